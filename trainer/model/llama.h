// Llama-family decoder (RMSNorm, RoPE, GQA attention, SwiGLU MLP, tied or untied
// embeddings) in libtorch. The model math, written for one tensor-parallel rank: its
// forward and backward run the Megatron tp collectives (comm/tp.h) in place.
// Which parameters ZeRO shards and how gradients are synchronised across data-parallel
// ranks lives in parallel/ (parallelize.h).
//
// Contracts:
// - Parameters are registered as layers_3.wq, tok_embeddings, ... (libtorch forbids
//   dots in names); each is initialised from a generator seeded by (seed, its
//   torchtitan name, e.g. "layers.3.attention.wq.weight"), on its
//   FULL shape, before this rank keeps its tensor-parallel slice: the initial model
//   is the same for every parallel layout and does not depend on construction order.
// - Tensor parallel (Megatron): wq/wk/wv/w1/w3 and the output projection are
//   column-parallel (rows split), wo/w2 row-parallel (columns split), the embedding
//   is split over the vocabulary; heads and kv heads are split across tp ranks.
//   With tp = 1 every parallel op is the identity.
// - Parameters are fp32 master weights. In bf16 compute each weight is cast on use
//   (differentiably), so gradients arrive in fp32 (except under ZeRO-3, which gathers
//   blocks in the compute dtype and reduces their gradients in fp32: parallel/zero.h).
//   RMSNorm, softmax and the loss run in fp32.
// - forward(tokens[B,T]) -> local logits [B,T,V/tp] in the compute dtype, on the model's
//   device (tokens, targets and masks may come from the CPU; they are moved). Padding
//   is on the right, so a causal mask alone keeps real tokens from seeing padding.
// - A BlockExecutor, when set, runs each transformer block instead of the default
//   (plain or activation-checkpointed) path: ZeRO-3 uses it to gather parameters.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "common/run_config.h"
#include "trainer/comm/tp.h"
#include "trainer/kernels/nf4.h"
#include "trainer/model/lora.h"

namespace ftb {

// Precomputed rotary tables cos/sin [max_seq_len, head_dim/2] in fp32, HF "rotate_half"
// layout. (The causal mask is applied by the fused softmax, kernels/fused_ops.h.)
struct RopeTables {
  torch::Tensor cos, sin;
  // Angles in fp64, tables rounded once to `dtype` (fp32; fp64 for an fp64 compute dtype).
  static RopeTables make(int64_t head_dim, int64_t max_seq_len, double theta,
                         torch::ScalarType dtype = torch::kFloat32);
  // The first T rows: taken once per forward and shared by every block (and its
  // recompute).
  RopeTables forTokens(int64_t T) const;
};
// x [B,H,T,hd] rotated (fused kernel, kernels/fused_ops.h), times scale; contiguous result.
torch::Tensor applyRope(const torch::Tensor& x, const RopeTables& rope, double scale = 1.0);
// RMSNorm in fp32 statistics, result in the compute dtype (fused kernel, kernels/fused_ops.h).
torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// How causal attention is computed (training.attention), process-wide; set once before the
// first forward. kFusedSoftmax: scores = q kᵀ, the fused fp32 causal softmax
// (fused_ops.h), probs · v. kSdpa: at::scaled_dot_product_attention with is_causal (libtorch
// 2.x's fused flash-attention kernel on the CPU, or the CUDA one). The same function of
// q, k, v; the results differ in rounding. On a GPU it is always kSdpa (the fused softmax
// is CPU code).
enum class AttentionKernel { kFusedSoftmax, kSdpa };
void setAttentionKernel(AttentionKernel kernel);
AttentionKernel attentionKernel();
// q [B, H, T, hd] already scaled by 1/sqrt(hd); k, v [B, H, T, hd] (GQA heads repeated).
// Returns [B, H, T, hd] in q's dtype.
torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v);

// A parameter as the model created it. Invariant: shard_dim is the dimension split
// across tensor-parallel ranks, -1 when every tp rank holds the same full tensor
// (norm weights): those count once, not tp times, in the global gradient norm.
// Invariant: trainable == tensor.requires_grad(); with LoRA only the adapters train.
// An NF4 base matrix (lora.base_dtype = "nf4"): `nf4` is defined, `tensor` is its packed
// codes (nf4.codes) and nf4.shape the weight's shape; writing the weight goes through
// nf4Requantize (kernels/nf4.h), never through `tensor`.
struct ModelParam {
  std::string name;  // torchtitan name, e.g. "layers.3.attention.wq.weight"
  torch::Tensor tensor;
  int shard_dim = -1;
  bool trainable = true;
  Nf4Tensor nf4;
  bool tpReplicated() const { return shard_dim < 0; }
};
std::vector<ModelParam> trainableOnly(const std::vector<ModelParam>& params);
std::vector<ModelParam> frozenOnly(const std::vector<ModelParam>& params);

// How a parameter is split across tensor-parallel ranks: the dimension (or -1), and
// how it starts: norms at 1, LoRA B at 0, LoRA A kaiming-uniform, the rest ~ N(0, 0.02).
struct ParamInit {
  enum class Fill { kNormal, kOnes, kZeros, kKaimingUniform };
  std::string name;
  std::vector<int64_t> full_shape;
  int shard_dim = -1;
  Fill fill = Fill::kNormal;
};

// What the model is built with besides its shape and tp context.
struct ModelOptions {
  torch::ScalarType compute_dtype = torch::kFloat32;
  int64_t recompute_every = 0;  // 0 = none, n = recompute every n-th block in backward
  uint64_t seed = 0;
  LoraConfig lora;  // rank 0: every weight trains
  // Where parameters live. Each is drawn on the CPU (initParam), then moved here, so a
  // model starts from the same values on every device.
  torch::Device device = torch::kCPU;
  // training.master_weights = "none": weight matrices are stored and trained in bf16.
  bool bf16_weights = false;
};

class TransformerBlockImpl : public torch::nn::Module {
 public:
  // `mask_seed` (LoRA dropout): read at each forward; 0 = no dropout. REQUIRES: it
  // outlives the block and keeps its value from a forward to that forward's backward.
  TransformerBlockImpl(const ModelArgs& a, const TpContext& tp, int64_t layer,
                       const ModelOptions& opt, const uint64_t* mask_seed = nullptr);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  // This block's parameters in registration order (= parameters() order): the base
  // weights, then the LoRA adapters in kLoraTargets order.
  const std::vector<ModelParam>& modelParams() const { return params_; }
  // The trainable ones' tensors, in the same order.
  std::vector<torch::Tensor> trainableTensors() const;

  torch::Tensor attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3;

 private:
  // W x (+ the LoRA delta of target t, from the input before copyToTp when column-parallel).
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& lora_x,
                       const torch::Tensor& weight, size_t t) const;
  // W x alone, W being target t's base weight (dequantized on use when it is NF4).
  torch::Tensor baseProjection(const torch::Tensor& x, const torch::Tensor& weight, size_t t) const;
  void addAdapters(const ModelArgs& a, const std::string& pre, const ModelOptions& opt);

  std::vector<ModelParam> params_;
  std::vector<LoraAdapter> adapters_;  // by kLoraTargets index; undefined = no adapter
  std::vector<Nf4Tensor> nf4_;         // by kLoraTargets index; undefined = not NF4
  double lora_scale_ = 0, lora_dropout_ = 0;
  const uint64_t* mask_seed_ = nullptr;
  int64_t n_local_heads_, n_local_kv_heads_, head_dim_;
  double eps_;
  TpContext tp_;
};
TORCH_MODULE(TransformerBlock);

class BlockExecutor {
 public:
  virtual ~BlockExecutor() = default;
  // layer: the block's index among the blocks of the model's part (ModelPart; for the
  // whole model, its layer).
  virtual torch::Tensor run(int64_t layer, TransformerBlockImpl& block, const torch::Tensor& x,
                            const RopeTables& rope) = 0;
};

// The part of the model a pipeline stage's chunk holds (parallel/pipeline.h): blocks
// [first_layer, last_layer), the embedding when `embed`, the final norm and the output
// projection when `head`. The default, last_layer = -1, is the whole model. Parameters
// keep their global names and initial values (seeded by name), so the parts of a model
// are the whole model's parameters, split.
struct ModelPart {
  int64_t first_layer = 0, last_layer = -1;
  bool embed = true, head = true;
};

class TransformerImpl : public torch::nn::Module {
 public:
  // Called once per block right after it is built and initialised, then once with
  // layer = -1 for the root parameters (embedding, final norm, output), each time with
  // that unit's parameters in registration order. ZeRO uses it to shard parameters
  // before the next block is allocated.
  using UnitBuilt = std::function<void(int64_t layer, const std::vector<ModelParam>& params)>;

  // part: the blocks and root parameters to build (the whole model by default); a part
  // without the embedding and head calls on_unit for no root unit.
  TransformerImpl(const ModelArgs& a, const TpContext& tp, const ModelOptions& opt,
                  const UnitBuilt& on_unit = nullptr, const ModelPart& part = {});
  torch::Tensor forward(const torch::Tensor& tokens);
  // A part's forward: tokens [B,T] when it holds the embedding, else the previous part's
  // hidden states [B,T,D] in the compute dtype; returns logits when it holds the head,
  // else its hidden states. forward(tokens) == forwardPart(tokens) for the whole model.
  torch::Tensor forwardPart(const torch::Tensor& input);
  const ModelPart& part() const { return part_; }
  // Σ of token cross-entropies over mask (fp32 scalar), vocab-parallel under tp.
  torch::Tensor lossSum(const torch::Tensor& logits, const torch::Tensor& targets,
                        const torch::Tensor& mask) const;
  void setBlockExecutor(BlockExecutor* e) { executor_ = e; }
  const ModelArgs& args() const { return args_; }
  // Parameters of the root unit (everything outside the blocks this part holds),
  // registration order.
  const std::vector<ModelParam>& rootParams() const { return root_params_; }
  // Every parameter in the order forward first uses them: embedding, blocks 0..L-1,
  // final norm, output. Backward produces gradients roughly in reverse.
  std::vector<ModelParam> paramsInForwardOrder() const;

  torch::Tensor tok_embeddings, norm, output;  // output undefined when tied
  std::vector<TransformerBlock> layers;        // blocks first_layer.. of the part

 private:
  ModelPart part_;
  std::vector<ModelParam> root_params_;
  ModelArgs args_;
  TpContext tp_;
  torch::ScalarType compute_dtype_;
  torch::Device device_ = torch::kCPU;  // where the parameters live (ModelOptions::device)
  int64_t recompute_every_;
  double lora_dropout_;
  uint64_t mask_seed_ = 0;  // this forward's LoRA dropout seed (0 = none), drawn per forward
  RopeTables rope_;
  // The current forward's tables; a member because checkpointed blocks read them
  // again in backward (Invariant: a backward runs before the next forward).
  RopeTables step_rope_;
  BlockExecutor* executor_ = nullptr;
};
TORCH_MODULE(Transformer);

// The dtype in which weights are used in matmuls (thread-local, set by the model
// around forward and by recompute in backward). Weights are cast to it on use.
torch::ScalarType computeDtype();
class ComputeDtypeGuard {
 public:
  explicit ComputeDtypeGuard(torch::ScalarType dt);
  ~ComputeDtypeGuard();

 private:
  torch::ScalarType prev_;
};

}  // namespace ftb
