// Causal attention's two products, q·kᵀ and probs·v, computing only the blocks the causal
// mask keeps.
//
// Row block i of the scores (query rows [s_i, e_i), kCausalBlockRows rows each, the last
// one shorter) needs key columns [0, e_i) only: the causal softmax never reads a score past
// its row's diagonal, and its probabilities and their gradient are exactly 0 there
// (kernels/fused_ops.h). So each product runs on the lower block triangle: at T = 512,
// 10 of 16 blocks (62.5 % of the full products' FLOPs).
//
// Contracts:
// - causalScores(q, k): q [..., T, d], k [..., T, d] (equal batch dimensions) ->
//   [..., T, T] contiguous; entries of row block i past column e_i are 0. Differentiable in
//   q and k. REQUIRES: the gradient flowing back is 0 past each row's diagonal (the fused
//   causal softmax's is).
// - causalWeighted(p, v): p [..., T, T] with p 0 past each row's diagonal, v [..., T, d]
//   -> [..., T, d] contiguous. Differentiable in p and v; p's gradient is computed on the
//   lower block triangle and is 0 elsewhere (the softmax reads only up to the diagonal).
// - Both run on OpenBLAS, one head at a time, for fp32 CPU operands when training.fp32_gemm
//   chose it (model/linear.h), where its small-matrix kernels serve head-sized products
//   (MKL's batched product took twice their CPU time on the tiny model, perf). Everything
//   else (bf16, the GPU, the ATen route) goes to torch::matmul over the whole [T, T]: the
//   same values to fp32 rounding (the masked entries differ, and nothing reads them).
#pragma once

#include <torch/torch.h>

namespace ftb {

constexpr int64_t kCausalBlockRows = 128;

torch::Tensor causalScores(const torch::Tensor& q, const torch::Tensor& k);
torch::Tensor causalWeighted(const torch::Tensor& p, const torch::Tensor& v);

}  // namespace ftb
