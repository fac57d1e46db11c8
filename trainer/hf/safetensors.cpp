#include "trainer/hf/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/checked_math.h"
#include "common/checkpoint_manifest.h"
#include "common/error.h"
#include "common/json_input.h"
#include "common/safetensors_header.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader copies it as host-order bytes"
#endif

namespace ftb::hf {
namespace {

using nlohmann::json;

[[noreturn]] void failSafetensors(const std::string& key, const std::string& path, const std::string& what,
                       const std::string& hint = "") {
  throw ConfigError(key, path, what, hint);
}

int64_t pageSize() {
  static const int64_t p = sysconf(_SC_PAGESIZE);
  return p;
}

}  // namespace

torch::ScalarType scalarTypeOf(const std::string& dt) {
  if (dt == "F32") return torch::kFloat32;
  if (dt == "F16") return torch::kFloat16;
  return torch::kBFloat16;
}

std::string stDtypeOf(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return "F32";
    case torch::kFloat16:
      return "F16";
    case torch::kBFloat16:
      return "BF16";
    case torch::kFloat64:
      return "F64";  // written only (trainer logits --dtype fp64)
    case torch::kInt64:
      return "I64";  // written only (trainer logits' input_ids); readers accept floats
    default:
      throw IoError(std::string("safetensors: cannot write dtype ") + c10::toString(t));
  }
}

SafetensorsFile::SafetensorsFile(std::string path, std::string key)
    : path_(std::move(path)), key_(std::move(key)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd_ < 0 || fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    std::string why = fd_ < 0 ? std::strerror(errno) : "not a regular file";
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    failSafetensors(key_, path_, "cannot open safetensors file: " + why);
  }
  size_ = st.st_size;
  if (size_ < 8) {
    ::close(fd_);
    fd_ = -1;
    failSafetensors(key_, path_,
         "truncated: " + std::to_string(size_) + " bytes, shorter than the 8-byte header length");
  }
  void* m = mmap(nullptr, size_t(size_), PROT_READ, MAP_PRIVATE, fd_, 0);
  if (m == MAP_FAILED) {
    ::close(fd_);
    fd_ = -1;
    failSafetensors(key_, path_, std::string("cannot map the file: ") + std::strerror(errno));
  }
  map_ = static_cast<const uint8_t*>(m);
  try {
    StHeader h = parseSafetensorsHeader(map_, size_, key_, path_);
    data_start_ = h.data_start;
    tensors_ = std::move(h.tensors);
  } catch (...) {
    munmap(const_cast<uint8_t*>(map_), size_t(size_));
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(const_cast<uint8_t*>(map_), size_t(size_));
  if (fd_ >= 0) ::close(fd_);
}

torch::Tensor SafetensorsFile::view(const std::string& name) const {
  const StTensor& t = tensors_.at(name);
  void* p = const_cast<uint8_t*>(map_ + data_start_ + t.begin);  // read-only mapping: never written
  return torch::from_blob(p, t.shape, torch::TensorOptions().dtype(scalarTypeOf(t.dtype)));
}

void SafetensorsFile::release(const std::string& name) const {
  const StTensor& t = tensors_.at(name);
  const int64_t ps = pageSize();
  int64_t b = (data_start_ + t.begin) / ps * ps;
  int64_t e = std::min(size_, (data_start_ + t.end + ps - 1) / ps * ps);
  if (e > b) madvise(const_cast<uint8_t*>(map_ + b), size_t(e - b), MADV_DONTNEED);
}

std::string SafetensorsFile::nonFinite(const std::string& name) const {
  torch::NoGradGuard no_grad;
  const torch::Tensor t = view(name);
  const int64_t nan = t.isnan().sum().item<int64_t>(), inf = t.isinf().sum().item<int64_t>();
  release(name);
  if (nan + inf == 0) return "";
  return path_ + ": tensor '" + shortText(name) + "' holds " + std::to_string(nan) + " NaN and " +
         std::to_string(inf) + " infinite values";
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<StTensor> tensors)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  json h = json::object();
  int64_t off = 0;
  for (StTensor& t : tensors_) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    t.begin = off;
    t.end = off + numel * stElementSize(t.dtype);
    off = t.end;
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  h["__metadata__"] = {{"format", "pt"}};
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section 8-byte aligned
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError("cannot create " + path_ + ": " + std::strerror(errno));
  uint64_t n = text.size();
  std::string head(reinterpret_cast<const char*>(&n), 8);
  head += text;
  total_ = int64_t(head.size()) + off;
  if (::write(fd_, head.data(), head.size()) != ssize_t(head.size()))
    throw IoError("writing " + path_ + ": " + std::strerror(errno));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsWriter::write(const torch::Tensor& t) {
  TORCH_CHECK(next_ < tensors_.size(), "safetensors writer: more tensors than declared");
  const StTensor& d = tensors_[next_++];
  TORCH_CHECK(stDtypeOf(t.scalar_type()) == d.dtype && t.sizes().vec() == d.shape,
              "safetensors writer: tensor ", d.name, " does not match its declaration");
  torch::Tensor c = t.to(torch::kCPU).contiguous();
  const char* p = static_cast<const char*>(c.data_ptr());
  int64_t left = d.end - d.begin;
  while (left > 0) {
    ssize_t w = ::write(fd_, p, size_t(std::min<int64_t>(left, int64_t(1) << 30)));
    if (w <= 0)
      throw IoError("writing " + path_ + " (tensor " + d.name + "): " + std::strerror(errno));
    p += w;
    left -= w;
  }
}

void SafetensorsWriter::close() {
  TORCH_CHECK(next_ == tensors_.size(), "safetensors writer: ", tensors_.size() - next_,
              " declared tensors not written to ", path_);
  if (::fsync(fd_) != 0 || ::close(fd_) != 0)
    throw IoError("closing " + path_ + ": " + std::strerror(errno));
  fd_ = -1;
}

}  // namespace ftb::hf
