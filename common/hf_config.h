// Hugging Face model directories: config.json -> model.* keys (trainer/README.md
// "Hugging Face models"). No libtorch: the sweep tagger resolves configs too.
//
// Contracts:
// - hfModelKeys(dir) reads <dir>/config.json and returns the model.* keys it implies,
//   for architectures LlamaForCausalLM and MistralForCausalLM only:
//     hidden_size -> model.dim, num_hidden_layers -> n_layers, num_attention_heads ->
//     n_heads, num_key_value_heads (default n_heads) -> n_kv_heads, intermediate_size ->
//     ffn_dim, vocab_size, max_position_embeddings -> max_seq_len, rope_theta (default
//     10000), rms_norm_eps -> norm_eps, tie_word_embeddings (default false).
//   Anything the ftbench Llama cannot compute exactly (another architecture, hidden_act
//   other than silu, attention/mlp biases, rope_scaling, a head_dim other than
//   hidden_size / num_attention_heads) throws ConfigError naming config.json and the field.
// - applyPretrained(cfg): when model.from_pretrained is set, every model.* key above
//   comes from config.json (origin "<dir>/config.json"). A key the run config or an
//   override sets to another value throws ConfigError naming both values; model.name
//   defaults to the directory's name, and a model.name naming a preset (configs/runs/
//   tiny.toml's "tiny") gives way to it: Config::fromString drops it, as no preset is
//   applied; a name of the user's own ("my-smol") is kept. A resolved run.toml read
//   back where the directory is gone (sweep_tagger aggregate on another machine) keeps
//   its recorded model.* keys: config.json is only required when some key is unset.
#pragma once

#include <map>
#include <string>

#include "common/config.h"

namespace ftb {

inline constexpr const char* kHfConfigName = "config.json";

// key -> value, e.g. {"model.dim", int64_t 576}.
std::map<std::string, Value> hfModelKeys(const std::string& dir);

// Mistral's sliding_window (0 when absent or null).
int64_t hfSlidingWindow(const std::string& dir);

void applyPretrained(Config& cfg);

}  // namespace ftb
