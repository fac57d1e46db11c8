#include "trainer/comm/tp.h"

#include "trainer/kernels/fused_ops.h"

namespace ftb {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Comm* commOf(AutogradContext* ctx) {
  return reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt());
}

torch::Tensor allReduced(const torch::Tensor& x, Comm* comm) {
  torch::Tensor y = x.contiguous().clone();
  comm->allReduceSum(y);
  return y;
}

struct CopyToTp : public torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, Comm* comm) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {allReduced(g[0], commOf(ctx)), torch::Tensor()};
  }
};

struct ReduceFromTp : public torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, Comm* comm) {
    return allReduced(x, comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {g[0], torch::Tensor()};
  }
};

}  // namespace

torch::Tensor copyToTp(const torch::Tensor& x, const TpContext& tp) {
  return tp.active() ? CopyToTp::apply(x, tp.comm) : x;
}

torch::Tensor reduceFromTp(const torch::Tensor& x, const TpContext& tp) {
  return tp.active() ? ReduceFromTp::apply(x, tp.comm) : x;
}

torch::Tensor vocabParallelEmbedding(const torch::Tensor& tokens, const torch::Tensor& weight_local,
                                     int64_t vocab_start, const TpContext& tp) {
  if (!tp.active()) return torch::embedding(weight_local, tokens);
  int64_t n = weight_local.size(0);
  torch::Tensor mine = (tokens >= vocab_start) & (tokens < vocab_start + n);
  torch::Tensor local = (tokens - vocab_start).clamp(0, n - 1);
  torch::Tensor e =
      torch::embedding(weight_local, local) * mine.unsqueeze(-1).to(weight_local.dtype());
  return reduceFromTp(e, tp);  // each token's row lives on exactly one rank
}

torch::Tensor vocabParallelCrossEntropySum(const torch::Tensor& logits_local,
                                           const torch::Tensor& targets, const torch::Tensor& mask,
                                           int64_t vocab_start, const TpContext& tp) {
  if (!tp.active()) {  // one device holds the whole vocabulary
    torch::Tensor nll = fusedCrossEntropy(logits_local.reshape({-1, logits_local.size(-1)}),
                                          targets.reshape({-1}).contiguous());
    return (nll * mask.reshape({-1}).to(torch::kFloat32)).sum();
  }
  torch::Tensor z = logits_local.to(torch::kFloat32);
  int64_t n = z.size(-1);
  // Stable log-sum-exp over the whole vocabulary: subtract the global max (no grad).
  torch::Tensor gmax = std::get<0>(z.detach().max(-1, /*keepdim=*/true)).contiguous();
  if (tp.active()) tp.comm->allReduceMax(gmax);
  z = z - gmax;
  torch::Tensor sumexp = reduceFromTp(z.exp().sum(-1), tp);
  torch::Tensor mine = (targets >= vocab_start) & (targets < vocab_start + n);
  torch::Tensor local = (targets - vocab_start).clamp(0, n - 1);
  torch::Tensor tgt = z.gather(-1, local.unsqueeze(-1)).squeeze(-1) * mine.to(torch::kFloat32);
  tgt = reduceFromTp(tgt, tp);
  torch::Tensor nll = sumexp.log() - tgt;
  return (nll * mask.to(torch::kFloat32)).sum();
}

}  // namespace ftb
