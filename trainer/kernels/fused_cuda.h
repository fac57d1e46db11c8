// The fused kernels of kernels/fused_ops.h on a CUDA device: hand-written CUDA kernels
// (kernels/cuda/fused_kernels.cu) behind autograd Functions (kernels/fused_cuda.cpp), linked
// into `trainer_cuda` only. In `trainer` and the CPU unit tests (kernels/fused_cuda_off.cpp)
// available() is false and the others throw std::logic_error.
//
// Contracts: those of the same-named functions of fused_ops.h (dtypes, shapes, statistics
// in fp32, one rounding to the output dtype), for tensors on the current CUDA device, work
// queued on the current CUDA stream. Each agrees with the composed ATen form of fused_ops.h
// (namespace composed) within 1e-5 relative in fp32 and 1e-2 in bf16, forward and backward
// (tests/gpu/fused_cuda_test.cpp, run by scripts/gpu_check.sh). Deterministic: the same
// inputs give the same bits on one GPU (no atomics in a reduction whose order varies).
#pragma once

#include <torch/torch.h>

namespace ftb::cuda_fused {

bool available();

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      torch::ScalarType out_dtype);
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                   double scale);
torch::Tensor swiGlu(const torch::Tensor& a, const torch::Tensor& b);
torch::Tensor crossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace ftb::cuda_fused
