#include "trainer/hf/logits.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/cli_args.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hf_config.h"
#include "common/json_input.h"
#include "trainer/data/tokenizer.h"
#include "trainer/hf/peft_adapter.h"
#include "trainer/hf/pretrained.h"
#include "trainer/hf/safetensors.h"
#include "trainer/model/llama.h"

namespace ftb::hf {
namespace {

namespace lfs = std::filesystem;
constexpr const char* kLogitsUsage =
    "trainer logits --model HF_DIR [--adapter PEFT_DIR] (--ids \"1,2,3\" | --ids-file F.jsonl | "
    "--text \"...\" --tokenizer PATH) --out OUT.safetensors";

struct LogitsOptions {
  std::string model, adapter, out;
  std::vector<std::vector<int64_t>> ids;  // [B][T]
};

ModelArgs logitsModelArgs(const std::string& dir) {
  if (!lfs::is_directory(dir))
    throw ConfigError("--model", dir, "not a directory",
                      "a Hugging Face Llama directory (config.json + model.safetensors); for a "
                      "trainer checkpoint run `trainer export` first");
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
  const nlohmann::json j = parseJsonInput(readInputFile(path, "PEFT adapter config"), "--adapter",
                                          path);
  LoraConfig l;
  if (j.is_object() && j.value("r", nlohmann::json()).is_number_integer())
    l.rank = j["r"].get<int64_t>();
  if (j.is_object() && j.value("lora_alpha", nlohmann::json()).is_number())
    l.alpha = j["lora_alpha"].get<double>();
  const nlohmann::json tm = j.is_object() ? j.value("target_modules", nlohmann::json()) : nlohmann::json();
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
    const nlohmann::json ids = j.is_object() ? j.value("input_ids", nlohmann::json()) : nlohmann::json();
    std::vector<int64_t> row;
    for (const nlohmann::json& v : ids.is_array() ? ids : nlohmann::json::array()) {
      if (!v.is_number_integer())
        throw ConfigError("--ids-file", where, "input_ids holds " + v.dump() + ", expected integers");
      row.push_back(v.get<int64_t>());
    }
    if (!ids.is_array())
      throw ConfigError("--ids-file", where, "expected {\"input_ids\": [...]}",
                        "what `trainer tokenize` writes");
    rows.push_back(std::move(row));
  }
  return rows;
}

// The batch from --ids, --ids-file or --text (exactly one), checked against the model.
std::vector<std::vector<int64_t>> logitsInput(const cxxopts::ParseResult& r, const ModelArgs& a) {
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
    if (row.size() != rows[0].size())
      throw ConfigError(flag, "input", "sequences of " + std::to_string(rows[0].size()) + " and " +
                        std::to_string(row.size()) + " tokens", "every line must have one length");
    if (int64_t(row.size()) > a.max_seq_len)
      throw ConfigError(flag, "input", std::to_string(row.size()) + " tokens, more than the " +
                        "model's max_position_embeddings " + std::to_string(a.max_seq_len));
    for (int64_t id : row)
      if (id < 0 || id >= a.vocab_size)
        throw ConfigError(flag, "input", "token id " + std::to_string(id) + " outside [0, " +
                          std::to_string(a.vocab_size) + ")", "ids of this model's vocabulary");
  }
  return rows;
}

// Builds the model from --model (and --adapter), loads its weights, returns it in eval.
Transformer logitsModel(const LogitsOptions& o, const ModelArgs& a) {
  torch::NoGradGuard no_grad;
  ModelOptions mo;
  if (!o.adapter.empty()) mo.lora = logitsLoraConfig(o.adapter);
  const PretrainedModel pm = PretrainedModel::open(o.model, a);
  std::optional<PeftAdapter> adapter;
  if (!o.adapter.empty()) adapter.emplace(PeftAdapter::open(o.adapter, a, mo.lora));
  Transformer m(a, TpContext{}, mo);
  std::vector<ckpt::StatePiece> pieces = logitsPieces(m);
  pm.load(pieces);
  if (adapter) adapter->load(pieces);
  m->eval();
  return m;
}

// Forward without gradient; writes input_ids, logits, loss to o.out via a temp file.
void writeLogits(const LogitsOptions& o, const ModelArgs& a) {
  Transformer m = logitsModel(o, a);
  const int64_t B = int64_t(o.ids.size()), T = int64_t(o.ids[0].size());
  torch::Tensor ids = torch::empty({B, T}, torch::kInt64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) ids[b][t] = o.ids[size_t(b)][size_t(t)];
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = m->forward(ids).to(torch::kFloat32).contiguous();
  torch::Tensor loss = torch::zeros({B, T - 1}, torch::kFloat32);
  if (T > 1)
    loss = torch::nn::functional::cross_entropy(
               logits.narrow(1, 0, T - 1).reshape({-1, a.vocab_size}),
               ids.narrow(1, 1, T - 1).reshape({-1}),
               torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
               .reshape({B, T - 1})
               .contiguous();
  const std::string tmp = o.out + ".tmp." + std::to_string(::getpid());
  try {
    SafetensorsWriter w(tmp, {StTensor{"input_ids", "I64", {B, T}, 0, 0},
                              StTensor{"logits", "F32", {B, T, a.vocab_size}, 0, 0},
                              StTensor{"loss", "F32", {B, T - 1}, 0, 0}});
    w.write(ids);
    w.write(logits);
    w.write(loss);
    w.close();
    renameDurably(tmp, o.out);
  } catch (...) {
    std::error_code ec;
    lfs::remove(tmp, ec);
    throw;
  }
  std::cerr << "trainer logits: " << B << " x " << T << " tokens, vocab " << a.vocab_size
            << "; wrote " << o.out << "\n";
}

cxxopts::Options logitsCli() {
  cxxopts::Options cli("trainer logits",
                       "Write the logits and per-token loss of a Hugging Face Llama directory "
                       "(with or without a PEFT adapter) as safetensors.\n  " +
                           std::string(kLogitsUsage));
  cli.add_options()("model", "a Hugging Face Llama directory (config.json + safetensors)",
                    cxxopts::value<std::string>())(
      "adapter", "a PEFT LoRA adapter directory applied on --model", cxxopts::value<std::string>())(
      "ids", "comma-separated token ids of one sequence", cxxopts::value<std::string>())(
      "ids-file", "JSONL, one {\"input_ids\": [...]} per line, all of one length",
      cxxopts::value<std::string>())("text", "a text, encoded with --tokenizer (no BOS/EOS)",
                                     cxxopts::value<std::string>())(
      "tokenizer", "a tokenizer.json or sentencepiece .model (with --text)",
      cxxopts::value<std::string>())("out", "the safetensors file to write",
                                     cxxopts::value<std::string>())("h,help", "show help");
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
                      for (const char* k : {"model", "out"})
                        if (!r.count(k))
                          throw ConfigError(std::string("--") + k, "command line", "missing",
                                            kLogitsUsage);
                      LogitsOptions o;
                      o.model = r["model"].as<std::string>();
                      o.out = r["out"].as<std::string>();
                      if (r.count("adapter")) o.adapter = r["adapter"].as<std::string>();
                      const ModelArgs a = logitsModelArgs(o.model);
                      o.ids = logitsInput(r, a);
                      if (const int64_t sw = hfSlidingWindow(o.model);
                          sw > 0 && int64_t(o.ids[0].size()) > sw)
                        throw ConfigError("--model", o.model + "/config.json",
                                          "sliding_window " + std::to_string(sw) +
                                              " is shorter than the " +
                                              std::to_string(o.ids[0].size()) + " tokens given",
                                          "at most sliding_window tokens (the model attends to "
                                          "all of them)");
                      writeLogits(o, a);
                      return 0;
                    })
      .value_or(0);
}

}  // namespace ftb::hf
