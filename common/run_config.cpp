#include "common/run_config.h"

#include <cmath>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "common/checked_math.h"
#include "common/error.h"
#include "common/hf_config.h"
#include "common/pipeline_config.h"
#include "common/run_keys.h"

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

// A value other than the schema default (a resolved run.toml lists every default
// explicitly, so "where it came from" does not tell).
bool differsFromDefault(const Config& cfg, const std::string& key) {
  if (!cfg.has(key)) return false;
  const KeySpec* spec = cfg.schema().find(key);
  return !spec || !spec->default_value || !(*spec->default_value == cfg.entries().at(key).value);
}

// The JSONL text dataset keys: the tokenizer (data.tokenizer, else, for a .jsonl
// data.source, <model.from_pretrained>/tokenizer.json when it exists, as HF's AutoTokenizer
// prefers it, else <model.from_pretrained>/tokenizer.model when it exists; neither: the
// .jsonl holds input_ids) and the fields. A token-file source (.bin) with
// model.from_pretrained stays a token dataset.
// REQUIRES: c.data_source set.
void textDataConfig(const Config& cfg, DataConfig& c, Checks checks) {
  namespace fs = std::filesystem;
  if (c.tokenizer.empty() && cfg.has("model.from_pretrained") &&
      fs::path(c.data_source).extension() == ".jsonl") {
    const fs::path dir = cfg.getString("model.from_pretrained");
    std::error_code ec;  // a symlink loop is "not there" here
    for (const char* name : {"tokenizer.json", "tokenizer.model"})
      if (c.tokenizer.empty() && fs::is_regular_file(dir / name, ec))
        c.tokenizer = (dir / name).string();
  }
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
  const char* what = "set data.tokenizer to a tokenizer.json or a sentencepiece tokenizer.model";
  if (c.tokenizer.empty()) cfg.fail("data.tokenizer", "data.prompt_field needs a tokenizer", what);
  std::error_code ec;
  if (checks == Checks::kAll && !std::filesystem::is_regular_file(c.tokenizer, ec))
    cfg.fail(cfg.has("data.tokenizer") && !cfg.getString("data.tokenizer").empty()
                 ? "data.tokenizer"
                 : "model.from_pretrained",
             "tokenizer \"" + c.tokenizer + "\" is not a readable file" +
                 (ec ? " (" + ec.message() + ")" : ""),
             what);
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

double ModelArgs::blockForwardFlops(int64_t seq_len) const {
  return 2.0 * double(blockMatrixParams() + 2 * dim) +
         4.0 * double(n_heads * headDim()) * double(seq_len);
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

namespace {

// per_token of a full finetune or of LoRA (FlopsCount's formulas), with its formula name.
void modelFlops(const ModelArgs& m, const LoraConfig& lora, int64_t seq_len, FlopsCount& f) {
  if (!lora.enabled()) {
    f.per_token = m.flopsPerToken(seq_len);
    f.formula = "full-v1";
    f.trainable_params = m.numParams();
    return;
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
}

}  // namespace

FlopsCount trainingFlops(const ModelArgs& m, const LoraConfig& lora, int64_t seq_len,
                         double recomputed_blocks) {
  FlopsCount f;
  f.total_params = m.numParams() + loraParams(m, lora);
  modelFlops(m, lora, seq_len, f);
  f.per_token_causal = f.per_token - 6.0 * m.n_layers * m.n_heads * m.headDim() * double(seq_len);
  const double adapters_per_block = double(loraParams(m, lora)) / double(m.n_layers);
  f.per_token_hardware =
      f.per_token + recomputed_blocks * (m.blockForwardFlops(seq_len) + 2.0 * adapters_per_block);
  return f;
}

double recomputedBlocks(const TrainConfig& tc, double blocks) {
  if (tc.layout.effectiveZeroStage() == 3) return blocks;
  const int64_t n = tc.training.activation_checkpointing;
  return n > 0 ? std::ceil(blocks / double(n)) : 0;
}

FlopsCount trainingFlops(const TrainConfig& tc) {
  return trainingFlops(tc.model, tc.lora, tc.data.seq_len,
                       recomputedBlocks(tc, double(tc.model.n_layers)));
}

std::string binDtypeProblem(const std::string& bin_dtype, int64_t vocab_size) {
  if (bin_dtype == "uint16" && vocab_size > 65536)
    return "uint16 cannot hold token ids of vocab_size(" + num(vocab_size) + ")";
  return "";
}

std::string binDtypeProblem(const TrainConfig& c) {
  return binDtypeProblem(c.data.bin_dtype, c.model.vocab_size);
}

namespace {

// The model's sizes are set (a preset or [model]).
void requireModelKeys(const Config& cfg) {
  for (const char* k : {"model.dim", "model.n_layers", "model.n_heads", "model.n_kv_heads",
                        "model.ffn_dim", "model.vocab_size", "model.max_seq_len"})
    if (!cfg.has(k)) cfg.fail(k, "missing", "set it in [model] or choose a preset with model.name");
}

// REQUIRES: cfg.checkDomains() passed (the sizes are >= 1: no division by zero).
void checkModelShape(const Config& cfg, const ModelArgs& m) {
  if (m.dim % m.n_heads != 0)
    cfg.failEither("model.n_heads", "model.dim",
                   "n_heads(" + num(m.n_heads) + ") does not divide dim(" + num(m.dim) + ")",
                   "head_dim = dim / n_heads must be a whole number");
  if (m.n_heads % m.n_kv_heads != 0)
    cfg.failEither(
        "model.n_kv_heads", "model.n_heads",
        "n_kv_heads(" + num(m.n_kv_heads) + ") does not divide n_heads(" + num(m.n_heads) + ")",
        "grouped-query attention shares each kv head among n_heads/n_kv_heads heads");
  if (m.headDim() % 2 != 0)
    cfg.failEither("model.dim", "model.n_heads",
                   "head_dim = dim(" + num(m.dim) + ") / n_heads(" + num(m.n_heads) +
                       ") = " + num(m.headDim()) + " must be even for RoPE");
}

}  // namespace

ModelArgs modelArgsFromConfig(const Config& cfg) {
  cfg.checkDomains();
  requireModelKeys(cfg);
  TrainConfig tc;
  fillMembers(cfg, tc, "model.");
  checkModelShape(cfg, tc.model);
  return tc.model;
}

std::string refusalOf(const Config& cfg, int world_size, Checks checks) {
  try {
    TrainConfig::fromConfig(cfg, world_size, checks);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

namespace {

// [data] against the model: seq_len <= max_seq_len, pad_id and bin_dtype hold the
// vocabulary, the source's type; resolves min_doc_len and the tokenizer.
void checkData(const Config& cfg, DataConfig& c, const ModelArgs& model, Checks checks) {
  if (c.seq_len > model.max_seq_len) {
    // A pretrained model's max_seq_len is its config.json's (applyPretrained refuses any
    // other value): lowering data.seq_len is the only way.
    std::string way = " or raise model.max_seq_len";
    if (cfg.has("model.from_pretrained"))
      way =
          " (model.max_seq_len is max_position_embeddings of " +
          (std::filesystem::path(cfg.getString("model.from_pretrained")) / kHfConfigName).string() +
          ": a pretrained model's length cannot be raised)";
    cfg.failEither(
        "data.seq_len", "model.max_seq_len",
        "seq_len(" + num(c.seq_len) + ") exceeds model.max_seq_len(" + num(model.max_seq_len) + ")",
        "lower data.seq_len to at most " + num(model.max_seq_len) + way);
  }
  const std::string bin_problem = binDtypeProblem(c.bin_dtype, model.vocab_size);
  if (c.data_source.size() > 4 && c.data_source.compare(c.data_source.size() - 4, 4, ".bin") == 0 &&
      !bin_problem.empty())
    cfg.fail("data.bin_dtype", bin_problem, "set data.bin_dtype = \"uint32\"");
  if (c.min_doc_len < 0 || c.min_doc_len > c.seq_len)
    cfg.fail("data.min_doc_len",
             "must be in [0, seq_len(" + num(c.seq_len) + ")], got " + num(c.min_doc_len));
  if (c.min_doc_len == 0) c.min_doc_len = std::max<int64_t>(1, c.seq_len / 4);
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
}

// training.device syntax (the other training keys are checked by their rows).
void checkTraining(const Config& cfg, const TrainingConfig& c) {
  if (!validDeviceName(c.device))
    cfg.fail("training.device",
             "expected \"auto\", \"cpu\", \"cuda\" or \"cuda:N\", got \"" + c.device + "\"",
             "the device ranks put the model and batches on");
  if (c.activation_offload == "host" && c.device == "cpu")
    cfg.failEither("training.activation_offload", "training.device",
                   "moves a GPU's activations to host memory, but training.device is \"cpu\"",
                   "leave training.activation_offload = \"none\" on the CPU");
  if (c.optimizer_offload == "host" && c.device == "cpu")
    cfg.failEither("training.optimizer_offload", "training.device",
                   "moves a GPU's optimizer state to host memory, but training.device is "
                   "\"cpu\", where it is in host memory already",
                   "leave training.optimizer_offload = \"none\" on the CPU");
  if (c.device_memory_limit_bytes > 0 && c.device == "cpu")
    cfg.failEither("training.device_memory_limit_gb", "training.device",
                   "caps a GPU's caching allocator, but training.device is \"cpu\"",
                   "for a host memory limit use parallel.memory_limit_gb");
}

}  // namespace

bool LoraConfig::hasTarget(const std::string& t) const {
  for (const auto& x : targets)
    if (x == t) return true;
  return false;
}

namespace {

// An NF4 base is held whole by every rank: its packed blocks are not split over tp ranks
// nor sharded into ZeRO-3's flat units.
void checkNf4Layout(const Config& cfg, const LayoutConfig& layout) {
  if (layout.tp > 1)
    cfg.failEither("lora.base_dtype", "parallel.tp",
                   "an NF4 base (\"nf4\") is held whole by every rank; tensor parallelism would "
                   "split its packed blocks",
                   "parallel.tp = 1 (DDP or ZeRO-1/2 over the ranks), or lora.base_dtype = "
                   "\"bf16\"");
  if (layout.effectiveZeroStage() == 3)
    cfg.failEither("lora.base_dtype", "parallel.zero_stage",
                   "an NF4 base (\"nf4\") is held whole by every rank; ZeRO-3 would shard it",
                   "parallel.zero_stage = 1 or 2 (they shard the adapters' optimizer state), or "
                   "lora.base_dtype = \"bf16\"");
}

// [lora]: an adapter or a frozen base's dtype needs adapters; dropout is not split over tp.
void checkLora(const Config& cfg, const LoraConfig& c, const LayoutConfig& layout) {
  if (!c.enabled() && !c.from_pretrained.empty())
    cfg.fail("lora.from_pretrained",
             "a PEFT adapter needs lora.rank > 0 (it is 0: full finetuning)",
             "set lora.rank to the adapter's r (adapter_config.json)");
  if (!c.enabled() && c.base_dtype != BaseDType::kFp32)
    cfg.fail("lora.base_dtype", "a frozen base needs lora.rank > 0 (it is 0: every weight trains)",
             "set lora.rank, or leave lora.base_dtype = \"fp32\"");
  if (c.enabled() && c.base_dtype == BaseDType::kNf4) checkNf4Layout(cfg, layout);
  if (c.enabled() && c.dropout > 0 && layout.tp > 1)
    cfg.failEither(
        "lora.dropout", "parallel.tp",
        "LoRA dropout with tensor parallelism is not supported: the tp ranks would have to "
        "draw the same masks",
        "lora.dropout = 0 (the usual setting for benchmarks), or parallel.tp = 1");
}

// [parallel] degrees: dp_replicate = 0 is derived; the degrees' product (with pp) must
// equal world_size. REQUIRES: world_size >= 1.
void resolveLayout(const Config& cfg, LayoutConfig& c, int world_size) {
  c.world_size = world_size;
  const std::string pp_factor = c.pp > 1 ? "pp(" + num(c.pp) + ") * " : "";
  if (c.dp_replicate == 0) {
    // Overflow-checked: a product past int64 cannot divide world_size either.
    const std::optional<int64_t> shard_tp = checkedProduct({c.pp, c.dp_shard, c.tp});
    if (!shard_tp || world_size % *shard_tp != 0)
      cfg.failEither(c.pp > 1 ? "parallel.pp" : "parallel.dp_shard", "parallel.tp",
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
}

// [parallel] backend: nccl needs a build with it (checks = kAll).
void checkComm(const Config& cfg, const CommConfig& c, Checks checks) {
  if (checks == Checks::kAll && c.backend == "nccl" && !ncclCompiledIn())
    cfg.fail("parallel.backend", "\"nccl\" is not compiled into this build (libtorch has no CUDA)",
             "use backend = \"gloo\" or \"auto\"");
}

// [metrics] profile_steps: [first, last] below max_steps, or [].
void checkMetrics(const Config& cfg, const MetricsConfig& c, int64_t max_steps) {
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
}

// [checkpoint] resume: "auto", "never" or a path.
void checkCheckpoint(const Config& cfg, const CheckpointConfig& c) {
  if (c.resume.empty() || c.resume == "none")
    cfg.fail("checkpoint.resume", "must be \"auto\", \"never\" or the path of a step_N directory",
             "checkpoint.resume=never to start from step 0");
}

// Tensor parallel splits the model evenly and per-tensor optimizers cannot see a split
// or flat-sharded tensor: the layout against [model] and training.optimizer.
void checkLayoutFits(const Config& cfg, const TrainConfig& c) {
  const ModelArgs& m = c.model;
  auto divides = [&](const char* what, int64_t n) {
    if (n % c.layout.tp != 0)
      cfg.failEither("parallel.tp", std::string("model.") + what,
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

// training.optimizer_in_backward steps each parameter the moment its gradient is final:
// there must be one backward per step, no norm over all gradients before the update, and a
// gradient sync that knows when a gradient is final (DDP, ZeRO-3 without replicas;
// trainer/parallel/grad_sync.h).
// REQUIRES: grad_accum_steps resolved.
void checkOptimizerInBackward(const Config& cfg, const TrainConfig& c) {
  if (!c.training.optimizer_in_backward) return;
  const std::string why = "training.optimizer_in_backward steps each parameter inside backward, ";
  if (c.training.grad_accum_steps > 1)
    cfg.fail("training.grad_accum_steps",
             why + "so a step has one backward; grad_accum_steps is " +
                 num(c.training.grad_accum_steps),
             "raise training.micro_batch_size instead, or turn optimizer_in_backward off");
  if (c.training.max_grad_norm > 0)
    cfg.fail("training.max_grad_norm",
             why + "before the global gradient norm exists; clipping by it (max_grad_norm = " +
                 num(c.training.max_grad_norm) + ") cannot be applied",
             "set training.max_grad_norm = 0 (the grad_norm column is still recorded)");
  if (c.layout.pp > 1)
    cfg.fail("parallel.pp", why + "but a pipeline stage runs several backwards per step",
             "use parallel.pp = 1 with optimizer_in_backward");
  const int64_t stage = c.layout.effectiveZeroStage();
  if (stage == 1 || stage == 2)
    cfg.fail("parallel.zero_stage",
             why + "which DDP and ZeRO-3 support; ZeRO stage " + num(stage) + " does not",
             "use parallel.zero_stage = 0 (DDP) or 3 with optimizer_in_backward");
  if (stage == 3 && c.layout.dp_replicate > 1)
    cfg.fail("parallel.dp_replicate",
             why + "but replicas (HSDP, dp_replicate = " + num(c.layout.dp_replicate) +
                 ") all-reduce their shard gradients only after backward",
             "set parallel.dp_replicate = 1 (shard over every data-parallel rank)");
}

// training.master_weights = "none": bf16 weights need bf16 compute, and the layouts whose
// gradient sync keeps the weights as they are (DDP, tp; not ZeRO's fp32 shards).
void checkMasterWeights(const Config& cfg, const TrainConfig& c) {
  const TrainingConfig& t = c.training;
  if (t.master_weights != "none") {
    if (t.bf16_update != "stochastic")
      cfg.failEither("training.bf16_update", "training.master_weights",
                     "applies to bf16 weights, but master_weights is \"" + t.master_weights + "\"",
                     "set training.master_weights = \"none\", or leave bf16_update unset");
    return;
  }
  const std::string why = "master_weights = \"none\" keeps the weights in bf16";
  if (t.dtype != DType::kBf16)
    cfg.failEither("training.master_weights", "training.dtype",
                   why + ", but training.dtype is fp32", "set training.dtype = \"bf16\"");
  if (c.layout.effectiveZeroStage() != 0)
    cfg.fail("parallel.zero_stage", why + "; ZeRO's shards are fp32 masters",
             "use parallel.zero_stage = 0, or master_weights = \"fp32\"");
  if (c.layout.pp > 1)
    cfg.fail("parallel.pp", why + "; pipeline stages do not support it yet",
             "use parallel.pp = 1, or master_weights = \"fp32\"");
  if (c.lora.enabled())
    cfg.fail("training.master_weights", why + "; with LoRA the adapters train in fp32",
             "keep the frozen base small with lora.base_dtype = \"bf16\" instead");
}

// training.activation_offload = "host" offloads what checkpointed blocks keep: there must be
// some (activation checkpointing, or ZeRO-3, which recomputes every block).
void checkActivationOffload(const Config& cfg, const TrainConfig& c) {
  if (c.training.activation_offload != "host" || c.training.activation_checkpointing > 0 ||
      c.layout.effectiveZeroStage() == 3)
    return;
  cfg.failEither("training.activation_offload", "training.activation_checkpointing",
                 "offloads the inputs checkpointed blocks keep, and no block is checkpointed",
                 "set training.activation_checkpointing = \"full\" (or \"every_N\")");
}

// training.cuda_graphs (trainer/parallel/graph_runner.h): a graph replays one GPU's forward
// and backward of one static batch; what the host does during a step of any other run
// (collectives, a changing shape, host-drawn masks, offload copies, updates inside backward)
// would be frozen into the graph or cannot be captured. REQUIRES: grad_accum_steps resolved.
void checkCudaGraphs(const Config& cfg, const TrainConfig& c) {
  const TrainingConfig& t = c.training;
  if (!t.cuda_graphs) return;
  const std::string why = "training.cuda_graphs replays one captured forward and backward, ";
  const std::string off = "or set training.cuda_graphs = false";
  if (t.device == "cpu")
    cfg.failEither("training.cuda_graphs", "training.device",
                   why + "on a GPU, but training.device is \"cpu\"",
                   "set training.device = \"cuda\" (or \"auto\" on a machine with a GPU)");
  if (c.layout.world_size > 1)
    cfg.fail("training.cuda_graphs",
             why + "of one GPU; this run has " + num(c.layout.world_size) +
                 " ranks, whose collectives the host waits for",
             "run one rank per configuration (a sweep runs the others), " + off);
  if (t.grad_accum_steps > 1)
    cfg.fail("training.grad_accum_steps",
             why + "of one micro-batch per step; grad_accum_steps is " + num(t.grad_accum_steps),
             "raise training.micro_batch_size instead, " + off);
  if (c.data.pad_longest)
    cfg.fail("data.padding",
             why + "whose batch shape is fixed; \"longest\" changes it from batch to batch",
             "use data.padding = \"max_length\" or \"packing\", " + off);
  if (c.lora.rank > 0 && c.lora.dropout > 0)
    cfg.fail("lora.dropout", why + "but dropout masks are drawn on the host at each forward",
             "set lora.dropout = 0, " + off);
  if (t.optimizer_in_backward || t.activation_offload != "none" || t.optimizer_offload != "none")
    cfg.fail("training.cuda_graphs",
             why + "but optimizer_in_backward and the offloads work from the host inside it",
             "turn training.optimizer_in_backward, activation_offload and optimizer_offload "
             "off, " +
                 off);
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
  cfg.checkDomains();  // every value in its range or choices before any cross-key check
  requireModelKeys(cfg);
  TrainConfig c;
  fillMembers(cfg, c);
  checkModelShape(cfg, c.model);
  checkData(cfg, c.data, c.model, checks);
  checkTraining(cfg, c.training);
  resolveLayout(cfg, c.layout, world_size);
  checkLayoutFits(cfg, c);
  c.training.grad_accum_steps = gradAccumFor(cfg, c);
  checkOptimizerInBackward(cfg, c);
  checkMasterWeights(cfg, c);
  checkActivationOffload(cfg, c);
  checkCudaGraphs(cfg, c);
  resolvePipeline(cfg, c);
  checkComm(cfg, c.comm, checks);
  refusePlannedKeys(cfg);
  checkCheckpoint(cfg, c.checkpoint);
  checkLora(cfg, c.lora, c.layout);
  checkMetrics(cfg, c.metrics, c.training.max_steps);
  checkSizes(cfg, c);
  return c;
}

}  // namespace ftb
