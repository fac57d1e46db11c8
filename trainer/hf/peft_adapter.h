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
// Every adapter tensor of the model `a` with `rank` on `targets` (keys), layer by layer,
// each target's lora_A then lora_B. REQUIRES: every key is a target.
std::vector<AdapterParam> adapterParams(const ModelArgs& a, int64_t rank,
                                        const std::vector<std::string>& targets);

struct AdapterSpec {
  int64_t rank = 0;
  double alpha = 0, dropout = 0;
  std::vector<std::string> targets;  // keys
  std::string base_model;            // base_model_name_or_path; "" = null
};

// `tensor(p)`: the whole tensor p names, any float dtype (converted to `dtype`).
void writeAdapter(const std::string& out, const ModelArgs& a, const AdapterSpec& spec,
                  torch::ScalarType dtype,
                  const std::function<torch::Tensor(const AdapterParam&)>& tensor);

class PeftAdapter {
 public:
  static PeftAdapter open(const std::string& dir, const ModelArgs& a, const AdapterSpec& lora);
  // Pieces of other tensors are left alone. Returns the number of pieces filled.
  int load(std::vector<ckpt::StatePiece>& pieces) const;
  std::map<std::string, torch::Tensor> tensors() const;

 private:
  std::string dir_;
  std::unique_ptr<SafetensorsFile> file_;
  std::map<std::string, AdapterParam> by_name_;  // ftbench name
};

}  // namespace ftb::hf
