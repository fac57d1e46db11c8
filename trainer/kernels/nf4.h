// NF4 storage of frozen weights (QLoRA, Dettmers et al. 2023; lora.base_dtype = "nf4"), in
// bitsandbytes' layout: what bitsandbytes.functional.quantize_4bit(x, quant_type="nf4",
// blocksize=64) returns for the same tensor, byte for byte.
//
// Contracts:
// - The weight is flattened in row-major order and cut into blocks of kNf4Block = 64
//   consecutive elements (the last one shorter when 64 does not divide numel). Each block
//   stores absmax = max |x| over it (fp32), and each element the index of the NF4 code value
//   nearest to x / absmax (ties to the lower code; an all-zero block stores code 7, = 0).
// - Two codes per byte: element 2i in the high nibble of byte i, element 2i + 1 in the low
//   one; an odd numel pads the last low nibble with code 7.
// - Device-agnostic: ATen ops only, on the tensors' device (CPU or CUDA); nothing is copied
//   to the host.
#pragma once

#include <torch/torch.h>

#include <array>
#include <vector>

namespace ftb {

inline constexpr int64_t kNf4Block = 64;

// bitsandbytes' get_4bit_type("nf4"): the 16 code values, ascending from -1 to 1, code 7 = 0
// (the QLoRA paper's published values, as fp32).
extern const std::array<float, 16> kNf4Codes;

// A quantized weight. Invariant: codes is uint8 [ceil(n / 2)] and absmax fp32
// [ceil(n / 64)], n = the product of shape, both contiguous on one device.
struct Nf4Tensor {
  torch::Tensor codes, absmax;
  std::vector<int64_t> shape;
  bool defined() const { return codes.defined(); }
  int64_t numel() const;
  // Bytes held: codes and absmax (0.5 + 4/64 bytes per element).
  int64_t bytes() const;
};

// x (any floating dtype, any device) quantized as above, on x's device.
Nf4Tensor nf4Quantize(const torch::Tensor& x);

// Overwrites q's codes and absmax in place with x's quantization: the storage is kept, so
// every handle to those tensors (the model's registered ones) sees the new weight.
// REQUIRES: x.sizes() == q.shape.
void nf4Requantize(Nf4Tensor& q, const torch::Tensor& x);

// The weight q stands for: each code's value times its block's absmax, computed in fp32,
// returned in `dtype` with q.shape on q's device. Holds one weight-sized fp32 tensor (plus
// the int32 nibbles, 2 bytes per element) while it runs. REQUIRES: q.defined().
torch::Tensor nf4Dequantize(const Nf4Tensor& q, torch::ScalarType dtype);

}  // namespace ftb
