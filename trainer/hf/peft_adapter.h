// PEFT LoRA adapter directories <-> the ftbench LoRA adapters (trainer/README.md "LoRA").
//
// A PEFT adapter directory (peft's save_pretrained) holds adapter_config.json and
// adapter_model.safetensors.
//
// Contracts:
// - Names: the adapter of target t in layer N is "layers.N.<module>.lora_{A,B}.weight" here
//   and "base_model.model.model.layers.N.<hf module>.lora_{A,B}.weight" in PEFT, with
//   q/k/v/o -> attention.w{q,k,v,o} / self_attn.{q,k,v,o}_proj and gate/up/down ->
//   feed_forward.w{1,3,2} / mlp.{gate,up,down}_proj. lora_A is [r, in] and lora_B [out, r]
//   for the base weight [out, in] (hfParams in pretrained.h), the same in both.
// - writeAdapter(out, ...) writes adapter_config.json (peft_type LORA, task_type
//   CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules as HF module names, bias none,
//   fan_in_fan_out false, use_rslora false, use_dora false, base_model_name_or_path) and
//   adapter_model.safetensors (every adapter tensor of adapterParams, in `dtype`) into
//   out.tmp, renamed to `out` (which must not exist: ConfigError) only when complete.
// - PeftAdapter::open(dir, a, lora) validates the directory before anything is read: the
//   config is a JSON object with peft_type LORA, r == lora.rank, lora_alpha ==
//   lora.alpha, target_modules == lora.targets as a set, and no option ftbench does not
//   compute (rslora, DoRA, bias, per-module rank or alpha, modules_to_save, ...); the
//   safetensors header is valid (safetensors.h) and holds exactly the adapter tensors
//   with their shapes. Each problem is a ConfigError (key lora.from_pretrained, exit 2)
//   naming the file and the tensor or field, expected against found.
// - load(pieces) copies into every "model.<adapter name>" StatePiece (any layout) its box
//   of the file's tensor, converted to the piece's dtype; tensors() returns every
//   adapter tensor whole, fp32, under ftbench names.
#pragma once

#include <torch/torch.h>

#include <functional>
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

inline constexpr const char* kAdapterConfigName = "adapter_config.json";
inline constexpr const char* kAdapterWeightsName = "adapter_model.safetensors";

struct LoraTarget {
  const char* key;     // lora.targets spelling: "q"
  const char* module;  // ftbench: "attention.wq"
  const char* hf;      // HF Llama module: "self_attn.q_proj"
};
// The seven targets, in a layer's parameter order (q k v o gate down up, as hfParams).
const std::vector<LoraTarget>& loraTargets();
// nullptr when `key` is no target.
const LoraTarget* loraTargetByKey(const std::string& key);

struct AdapterParam {
  std::string peft_name, name;  // PEFT's and ftbench's (no "model." prefix)
  std::vector<int64_t> shape;
};
// Every adapter tensor of the model `a` with lora.rank on lora.targets, layer by layer,
// each target's lora_A then lora_B. REQUIRES: every target is one of kLoraTargets.
std::vector<AdapterParam> adapterParams(const ModelArgs& a, const LoraConfig& lora);

// `tensor(p)`: the whole tensor p names, any float dtype (converted to `dtype`). base_model:
// adapter_config.json's base_model_name_or_path ("" = null). REQUIRES: lora.enabled().
void writeAdapter(const std::string& out, const ModelArgs& a, const LoraConfig& lora,
                  const std::string& base_model, torch::ScalarType dtype,
                  const std::function<torch::Tensor(const AdapterParam&)>& tensor);

class PeftAdapter {
 public:
  static PeftAdapter open(const std::string& dir, const ModelArgs& a, const LoraConfig& lora);
  // Pieces of other tensors are left alone. Returns the number of pieces filled.
  int load(std::vector<ckpt::StatePiece>& pieces) const;
  std::map<std::string, torch::Tensor> tensors() const;
  // Of the adapter tensors whose index (in ftbench name order) is `share` modulo `shares`,
  // the first that holds a NaN or an infinity (SafetensorsFile::nonFinite); "" when none.
  std::string firstNonFinite(int64_t share, int64_t shares) const;

 private:
  std::string dir_;
  std::unique_ptr<SafetensorsFile> file_;
  std::map<std::string, AdapterParam> by_name_;  // ftbench name
};

// Fills this rank's adapters (the lora_A / lora_B pieces of ckpt::collectModelState, any
// layout) from tc.lora.from_pretrained and refreshes the materialised parameters
// (sync.paramsLoaded(): collective). REQUIRES: parallelize() built `sync` with the adapters
// among its parameters. An adapter piece the directory does not fill is an internal error.
void loadAdapter(const TrainConfig& tc, const Mesh& mesh, GradSync& sync);

// tc.lora.from_pretrained validated by every rank (PeftAdapter::open) before anything is
// written, every adapter value finite (each rank reads 1/world of the tensors: a NaN would
// otherwise train as "diverged, lower the learning rate"). Collective: when any rank finds a
// problem, every rank throws that ConfigError (exit 2). Nothing to do when the key is "".
void checkAdapter(const TrainConfig& tc, Distributed& dist);

}  // namespace ftb::hf
