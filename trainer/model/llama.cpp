#include "trainer/model/llama.h"

#include <atomic>
#include <cmath>

#include "trainer/model/activation_checkpoint.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/model/linear.h"

namespace ftb {
namespace {

thread_local torch::ScalarType t_compute_dtype = torch::kFloat32;
std::atomic<AttentionKernel> g_attention{AttentionKernel::kFusedSoftmax};

// Weight cast to the compute dtype; differentiable, so the fp32 master gets fp32 grads.
torch::Tensor w(const torch::Tensor& weight) {
  return weight.scalar_type() == t_compute_dtype ? weight : weight.to(t_compute_dtype);
}

torch::Tensor proj(const torch::Tensor& x, const torch::Tensor& weight) {
  return projection(x, w(weight));
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// The full tensor of `p` drawn from its own generator, then this tp rank's slice.
torch::Tensor initParam(const ParamInit& p, const TpContext& tp, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::Tensor full;
  if (p.ones) {
    full = torch::ones(p.full_shape);
  } else {
    at::Generator gen = at::detail::createCPUGenerator(seed * 0x9E3779B97F4A7C15ULL ^ fnv1a(p.name));
    full = torch::empty(p.full_shape).normal_(0.0, 0.02, gen);
  }
  if (p.shard_dim < 0 || tp.size == 1) return full;
  int64_t n = p.full_shape[p.shard_dim] / tp.size;
  return full.narrow(p.shard_dim, tp.rank * n, n).clone();
}

}  // namespace

torch::ScalarType computeDtype() { return t_compute_dtype; }
ComputeDtypeGuard::ComputeDtypeGuard(torch::ScalarType dt) : prev_(t_compute_dtype) {
  t_compute_dtype = dt;
}
ComputeDtypeGuard::~ComputeDtypeGuard() { t_compute_dtype = prev_; }

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return fusedRmsNorm(x, weight, eps, t_compute_dtype);
}

RopeTables RopeTables::make(int64_t head_dim, int64_t max_seq_len, double theta) {
  torch::Tensor inv = torch::pow(theta, -torch::arange(0, head_dim, 2, torch::kFloat64) /
                                            static_cast<double>(head_dim));
  torch::Tensor t = torch::arange(max_seq_len, torch::kFloat64);
  torch::Tensor freqs = torch::outer(t, inv);  // [T, hd/2]
  return {freqs.cos().to(torch::kFloat32), freqs.sin().to(torch::kFloat32)};
}

RopeTables RopeTables::forTokens(int64_t T) const {
  return {cos.narrow(0, 0, T), sin.narrow(0, 0, T)};
}

// HF layout: rotate the halves (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), times scale.
torch::Tensor applyRope(const torch::Tensor& x, const RopeTables& rope, double scale) {
  return fusedRope(x, rope.cos, rope.sin, scale);
}

TransformerBlockImpl::TransformerBlockImpl(const ModelArgs& a, const TpContext& tp,
                                           int64_t layer, uint64_t seed)
    : n_local_heads_(a.n_heads / tp.size), n_local_kv_heads_(a.n_kv_heads / tp.size),
      head_dim_(a.headDim()), eps_(a.norm_eps), tp_(tp) {
  const std::string pre = "layers." + std::to_string(layer) + ".";
  const int64_t D = a.dim, hd = a.headDim();
  // Registered under short names (libtorch forbids dots); seeded by the full name.
  auto add = [&](const char* name, const std::string& full, std::vector<int64_t> shape, int dim,
                 bool ones) {
    torch::Tensor t = register_parameter(name, initParam({pre + full, shape, dim, ones}, tp, seed));
    params_.push_back({pre + full, t, dim});
    return t;
  };
  attention_norm = add("attention_norm", "attention_norm.weight", {D}, -1, true);
  wq = add("wq", "attention.wq.weight", {a.n_heads * hd, D}, 0, false);
  wk = add("wk", "attention.wk.weight", {a.n_kv_heads * hd, D}, 0, false);
  wv = add("wv", "attention.wv.weight", {a.n_kv_heads * hd, D}, 0, false);
  wo = add("wo", "attention.wo.weight", {D, a.n_heads * hd}, 1, false);
  ffn_norm = add("ffn_norm", "ffn_norm.weight", {D}, -1, true);
  w1 = add("w1", "feed_forward.w1.weight", {a.ffn_dim, D}, 0, false);
  w2 = add("w2", "feed_forward.w2.weight", {D, a.ffn_dim}, 1, false);
  w3 = add("w3", "feed_forward.w3.weight", {a.ffn_dim, D}, 0, false);
}

void setAttentionKernel(AttentionKernel kernel) { g_attention.store(kernel); }
AttentionKernel attentionKernel() { return g_attention.load(); }

torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v) {
  if (attentionKernel() == AttentionKernel::kSdpa)
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                            /*is_causal=*/true, /*scale=*/1.0);
  // Causal softmax in fp32 over the unmasked half only (fused kernel), probs in q's dtype.
  return torch::matmul(fusedCausalSoftmax(torch::matmul(q, k.transpose(-2, -1)), q.scalar_type()), v);
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  const int64_t B = x.size(0), T = x.size(1);
  // Attention: column-parallel q/k/v (local heads), row-parallel output.
  torch::Tensor h = copyToTp(rmsNorm(x, attention_norm, eps_), tp_);
  torch::Tensor q = proj(h, wq).view({B, T, n_local_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor k = proj(h, wk).view({B, T, n_local_kv_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor v = proj(h, wv).view({B, T, n_local_kv_heads_, head_dim_}).transpose(1, 2);
  // Scale q (B·T·D values) rather than the scores (B·H·T² values), inside the rotation.
  q = applyRope(q, rope, 1.0 / std::sqrt(double(head_dim_)));
  k = applyRope(k, rope, 1.0);
  if (n_local_kv_heads_ != n_local_heads_) {  // GQA: each kv head serves a group of heads
    int64_t rep = n_local_heads_ / n_local_kv_heads_;
    k = k.repeat_interleave(rep, 1);
    v = v.repeat_interleave(rep, 1);
  }
  torch::Tensor attn = causalAttention(q, k, v).transpose(1, 2).reshape({B, T, -1});
  torch::Tensor out = x + reduceFromTp(proj(attn, wo), tp_);
  // SwiGLU MLP: column-parallel w1/w3, row-parallel w2.
  torch::Tensor g = copyToTp(rmsNorm(out, ffn_norm, eps_), tp_);
  return out + reduceFromTp(proj(fusedSwiGlu(proj(g, w1), proj(g, w3)), w2), tp_);
}

TransformerImpl::TransformerImpl(const ModelArgs& a, const TpContext& tp,
                                 torch::ScalarType compute_dtype, int64_t recompute_every,
                                 uint64_t seed, const UnitBuilt& on_unit, const ModelPart& part)
    : part_(part), args_(a), tp_(tp), compute_dtype_(compute_dtype),
      recompute_every_(recompute_every) {
  if (part_.last_layer < 0) part_.last_layer = a.n_layers;
  for (int64_t i = part_.first_layer; i < part_.last_layer; ++i) {
    layers.push_back(register_module("layers_" + std::to_string(i),
                                     TransformerBlock(a, tp, i, seed)));
    if (on_unit) on_unit(i, layers.back()->modelParams());
  }
  auto add = [&](const char* name, const ParamInit& init) {
    torch::Tensor t = register_parameter(name, initParam(init, tp, seed));
    root_params_.push_back({init.name, t, init.shard_dim});
    return t;
  };
  if (part_.embed)
    tok_embeddings = add("tok_embeddings", {"tok_embeddings.weight", {a.vocab_size, a.dim}, 0, false});
  if (part_.head) norm = add("norm", {"norm.weight", {a.dim}, -1, true});
  if (part_.head && !a.tie_embeddings)
    output = add("output", {"output.weight", {a.vocab_size, a.dim}, 0, false});
  rope_ = RopeTables::make(a.headDim(), a.max_seq_len, a.rope_theta);
  if (on_unit && !root_params_.empty()) on_unit(-1, root_params_);
}

std::vector<ModelParam> TransformerImpl::paramsInForwardOrder() const {
  std::vector<ModelParam> v;
  const size_t embed = part_.embed ? 1 : 0;  // tok_embeddings first when held
  v.insert(v.end(), root_params_.begin(), root_params_.begin() + embed);
  for (const auto& layer : layers)
    v.insert(v.end(), layer->modelParams().begin(), layer->modelParams().end());
  v.insert(v.end(), root_params_.begin() + embed, root_params_.end());
  return v;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) { return forwardPart(tokens); }

torch::Tensor TransformerImpl::forwardPart(const torch::Tensor& input) {
  ComputeDtypeGuard dtype(compute_dtype_);
  step_rope_ = rope_.forTokens(input.size(1));
  const int64_t vocab_start = tp_.rank * (args_.vocab_size / tp_.size);
  torch::Tensor h = part_.embed ? vocabParallelEmbedding(input, tok_embeddings, vocab_start, tp_)
                                      .to(compute_dtype_)
                                : input;
  for (size_t j = 0; j < layers.size(); ++j) {
    TransformerBlockImpl& block = *layers[j];
    const int64_t i = part_.first_layer + static_cast<int64_t>(j);  // the global layer
    if (executor_) {
      h = executor_->run(static_cast<int64_t>(j), block, h, step_rope_);
    } else if (recompute_every_ > 0 && i % recompute_every_ == 0 &&
               torch::GradMode::is_enabled()) {
      h = checkpointedBlock(block, h, step_rope_, nullptr);
    } else {
      h = block.forward(h, step_rope_);
    }
  }
  if (!part_.head) return h;
  h = copyToTp(rmsNorm(h, norm, args_.norm_eps), tp_);
  return proj(h, output.defined() ? output : tok_embeddings);  // column-parallel over vocab
}

torch::Tensor TransformerImpl::lossSum(const torch::Tensor& logits, const torch::Tensor& targets,
                                       const torch::Tensor& mask) const {
  const int64_t vocab_start = tp_.rank * (args_.vocab_size / tp_.size);
  return vocabParallelCrossEntropySum(logits, targets, mask, vocab_start, tp_);
}

}  // namespace ftb
