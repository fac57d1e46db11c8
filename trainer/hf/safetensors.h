// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [b, e]},
// "__metadata__": {...}}, then the raw little-endian tensor bytes; offsets are relative
// to the first byte after the header.
//
// Contracts:
// - SafetensorsFile(path) maps the file read-only and validates the whole header before
//   anything is read (parseSafetensorsHeader, common/safetensors_header.h: each violation
//   throws ConfigError, exit 2, naming the file and the tensor, expected against found).
// - view(name) aliases the mapping (no copy; pages are read when touched), in the file's
//   dtype; release(name) drops the tensor's pages from this process's resident set.
// - nonFinite(name) reads the whole tensor (then releases it): "" when every value is
//   finite, else "<path>: tensor '<name>' holds N NaN and M infinite values".
//   Invariant: a view is valid while the SafetensorsFile lives.
// - SafetensorsWriter writes the header for the declared tensors, then each tensor's
//   bytes in declaration order; close() checks every tensor was written and fsyncs.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/safetensors_header.h"

namespace ftb::hf {

using ftb::shapeString;
using ftb::StTensor;  // common/safetensors_header.h

torch::ScalarType scalarTypeOf(const std::string& st_dtype);  // REQUIRES: a valid dtype
std::string stDtypeOf(torch::ScalarType t);                   // kFloat32 -> "F32", ...

class SafetensorsFile {
 public:
  // `key`: the config key the errors name (the file's origin).
  explicit SafetensorsFile(std::string path, std::string key = "model.from_pretrained");
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, StTensor>& tensors() const { return tensors_; }
  torch::Tensor view(const std::string& name) const;
  void release(const std::string& name) const;
  std::string nonFinite(const std::string& name) const;  // REQUIRES: name is a tensor here

 private:
  std::string path_, key_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  int64_t size_ = 0, data_start_ = 0;
  std::map<std::string, StTensor> tensors_;
};

class SafetensorsWriter {
 public:
  // `tensors`: name, dtype, shape in file order (begin/end are computed here).
  SafetensorsWriter(std::string path, std::vector<StTensor> tensors);
  ~SafetensorsWriter();
  // REQUIRES: t matches the next declared tensor's dtype and shape.
  void write(const torch::Tensor& t);
  void close();
  int64_t bytes() const { return total_; }  // whole file

 private:
  std::string path_;
  std::vector<StTensor> tensors_;
  size_t next_ = 0;
  int fd_ = -1;
  int64_t total_ = 0;
};

}  // namespace ftb::hf
