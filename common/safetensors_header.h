// The header of a safetensors file (https://huggingface.co/docs/safetensors), parsed and
// checked without libtorch: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [b, e]}, "__metadata__": {...}}, then the raw
// tensor bytes; offsets are relative to the first byte after the header.
//
// Contract: parseSafetensorsHeader(bytes, size, key, path) validates the whole header
// before anything is read: the file holds the 8-byte length and the header (else
// "truncated" / "header length past the end of the file"), the header is a JSON object,
// every dtype is F32, F16 or BF16, every byte range [b, e) lies inside the data section
// and equals numel x element size, and no two ranges overlap. Each violation throws
// ConfigError (exit 2) naming `key`, the file and the tensor, expected against found.
// trainer/hf/safetensors.h reads files through it; tests/fuzz/fuzz_safetensors.cpp fuzzes it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ftb {

struct StTensor {
  std::string name, dtype;  // "F32" | "F16" | "BF16"
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range in the data section
};

struct StHeader {
  int64_t data_start = 0;  // the data section's first byte: 8 + N
  std::map<std::string, StTensor> tensors;
};

// REQUIRES: bytes[0, size) is the whole file (size >= 0).
StHeader parseSafetensorsHeader(const uint8_t* bytes, int64_t size, const std::string& key,
                                const std::string& path);

int64_t stElementSize(const std::string& st_dtype);  // I64 and F64: 8, F32: 4, F16 and BF16: 2
std::string shapeString(const std::vector<int64_t>& shape);  // "[64, 128]"

}  // namespace ftb
