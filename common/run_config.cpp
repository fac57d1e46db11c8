#include "common/run_config.h"

#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "common/checked_math.h"
#include "common/error.h"
#include "common/hf_config.h"
#include "common/pipeline.h"

namespace ftb {

bool ncclCompiledIn() { return FTB_NCCL_COMPILED_IN != 0; }

namespace {

std::string num(int64_t v) { return std::to_string(v); }

}  // namespace

bool validDeviceName(const std::string& d) {
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  if (d.rfind("cuda:", 0) != 0 || d.size() == 5 || d.size() > 9) return false;
  return d.find_first_not_of("0123456789", 5) == std::string::npos;
}

namespace {

void requireOneOf(const Config& cfg, const std::string& key,
                  std::initializer_list<const char*> options) {
  const std::string& v = cfg.getString(key);
  std::string list;
  for (const char* o : options) {
    if (v == o) return;
    list += (list.empty() ? "" : " | ") + std::string("\"") + o + "\"";
  }
  cfg.fail(key, "expected one of " + list + ", got \"" + v + "\"");
}

// A value other than the schema default (a resolved run.toml lists every default
// explicitly, so "where it came from" does not tell).
bool differsFromDefault(const Config& cfg, const std::string& key) {
  if (!cfg.has(key)) return false;
  const KeySpec* spec = cfg.schema().find(key);
  return !spec || !spec->default_value || !(*spec->default_value == cfg.entries().at(key).value);
}

// How directly the user set `key`: override 3, run file 2, model preset 1, default 0.
int originRank(const Config& cfg, const std::string& key) {
  const std::string w = cfg.where(key);
  if (w.rfind("override", 0) == 0) return 3;
  if (w.empty() || w == "default") return 0;
  if (w.rfind("preset ", 0) == 0) return 1;
  return 2;
}

// An invariant between keys `a` and `b` is broken: blames the one the user set more
// directly (originRank; a tie blames `a`), so `model.dim=66` blames model.dim, not the
// preset's n_heads. When the other key came from a preset or the default, the message
// says so (the user did not write it anywhere).
[[noreturn]] void failEither(const Config& cfg, const std::string& a, const std::string& b,
                             const std::string& what, const std::string& hint = "") {
  bool blame_b = originRank(cfg, b) > originRank(cfg, a);
  const std::string& key = blame_b ? b : a;
  const std::string& other = blame_b ? a : b;
  std::string text = what;
  if (originRank(cfg, other) < 2) {
    const std::string from = cfg.where(other);
    text += "; " + other + " = " + valueToString(cfg.entries().at(other).value) +
            (from == "default" ? " is the default" : " comes from " + from);
  }
  cfg.fail(key, text, hint);
}

int64_t parseCheckpointing(const Config& cfg) {
  const std::string& v = cfg.getString("training.activation_checkpointing");
  if (v == "none") return 0;
  if (v == "full") return 1;
  if (v.rfind("every_", 0) == 0) {
    try {
      size_t used = 0;
      long n = std::stol(v.substr(6), &used);
      if (used == v.size() - 6 && n >= 1) return n;
    } catch (const std::exception&) {
    }
  }
  cfg.fail("training.activation_checkpointing",
           "expected \"none\", \"full\" or \"every_N\" (N >= 1), got \"" + v + "\"",
           "\"every_2\" checkpoints every second transformer block");
}

// The JSONL text dataset keys: the tokenizer (data.tokenizer, else, for a .jsonl
// data.source, <model.from_pretrained>/tokenizer.model) and the fields. A token-file
// source (.bin) with model.from_pretrained stays a token dataset.
// REQUIRES: c.data_source set.
void textDataConfig(const Config& cfg, DataConfig& c, Checks checks) {
  c.tokenizer = cfg.getString("data.tokenizer");
  if (c.tokenizer.empty() && cfg.has("model.from_pretrained") &&
      std::filesystem::path(c.data_source).extension() == ".jsonl")
    c.tokenizer =
        (std::filesystem::path(cfg.getString("model.from_pretrained")) / "tokenizer.model")
            .string();
  c.text_field = cfg.getString("data.text_field");
  c.prompt_field = cfg.getString("data.prompt_field");
  c.completion_field = cfg.getString("data.completion_field");
  if (c.prompt_field.empty() != c.completion_field.empty())
    cfg.fail(c.prompt_field.empty() ? "data.prompt_field" : "data.completion_field",
             "data.prompt_field and data.completion_field are set together (got \"" +
                 c.prompt_field + "\" and \"" + c.completion_field + "\")",
             "set both for completion-only loss, or neither and use data.text_field");
  if (c.text_field.empty()) cfg.fail("data.text_field", "must name a JSONL field, got \"\"");
  const bool text = !c.prompt_field.empty() || !c.tokenizer.empty();
  if (!text) return;
  if (std::filesystem::path(c.data_source).extension() != ".jsonl")
    cfg.fail(
        c.tokenizer.empty() ? "data.prompt_field" : "data.tokenizer",
        "text fields and a tokenizer need a .jsonl data.source, got \"" + c.data_source + "\"");
  if (c.tokenizer.empty())
    cfg.fail("data.tokenizer", "data.prompt_field needs a tokenizer",
             "set data.tokenizer to a sentencepiece tokenizer.model");
  if (checks == Checks::kAll && !std::filesystem::is_regular_file(c.tokenizer))
    cfg.fail(cfg.has("data.tokenizer") && !cfg.getString("data.tokenizer").empty()
                 ? "data.tokenizer"
                 : "model.from_pretrained",
             "tokenizer model \"" + c.tokenizer + "\" does not exist",
             "set data.tokenizer to a sentencepiece tokenizer.model");
}

}  // namespace

int64_t ModelArgs::numEmbeddingParams() const { return vocab_size * dim; }

int64_t ModelArgs::blockMatrixParams() const {
  int64_t hd = headDim();
  int64_t attn = dim * n_heads * hd + 2 * dim * n_kv_heads * hd + n_heads * hd * dim;
  return attn + 3 * dim * ffn_dim;
}

int64_t ModelArgs::numParams() const {
  int64_t block = blockMatrixParams() + 2 * dim;  // + the two RMSNorm weights
  int64_t out = tie_embeddings ? 0 : vocab_size * dim;
  return numEmbeddingParams() + n_layers * block + dim + out;
}

double ModelArgs::flopsPerToken(int64_t seq_len) const {
  double n = static_cast<double>(numParams() - numEmbeddingParams());
  if (tie_embeddings) n += static_cast<double>(vocab_size * dim);
  return 6.0 * n + 12.0 * n_layers * n_heads * headDim() * static_cast<double>(seq_len);
}

LoraTargetShape loraTargetShape(const ModelArgs& m, const std::string& target) {
  const int64_t D = m.dim, q = m.n_heads * m.headDim(), kv = m.n_kv_heads * m.headDim();
  if (target == "q") return {D, q};
  if (target == "k" || target == "v") return {D, kv};
  if (target == "o") return {q, D};
  if (target == "gate" || target == "up") return {D, m.ffn_dim};
  if (target == "down") return {m.ffn_dim, D};
  throw std::invalid_argument("loraTargetShape: \"" + target + "\" is not one of kLoraTargets");
}

int64_t loraParams(const ModelArgs& m, const LoraConfig& lora) {
  if (!lora.enabled()) return 0;
  int64_t per_block = 0;
  for (const std::string& t : kLoraTargets) {
    if (!lora.hasTarget(t)) continue;
    const LoraTargetShape s = loraTargetShape(m, t);
    per_block += lora.rank * (s.in + s.out);
  }
  return per_block * m.n_layers;
}

FlopsCount trainingFlops(const ModelArgs& m, const LoraConfig& lora, int64_t seq_len) {
  FlopsCount f;
  f.total_params = m.numParams() + loraParams(m, lora);
  if (!lora.enabled()) {
    f.per_token = m.flopsPerToken(seq_len);
    f.formula = "full-v1";
    f.trainable_params = m.numParams();
    return f;
  }
  const double attention = 12.0 * m.n_layers * m.n_heads * m.headDim() * double(seq_len);
  const double n = (m.flopsPerToken(seq_len) - attention) / 6.0;  // N as full-v1 counts it
  const double na = double(loraParams(m, lora));
  double skipped = 0;  // block 0's q, k, v input gradients (base and A)
  for (const char* t : {"q", "k", "v"}) {
    const LoraTargetShape s = loraTargetShape(m, t);
    skipped += double(s.in * s.out) + (lora.hasTarget(t) ? double(lora.rank * s.in) : 0);
  }
  f.per_token = 4.0 * n + 6.0 * na - 2.0 * skipped + attention;
  f.formula = "lora-v1";
  f.trainable_params = loraParams(m, lora);
  return f;
}

std::string binDtypeProblem(const std::string& bin_dtype, int64_t vocab_size) {
  if (bin_dtype == "uint16" && vocab_size > 65536)
    return "uint16 cannot hold token ids of vocab_size(" + num(vocab_size) + ")";
  return "";
}

std::string binDtypeProblem(const TrainConfig& c) {
  return binDtypeProblem(c.data.bin_dtype, c.model.vocab_size);
}

ModelArgs modelArgsFromConfig(const Config& cfg) {
  cfg.checkDomains();  // the sizes below are >= 1 (schema atLeast(1)): no division by zero
  ModelArgs m;
  m.name = cfg.getString("model.name");
  for (const char* k : {"model.dim", "model.n_layers", "model.n_heads", "model.n_kv_heads",
                        "model.ffn_dim", "model.vocab_size", "model.max_seq_len"})
    if (!cfg.has(k)) cfg.fail(k, "missing", "set it in [model] or choose a preset with model.name");
  m.dim = cfg.getInt("model.dim");
  m.n_layers = cfg.getInt("model.n_layers");
  m.n_heads = cfg.getInt("model.n_heads");
  m.n_kv_heads = cfg.getInt("model.n_kv_heads");
  m.ffn_dim = cfg.getInt("model.ffn_dim");
  m.vocab_size = cfg.getInt("model.vocab_size");
  m.max_seq_len = cfg.getInt("model.max_seq_len");
  m.rope_theta = cfg.getFloat("model.rope_theta");
  m.norm_eps = cfg.getFloat("model.norm_eps");
  m.tie_embeddings = cfg.getBool("model.tie_embeddings");
  if (m.dim % m.n_heads != 0)
    failEither(cfg, "model.n_heads", "model.dim",
               "n_heads(" + num(m.n_heads) + ") does not divide dim(" + num(m.dim) + ")",
               "head_dim = dim / n_heads must be a whole number");
  if (m.n_heads % m.n_kv_heads != 0)
    failEither(
        cfg, "model.n_kv_heads", "model.n_heads",
        "n_kv_heads(" + num(m.n_kv_heads) + ") does not divide n_heads(" + num(m.n_heads) + ")",
        "grouped-query attention shares each kv head among n_heads/n_kv_heads heads");
  if (m.headDim() % 2 != 0)
    failEither(cfg, "model.dim", "model.n_heads",
               "head_dim = dim(" + num(m.dim) + ") / n_heads(" + num(m.n_heads) +
                   ") = " + num(m.headDim()) + " must be even for RoPE");
  return m;
}

std::string refusalOf(const Config& cfg, int world_size, Checks checks) {
  try {
    TrainConfig::fromConfig(cfg, world_size, checks);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

DataConfig DataConfig::fromConfig(const Config& cfg, const ModelArgs& model, Checks checks) {
  DataConfig c;
  c.data_source = cfg.getString("data.source");
  c.seq_len = cfg.getInt("data.seq_len");
  if (c.seq_len > model.max_seq_len) {
    // A pretrained model's max_seq_len is its config.json's (applyPretrained refuses any
    // other value): lowering data.seq_len is the only way.
    std::string way = " or raise model.max_seq_len";
    if (cfg.has("model.from_pretrained"))
      way =
          " (model.max_seq_len is max_position_embeddings of " +
          (std::filesystem::path(cfg.getString("model.from_pretrained")) / kHfConfigName).string() +
          ": a pretrained model's length cannot be raised)";
    failEither(
        cfg, "data.seq_len", "model.max_seq_len",
        "seq_len(" + num(c.seq_len) + ") exceeds model.max_seq_len(" + num(model.max_seq_len) + ")",
        "lower data.seq_len to at most " + num(model.max_seq_len) + way);
  }
  requireOneOf(cfg, "data.padding", {"max_length", "longest", "packing"});
  c.pad_longest = cfg.getString("data.padding") == "longest";
  c.pack = cfg.getString("data.padding") == "packing";
  requireOneOf(cfg, "data.bin_dtype", {"uint16", "uint32"});
  c.bin_dtype = cfg.getString("data.bin_dtype");
  const std::string bin_problem = binDtypeProblem(c.bin_dtype, model.vocab_size);
  if (c.data_source.size() > 4 && c.data_source.compare(c.data_source.size() - 4, 4, ".bin") == 0 &&
      !bin_problem.empty())
    cfg.fail("data.bin_dtype", bin_problem, "set data.bin_dtype = \"uint32\"");
  c.num_samples = cfg.getInt("data.num_samples");
  c.min_doc_len = cfg.getInt("data.min_doc_len");
  if (c.min_doc_len < 0 || c.min_doc_len > c.seq_len)
    cfg.fail("data.min_doc_len",
             "must be in [0, seq_len(" + num(c.seq_len) + ")], got " + num(c.min_doc_len));
  if (c.min_doc_len == 0) c.min_doc_len = std::max<int64_t>(1, c.seq_len / 4);
  c.pad_id = cfg.getInt("data.pad_id");
  if (c.pad_id < 0 || c.pad_id >= model.vocab_size)
    cfg.fail(
        "data.pad_id",
        "pad_id(" + num(c.pad_id) + ") is not a token id in [0, vocab_size(" +
            num(model.vocab_size) + "))",
        "padding positions are masked out of the loss, but they still go through the embedding");
  const std::string ext = std::filesystem::path(c.data_source).extension().string();
  if (c.data_source != "synthetic" && ext != ".jsonl" && ext != ".bin")
    cfg.fail("data.source", "unknown data file type \"" + c.data_source + "\"",
             "expected \"synthetic\", a .jsonl or a .bin file (the format comes from the name)");
  if (c.data_source != "synthetic" && checks == Checks::kAll &&
      !std::filesystem::is_regular_file(c.data_source))
    cfg.fail("data.source", "data file \"" + c.data_source + "\" does not exist",
             "use \"synthetic\" or a .bin/.jsonl token file (trainer --generate-data writes one)");
  if (c.pack && std::filesystem::path(c.data_source).extension() == ".bin")
    cfg.fail("data.padding", "\"packing\": a .bin source is already one packed stream",
             "use data.padding = \"max_length\" with a .bin file");
  textDataConfig(cfg, c, checks);
  return c;
}

TrainingConfig TrainingConfig::fromConfig(const Config& cfg) {
  TrainingConfig c;
  c.micro_batch_size = cfg.getInt("training.micro_batch_size");
  c.grad_accum_steps = cfg.getInt("training.grad_accum_steps");
  c.max_steps = cfg.getInt("training.max_steps");
  c.stop_after_seconds = cfg.getFloat("training.stop_after_seconds");
  c.lr = cfg.getFloat("training.lr");
  c.lr_warmup_steps = cfg.getInt("training.lr_warmup_steps");
  c.weight_decay = cfg.getFloat("training.weight_decay");
  c.max_grad_norm = cfg.getFloat("training.max_grad_norm");
  c.beta1 = cfg.getFloat("training.beta1");
  c.beta2 = cfg.getFloat("training.beta2");
  c.eps = cfg.getFloat("training.eps");
  c.seed = cfg.getInt("training.seed");
  c.threads = cfg.getInt("training.threads");
  requireOneOf(cfg, "training.fp32_gemm", {"auto", "aten", "openblas"});
  requireOneOf(cfg, "training.attention", {"fused_softmax", "sdpa"});
  c.attention = cfg.getString("training.attention");
  c.fp32_gemm = cfg.getString("training.fp32_gemm");
  c.device = cfg.getString("training.device");
  if (!validDeviceName(c.device))
    cfg.fail("training.device",
             "expected \"auto\", \"cpu\", \"cuda\" or \"cuda:N\", got \"" + c.device + "\"",
             "the device ranks put the model and batches on");
  requireOneOf(cfg, "training.optimizer", {"adamw", "adafactor"});
  c.optimizer = cfg.getString("training.optimizer");
  requireOneOf(cfg, "training.dtype", {"fp32", "bf16"});
  c.dtype = cfg.getString("training.dtype") == "bf16" ? DType::kBf16 : DType::kFp32;
  c.activation_checkpointing = parseCheckpointing(cfg);
  return c;
}

namespace {

// "q_proj" -> "q", ...; "" when `name` is neither a target nor its HF module name.
std::string loraTargetName(const std::string& name) {
  static const std::vector<std::pair<std::string, std::string>> hf = {
      {"q_proj", "q"},       {"k_proj", "k"},   {"v_proj", "v"},      {"o_proj", "o"},
      {"gate_proj", "gate"}, {"up_proj", "up"}, {"down_proj", "down"}};
  for (const auto& t : kLoraTargets)
    if (t == name) return t;
  for (const auto& [h, t] : hf)
    if (h == name) return t;
  return "";
}

// lora.targets as a subset of kLoraTargets in model order. Throws ConfigError.
std::vector<std::string> parseLoraTargets(const Config& cfg) {
  const std::string& v = cfg.getString("lora.targets");
  if (v == "all") return kLoraTargets;
  std::vector<bool> on(kLoraTargets.size(), false);
  size_t begin = 0;
  while (begin <= v.size()) {
    size_t end = v.find(',', begin);
    if (end == std::string::npos) end = v.size();
    std::string item = v.substr(begin, end - begin);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    const std::string t = loraTargetName(item);
    if (t.empty())
      cfg.fail("lora.targets", "unknown target \"" + item + "\" in \"" + v + "\"",
               "targets are q, k, v, o, gate, up, down (or q_proj ... down_proj), "
               "comma-separated, or \"all\"");
    for (size_t i = 0; i < kLoraTargets.size(); ++i) on[i] = on[i] || kLoraTargets[i] == t;
    begin = end + 1;
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < kLoraTargets.size(); ++i)
    if (on[i]) out.push_back(kLoraTargets[i]);
  return out;
}

}  // namespace

bool LoraConfig::hasTarget(const std::string& t) const {
  for (const auto& x : targets)
    if (x == t) return true;
  return false;
}

LoraConfig LoraConfig::fromConfig(const Config& cfg) {
  LoraConfig c;
  c.rank = cfg.getInt("lora.rank");
  c.alpha = cfg.getFloat("lora.alpha");
  c.dropout = cfg.getFloat("lora.dropout");
  c.targets = parseLoraTargets(cfg);
  requireOneOf(cfg, "lora.base_dtype", {"fp32", "bf16"});
  c.base_dtype = cfg.getString("lora.base_dtype") == "bf16" ? DType::kBf16 : DType::kFp32;
  c.from_pretrained = cfg.getString("lora.from_pretrained");
  if (!c.enabled() && !c.from_pretrained.empty())
    cfg.fail("lora.from_pretrained",
             "a PEFT adapter needs lora.rank > 0 (it is 0: full finetuning)",
             "set lora.rank to the adapter's r (adapter_config.json)");
  if (!c.enabled() && c.base_dtype != DType::kFp32)
    cfg.fail("lora.base_dtype", "a frozen base needs lora.rank > 0 (it is 0: every weight trains)",
             "set lora.rank, or leave lora.base_dtype = \"fp32\"");
  return c;
}

LayoutConfig LayoutConfig::fromConfig(const Config& cfg, int world_size) {
  LayoutConfig c;
  c.world_size = world_size;
  c.tp = cfg.getInt("parallel.tp");
  c.dp_shard = cfg.getInt("parallel.dp_shard");
  c.zero_stage = cfg.getInt("parallel.zero_stage");
  c.dp_replicate = cfg.getInt("parallel.dp_replicate");
  c.pp = cfg.getInt("parallel.pp");
  const std::string pp_factor = c.pp > 1 ? "pp(" + num(c.pp) + ") * " : "";
  if (c.dp_replicate == 0) {
    // Overflow-checked: a product past int64 cannot divide world_size either.
    const std::optional<int64_t> shard_tp = checkedProduct({c.pp, c.dp_shard, c.tp});
    if (!shard_tp || world_size % *shard_tp != 0)
      failEither(cfg, c.pp > 1 ? "parallel.pp" : "parallel.dp_shard", "parallel.tp",
                 pp_factor + "dp_shard(" + num(c.dp_shard) + ") * tp(" + num(c.tp) +
                     ") does not divide world_size(" + num(world_size) + ")",
                 "world_size = nodes * nproc_per_node (launcher)");
    c.dp_replicate = world_size / *shard_tp;
  }
  const std::optional<int64_t> degrees = checkedProduct({c.pp, c.dp_replicate, c.dp_shard, c.tp});
  if (degrees != int64_t(world_size))
    cfg.fail("parallel.dp_replicate",
             pp_factor + "dp_replicate(" + num(c.dp_replicate) + ") * dp_shard(" + num(c.dp_shard) +
                 ") * tp(" + num(c.tp) +
                 ") = " + (degrees ? num(*degrees) : std::string("more than 2^63")) +
                 " does not equal world_size(" + num(world_size) + ")",
             "set parallel.dp_replicate = 0 to derive it from the world size");
  // ZeRO shards over dp_shard only: a stage with dp_shard = 1 over several replicas would
  // silently run plain DDP while the tag and tables said ZeRO.
  if (c.zero_stage > 0 && c.dp_shard == 1 && c.dp_replicate > 1)
    cfg.fail("parallel.zero_stage",
             "zero_stage(" + num(c.zero_stage) + ") shards over parallel.dp_shard, which is 1: " +
                 "this layout would run plain DDP over dp_replicate(" + num(c.dp_replicate) +
                 ") replicas",
             "set parallel.dp_shard = " + num(c.dp_replicate) +
                 " to shard over every data-parallel rank (FSDP), or zero_stage = 0 for DDP");
  return c;
}

CommConfig CommConfig::fromConfig(const Config& cfg, Checks checks) {
  CommConfig c;
  c.backend = cfg.getString("parallel.backend");
  requireOneOf(cfg, "parallel.backend", {"auto", "gloo", "nccl"});
  if (checks == Checks::kAll && c.backend == "nccl" && !ncclCompiledIn())
    cfg.fail("parallel.backend", "\"nccl\" is not compiled into this build (libtorch has no CUDA)",
             "use backend = \"gloo\" or \"auto\"");
  c.local_collectives = cfg.getString("parallel.local_collectives");
  requireOneOf(cfg, "parallel.local_collectives", {"auto", "off"});
  c.pp_local_p2p = cfg.getBool("parallel.pp_local_p2p");
  c.timeout_seconds = cfg.getFloat("parallel.timeout_seconds");
  c.bucket_bytes = cfg.getFloat("parallel.bucket_mb") * double(1 << 20);
  c.memory_limit_bytes = cfg.getFloat("parallel.memory_limit_gb") * double(1LL << 30);
  return c;
}

MetricsConfig MetricsConfig::fromConfig(const Config& cfg, int64_t max_steps) {
  MetricsConfig c;
  c.log_every = cfg.getInt("metrics.log_every");
  c.skip_first_steps = cfg.getInt("metrics.skip_first_steps");
  c.peak_tflops = cfg.getFloat("metrics.peak_tflops");
  c.price_per_hour = cfg.getFloat("metrics.price_per_hour");
  c.profile_steps = cfg.getIntList("metrics.profile_steps");
  c.max_interference = cfg.getFloat("metrics.max_interference");
  const auto& ps = c.profile_steps;
  if (!ps.empty() && (ps.size() != 2 || ps[0] < 0 || ps[1] < ps[0]))
    cfg.fail("metrics.profile_steps",
             "expected [first, last] with 0 <= first <= last (0-based steps), or [] for off",
             "profile_steps = [5, 7] traces steps 5, 6 and 7");
  if (!ps.empty() && ps[1] >= max_steps)
    cfg.fail("metrics.profile_steps",
             "last traced step " + num(ps[1]) + " is not below training.max_steps(" +
                 num(max_steps) + ")",
             "steps are 0-based: the last step is max_steps - 1");
  return c;
}

OutputConfig OutputConfig::fromConfig(const Config& cfg) {
  OutputConfig c;
  c.output_dir = cfg.getString("output.dir");
  c.sweep_fmt = cfg.getString("output.sweep_fmt");
  c.no_sweep_dir = cfg.getBool("output.no_sweep_dir");
  return c;
}

CheckpointConfig CheckpointConfig::fromConfig(const Config& cfg) {
  CheckpointConfig c;
  c.dir = cfg.getString("checkpoint.dir");
  c.interval = cfg.getInt("checkpoint.interval");
  c.save_final = cfg.getBool("checkpoint.save_final");
  c.keep_last = cfg.getInt("checkpoint.keep_last");
  c.resume = cfg.getString("checkpoint.resume");
  if (c.resume.empty() || c.resume == "none")
    cfg.fail("checkpoint.resume", "must be \"auto\", \"never\" or the path of a step_N directory",
             "checkpoint.resume=never to start from step 0");
  c.preempt_grace_s = cfg.getFloat("checkpoint.preempt_grace_s");
  return c;
}

namespace {

// Tensor parallel splits the model evenly and per-tensor optimizers cannot see a split
// or flat-sharded tensor: the layout against [model] and training.optimizer.
void checkLayoutFits(const Config& cfg, const TrainConfig& c) {
  const ModelArgs& m = c.model;
  auto divides = [&](const char* what, int64_t n) {
    if (n % c.layout.tp != 0)
      failEither(cfg, "parallel.tp", std::string("model.") + what,
                 "tp(" + num(c.layout.tp) + ") does not divide " + what + "(" + num(n) + ")",
                 "tensor parallel splits heads, kv heads, ffn_dim and the vocabulary evenly");
  };
  divides("n_heads", m.n_heads);
  divides("n_kv_heads", m.n_kv_heads);
  divides("ffn_dim", m.ffn_dim);
  divides("vocab_size", m.vocab_size);
  if (c.layout.tp > 1 && c.training.optimizer == "adafactor")
    cfg.fail("training.optimizer",
             "adafactor's factored moments and update clipping are per tensor, but tp(" +
                 num(c.layout.tp) + ") splits tensors across ranks",
             "use optimizer = \"adamw\" with tensor parallel");
  if (c.layout.zero_stage > 0 && c.training.optimizer == "adafactor")
    cfg.fail("training.optimizer",
             "adafactor needs 2-D parameters for its factored moments, but zero_stage(" +
                 num(c.layout.zero_stage) + ") gives the optimizer flat 1-D shards",
             "use optimizer = \"adamw\" with ZeRO, or zero_stage = 0");
}

// parallel.pp_microbatches, when > 0, is grad_accum_steps: the step's micro-batches are
// the pipeline's. `accum` comes from grad_accum_steps or global_batch_size; a value set
// there that differs is a contradiction.
int64_t withPipeMicrobatches(const Config& cfg, int64_t accum) {
  const int64_t m = cfg.getInt("parallel.pp_microbatches");
  if (m == 0) return accum;
  const bool gbs = cfg.getInt("training.global_batch_size") > 0;
  if (accum != m && (gbs || cfg.where("training.grad_accum_steps") != "default"))
    cfg.fail("parallel.pp_microbatches",
             "pp_microbatches(" + num(m) + ") contradicts grad_accum_steps(" + num(accum) +
                 (gbs ? ") derived from training.global_batch_size" : ")"),
             "the pipeline's micro-batches are the step's gradient-accumulation micro-batches: "
             "set only one of them");
  return m;
}

// training.global_batch_size, when > 0, fixes grad_accum_steps: it must split evenly into
// micro-batches on every data-parallel rank. Returns grad_accum_steps.
int64_t gradAccumFor(const Config& cfg, const TrainConfig& c) {
  const int64_t gbs = cfg.getInt("training.global_batch_size");
  if (gbs == 0) return withPipeMicrobatches(cfg, c.training.grad_accum_steps);
  auto checked = checkedProduct({c.training.micro_batch_size, c.layout.dpSize()});
  if (!checked)
    cfg.fail("training.micro_batch_size", "micro_batch_size(" + num(c.training.micro_batch_size) +
                                              ") * data-parallel size overflows int64");
  const int64_t per_step = *checked;
  if (gbs % per_step != 0)
    cfg.fail("training.global_batch_size",
             "global_batch_size(" + num(gbs) + ") is not divisible by micro_batch_size(" +
                 num(c.training.micro_batch_size) + ") * data-parallel size(" +
                 num(c.layout.dpSize()) + ") = " + num(per_step) + " (world_size(" +
                 num(c.layout.world_size) + "), tp(" + num(c.layout.tp) + "))",
             "choose a global batch that is a multiple of " + num(per_step) +
                 ", or set global_batch_size = 0");
  const int64_t accum = gbs / per_step;
  if (cfg.where("training.grad_accum_steps") != "default" && accum != c.training.grad_accum_steps)
    cfg.fail("training.grad_accum_steps",
             "grad_accum_steps(" + num(c.training.grad_accum_steps) +
                 ") contradicts global_batch_size(" + num(gbs) + ") / (micro_batch_size * dp)(" +
                 num(per_step) + ") = " + num(accum),
             "set only one of them");
  return withPipeMicrobatches(cfg, accum);
}

std::string listText(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + num(v[i]);
  return out + "]";
}

// The schedule and its virtual stages against pp and the model's blocks.
void checkPipeShape(const Config& cfg, const TrainConfig& c) {
  const int64_t L = c.model.n_layers, v = c.pipeline.pp_virtual_stages;
  if (c.layout.pp > L)
    failEither(cfg, "parallel.pp", "model.n_layers",
               "pp(" + num(c.layout.pp) + ") exceeds model.n_layers(" + num(L) +
                   "): every pipeline stage needs at least one transformer block",
               "lower parallel.pp to at most " + num(L));
  const bool interleaved = c.pipeline.pp_schedule == "interleaved_1f1b";
  if (v > 1 && !interleaved)
    failEither(cfg, "parallel.pp_virtual_stages", "parallel.pp_schedule",
               "pp_virtual_stages(" + num(v) +
                   ") > 1 needs pp_schedule \"interleaved_1f1b\", "
                   "got \"" +
                   c.pipeline.pp_schedule + "\"",
               "set parallel.pp_schedule = \"interleaved_1f1b\" or pp_virtual_stages = 1");
  if (v > 1 && c.layout.pp == 1)
    failEither(cfg, "parallel.pp_virtual_stages", "parallel.pp",
               "pp_virtual_stages(" + num(v) + ") > 1 needs a pipeline, but pp is 1",
               "set parallel.pp >= 2, or pp_virtual_stages = 1");
  if (interleaved && c.layout.pp > 1 && v < 2)
    failEither(cfg, "parallel.pp_virtual_stages", "parallel.pp_schedule",
               "pp_schedule \"interleaved_1f1b\" needs pp_virtual_stages >= 2, got " + num(v),
               "set parallel.pp_virtual_stages = 2 (two model chunks per stage), or use "
               "pp_schedule = \"1f1b\"");
  const int64_t chunks = c.layout.pp * v;
  if (chunks > L ||
      (interleaved && c.layout.pp > 1 && c.pipeline.pp_split.empty() && L % chunks != 0))
    failEither(cfg, "parallel.pp_virtual_stages", "model.n_layers",
               "pp(" + num(c.layout.pp) + ") * pp_virtual_stages(" + num(v) + ") = " + num(chunks) +
                   " model chunks do not divide model.n_layers(" + num(L) + ")",
               "choose pp_virtual_stages so that pp * pp_virtual_stages divides n_layers, or "
               "give the blocks per chunk in parallel.pp_split");
}

// The micro-batches against the schedule: 1F1B fills the pipeline with pp micro-batches
// before its first backward; interleaved 1F1B runs them in groups of pp.
void checkPipeMicrobatches(const Config& cfg, const TrainConfig& c) {
  const int64_t m = c.training.grad_accum_steps;
  if (c.layout.pp == 1 || c.pipeline.pp_schedule == "gpipe") return;
  const std::string got =
      "got " + num(m) + " micro-batches per step (training.grad_accum_steps" +
      (cfg.getInt("training.global_batch_size") > 0 ? " from global_batch_size)"
                                                    : " or parallel.pp_microbatches)");
  const std::string hint = "set parallel.pp_microbatches to a multiple of pp(" + num(c.layout.pp) +
                           ") (the global batch grows with it), or use pp_schedule = \"gpipe\"";
  if (m < c.layout.pp)
    failEither(cfg, "parallel.pp_microbatches", "parallel.pp",
               "pp_schedule \"" + c.pipeline.pp_schedule + "\" needs at least pp(" +
                   num(c.layout.pp) + ") micro-batches, " + got,
               hint);
  if (c.pipeline.pp_schedule == "interleaved_1f1b" && m % c.layout.pp != 0)
    failEither(cfg, "parallel.pp_microbatches", "parallel.pp",
               "pp_schedule \"interleaved_1f1b\" runs micro-batches in groups of pp(" +
                   num(c.layout.pp) + "), " + got,
               hint);
}

// parallel.pp_split: pp · pp_virtual_stages entries >= 1 summing to n_layers, or
// [] for the FLOP-balanced split (common/pipeline.h).
std::vector<int64_t> pipeSplit(const Config& cfg, const TrainConfig& c) {
  const int64_t chunks = c.layout.pp * c.pipeline.pp_virtual_stages, L = c.model.n_layers;
  const std::vector<int64_t>& given = cfg.getIntList("parallel.pp_split");
  // One chunk holds every block: nothing to balance (balancedSplit grows with the layers).
  if (given.empty() && chunks == 1) return {L};
  if (given.empty() && c.pipeline.pp_virtual_stages > 1)
    return interleavedSplit(L, c.layout.pp, c.pipeline.pp_virtual_stages,
                            layerCosts(c.model, c.data.seq_len));
  if (given.empty()) return balancedSplit(L, chunks, layerCosts(c.model, c.data.seq_len));
  int64_t sum = 0;
  for (int64_t n : given) {
    if (n < 1)
      cfg.fail("parallel.pp_split", listText(given) + " gives a chunk " + num(n) + " blocks",
               "every model chunk holds at least one block");
    sum += n;
  }
  if (int64_t(given.size()) != chunks)
    cfg.fail("parallel.pp_split",
             listText(given) + " has " + num(int64_t(given.size())) + " entries, expected pp(" +
                 num(c.layout.pp) + ") * pp_virtual_stages(" + num(c.pipeline.pp_virtual_stages) +
                 ") = " + num(chunks),
             "one entry per model chunk, in model order; [] balances by FLOPs");
  if (sum != L)
    failEither(cfg, "parallel.pp_split", "model.n_layers",
               listText(given) + " sums to " + num(sum) + ", not model.n_layers(" + num(L) + ")",
               "the entries are the blocks of each model chunk; [] balances by FLOPs");
  return given;
}

// What a pipeline stage does not run yet: tied embeddings under ZeRO (the first and the
// last stage sum the tied weight's whole gradient, which ZeRO shards), ZeRO beyond two
// stages of one chunk (every ZeRO stage needs a root unit), and micro-batches of different
// lengths with recomputed blocks.
void checkPipeSupport(const Config& cfg, const TrainConfig& c) {
  if (c.layout.pp == 1) return;
  if (c.model.tie_embeddings && c.layout.effectiveZeroStage() > 0)
    failEither(cfg, "parallel.zero_stage", "model.tie_embeddings",
               "zero_stage(" + num(c.layout.zero_stage) +
                   ") with tied embeddings in a pipeline (pp " + num(c.layout.pp) +
                   ") is not supported: the first and the last stage sum the tied "
                   "weight's whole gradient every step, and ZeRO shards it",
               "use parallel.zero_stage = 0 (DDP inside each stage), or parallel.pp = 1");
  if (c.layout.effectiveZeroStage() > 0 && (c.layout.pp > 2 || c.pipeline.pp_virtual_stages > 1))
    failEither(cfg, "parallel.zero_stage", "parallel.pp",
               "zero_stage(" + num(c.layout.zero_stage) +
                   ") inside a pipeline needs pp = 2 with one "
                   "chunk per stage, got pp(" +
                   num(c.layout.pp) + "), pp_virtual_stages(" + num(c.pipeline.pp_virtual_stages) +
                   ")",
               "use parallel.pp = 2 with pp_schedule \"1f1b\" or \"gpipe\", or zero_stage = 0");
  // Recomputed blocks read the model's rope tables of the latest forward (llama.h); a
  // pipeline runs several forwards before a backward, so their lengths must agree.
  if (c.data.pad_longest &&
      (c.training.activation_checkpointing > 0 || c.layout.effectiveZeroStage() == 3))
    failEither(cfg, "data.padding", "parallel.pp",
               "\"longest\" gives the micro-batches of a pipeline different lengths, but its "
               "recomputed blocks (activation checkpointing, ZeRO-3) need one length per step",
               "use data.padding = \"max_length\" or \"packing\" with parallel.pp > 1");
}

// [parallel] pipeline keys (PipelineConfig). REQUIRES: layout and grad_accum_steps set.
void pipelineConfig(const Config& cfg, TrainConfig& c) {
  requireOneOf(cfg, "parallel.pp_schedule", {"gpipe", "1f1b", "interleaved_1f1b"});
  c.pipeline.pp_schedule = cfg.getString("parallel.pp_schedule");
  c.pipeline.pp_virtual_stages = cfg.getInt("parallel.pp_virtual_stages");
  c.pipeline.pp_split = cfg.getIntList("parallel.pp_split");
  checkPipeShape(cfg, c);
  checkPipeMicrobatches(cfg, c);
  checkPipeSupport(cfg, c);
  c.pipeline.pp_microbatches = c.training.grad_accum_steps;
  c.pipeline.pp_split = pipeSplit(cfg, c);
}

// Planned keys (KeySpec::planned) are refused rather than silently ignored until they exist.
void refusePlannedKeys(const Config& cfg) {
  for (const KeySpec& k : cfg.schema().keys())
    if (k.planned && differsFromDefault(cfg, k.key))
      cfg.fail(k.key, "is planned and not implemented yet in this version",
               "remove it; see README.md \"Not implemented yet\"");
}

}  // namespace

TrainConfig TrainConfig::fromConfig(const Config& cfg, int world_size, Checks checks) {
  if (world_size < 1)
    throw ConfigError("", "world size", "world_size(" + num(world_size) + ") must be >= 1",
                      "the launcher sets WORLD_SIZE = nodes * nproc_per_node");
  cfg.checkDomains();  // every numeric value in its schema range before any cross-key check
  TrainConfig c;
  c.model = modelArgsFromConfig(cfg);
  if (cfg.has("model.from_pretrained")) c.from_pretrained = cfg.getString("model.from_pretrained");
  c.data = DataConfig::fromConfig(cfg, c.model, checks);
  c.training = TrainingConfig::fromConfig(cfg);
  c.layout = LayoutConfig::fromConfig(cfg, world_size);
  checkLayoutFits(cfg, c);
  c.training.grad_accum_steps = gradAccumFor(cfg, c);
  pipelineConfig(cfg, c);
  c.comm = CommConfig::fromConfig(cfg, checks);
  refusePlannedKeys(cfg);
  c.checkpoint = CheckpointConfig::fromConfig(cfg);
  c.lora = LoraConfig::fromConfig(cfg);
  if (c.lora.enabled() && c.lora.dropout > 0 && c.layout.tp > 1)
    failEither(cfg, "lora.dropout", "parallel.tp",
               "LoRA dropout with tensor parallelism is not supported: the tp ranks would have to "
               "draw the same masks",
               "lora.dropout = 0 (the usual setting for benchmarks), or parallel.tp = 1");
  c.metrics = MetricsConfig::fromConfig(cfg, c.training.max_steps);
  c.output = OutputConfig::fromConfig(cfg);
  checkSizes(cfg, c);
  return c;
}

}  // namespace ftb
