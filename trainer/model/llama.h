// Llama-family decoder (RMSNorm, RoPE, GQA attention, SwiGLU MLP, tied or untied
// embeddings) in libtorch. Model math only: how it is sharded lives in parallel/.
//
// Contracts:
// - Parameters are fp32 master weights. With compute dtype bf16 each weight is cast
//   on use (differentiably), so gradients arrive in fp32 on the fp32 parameters.
// - RMSNorm, softmax and the loss run in fp32 whatever the compute dtype.
// - forward(tokens[B,T]) -> logits[B,T,V] in the compute dtype. Padding is on the
//   right, so a causal mask alone keeps real tokens from seeing padding.
// - Init is deterministic given the torch seed set by the caller (torch::manual_seed).
#pragma once

#include <torch/torch.h>

#include "trainer/run_config.h"

namespace ftb {

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Precomputed rotary tables cos/sin [max_seq_len, head_dim/2], HF "rotate_half" layout.
struct RopeTables {
  torch::Tensor cos, sin;
  static RopeTables make(int64_t head_dim, int64_t max_seq_len, double theta);
};
torch::Tensor applyRope(const torch::Tensor& x, const RopeTables& rope);  // x [B,H,T,hd]

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelArgs& a);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
};
TORCH_MODULE(Attention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const ModelArgs& a);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const ModelArgs& a);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  Attention attention{nullptr};
  FeedForward feed_forward{nullptr};
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
};
TORCH_MODULE(TransformerBlock);

class TransformerImpl : public torch::nn::Module {
 public:
  // checkpoint_every: 0 = none, n = recompute every n-th block in backward.
  TransformerImpl(const ModelArgs& a, torch::ScalarType compute_dtype, int64_t checkpoint_every);
  torch::Tensor forward(const torch::Tensor& tokens);
  const ModelArgs& args() const { return args_; }

  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  torch::nn::Linear output{nullptr};  // nullptr when tie_embeddings

 private:
  void initWeights();
  ModelArgs args_;
  torch::ScalarType compute_dtype_;
  int64_t checkpoint_every_;
  RopeTables rope_;
};
TORCH_MODULE(Transformer);

// Sum of token cross-entropies over positions where mask is true, in fp32, and the
// count of those positions. logits [B,T,V], targets [B,T] int64, mask [B,T] bool.
torch::Tensor maskedCrossEntropySum(const torch::Tensor& logits, const torch::Tensor& targets,
                                    const torch::Tensor& mask);

// The dtype in which weights are used in matmuls (thread-local, set by the trainer
// around forward/backward). Weights are cast to it on use.
torch::ScalarType computeDtype();
class ComputeDtypeGuard {
 public:
  explicit ComputeDtypeGuard(torch::ScalarType dt);
  ~ComputeDtypeGuard();

 private:
  torch::ScalarType prev_;
};

}  // namespace ftb
