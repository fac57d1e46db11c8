// Autograd ops over the fused fp32 CPU loops of trainer/kernels/cpu_kernels.h: one op
// (and one backward node) where the ATen composition takes several, for the small-tensor
// hot path. Each has an applies() test; callers keep the ATen composition for anything
// else (bf16, CUDA), so the math there is unchanged.
#pragma once

#include <torch/torch.h>

namespace ftb {

// RMSNorm: x / sqrt(mean(x², -1) + eps) * weight, for fp32 CPU x [..., d], weight [d].
bool fusedRmsNormApplies(const torch::Tensor& x, const torch::Tensor& weight);
torch::Tensor fusedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace ftb
