// Fused elementwise kernels of the Llama block, each an autograd Function with a
// hand-written backward: RMSNorm, the rotary embedding, the causal softmax, the
// SwiGLU gate and the cross-entropy over the vocabulary.
//
// Why: composed from ATen ops, RMSNorm costs 6 passes over an activation-sized tensor
// forward and about 10 backward (and as many dispatches); RoPE 7 forward (narrow, 4 mul,
// sub, add, cat) plus the q scaling; the causal softmax 3 forward (mask add, softmax,
// cast) over all T² scores though half are masked; SwiGLU 2 forward, 3 backward. Fused,
// each is one pass forward and one backward, and the softmax touches only the unmasked
// half. The cross-entropy keeps one logsumexp per row (not a [N, V] log-softmax) and
// builds its [N, V] gradient in one pass (composed: sub, exp, mul, scatter, copy).
//
// Contracts (checked against the composed ATen math in tests/unit/trainer/fused_ops_test.cpp):
// - Same math as the composition: inputs fp32 or bf16, accumulation and the per-row
//   statistics in fp32, one rounding to the output dtype. exp is a polynomial within
//   2 ulp of expf (the softmax and the SiLU). Results agree with the
//   composition within fp32 rounding (not bit for bit: the summation order differs).
// - Deterministic on one machine: the result does not depend on the number of
//   intra-op threads (rows are independent; the RMSNorm weight gradient is reduced
//   from fixed row chunks in a fixed order). The inner loops are compiled for
//   AVX-512, AVX2 + FMA and baseline x86-64 and picked at run time (kernels/clones.h),
//   so two CPU kinds may differ in the last bit (as their BLAS kernels do).
// - On a CUDA tensor, RMSNorm, RoPE, SwiGLU and the cross-entropy run the CUDA kernels of
//   fused_cuda.h where this program has them (trainer_cuda) and setCudaKernels chose
//   kFused (the default); otherwise, and for the causal softmax (a GPU run computes
//   attention with SDPA: model/llama.h), the composed ATen form of the same math
//   (namespace composed, below; ATen's own kernels, differentiated by autograd).
// - fp64 input (`trainer logits --dtype fp64`, a float64 check against a reference) takes
//   the composed form computed in fp64 throughout.
#pragma once

#include <torch/torch.h>

namespace ftb {

// training.cuda_kernels, process-wide; set once before the first forward (default kFused).
enum class CudaKernels { kFused, kComposed };
void setCudaKernels(CudaKernels k);

// y = x * rsqrt(mean(x^2, -1) + eps) * weight, returned in `out_dtype`.
// REQUIRES: x [..., D] fp32 or bf16; weight [D] fp32 or bf16. The gradient of x comes
// back in x's dtype, that of weight in weight's dtype.
torch::Tensor fusedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                           torch::ScalarType out_dtype);

// HF "rotate_half" rotary embedding times `scale`: with x = (x1, x2) split in halves of
// the last dimension, (x1 cos - x2 sin, x2 cos + x1 sin) * scale.
// REQUIRES: x [B, H, T, hd] fp32 or bf16, any strides; cos, sin fp32 [>= T, hd/2].
// Returns a contiguous [B, H, T, hd] tensor in x's dtype.
torch::Tensor fusedRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        double scale);

// softmax(scores + causal mask, -1) in `out_dtype`: row t of each [T, T] block keeps
// columns 0..t; the masked entries are exactly 0 (forward and gradient).
// REQUIRES: scores [..., T, T] fp32 or bf16 (query length = key length). The gradient
// comes back in the scores' dtype.
torch::Tensor fusedCausalSoftmax(const torch::Tensor& scores, torch::ScalarType out_dtype);

// silu(a) * b (the SwiGLU gate), in a's dtype. REQUIRES: a, b of one shape and dtype.
torch::Tensor fusedSwiGlu(const torch::Tensor& a, const torch::Tensor& b);

// Per-row cross-entropy: nll[r] = logsumexp(logits[r]) - logits[r, targets[r]], fp32 [N].
// REQUIRES: logits [N, V] fp32 or bf16, targets [N] integer in [0, V) (else an error).
// The logits' gradient comes back in their dtype.
torch::Tensor fusedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);

// The same functions composed from ATen ops (any device): what the fused ones compute on
// a non-CPU device. Statistics in fp32, one rounding to the output dtype. The composed
// cross-entropy does not range-check targets (a GPU gather asserts on the device).
namespace composed {
torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      torch::ScalarType out_dtype);
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                   double scale);
torch::Tensor causalSoftmax(const torch::Tensor& scores, torch::ScalarType out_dtype);
torch::Tensor swiGlu(const torch::Tensor& a, const torch::Tensor& b);
torch::Tensor crossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);
}  // namespace composed

}  // namespace ftb
