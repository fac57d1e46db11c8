#include "common/hf_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "common/json_input.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kArchitectures[] = {"LlamaForCausalLM", "MistralForCausalLM"};

std::string configPath(const std::string& dir) { return (fs::path(dir) / kHfConfigName).string(); }

json readConfigJson(const std::string& dir) {
  const std::string path = configPath(dir);
  const std::string text = readInputFile(path, "model.from_pretrained config.json");
  json j = parseJsonInput(text, "model.from_pretrained", path);
  if (!j.is_object()) throw ConfigError("model.from_pretrained", path, "is not a JSON object");
  return j;
}

[[noreturn]] void bad(const std::string& path, const std::string& field, const std::string& what) {
  throw ConfigError("model.from_pretrained", path, "field \"" + field + "\": " + what,
                    "ftbench loads LlamaForCausalLM / MistralForCausalLM checkpoints that the "
                    "plain Llama (RMSNorm, RoPE, SwiGLU, no biases) computes exactly");
}

int64_t intField(const json& j, const std::string& path, const char* f,
                 std::optional<int64_t> def) {
  if (!j.contains(f) || j[f].is_null()) {
    if (def) return *def;
    bad(path, f, "missing (a positive integer is required)");
  }
  if (!j[f].is_number_integer() || j[f].get<int64_t>() <= 0)
    bad(path, f, "expected a positive integer, found " + shortJson(j[f]));
  return j[f].get<int64_t>();
}

double floatField(const json& j, const std::string& path, const char* f, double def) {
  if (!j.contains(f) || j[f].is_null()) return def;
  if (!j[f].is_number() || j[f].get<double>() <= 0)
    bad(path, f, "expected a positive number, found " + shortJson(j[f]));
  return j[f].get<double>();
}

void checkArchitecture(const json& j, const std::string& path) {
  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty())
    bad(path, "architectures",
        "missing; expected [\"LlamaForCausalLM\"] or [\"MistralForCausalLM\"]");
  for (const json& a : j["architectures"]) {
    bool ok = false;
    for (const char* k : kArchitectures) ok = ok || (a.is_string() && a.get<std::string>() == k);
    if (!ok)
      bad(path, "architectures",
          "unsupported architecture " + shortJson(a) +
              "; supported: LlamaForCausalLM, MistralForCausalLM");
  }
}

// Features the ftbench Llama does not compute: refused rather than silently ignored.
void checkFeatures(const json& j, const std::string& path, int64_t dim, int64_t heads) {
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    bad(path, "hidden_act", "expected \"silu\", found " + shortJson(j["hidden_act"]));
  for (const char* f : {"attention_bias", "mlp_bias"})
    if (j.contains(f) && j[f] != false) bad(path, f, "expected false, found " + shortJson(j[f]));
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    bad(path, "rope_scaling", "not supported, found " + shortJson(j["rope_scaling"]));
  if (j.contains("head_dim") && !j["head_dim"].is_null() && j["head_dim"] != json(dim / heads))
    bad(path, "head_dim",
        "expected hidden_size / num_attention_heads = " + std::to_string(dim / heads) + ", found " +
            shortJson(j["head_dim"]));
}

}  // namespace

std::map<std::string, Value> hfModelKeys(const std::string& dir) {
  const std::string path = configPath(dir);
  json j = readConfigJson(dir);
  checkArchitecture(j, path);
  std::map<std::string, Value> m;
  const int64_t dim = intField(j, path, "hidden_size", std::nullopt);
  const int64_t heads = intField(j, path, "num_attention_heads", std::nullopt);
  checkFeatures(j, path, dim, heads);
  m["model.dim"] = dim;
  m["model.n_heads"] = heads;
  m["model.n_layers"] = intField(j, path, "num_hidden_layers", std::nullopt);
  m["model.n_kv_heads"] = intField(j, path, "num_key_value_heads", heads);
  m["model.ffn_dim"] = intField(j, path, "intermediate_size", std::nullopt);
  m["model.vocab_size"] = intField(j, path, "vocab_size", std::nullopt);
  m["model.max_seq_len"] = intField(j, path, "max_position_embeddings", std::nullopt);
  m["model.rope_theta"] = floatField(j, path, "rope_theta", 10000.0);
  m["model.norm_eps"] = floatField(j, path, "rms_norm_eps", 1e-6);
  bool tie = false;
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null()) {
    if (!j["tie_word_embeddings"].is_boolean())
      bad(path, "tie_word_embeddings",
          "expected true or false, found " + shortJson(j["tie_word_embeddings"]));
    tie = j["tie_word_embeddings"].get<bool>();
  }
  m["model.tie_embeddings"] = tie;
  return m;
}

int64_t hfSlidingWindow(const std::string& dir) {
  json j = readConfigJson(dir);
  if (!j.contains("sliding_window") || j["sliding_window"].is_null()) return 0;
  return intField(j, configPath(dir), "sliding_window", std::nullopt);
}

void applyPretrained(Config& cfg) {
  const std::string dir = cfg.getString("model.from_pretrained");
  const std::string origin = configPath(dir);
  bool all_set = true;
  for (const char* k : {"model.dim", "model.n_layers", "model.n_heads", "model.n_kv_heads",
                        "model.ffn_dim", "model.vocab_size", "model.max_seq_len",
                        "model.rope_theta", "model.norm_eps", "model.tie_embeddings"})
    all_set = all_set && cfg.has(k);
  if (!cfg.has("model.name")) {
    fs::path p = fs::path(dir).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();  // "models/smollm/"
    cfg.set("model.name", p.filename().string(), origin);
  }
  if (all_set && !notRegularFileReason(origin).empty()) return;  // a recorded run.toml
  for (const auto& [key, v] : hfModelKeys(dir)) {
    if (cfg.has(key) && cfg.entries().at(key).value != v)
      cfg.fail(key,
               valueToString(cfg.entries().at(key).value) + " disagrees with " + origin +
                   ", which gives " + valueToString(v),
               "drop " + key +
                   " from the run config (the shape of a pretrained model comes from "
                   "its config.json), or point model.from_pretrained at another model");
    if (!cfg.has(key)) cfg.set(key, v, origin);
  }
}

}  // namespace ftb
