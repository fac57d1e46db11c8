#include "trainer/hf/export.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "common/checkpoint_manifest.h"
#include "common/cli_args.h"
#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hf_config.h"
#include "common/json_input.h"
#include "common/log.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/data/tokenizer.h"
#include "trainer/hf/peft_adapter.h"
#include "trainer/hf/pretrained.h"
#include "trainer/hf/safetensors.h"

namespace ftb::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The step_N directory `path` names, or the newest usable one under it.
ResumePoint resolveCheckpoint(const std::string& path) {
  std::vector<std::string> dirs{path};
  if (!fs::exists(fs::path(path) / kManifestName)) dirs = listCheckpointDirs(path);
  if (dirs.empty())
    throw ConfigError("--checkpoint", "command line",
                      path + " is not a checkpoint (no " + std::string(kManifestName) +
                          ") and holds no step_N checkpoints",
                      "pass a step_N directory or the run's checkpoints/ directory");
  std::string problems;
  for (const std::string& d : dirs) {
    try {
      return ResumePoint{d, loadVerifiedManifest(d)};
    } catch (const CheckpointError& e) {
      problems += std::string("\n  ") + e.what();
    }
  }
  throw ConfigError("--checkpoint", "command line", "no usable checkpoint:" + problems);
}

const std::string& compatValue(const Manifest& m, const std::string& dir, const char* key) {
  auto it = m.compat.find(key);
  if (it == m.compat.end())
    throw ConfigError("--checkpoint", dir + "/" + kManifestName,
                      std::string("the manifest does not record ") + key);
  return it->second;
}

ModelArgs modelOf(const ResumePoint& rp) {
  auto i = [&](const char* k) { return std::stoll(compatValue(rp.manifest, rp.dir, k)); };
  auto f = [&](const char* k) { return std::stod(compatValue(rp.manifest, rp.dir, k)); };
  ModelArgs a;
  a.dim = i("model.dim");
  a.n_layers = i("model.n_layers");
  a.n_heads = i("model.n_heads");
  a.n_kv_heads = i("model.n_kv_heads");
  a.ffn_dim = i("model.ffn_dim");
  a.vocab_size = i("model.vocab_size");
  a.max_seq_len = i("model.max_seq_len");
  a.rope_theta = f("model.rope_theta");
  a.norm_eps = f("model.norm_eps");
  a.tie_embeddings = compatValue(rp.manifest, rp.dir, "model.tie_embeddings") == "true";
  return a;
}

struct ExportDtype {
  std::string name;        // "fp32" | "bf16" | "fp16"
  torch::ScalarType type;  // of the written tensors
  std::string source;      // why this dtype, for the log
};

ExportDtype dtypeNamed(const std::string& name, const std::string& source) {
  if (name == "fp32") return {name, torch::kFloat32, source};
  if (name == "bf16") return {name, torch::kBFloat16, source};
  if (name == "fp16") return {name, torch::kFloat16, source};
  throw ConfigError("--dtype", "command line", "unknown dtype \"" + name + "\"",
                    "one of run (the run's training.dtype), fp32, bf16, fp16");
}

// The resolved config (run.toml) of the run whose default checkpoint directory
// <run>/checkpoints/step_N holds the checkpoint. `where`: its path, or why there is none.
struct RunConfig {
  std::optional<Config> cfg;
  std::string where;
};

RunConfig runConfig(const ResumePoint& rp) {
  const fs::path run = fs::absolute(rp.dir).parent_path().parent_path();
  const fs::path toml = run / "run.toml";
  if (!fs::exists(toml) || run.filename().string() != rp.manifest.tag)
    return {std::nullopt, "no run.toml of run '" + rp.manifest.tag + "' beside the checkpoint"};
  try {
    return {Config::load(toml.string(), {}), toml.string()};
  } catch (const FtbError& e) {
    return {std::nullopt, e.what()};
  }
}

// --dtype run: the run's training.dtype, else the master weights' fp32.
ExportDtype runDtype(const RunConfig& run) {
  if (!run.cfg) return dtypeNamed("fp32", "the master weights' dtype: " + run.where);
  return dtypeNamed(run.cfg->getString("training.dtype"), "training.dtype of " + run.where);
}

// A string key of the run's config, "" when it is unset (model.from_pretrained has no
// default: a run started from a preset does not have it).
std::string runString(const std::optional<Config>& run, const char* key) {
  return run && run->has(key) ? run->getString(key) : "";
}

// model.from_pretrained's config.json, if the run had one and it is still there; else null.
json sourceConfig(const std::optional<Config>& run) {
  const std::string base = runString(run, "model.from_pretrained");
  if (base.empty()) return nullptr;
  const std::string path = (fs::path(base) / kHfConfigName).string();
  try {  // bounded like every input read (common/json_input.h); unreadable: null
    const json j = parseJsonInput(readInputFile(path, "config.json"), "", path);
    return j.is_object() ? j : json();
  } catch (const ConfigError&) {
    return json();
  }
}

// The architecture fields of the model the run started from (sourceConfig): a
// MistralForCausalLM stays one, with its sliding_window. Otherwise LlamaForCausalLM.
json sourceArchitecture(const json& source) {
  json llama = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}};
  if (!source.is_object() ||
      source.value("architectures", json::array()) != json{"MistralForCausalLM"})
    return llama;
  return {{"architectures", {"MistralForCausalLM"}},
          {"model_type", "mistral"},
          {"sliding_window", source.value("sliding_window", json())}};
}

// The tokenizer the run tokenized with: data.tokenizer, else model.from_pretrained's
// tokenizer.json, else its tokenizer.model; "" when none is there.
std::string runTokenizer(const std::optional<Config>& run) {
  std::string p = runString(run, "data.tokenizer");
  const std::string base = runString(run, "model.from_pretrained");
  if (p.empty() && !base.empty()) {
    p = (fs::path(base) / "tokenizer.json").string();
    if (!fs::is_regular_file(p)) p = (fs::path(base) / "tokenizer.model").string();
  }
  return !p.empty() && fs::is_regular_file(p) ? p : "";
}

// The tokenizer goes with the weights, as in a model directory: a sentencepiece model as
// tokenizer.model; a tokenizer.json as tokenizer.json, with the tokenizer_config.json (its
// eos_token, its chat template) and chat_template.jinja beside it when they are there.
void copyTokenizer(const std::string& tokenizer, const fs::path& dir) {
  std::vector<std::pair<fs::path, std::string>> files;
  if (!isTokenizerJson(tokenizer)) {
    files.emplace_back(tokenizer, "tokenizer.model");
  } else {
    files.emplace_back(tokenizer, "tokenizer.json");
    for (const char* name : {"tokenizer_config.json", "chat_template.jinja"}) {
      const fs::path p = fs::path(tokenizer).parent_path() / name;
      if (fs::is_regular_file(p)) files.emplace_back(p, name);
    }
  }
  for (const auto& [from, name] : files) {
    fs::copy_file(from, dir / name);
    fsyncPath((dir / name).string());
  }
}

// config.json's bos_token_id / eos_token_id: the tokenizer's (when it has them), else the
// source config.json's; none when neither says.
json specialTokenIds(const std::string& tokenizer, const json& source) {
  json ids = json::object();
  if (!tokenizer.empty()) {
    std::unique_ptr<TextTokenizer> t = loadTextTokenizer(tokenizer, "data.tokenizer");
    if (t->bos() >= 0) ids["bos_token_id"] = t->bos();
    if (t->eos() >= 0) ids["eos_token_id"] = t->eos();
    return ids;
  }
  for (const char* k : {"bos_token_id", "eos_token_id"})
    if (source.is_object() && source.contains(k)) ids[k] = source[k];
  return ids;
}

const char* hfTorchDtype(torch::ScalarType t) {
  return t == torch::kBFloat16 ? "bfloat16" : t == torch::kFloat16 ? "float16" : "float32";
}

int64_t tensorBytes(const HfParam& p, torch::ScalarType t) {
  int64_t b = int64_t(c10::elementSize(t));
  for (int64_t d : p.shape) b *= d;
  return b;
}

json configJson(const ModelArgs& a, const ResumePoint& rp, torch::ScalarType t, json arch) {
  json c = {{"hidden_size", a.dim},
            {"num_hidden_layers", a.n_layers},
            {"num_attention_heads", a.n_heads},
            {"num_key_value_heads", a.n_kv_heads},
            {"intermediate_size", a.ffn_dim},
            {"vocab_size", a.vocab_size},
            {"max_position_embeddings", a.max_seq_len},
            {"rope_theta", a.rope_theta},
            {"rms_norm_eps", a.norm_eps},
            {"tie_word_embeddings", a.tie_embeddings},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"rope_scaling", nullptr},
            {"torch_dtype", hfTorchDtype(t)},
            {"ftbench_export",
             {{"checkpoint", fs::absolute(rp.dir).string()},
              {"step", rp.manifest.state.count("step") ? rp.manifest.state.at("step") : -1}}}};
  arch.update(c);
  return arch;
}

// Consecutive groups of params, each at most max_bytes in dtype t (a larger tensor alone).
std::vector<std::vector<HfParam>> planShards(const std::vector<HfParam>& params, int64_t max_bytes,
                                             torch::ScalarType t) {
  std::vector<std::vector<HfParam>> shards(1);
  int64_t bytes = 0;
  for (const HfParam& p : params) {
    const int64_t b = tensorBytes(p, t);
    if (!shards.back().empty() && bytes + b > max_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(p);
    bytes += b;
  }
  return shards;
}

// Checkpointer::load of `pieces` (any saved layout); its CheckpointError is a ConfigError on
// --checkpoint.
void loadPieces(const ResumePoint& rp, std::vector<ckpt::StatePiece>& pieces) {
  try {
    Checkpointer::load(rp, pieces);
  } catch (const CheckpointError& e) {
    throw ConfigError("--checkpoint", "command line", e.what());
  }
}

// One global tensor, assembled from whatever slices the checkpoint holds.
torch::Tensor readTensor(const ResumePoint& rp, const HfParam& p) {
  const std::string name = "model." + p.name;
  auto it = rp.manifest.tensors.find(name);
  if (it == rp.manifest.tensors.end() || it->second.shape != p.shape)
    throw ConfigError(
        "--checkpoint", rp.dir + "/" + kManifestName,
        "tensor '" + name + "' " +
            (it == rp.manifest.tensors.end() ? std::string("is missing")
                                             : "has shape " + shapeString(it->second.shape)) +
            ", expected " + shapeString(p.shape) + " from the recorded model.* keys");
  std::vector<ckpt::StatePiece> pieces{{name,
                                        p.shape,
                                        {std::vector<int64_t>(p.shape.size(), 0), p.shape},
                                        torch::empty(p.shape, torch::kFloat32)}};
  loadPieces(rp, pieces);
  return pieces[0].view;
}

void writeShard(const ResumePoint& rp, const std::string& path, const std::vector<HfParam>& ps,
                torch::ScalarType t) {
  std::vector<StTensor> decl;
  for (const HfParam& p : ps) decl.push_back({p.hf_name, stDtypeOf(t), p.shape, 0, 0});
  SafetensorsWriter w(path, decl);
  for (const HfParam& p : ps) w.write(readTensor(rp, p).to(t));
  w.close();
}

// A LoRA run's lora.* (or model.*) value, as its TOML spelling: the manifest's record,
// else the run.toml beside the checkpoint; nullopt when neither has it.
std::optional<std::string> runValue(const ResumePoint& rp, const RunConfig& run, const char* key) {
  auto it = rp.manifest.compat.find(key);
  if (it != rp.manifest.compat.end()) return it->second;
  if (run.cfg && run.cfg->has(key)) return valueToString(run.cfg->entries().at(key).value);
  return std::nullopt;
}

double loraNumber(const ResumePoint& rp, const RunConfig& run, const char* key) {
  const std::optional<std::string> v = runValue(rp, run, key);
  if (!v)
    throw ConfigError("--checkpoint", rp.dir + "/" + kManifestName,
                      std::string("the checkpoint does not record ") + key + " and " + run.where,
                      "export a checkpoint in its run's checkpoints/ directory");
  const std::optional<Value> x = valueFromString(*v);
  if (x && std::holds_alternative<double>(*x)) return std::get<double>(*x);
  if (x && std::holds_alternative<int64_t>(*x)) return double(std::get<int64_t>(*x));
  throw ConfigError("--checkpoint", rp.dir, std::string(key) + " = " + *v + " is not a number");
}

// The adapter a LoRA checkpoint holds: rank and targets from its tensors (layer 0's
// lora_A), alpha and dropout from the run.
LoraConfig loraOf(const ResumePoint& rp, const RunConfig& run) {
  LoraConfig l;
  for (const LoraTarget& t : loraTargets()) {
    auto it =
        rp.manifest.tensors.find(std::string("model.layers.0.") + t.module + ".lora_A.weight");
    if (it == rp.manifest.tensors.end()) continue;
    l.targets.push_back(t.key);
    l.rank = it->second.shape.at(0);
  }
  if (l.targets.empty())
    throw ConfigError("--adapter", rp.dir + "/" + kManifestName,
                      "not a LoRA checkpoint: it holds no lora_A / lora_B tensors",
                      "without --adapter, trainer export writes the whole model");
  l.alpha = loraNumber(rp, run, "lora.alpha");
  l.dropout = loraNumber(rp, run, "lora.dropout");
  return l;
}

// The run's model.from_pretrained, absolute ("" when it started from random weights).
std::string baseModelOf(const ResumePoint& rp, const RunConfig& run) {
  const std::optional<std::string> base = runValue(rp, run, "model.from_pretrained");
  const std::optional<Value> path = base ? valueFromString(*base) : std::nullopt;
  if (!path || !std::holds_alternative<std::string>(*path) || std::get<std::string>(*path).empty())
    return "";
  return fs::absolute(std::get<std::string>(*path)).string();
}

int exportAdapter(const ExportOptions& o) {
  if (fs::exists(o.out))
    throw ConfigError("--out", "command line", o.out + " already exists",
                      "export into a new directory (nothing is overwritten)");
  ResumePoint rp = resolveCheckpoint(o.checkpoint);
  const ModelArgs a = modelOf(rp);
  const RunConfig run = runConfig(rp);
  const ExportDtype dt =
      o.dtype == "run" ? runDtype(run) : dtypeNamed(o.dtype, "--dtype " + o.dtype);
  const LoraConfig lora = loraOf(rp, run);
  writeAdapter(o.out, a, lora, baseModelOf(rp, run), dt.type, [&](const AdapterParam& p) {
    return readTensor(rp, HfParam{p.peft_name, p.name, p.shape});
  });
  FTB_INFO("exported the LoRA adapter of "
           << rp.dir << " (step " << rp.manifest.state["step"] << ", rank " << lora.rank << ", "
           << lora.targets.size() << " targets, " << dt.name << "; " << dt.source << ") to "
           << o.out << " as a PEFT adapter");
  return 1;
}

}  // namespace

CheckpointModel openCheckpointModel(const std::string& path) {
  ResumePoint rp = resolveCheckpoint(path);
  const ModelArgs a = modelOf(rp);
  if (!rp.manifest.tensors.count("model.tok_embeddings.weight") &&
      rp.manifest.tensors.count("model.layers.0.attention.wq.lora_A.weight") +
              rp.manifest.tensors.count("model.layers.0.attention.wv.lora_A.weight") >
          0)
    throw ConfigError("--checkpoint", rp.dir + "/" + kManifestName,
                      "a LoRA checkpoint: it holds the adapters, not the base weights",
                      "trainer export --adapter writes its PEFT adapter directory (trainer "
                      "logits: --model BASE_DIR --adapter that directory)");
  const int64_t held = std::count_if(rp.manifest.tensors.begin(), rp.manifest.tensors.end(),
                                     [](const auto& t) { return t.first.rfind("model.", 0) == 0; });
  if (hfParamCount(a) > held)  // before a list of that size is built
    throw ConfigError("--checkpoint", rp.dir + "/" + kManifestName,
                      "model.n_layers = " + std::to_string(a.n_layers) +
                          " makes more tensors than the " + std::to_string(held) +
                          " model tensors the checkpoint holds");
  const json sw =
      sourceArchitecture(sourceConfig(runConfig(rp).cfg)).value("sliding_window", json());
  const int64_t window = sw.is_number_integer() ? std::max<int64_t>(sw.get<int64_t>(), 0) : 0;
  return CheckpointModel{std::move(rp), a, window};
}

void loadCheckpointModel(const CheckpointModel& c, std::vector<ckpt::StatePiece>& pieces) {
  std::vector<ckpt::StatePiece> base;  // aliasing the same tensors
  for (const ckpt::StatePiece& p : pieces)
    if (p.name.find(".lora_") == std::string::npos) base.push_back(p);
  loadPieces(c.rp, base);
}

int exportCheckpoint(const ExportOptions& o) {
  if (o.adapter) return exportAdapter(o);
  if (fs::exists(o.out))
    throw ConfigError("--out", "command line", o.out + " already exists",
                      "export into a new directory (nothing is overwritten)");
  CheckpointModel c = openCheckpointModel(o.checkpoint);
  ResumePoint& rp = c.rp;
  const ModelArgs& a = c.args;
  const RunConfig run = runConfig(rp);
  const ExportDtype dt =
      o.dtype == "run" ? runDtype(run) : dtypeNamed(o.dtype, "--dtype " + o.dtype);
  const std::vector<std::vector<HfParam>> shards =
      planShards(hfParams(a), o.max_shard_bytes, dt.type);
  const fs::path tmp = o.out + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const json source = sourceConfig(run.cfg);
  const std::string tokenizer = runTokenizer(run.cfg);
  json config = configJson(a, rp, dt.type, sourceArchitecture(source));
  config.update(specialTokenIds(tokenizer, source));
  writeFileDurably((tmp / kHfConfigName).string(), config.dump(2) + "\n");
  if (!tokenizer.empty()) copyTokenizer(tokenizer, tmp);
  const int n = int(shards.size());
  json weight_map = json::object();
  int64_t total = 0;
  for (int k = 0; k < n; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, n);
    const std::string file = n == 1 ? kSingleFile : name;
    writeShard(rp, (tmp / file).string(), shards[k], dt.type);
    for (const HfParam& p : shards[k]) {
      weight_map[p.hf_name] = file;
      total += tensorBytes(p, dt.type);
    }
  }
  if (n > 1)
    writeFileDurably(
        (tmp / kIndexFile).string(),
        json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
  fsyncPath(tmp.string());
  renameDurably(tmp.string(), o.out);
  FTB_INFO("exported " << rp.dir << " (step " << rp.manifest.state["step"] << ", " << total
                       << " bytes of " << dt.name << " weights; " << dt.source << ") to " << o.out
                       << " in " << n << " safetensors file(s)");
  return n;
}

int exportMain(const std::vector<std::string>& args) {
  cxxopts::Options cli(
      "trainer export",
      "Write a checkpoint as a Hugging Face model directory, or a LoRA run's adapters as a PEFT "
      "adapter directory.\n"
      "  trainer export --checkpoint RUN/checkpoints/step_00000020 --out DIR [--adapter]");
  cli.add_options()("checkpoint",
                    "a step_N checkpoint directory, or a checkpoint directory (newest usable step)",
                    cxxopts::value<std::string>())(
      "out", "new directory for config.json + safetensors", cxxopts::value<std::string>())(
      "max-shard-mb", "split the weights into shards of at most this many MiB (default 5120)",
      cxxopts::value<double>()->default_value("5120"))(
      "adapter",
      "write the LoRA adapters of a LoRA run's checkpoint as a PEFT adapter directory "
      "(adapter_config.json + adapter_model.safetensors)")(
      "dtype",
      "dtype of the written weights: run (the run's training.dtype, from its run.toml "
      "beside the checkpoint; else fp32), fp32, bf16, fp16",
      cxxopts::value<std::string>()->default_value("run"))("h,help", "show help");
  return guardedCli(cli,
                    [&]() -> std::optional<int> {
                      const auto parsed = parseSubcommand(cli, "trainer export", args);
                      if (!parsed) return 0;
                      const cxxopts::ParseResult& r = *parsed;
                      for (const char* k : {"checkpoint", "out"})
                        if (!r.count(k))
                          throw ConfigError(std::string("--") + k, "command line", "missing",
                                            "trainer export --checkpoint STEP_DIR --out DIR");
                      const double mb = r["max-shard-mb"].as<double>();
                      if (!(mb > 0)) {
                        std::ostringstream got;
                        got << mb;
                        throw ConfigError("--max-shard-mb", "command line",
                                          "must be > 0, got " + got.str(),
                                          optionHint(cli, "--max-shard-mb"));
                      }
                      ExportOptions opts;
                      opts.checkpoint = r["checkpoint"].as<std::string>();
                      opts.out = r["out"].as<std::string>();
                      opts.max_shard_bytes = int64_t(mb * (1 << 20));
                      opts.dtype = r["dtype"].as<std::string>();
                      opts.adapter = r.count("adapter") > 0;
                      exportCheckpoint(opts);
                      return 0;  // a manifest value that is not a number: std::exception, exit 1
                    })
      .value_or(0);
}

}  // namespace ftb::hf
