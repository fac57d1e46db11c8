#include "common/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/checked_math.h"
#include "common/error.h"
#include "common/json_input.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader copies it as host-order bytes"
#endif

namespace ftb {
namespace {

using nlohmann::json;
constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;  // the format's own limit

[[noreturn]] void fail(const std::string& key, const std::string& path, const std::string& what,
                       const std::string& hint = "") {
  throw ConfigError(key, path, what, hint);
}

void parseInto(StHeader& out, const uint8_t* map_, int64_t size_, const std::string& key_,
               const std::string& path_) {
  uint64_t n = 0;
  std::memcpy(&n, map_, 8);  // little-endian (checked at compile time)
  if (n > uint64_t(size_ - 8) || int64_t(n) > kMaxHeaderBytes)
    fail(key_, path_,
         "header length " + std::to_string(n) + " is past the end of the file (" +
             std::to_string(size_) + " bytes): truncated or not a safetensors file");
  out.data_start = 8 + int64_t(n);
  const json h = parseJsonInput(
      std::string_view(reinterpret_cast<const char*>(map_) + 8, size_t(n)), key_, path_);
  if (!h.is_object()) fail(key_, path_, "header is not a JSON object");
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") continue;
    const std::string t = "tensor '" + shortText(name) + "': ";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      fail(key_, path_,
           t + "expected {\"dtype\", \"shape\", \"data_offsets\"}, found " + shortJson(v));
    StTensor st;
    st.name = name;
    st.dtype = v["dtype"].is_string() ? v["dtype"].get<std::string>() : shortJson(v["dtype"]);
    if (st.dtype != "F32" && st.dtype != "F16" && st.dtype != "BF16")
      fail(key_, path_, t + "dtype " + shortText(st.dtype) + ", expected F32, F16 or BF16");
    const json& sh = v["shape"];
    const json& off = v["data_offsets"];
    bool ok = sh.is_array() && off.is_array() && off.size() == 2;
    for (const json& d : sh) ok = ok && d.is_number_unsigned();
    for (const json& d : off) ok = ok && d.is_number_unsigned();
    if (!ok)
      fail(key_, path_,
           t + "shape and data_offsets must be arrays of non-negative integers, found " +
               shortJson(v));
    int64_t numel = 1;
    for (const json& d : sh) {
      st.shape.push_back(d.get<int64_t>());
      std::optional<int64_t> p = checkedProduct({numel, st.shape.back()});
      if (!p || st.shape.back() < 0) fail(key_, path_, t + "shape " + shortJson(sh) + " overflows");
      numel = *p;
    }
    st.begin = off[0].get<int64_t>();
    st.end = off[1].get<int64_t>();
    std::optional<int64_t> bytes = checkedProduct({numel, stElementSize(st.dtype)});
    if (st.begin < 0 || st.end < st.begin || !bytes || st.end - st.begin != *bytes)
      fail(key_, path_,
           t + "data_offsets " + shortJson(off) + " span " + std::to_string(st.end - st.begin) +
               " bytes, expected " + std::to_string(bytes.value_or(-1)) + " for " + st.dtype + " " +
               shapeString(st.shape));
    out.tensors.emplace(name, std::move(st));
  }
}

void checkRanges(const StHeader& h, int64_t size_, const std::string& key_,
                 const std::string& path_) {
  const int64_t data = size_ - h.data_start;
  std::vector<const StTensor*> by_start;
  for (const auto& [name, t] : h.tensors) {
    if (t.end > data)
      fail(key_, path_,
           "tensor '" + shortText(name) + "': data_offsets [" + std::to_string(t.begin) + ", " +
               std::to_string(t.end) + "] past the end of the data section (" +
               std::to_string(data) + " bytes): the file is truncated or the offset is wrong");
    by_start.push_back(&t);
  }
  std::sort(by_start.begin(), by_start.end(), [](const StTensor* a, const StTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < by_start.size(); ++i) {
    const StTensor &a = *by_start[i - 1], &b = *by_start[i];
    if (b.begin < a.end && b.end > b.begin)
      fail(key_, path_,
           "tensor '" + shortText(b.name) + "': data_offsets [" + std::to_string(b.begin) + ", " +
               std::to_string(b.end) + "] overlap tensor '" + shortText(a.name) + "' [" +
               std::to_string(a.begin) + ", " + std::to_string(a.end) + "]");
  }
}

}  // namespace

int64_t stElementSize(const std::string& dt) {
  return dt == "I64" || dt == "F64" ? 8 : dt == "F32" ? 4 : 2;
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

StHeader parseSafetensorsHeader(const uint8_t* bytes, int64_t size, const std::string& key,
                                const std::string& path) {
  if (size < 8)
    fail(key, path,
         "truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  StHeader h;
  parseInto(h, bytes, size, key, path);
  checkRanges(h, size, key, path);
  return h;
}

}  // namespace ftb
