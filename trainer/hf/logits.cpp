#include "trainer/hf/logits.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "common/checkpoint_manifest.h"
#include "common/cli_args.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hf_config.h"
#include "common/json_input.h"
#include "trainer/data/tokenizer.h"
#include "trainer/hf/export.h"
#include "trainer/hf/peft_adapter.h"
#include "trainer/hf/pretrained.h"
#include "trainer/hf/safetensors.h"
#include "trainer/model/llama.h"
#include "trainer/model/lora.h"

namespace ftb::hf {
namespace {

namespace lfs = std::filesystem;
constexpr const char* kLogitsUsage =
    "trainer logits (--model HF_DIR | --checkpoint STEP_DIR) [--adapter PEFT_DIR "
    "[--merge-adapter]] (--ids \"1,2,3\" "
    "| --ids-file F.jsonl | --text \"...\" --tokenizer PATH) [--dtype fp32|bf16|fp64] "
    "--out OUT.safetensors";

struct LogitsOptions {
  std::string model, adapter, out;            // model: --model ("" with --checkpoint)
  std::optional<CheckpointModel> checkpoint;  // --checkpoint
  ModelArgs args;                             // of either
  int64_t sliding_window = 0;                 // 0: none
  std::string source_flag, source_where;      // "--model", its config.json (for messages)
  torch::ScalarType dtype = torch::kFloat32;  // --dtype: the compute dtype
  bool merge_adapter = false;                 // --merge-adapter: W + s·B·A, as PEFT merges
  std::vector<std::vector<int64_t>> ids;      // [B][T_b], T_b >= 1
};

ModelArgs logitsModelArgs(const std::string& dir) {
  if (!lfs::is_directory(dir) || !lfs::exists(lfs::path(dir) / kHfConfigName))
    throw ConfigError("--model", dir, lfs::is_directory(dir) ? "no config.json" : "not a directory",
                      lfs::exists(lfs::path(dir) / kManifestName)
                          ? "a trainer checkpoint: pass it as --checkpoint STEP_DIR"
                          : "a Hugging Face Llama directory (config.json + model.safetensors); a "
                            "trainer checkpoint goes to --checkpoint STEP_DIR");
  const std::map<std::string, Value> k = hfModelKeys(dir);
  ModelArgs a;
  a.name = lfs::path(dir).filename().string();
  a.dim = std::get<int64_t>(k.at("model.dim"));
  a.n_layers = std::get<int64_t>(k.at("model.n_layers"));
  a.n_heads = std::get<int64_t>(k.at("model.n_heads"));
  a.n_kv_heads = std::get<int64_t>(k.at("model.n_kv_heads"));
  a.ffn_dim = std::get<int64_t>(k.at("model.ffn_dim"));
  a.vocab_size = std::get<int64_t>(k.at("model.vocab_size"));
  a.max_seq_len = std::get<int64_t>(k.at("model.max_seq_len"));
  a.rope_theta = std::get<double>(k.at("model.rope_theta"));
  a.norm_eps = std::get<double>(k.at("model.norm_eps"));
  a.tie_embeddings = std::get<bool>(k.at("model.tie_embeddings"));
  return a;
}

// --model HF_DIR or --checkpoint STEP_DIR (exactly one): sets o's model or checkpoint, its
// shape and its sliding window.
void logitsSource(const cxxopts::ParseResult& r, LogitsOptions& o) {
  const int given = int(r.count("model") + r.count("checkpoint"));
  if (given != 1)
    throw ConfigError("--model / --checkpoint", "command line",
                      "expected exactly one, got " + std::to_string(given), kLogitsUsage);
  if (r.count("model")) {
    o.model = r["model"].as<std::string>();
    o.args = logitsModelArgs(o.model);
    o.sliding_window = hfSlidingWindow(o.model);
    o.source_flag = "--model";
    o.source_where = (lfs::path(o.model) / kHfConfigName).string();
  } else {
    o.checkpoint.emplace(openCheckpointModel(r["checkpoint"].as<std::string>()));
    o.args = o.checkpoint->args;
    o.sliding_window = o.checkpoint->sliding_window;
    o.source_flag = "--checkpoint";
    o.source_where = o.checkpoint->rp.dir;
  }
}

torch::ScalarType logitsDtype(const std::string& name) {
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp64") return torch::kFloat64;
  throw ConfigError("--dtype", "command line", "unknown dtype \"" + name + "\"",
                    "fp32 (the default), bf16 or fp64");
}

// "q_proj" of "self_attn.q_proj" (PEFT lists target modules by their last name).
std::string logitsModuleTail(const std::string& module) {
  return module.substr(module.rfind('.') + 1);
}

// r, lora_alpha and target_modules of a PEFT adapter_config.json (PeftAdapter::open checks the
// rest against them).
LoraConfig logitsLoraConfig(const std::string& dir) {
  const std::string path = (lfs::path(dir) / kAdapterConfigName).string();
  if (!lfs::is_directory(dir) || !lfs::exists(path))
    throw ConfigError("--adapter", dir, std::string("no ") + kAdapterConfigName,
                      "a PEFT adapter directory (adapter_config.json + adapter_model.safetensors)");
  const nlohmann::json j =
      parseJsonInput(readInputFile(path, "PEFT adapter config"), "--adapter", path);
  LoraConfig l;
  if (j.is_object() && j.value("r", nlohmann::json()).is_number_integer())
    l.rank = j["r"].get<int64_t>();
  if (j.is_object() && j.value("lora_alpha", nlohmann::json()).is_number())
    l.alpha = j["lora_alpha"].get<double>();
  const nlohmann::json tm =
      j.is_object() ? j.value("target_modules", nlohmann::json()) : nlohmann::json();
  for (const LoraTarget& t : loraTargets())
    for (const nlohmann::json& m : tm.is_array() ? tm : nlohmann::json::array())
      if (m.is_string() && logitsModuleTail(t.hf) == logitsModuleTail(m.get<std::string>()))
        l.targets.push_back(t.key);
  if (l.rank <= 0 || l.targets.empty())
    throw ConfigError("--adapter", path, "expected a LoRA config with r > 0 and target_modules",
                      "an adapter saved by PeftModel.save_pretrained");
  return l;
}

// "model.<name>" pieces aliasing every parameter of a whole (tp 1) model.
std::vector<ckpt::StatePiece> logitsPieces(const Transformer& m) {
  std::vector<ckpt::StatePiece> pieces;
  for (const ModelParam& p : m->paramsInForwardOrder()) {
    ckpt::StatePiece s;
    s.name = "model." + p.name;
    s.global_shape = p.tensor.sizes().vec();
    s.box.offset.assign(s.global_shape.size(), 0);
    s.box.size = s.global_shape;
    s.view = p.tensor;
    pieces.push_back(std::move(s));
  }
  return pieces;
}

// --ids "1,2,3": one sequence.
std::vector<int64_t> logitsParseIds(const std::string& text, const std::string& flag,
                                    const std::string& where) {
  std::vector<int64_t> ids;
  std::stringstream ss(text);
  std::string word;
  while (std::getline(ss, word, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || word.find_first_not_of(" \t", used) != std::string::npos)
      throw ConfigError(flag, where, "\"" + word + "\" is not an integer token id",
                        "comma-separated ids, e.g. --ids \"1,2,3\"");
    ids.push_back(v);
  }
  return ids;
}

// --ids-file F.jsonl: one {"input_ids": [...]} per non-blank line.
std::vector<std::vector<int64_t>> logitsReadIdsFile(const std::string& path) {
  std::vector<std::vector<int64_t>> rows;
  std::stringstream in(readInputFile(path, "--ids-file"));
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(lineno);
    const nlohmann::json j = parseJsonInput(line, "--ids-file", where);
    const nlohmann::json ids =
        j.is_object() ? j.value("input_ids", nlohmann::json()) : nlohmann::json();
    std::vector<int64_t> row;
    for (const nlohmann::json& v : ids.is_array() ? ids : nlohmann::json::array()) {
      if (!v.is_number_integer())
        throw ConfigError("--ids-file", where,
                          "input_ids holds " + v.dump() + ", expected integers");
      row.push_back(v.get<int64_t>());
    }
    if (!ids.is_array())
      throw ConfigError("--ids-file", where, "expected {\"input_ids\": [...]}",
                        "what `trainer tokenize` writes");
    if (row.empty())
      throw ConfigError("--ids-file", where, "input_ids is empty", "give at least one token id");
    rows.push_back(std::move(row));
  }
  return rows;
}

// The batch from --ids, --ids-file or --text (exactly one), checked against o.args and
// o.sliding_window.
std::vector<std::vector<int64_t>> logitsInput(const cxxopts::ParseResult& r,
                                              const LogitsOptions& o) {
  const int given = int(r.count("ids") + r.count("ids-file") + r.count("text"));
  if (given != 1)
    throw ConfigError("--ids / --ids-file / --text", "command line",
                      "expected exactly one, got " + std::to_string(given), kLogitsUsage);
  std::vector<std::vector<int64_t>> rows;
  std::string flag = r.count("ids") ? "--ids" : r.count("ids-file") ? "--ids-file" : "--text";
  if (r.count("ids")) {
    rows.push_back(logitsParseIds(r["ids"].as<std::string>(), "--ids", "command line"));
  } else if (r.count("ids-file")) {
    rows = logitsReadIdsFile(r["ids-file"].as<std::string>());
  } else {
    if (!r.count("tokenizer"))
      throw ConfigError("--tokenizer", "command line", "missing: --text needs a tokenizer",
                        "--tokenizer HF_DIR/tokenizer.json (or a sentencepiece .model)");
    const auto tok = loadTextTokenizer(r["tokenizer"].as<std::string>(), "--tokenizer");
    std::vector<int64_t> row;
    for (int32_t id : tok->encode(r["text"].as<std::string>())) row.push_back(id);
    rows.push_back(std::move(row));
  }
  if (rows.empty() || rows[0].empty())
    throw ConfigError(flag, "command line", "no token ids", "give at least one token id");
  for (const std::vector<int64_t>& row : rows) {
    if (int64_t(row.size()) > o.args.max_seq_len)
      throw ConfigError(flag, "input",
                        std::to_string(row.size()) + " tokens, more than the " +
                            "model's max_position_embeddings " +
                            std::to_string(o.args.max_seq_len));
    if (o.sliding_window > 0 && int64_t(row.size()) > o.sliding_window)
      throw ConfigError(o.source_flag, o.source_where,
                        "sliding_window " + std::to_string(o.sliding_window) +
                            " is shorter than the " + std::to_string(row.size()) + " tokens given",
                        "at most sliding_window tokens (the model attends to all of them)");
    for (int64_t id : row)
      if (id < 0 || id >= o.args.vocab_size)
        throw ConfigError(flag, "input",
                          "token id " + std::to_string(id) + " outside [0, " +
                              std::to_string(o.args.vocab_size) + ")",
                          "ids of this model's vocabulary");
  }
  return rows;
}

// PEFT's merge_and_unload on the loaded pieces: each target's fp32 base weight W gains
// scale · (B · A) (PEFT's get_delta_weight, in that order of operations) and B becomes 0, so
// the adapter's path adds exact zeros and the forward is the merged model's.
// REQUIRES: pieces hold whole (tp = 1) fp32 weights, each adapter's A, B and its base W.
void mergeAdapterPieces(std::vector<ckpt::StatePiece>& pieces, double scale) {
  std::map<std::string, torch::Tensor> by_name;
  for (const ckpt::StatePiece& p : pieces) by_name[p.name] = p.view;
  const std::string weight = ".weight";
  for (auto& [name, w] : by_name) {
    if (name.size() <= weight.size() || name.compare(name.size() - weight.size(), weight.size(),
                                                     weight) != 0)
      continue;
    const std::string prefix = name.substr(0, name.size() - weight.size());
    const auto a = by_name.find(loraAName(prefix));
    if (a == by_name.end()) continue;  // not a LoRA target (or an adapter's own matrix)
    torch::Tensor& b = by_name.at(loraBName(prefix));
    w.add_(torch::matmul(b, a->second) * scale);
    b.zero_();
  }
}

// Builds the model of --model or --checkpoint (and --adapter) in o.dtype, loads its weights,
// returns it in eval.
Transformer logitsModel(const LogitsOptions& o) {
  torch::NoGradGuard no_grad;
  ModelOptions mo;
  mo.compute_dtype = o.dtype;
  if (!o.adapter.empty()) mo.lora = logitsLoraConfig(o.adapter);
  std::optional<PretrainedModel> pm;
  if (!o.checkpoint) pm.emplace(PretrainedModel::open(o.model, o.args));
  std::optional<PeftAdapter> adapter;
  if (!o.adapter.empty()) adapter.emplace(PeftAdapter::open(o.adapter, o.args, mo.lora));
  Transformer m(o.args, TpContext{}, mo);
  std::vector<ckpt::StatePiece> pieces = logitsPieces(m);
  if (pm)
    pm->load(pieces);
  else
    loadCheckpointModel(*o.checkpoint, pieces);
  if (adapter) adapter->load(pieces);
  if (adapter && o.merge_adapter)
    mergeAdapterPieces(pieces, mo.lora.alpha / static_cast<double>(mo.lora.rank));
  m->eval();
  return m;
}

// What OUT holds: [B, T] with T the longest row, each row right-padded (id 0, mask 0).
struct LogitsTensors {
  torch::Tensor ids, mask;  // int64 [B, T]; mask 1 at a row's own tokens
  torch::Tensor logits;     // [B, T, V] in o.dtype, 0 at padding
  torch::Tensor loss;       // fp32 [B, T-1], 0 where token t+1 is padding
};

// The loss's dtype: fp64 for fp64 logits, else fp32.
torch::ScalarType lossDtype(torch::ScalarType logits) {
  return logits == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// Each row runs alone (batch 1, its own length), so its logits are those of --ids with that
// row, bit for bit; the loss is computed from them in lossDtype.
LogitsTensors runLogits(Transformer& m, const LogitsOptions& o) {
  torch::NoGradGuard no_grad;
  int64_t T = 0;
  for (const std::vector<int64_t>& row : o.ids) T = std::max(T, int64_t(row.size()));
  const int64_t B = int64_t(o.ids.size());
  LogitsTensors r{torch::zeros({B, T}, torch::kInt64), torch::zeros({B, T}, torch::kInt64),
                  torch::zeros({B, T, o.args.vocab_size}, o.dtype),
                  torch::zeros({B, T - 1}, lossDtype(o.dtype))};
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t>& row = o.ids[size_t(b)];
    const int64_t L = int64_t(row.size());
    const torch::Tensor ids =
        torch::from_blob(const_cast<int64_t*>(row.data()), {L}, torch::kInt64).clone();
    const torch::Tensor logits = m->forward(ids.unsqueeze(0))[0];  // [L, V]
    r.ids[b].narrow(0, 0, L).copy_(ids);
    r.mask[b].narrow(0, 0, L).fill_(1);
    r.logits[b].narrow(0, 0, L).copy_(logits);
    if (L > 1)
      r.loss[b]
          .narrow(0, 0, L - 1)
          .copy_(torch::nn::functional::cross_entropy(
              logits.narrow(0, 0, L - 1).to(lossDtype(o.dtype)), ids.narrow(0, 1, L - 1),
              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone)));
  }
  return r;
}

// input_ids, attention_mask, logits, loss to `out`, through out.tmp.<pid>.
void writeLogitsFile(const std::string& out, const LogitsTensors& t) {
  const int64_t B = t.ids.size(0), T = t.ids.size(1);
  const std::string tmp = out + ".tmp." + std::to_string(::getpid());
  try {
    SafetensorsWriter w(
        tmp, {StTensor{"input_ids", "I64", {B, T}, 0, 0},
              StTensor{"attention_mask", "I64", {B, T}, 0, 0},
              StTensor{"logits", stDtypeOf(t.logits.scalar_type()), t.logits.sizes().vec(), 0, 0},
              StTensor{"loss", stDtypeOf(t.loss.scalar_type()), {B, T - 1}, 0, 0}});
    for (const torch::Tensor& x : {t.ids, t.mask, t.logits, t.loss}) w.write(x);
    w.close();
    renameDurably(tmp, out);
  } catch (...) {
    std::error_code ec;
    lfs::remove(tmp, ec);
    throw;
  }
}

cxxopts::Options logitsCli() {
  cxxopts::Options cli("trainer logits",
                       "Write the logits and per-token loss of a Hugging Face Llama directory or "
                       "a trainer checkpoint (with or without a PEFT adapter) as safetensors.\n  " +
                           std::string(kLogitsUsage));
  cli.add_options()("model", "a Hugging Face Llama directory (config.json + safetensors)",
                    cxxopts::value<std::string>())(
      "checkpoint",
      "a full model's trainer checkpoint: a step_N directory, or a checkpoints directory (its "
      "newest usable step); instead of --model",
      cxxopts::value<std::string>())("adapter",
                                     "a PEFT LoRA adapter directory applied on the model",
                                     cxxopts::value<std::string>())(
      "merge-adapter",
      "merge the adapter into the weights first, as PEFT's merge_and_unload (W + s*B*A)")(
      "ids", "comma-separated token ids of one sequence", cxxopts::value<std::string>())(
      "ids-file",
      "JSONL, one {\"input_ids\": [...]} per line; lines of different lengths are right-padded",
      cxxopts::value<std::string>())("text", "a text, encoded with --tokenizer (no BOS/EOS)",
                                     cxxopts::value<std::string>())(
      "tokenizer", "a tokenizer.json or sentencepiece .model (with --text)",
      cxxopts::value<std::string>())(
      "dtype",
      "compute dtype: fp32 or bf16 (as a training run's training.dtype), or fp64 to check "
      "the model against a float64 reference",
      cxxopts::value<std::string>()->default_value("fp32"))(
      "out", "the safetensors file to write", cxxopts::value<std::string>())("h,help", "show help");
  return cli;
}

}  // namespace

int logitsMain(const std::vector<std::string>& args) {
  cxxopts::Options cli = logitsCli();
  return guardedCli(cli,
                    [&]() -> std::optional<int> {
                      const auto parsed = parseSubcommand(cli, "trainer logits", args);
                      if (!parsed) return 0;
                      const cxxopts::ParseResult& r = *parsed;
                      if (!r.count("out"))
                        throw ConfigError("--out", "command line", "missing", kLogitsUsage);
                      LogitsOptions o;
                      o.out = r["out"].as<std::string>();
                      o.dtype = logitsDtype(r["dtype"].as<std::string>());
                      if (r.count("adapter")) o.adapter = r["adapter"].as<std::string>();
                      o.merge_adapter = r.count("merge-adapter") > 0;
                      if (o.merge_adapter && o.adapter.empty())
                        throw ConfigError("--merge-adapter", "command line",
                                          "given without --adapter", kLogitsUsage);
                      logitsSource(r, o);
                      o.ids = logitsInput(r, o);
                      Transformer m = logitsModel(o);
                      const LogitsTensors t = runLogits(m, o);
                      writeLogitsFile(o.out, t);
                      std::cerr << "trainer logits: " << t.ids.size(0) << " x " << t.ids.size(1)
                                << " tokens, vocab " << o.args.vocab_size << ", "
                                << r["dtype"].as<std::string>() << "; wrote " << o.out << "\n";
                      return 0;
                    })
      .value_or(0);
}

}  // namespace ftb::hf
