// Hugging Face Llama/Mistral checkpoints <-> the ftbench Llama (trainer/README.md
// "Hugging Face models").
//
// Contracts:
// - Names: model.embed_tokens.weight <-> tok_embeddings.weight, model.layers.N.self_attn.
//   {q,k,v,o}_proj.weight <-> layers.N.attention.w{q,k,v,o}.weight, mlp.{gate,down,up}_proj
//   <-> feed_forward.w{1,2,3}, input_layernorm <-> attention_norm, post_attention_layernorm
//   <-> ffn_norm, model.norm <-> norm, lm_head <-> output (absent when tied). Same shapes
//   ([out, in]). HF stores q/k rows for the "rotate_half" RoPE, which is the layout
//   applyRope (model/llama.h) computes, so q/k are copied without a permutation.
// - PretrainedModel::open(dir, args) reads config.json's companion weights:
//   model.safetensors, or model.safetensors.index.json and the shard files it names.
//   It validates every header (safetensors.h), that each expected tensor is present
//   exactly once with the shape `args` implies, that no other tensor is present (HF's
//   non-persistent "*.rotary_emb.inv_freq" buffers are ignored) and that the index agrees
//   with the files; each problem is a ConfigError (exit 2) naming the file and tensor.
//   Nothing is read beyond the headers.
// - load(pieces) copies into every "model.<name>" StatePiece (checkpoint/state.h: this
//   rank's boxes of the global tensors, whatever the layout) exactly that box of the
//   file's tensor, converted to the piece's dtype (the fp32 master weights), reading only
//   the pages the box covers, then drops them from the resident set. LoRA adapter pieces
//   ("*.lora_A.weight", "*.lora_B.weight") are left alone (peft_adapter.h fills them).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/run_config.h"
#include "trainer/checkpoint/state.h"
#include "trainer/hf/safetensors.h"
#include "trainer/parallel/dist.h"
#include "trainer/parallel/grad_sync.h"
#include "trainer/parallel/mesh.h"

namespace ftb::hf {

inline constexpr const char* kSingleFile = "model.safetensors";
inline constexpr const char* kIndexFile = "model.safetensors.index.json";

struct HfParam {
  std::string hf_name, name;  // "model.norm.weight", "norm.weight" (torchtitan)
  std::vector<int64_t> shape;
};

// Every parameter of the model `a` describes, in HF file order.
std::vector<HfParam> hfParams(const ModelArgs& a);
// hfParams(a).size() without building the list (INT64_MAX when that overflows): a size read
// from a file (a manifest's model.n_layers) is compared with the tensors the checkpoint holds
// before any list of that size is allocated.
int64_t hfParamCount(const ModelArgs& a);
// 1 + the largest K of a "layers.K." in any of `names` (tensor names of a weight file), 0
// when none names a layer: the layers a file holds, which bound the layer count read from
// a config (config.json's num_hidden_layers) before any per-layer list is built.
int64_t layersNamed(const std::vector<std::string>& names);

class PretrainedModel {
 public:
  static PretrainedModel open(const std::string& dir, const ModelArgs& a);
  struct LoadStats {
    int64_t bytes = 0;     // read from the files
    int64_t peak_rss = 0;  // max VmRSS sampled after each copy, before its pages are dropped
  };
  LoadStats load(std::vector<ckpt::StatePiece>& pieces) const;
  // Of the tensors whose index (in torchtitan name order) is `share` modulo `shares`, the
  // first that holds a NaN or an infinity, as "<file>: tensor '<HF name>' holds N NaN and
  // M infinite values"; "" when none does. Reads those tensors (mapped), then drops them.
  std::string firstNonFinite(int64_t share, int64_t shares) const;

 private:
  // Expected tensors present with their shapes, nothing else (holder: HF name -> file).
  void checkTensors(const ModelArgs& a,
                    const std::map<std::string, const SafetensorsFile*>& holder);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, HfParam>> by_name_;  // torchtitan name
};

// Fills this rank's weights (sync.optimizerParams(), any layout) from tc.from_pretrained
// and refreshes the materialised parameters (sync.paramsLoaded(): collective).
// REQUIRES: called after parallelize() built `sync` (train() does, before the optimizer). Logs the
// load time, this rank's RSS before loading and its peak while loading.
void loadPretrained(const TrainConfig& tc, const Mesh& mesh, GradSync& sync);

// The run's pretrained directory, validated by every rank before anything is written:
// PretrainedModel::open, config.json's sliding_window (Mistral) must cover data.seq_len,
// and every weight is finite (each rank reads 1/world of the tensors: firstNonFinite). Collective:
// when any rank finds a problem (a file missing on its node), every rank throws that ConfigError
// (exit 2), so none waits for the others.
void checkPretrained(const TrainConfig& tc, Distributed& dist);

}  // namespace ftb::hf
