#include "trainer/model/llama.h"

#include <atomic>
#include <cmath>

#include "trainer/kernels/fused_ops.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/attention_products.h"
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

// A block's projection: its weight gradient may be deferred (zb_h1, linear.h).
torch::Tensor blockProj(const torch::Tensor& x, const torch::Tensor& weight) {
  return blockProjection(x, w(weight));
}

// The full tensor of `p` drawn from its own generator, then this tp rank's slice.
torch::Tensor initParam(const ParamInit& p, const TpContext& tp, uint64_t seed) {
  torch::NoGradGuard no_grad;
  using Fill = ParamInit::Fill;
  torch::Tensor full;
  if (p.fill == Fill::kOnes || p.fill == Fill::kZeros) {
    full = p.fill == Fill::kOnes ? torch::ones(p.full_shape) : torch::zeros(p.full_shape);
  } else {
    at::Generator gen =
        at::detail::createCPUGenerator(seed * 0x9E3779B97F4A7C15ULL ^ fnv1a(p.name));
    full = torch::empty(p.full_shape);
    if (p.fill == Fill::kNormal) {
      full.normal_(0.0, 0.02, gen);
    } else {  // kaiming_uniform_(a = sqrt(5)) on [out, in]: bound 1 / sqrt(in), as PEFT's A
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.full_shape[1]));
      full.uniform_(-bound, bound, gen);
    }
  }
  if (p.shard_dim < 0 || tp.size == 1) return full;
  int64_t n = p.full_shape[p.shard_dim] / tp.size;
  return full.narrow(p.shard_dim, tp.rank * n, n).clone();
}

// The LoRA targets in kLoraTargets order: the base weight each adapts, and whether that
// weight is row-parallel (columns split across tp).
struct LoraTargetSpec {
  const char* base;  // under "layers.N."
  bool row_parallel;
};
constexpr LoraTargetSpec kTargetSpecs[] = {{"attention.wq", false},    {"attention.wk", false},
                                           {"attention.wv", false},    {"attention.wo", true},
                                           {"feed_forward.w1", false}, {"feed_forward.w3", false},
                                           {"feed_forward.w2", true}};

// Storage of a weight matrix: bf16 for a bf16 or NF4 frozen base (lora.base_dtype; NF4 holds
// the block projections in 4 bits, nf4Base, and the embedding and output in bf16) or bf16
// weights without masters (training.master_weights = "none"), else fp32; norms stay fp32.
torch::ScalarType baseDtype(const ModelOptions& opt) {
  const bool low_base = opt.lora.enabled() && opt.lora.base_dtype != BaseDType::kFp32;
  return low_base || opt.bf16_weights ? torch::kBFloat16 : torch::kFloat32;
}
bool nf4Base(const ModelOptions& opt) {
  return opt.lora.enabled() && opt.lora.base_dtype == BaseDType::kNf4;
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

RopeTables RopeTables::make(int64_t head_dim, int64_t max_seq_len, double theta,
                            torch::ScalarType dtype) {
  torch::Tensor inv = torch::pow(
      theta, -torch::arange(0, head_dim, 2, torch::kFloat64) / static_cast<double>(head_dim));
  torch::Tensor t = torch::arange(max_seq_len, torch::kFloat64);
  torch::Tensor freqs = torch::outer(t, inv);  // [T, hd/2]
  return {freqs.cos().to(dtype), freqs.sin().to(dtype)};
}

RopeTables RopeTables::forTokens(int64_t T) const {
  return {cos.narrow(0, 0, T), sin.narrow(0, 0, T)};
}

// HF layout: rotate the halves (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), times scale.
torch::Tensor applyRope(const torch::Tensor& x, const RopeTables& rope, double scale) {
  return fusedRope(x, rope.cos, rope.sin, scale);
}

std::vector<ModelParam> trainableOnly(const std::vector<ModelParam>& params) {
  std::vector<ModelParam> v;
  for (const auto& p : params)
    if (p.trainable) v.push_back(p);
  return v;
}
std::vector<ModelParam> frozenOnly(const std::vector<ModelParam>& params) {
  std::vector<ModelParam> v;
  for (const auto& p : params)
    if (!p.trainable) v.push_back(p);
  return v;
}

TransformerBlockImpl::TransformerBlockImpl(const ModelArgs& a, const TpContext& tp, int64_t layer,
                                           const ModelOptions& opt, const uint64_t* mask_seed)
    : mask_seed_(mask_seed),
      n_local_heads_(a.n_heads / tp.size),
      n_local_kv_heads_(a.n_kv_heads / tp.size),
      head_dim_(a.headDim()),
      eps_(a.norm_eps),
      tp_(tp) {
  const std::string pre = "layers." + std::to_string(layer) + ".";
  const int64_t D = a.dim, hd = a.headDim();
  const bool frozen = opt.lora.enabled();
  using Fill = ParamInit::Fill;
  nf4_.resize(kLoraTargets.size());
  // Registered under short names (libtorch forbids dots); seeded by the full name. Target
  // `t`'s matrix (kTargetSpecs index) of an NF4 base is quantized as soon as it is drawn:
  // the codes are the parameter, the block absmax a buffer "<name>_absmax".
  auto add = [&](const char* name, const std::string& full, std::vector<int64_t> shape, int dim,
                 Fill fill, int t = -1) {
    torch::Tensor w = initParam({pre + full, shape, dim, fill}, tp, opt.seed);
    Nf4Tensor q;
    if (t >= 0 && nf4Base(opt)) {
      q = nf4_[t] = nf4Quantize(w.to(opt.device));
      w = q.codes;
      register_buffer(std::string(name) + "_absmax", q.absmax);
    } else {
      w = w.to(opt.device, fill == Fill::kNormal ? baseDtype(opt) : w.scalar_type());
    }
    w = register_parameter(name, w, /*requires_grad=*/!frozen);
    params_.push_back({pre + full, w, dim, !frozen, q});
    return w;
  };
  attention_norm = add("attention_norm", "attention_norm.weight", {D}, -1, Fill::kOnes);
  wq = add("wq", "attention.wq.weight", {a.n_heads * hd, D}, 0, Fill::kNormal, 0);
  wk = add("wk", "attention.wk.weight", {a.n_kv_heads * hd, D}, 0, Fill::kNormal, 1);
  wv = add("wv", "attention.wv.weight", {a.n_kv_heads * hd, D}, 0, Fill::kNormal, 2);
  wo = add("wo", "attention.wo.weight", {D, a.n_heads * hd}, 1, Fill::kNormal, 3);
  ffn_norm = add("ffn_norm", "ffn_norm.weight", {D}, -1, Fill::kOnes);
  w1 = add("w1", "feed_forward.w1.weight", {a.ffn_dim, D}, 0, Fill::kNormal, 4);
  w2 = add("w2", "feed_forward.w2.weight", {D, a.ffn_dim}, 1, Fill::kNormal, 6);
  w3 = add("w3", "feed_forward.w3.weight", {a.ffn_dim, D}, 0, Fill::kNormal, 5);
  adapters_.resize(kLoraTargets.size());
  if (frozen) {
    lora_scale_ = opt.lora.alpha / static_cast<double>(opt.lora.rank);
    lora_dropout_ = opt.lora.dropout;
    addAdapters(a, pre, opt);
  }
}

// A [rank, in] and B [out, rank] for each target, after the base weights.
void TransformerBlockImpl::addAdapters(const ModelArgs& a, const std::string& pre,
                                       const ModelOptions& opt) {
  const int64_t r = opt.lora.rank;
  for (size_t t = 0; t < kLoraTargets.size(); ++t) {
    if (!opt.lora.hasTarget(kLoraTargets[t])) continue;
    const LoraTargetShape shape = loraTargetShape(a, kLoraTargets[t]);
    LoraAdapter& ad = adapters_[t];
    ad.name = pre + kTargetSpecs[t].base;
    ad.row_parallel = kTargetSpecs[t].row_parallel;
    const ParamInit ia{loraAName(ad.name),
                       {r, shape.in},
                       ad.row_parallel ? 1 : -1,
                       ParamInit::Fill::kKaimingUniform};
    const ParamInit ib{
        loraBName(ad.name), {shape.out, r}, ad.row_parallel ? -1 : 0, ParamInit::Fill::kZeros};
    const std::string short_name = std::string(kLoraTargets[t]);
    ad.a = register_parameter("lora_A_" + short_name, initParam(ia, tp_, opt.seed).to(opt.device));
    ad.b = register_parameter("lora_B_" + short_name, initParam(ib, tp_, opt.seed).to(opt.device));
    params_.push_back({ia.name, ad.a, ia.shard_dim, true});
    params_.push_back({ib.name, ad.b, ib.shard_dim, true});
  }
}

std::vector<torch::Tensor> TransformerBlockImpl::trainableTensors() const {
  std::vector<torch::Tensor> v;
  for (const auto& p : params_)
    if (p.trainable) v.push_back(p.tensor);
  return v;
}

torch::Tensor TransformerBlockImpl::baseProjection(const torch::Tensor& x,
                                                   const torch::Tensor& weight, size_t t) const {
  return nf4_[t].defined() ? nf4Projection(x, nf4_[t]) : blockProj(x, weight);
}

torch::Tensor TransformerBlockImpl::linear(const torch::Tensor& x, const torch::Tensor& lora_x,
                                           const torch::Tensor& weight, size_t t) const {
  torch::Tensor y = baseProjection(x, weight, t);
  if (!adapters_[t].defined()) return y;
  const uint64_t seed = mask_seed_ != nullptr ? *mask_seed_ : 0;
  return y + loraDelta(lora_x, adapters_[t], lora_scale_, lora_dropout_, seed, tp_);
}

void setAttentionKernel(AttentionKernel kernel) { g_attention.store(kernel); }
AttentionKernel attentionKernel() { return g_attention.load(); }

torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v) {
  // The fused softmax is a CPU kernel: on a GPU attention is always SDPA (its flash kernel).
  if (attentionKernel() == AttentionKernel::kSdpa || !q.device().is_cpu())
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                            /*is_causal=*/true, /*scale=*/1.0);
  // Causal softmax in fp32 over the unmasked half only (fused kernel), probs in q's dtype;
  // the products skip the blocks past the diagonal (model/attention_products.h).
  return causalWeighted(fusedCausalSoftmax(causalScores(q, k), q.scalar_type()), v);
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  const int64_t B = x.size(0), T = x.size(1);
  // Attention: column-parallel q/k/v (local heads), row-parallel output.
  torch::Tensor h0 = rmsNorm(x, attention_norm, eps_);
  torch::Tensor h = copyToTp(h0, tp_);
  torch::Tensor q = linear(h, h0, wq, 0).view({B, T, n_local_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor k = linear(h, h0, wk, 1).view({B, T, n_local_kv_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor v = linear(h, h0, wv, 2).view({B, T, n_local_kv_heads_, head_dim_}).transpose(1, 2);
  // Scale q (B·T·D values) rather than the scores (B·H·T² values), inside the rotation.
  q = applyRope(q, rope, 1.0 / std::sqrt(double(head_dim_)));
  k = applyRope(k, rope, 1.0);
  if (n_local_kv_heads_ != n_local_heads_) {  // GQA: each kv head serves a group of heads
    int64_t rep = n_local_heads_ / n_local_kv_heads_;
    k = k.repeat_interleave(rep, 1);
    v = v.repeat_interleave(rep, 1);
  }
  torch::Tensor attn = causalAttention(q, k, v).transpose(1, 2).reshape({B, T, -1});
  // Row-parallel adapters add their (already reduced) delta after the base's reduction.
  auto rowParallel = [&](const torch::Tensor& in, const torch::Tensor& weight, size_t t) {
    torch::Tensor y = reduceFromTp(baseProjection(in, weight, t), tp_);
    if (!adapters_[t].defined()) return y;
    const uint64_t seed = mask_seed_ != nullptr ? *mask_seed_ : 0;
    return y + loraDelta(in, adapters_[t], lora_scale_, lora_dropout_, seed, tp_);
  };
  torch::Tensor out = x + rowParallel(attn, wo, 3);
  // SwiGLU MLP: column-parallel w1/w3, row-parallel w2.
  torch::Tensor g0 = rmsNorm(out, ffn_norm, eps_);
  torch::Tensor g = copyToTp(g0, tp_);
  return out + rowParallel(fusedSwiGlu(linear(g, g0, w1, 4), linear(g, g0, w3, 5)), w2, 6);
}

TransformerImpl::TransformerImpl(const ModelArgs& a, const TpContext& tp, const ModelOptions& opt,
                                 const UnitBuilt& on_unit, const ModelPart& part)
    : part_(part),
      args_(a),
      tp_(tp),
      compute_dtype_(opt.compute_dtype),
      recompute_every_(opt.recompute_every),
      lora_dropout_(opt.lora.enabled() ? opt.lora.dropout : 0.0) {
  if (part_.last_layer < 0) part_.last_layer = a.n_layers;
  for (int64_t i = part_.first_layer; i < part_.last_layer; ++i) {
    layers.push_back(register_module("layers_" + std::to_string(i),
                                     TransformerBlock(a, tp, i, opt, &mask_seed_)));
    if (on_unit) on_unit(i, layers.back()->modelParams());
  }
  const bool frozen = opt.lora.enabled();
  using Fill = ParamInit::Fill;
  auto add = [&](const char* name, const ParamInit& init) {
    torch::Tensor t = initParam(init, tp, opt.seed);
    t = t.to(opt.device, init.fill == Fill::kNormal ? baseDtype(opt) : t.scalar_type());
    t = register_parameter(name, t, /*requires_grad=*/!frozen);
    root_params_.push_back({init.name, t, init.shard_dim, !frozen});
    return t;
  };
  // Tied embeddings in a pipeline: the last stage holds its own copy of the embedding as its
  // output projection (same name, so the same initial value), kept equal to the first
  // stage's by one gradient all-reduce per step (parallel/tied_embedding.h).
  if (part_.embed || (part_.head && a.tie_embeddings))
    tok_embeddings =
        add("tok_embeddings", {"tok_embeddings.weight", {a.vocab_size, a.dim}, 0, Fill::kNormal});
  if (part_.head) norm = add("norm", {"norm.weight", {a.dim}, -1, Fill::kOnes});
  if (part_.head && !a.tie_embeddings)
    output = add("output", {"output.weight", {a.vocab_size, a.dim}, 0, Fill::kNormal});
  rope_ =
      RopeTables::make(a.headDim(), a.max_seq_len, a.rope_theta,
                       opt.compute_dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32);
  rope_ = {rope_.cos.to(opt.device), rope_.sin.to(opt.device)};
  device_ = opt.device;
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
  // LoRA dropout in training only; the seed comes from the default CPU generator, which
  // checkpoints save, so a resumed run draws the same masks.
  mask_seed_ = lora_dropout_ > 0 && torch::GradMode::is_enabled()
                   ? static_cast<uint64_t>(torch::randint(1, INT64_MAX, {1}).item<int64_t>())
                   : 0;
  const int64_t vocab_start = tp_.rank * (args_.vocab_size / tp_.size);
  torch::Tensor h =
      part_.embed ? vocabParallelEmbedding(input.to(device_), tok_embeddings, vocab_start, tp_)
                        .to(compute_dtype_)
                  : input;
  for (size_t j = 0; j < layers.size(); ++j) {
    TransformerBlockImpl& block = *layers[j];
    const int64_t i = part_.first_layer + static_cast<int64_t>(j);  // the global layer
    if (executor_) {
      h = executor_->run(static_cast<int64_t>(j), block, h, step_rope_);
    } else if (recompute_every_ > 0 && i % recompute_every_ == 0 && torch::GradMode::is_enabled()) {
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
  return vocabParallelCrossEntropySum(logits, targets.to(logits.device()), mask.to(logits.device()),
                                      vocab_start, tp_);
}

}  // namespace ftb
