#include "trainer/model/llama.h"

#include <cmath>

#include "trainer/model/checkpoint.h"

namespace ftb {
namespace {

thread_local torch::ScalarType t_compute_dtype = torch::kFloat32;

// Weight cast to the compute dtype; differentiable, so the fp32 master gets fp32 grads.
torch::Tensor w(const torch::Tensor& weight) {
  return weight.scalar_type() == t_compute_dtype ? weight : weight.to(t_compute_dtype);
}

torch::Tensor linear(const torch::nn::Linear& l, const torch::Tensor& x) {
  return torch::matmul(x, w(l->weight).t());
}

}  // namespace

torch::ScalarType computeDtype() { return t_compute_dtype; }
ComputeDtypeGuard::ComputeDtypeGuard(torch::ScalarType dt) : prev_(t_compute_dtype) {
  t_compute_dtype = dt;
}
ComputeDtypeGuard::~ComputeDtypeGuard() { t_compute_dtype = prev_; }

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  torch::Tensor xf = x.to(torch::kFloat32);
  torch::Tensor y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return (y * weight).to(t_compute_dtype);
}

RopeTables RopeTables::make(int64_t head_dim, int64_t max_seq_len, double theta) {
  torch::Tensor inv = torch::pow(theta, -torch::arange(0, head_dim, 2, torch::kFloat64) /
                                            static_cast<double>(head_dim));
  torch::Tensor t = torch::arange(max_seq_len, torch::kFloat64);
  torch::Tensor freqs = torch::outer(t, inv);  // [T, hd/2]
  return {freqs.cos().to(torch::kFloat32), freqs.sin().to(torch::kFloat32)};
}

// HF layout: rotate the halves (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
torch::Tensor applyRope(const torch::Tensor& x, const RopeTables& rope) {
  int64_t T = x.size(2), half = x.size(3) / 2;
  torch::Tensor cos = rope.cos.narrow(0, 0, T).to(x.scalar_type());
  torch::Tensor sin = rope.sin.narrow(0, 0, T).to(x.scalar_type());
  torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

AttentionImpl::AttentionImpl(const ModelArgs& a)
    : n_heads_(a.n_heads), n_kv_heads_(a.n_kv_heads), head_dim_(a.headDim()) {
  auto lin = [](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  wq = register_module("wq", lin(a.dim, n_heads_ * head_dim_));
  wk = register_module("wk", lin(a.dim, n_kv_heads_ * head_dim_));
  wv = register_module("wv", lin(a.dim, n_kv_heads_ * head_dim_));
  wo = register_module("wo", lin(n_heads_ * head_dim_, a.dim));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  int64_t B = x.size(0), T = x.size(1);
  torch::Tensor q = linear(wq, x).view({B, T, n_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor k = linear(wk, x).view({B, T, n_kv_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor v = linear(wv, x).view({B, T, n_kv_heads_, head_dim_}).transpose(1, 2);
  q = applyRope(q, rope);
  k = applyRope(k, rope);
  if (n_kv_heads_ != n_heads_) {  // GQA: each kv head serves n_heads/n_kv_heads heads
    int64_t rep = n_heads_ / n_kv_heads_;
    k = k.repeat_interleave(rep, 1);
    v = v.repeat_interleave(rep, 1);
  }
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(head_dim_));
  torch::Tensor causal =
      torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
  scores = scores.to(torch::kFloat32).masked_fill(causal, -INFINITY);
  torch::Tensor probs = torch::softmax(scores, -1).to(x.scalar_type());
  torch::Tensor out = torch::matmul(probs, v).transpose(1, 2).reshape({B, T, -1});
  return linear(wo, out);
}

FeedForwardImpl::FeedForwardImpl(const ModelArgs& a) {
  auto lin = [](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  w1 = register_module("w1", lin(a.dim, a.ffn_dim));
  w2 = register_module("w2", lin(a.ffn_dim, a.dim));
  w3 = register_module("w3", lin(a.dim, a.ffn_dim));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  return linear(w2, torch::silu(linear(w1, x)) * linear(w3, x));
}

TransformerBlockImpl::TransformerBlockImpl(const ModelArgs& a) {
  attention = register_module("attention", Attention(a));
  feed_forward = register_module("feed_forward", FeedForward(a));
  attention_norm = register_module("attention_norm", RMSNorm(a.dim, a.norm_eps));
  ffn_norm = register_module("ffn_norm", RMSNorm(a.dim, a.norm_eps));
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  torch::Tensor h = x + attention->forward(attention_norm->forward(x), rope);
  return h + feed_forward->forward(ffn_norm->forward(h));
}

TransformerImpl::TransformerImpl(const ModelArgs& a, torch::ScalarType compute_dtype,
                                 int64_t checkpoint_every)
    : args_(a), compute_dtype_(compute_dtype), checkpoint_every_(checkpoint_every) {
  tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(a.vocab_size, a.dim));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < a.n_layers; ++i) layers->push_back(TransformerBlock(a));
  norm = register_module("norm", RMSNorm(a.dim, a.norm_eps));
  if (!a.tie_embeddings)
    output = register_module(
        "output", torch::nn::Linear(torch::nn::LinearOptions(a.dim, a.vocab_size).bias(false)));
  rope_ = RopeTables::make(a.headDim(), a.max_seq_len, a.rope_theta);
  initWeights();
}

// Llama-style init: N(0, 0.02) for projections and embeddings, ones for norms
// (already set by RMSNorm). Draws in registration order, so it depends only on the seed.
void TransformerImpl::initWeights() {
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    if (p.key().find("norm") != std::string::npos) continue;
    p.value().normal_(0.0, 0.02);
  }
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  ComputeDtypeGuard dtype(compute_dtype_);
  torch::Tensor h = tok_embeddings->forward(tokens).to(compute_dtype_);
  for (size_t i = 0; i < layers->size(); ++i) {
    auto block = layers->ptr<TransformerBlockImpl>(i);
    TransformerBlock holder(block);
    bool ckpt = checkpoint_every_ > 0 && (static_cast<int64_t>(i) % checkpoint_every_ == 0) &&
                torch::GradMode::is_enabled();
    h = ckpt ? checkpointedBlock(holder, h, rope_) : block->forward(h, rope_);
  }
  h = norm->forward(h);
  const torch::Tensor& out_w = output ? output->weight : tok_embeddings->weight;
  return torch::matmul(h, w(out_w).t());
}

torch::Tensor maskedCrossEntropySum(const torch::Tensor& logits, const torch::Tensor& targets,
                                    const torch::Tensor& mask) {
  torch::Tensor lf = logits.to(torch::kFloat32).reshape({-1, logits.size(-1)});
  torch::Tensor nll = torch::nn::functional::cross_entropy(
      lf, targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  return (nll * mask.reshape({-1}).to(torch::kFloat32)).sum();
}

}  // namespace ftb
