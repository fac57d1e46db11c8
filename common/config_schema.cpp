// Value types and their TOML spelling, Schema lookup, and the trainer's schema:
// every run-config key, its type, default and doc.
//
// Contract: trainerSchema() is the single source of truth for the trainer's config
// keys; anything that lists keys (--help-config, README) should read it. Keys with
// affects_experiment = false (output, checkpointing, logging, timeouts) are left out
// of the sweep tag hash. model.* shape keys have no default: they come from the
// preset named by model.name or from the run config.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "common/config.h"

namespace ftb {
namespace {

std::string quoteString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned char>(c));
          out += esc;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string leafName(const std::string& key) {
  size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// A domain bound: whole numbers as integers ("0", not "0.0": int keys share them),
// others by formatDouble.
std::string bound(double v) {
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return formatDouble(v);
}

KeySpec spec(const char* key, ValueType type, std::optional<Value> def, const char* doc,
             bool affects_experiment = true) {
  return KeySpec{key, type, std::move(def), doc, affects_experiment};
}

// A key declared for work not landed yet (KeySpec::planned).
[[maybe_unused]] KeySpec planned(KeySpec k) {
  k.planned = true;
  return k;
}

// A key added after run directories were named by the hash (KeySpec::hash_default).
KeySpec addedLater(KeySpec k) {
  k.hash_default = false;
  return k;
}

Value i(int64_t v) { return Value(v); }
Value f(double v) { return Value(v); }
Value b(bool v) { return Value(v); }
Value s(const char* v) { return Value(std::string(v)); }

constexpr ValueType kInt = ValueType::kInt;
constexpr ValueType kFloat = ValueType::kFloat;
constexpr ValueType kBool = ValueType::kBool;
constexpr ValueType kString = ValueType::kString;
constexpr bool kNoTag = false;  // affects_experiment = false

void addModel(Schema& sc) {
  sc.add(spec("model.name", kString, s("tiny"), "preset name: configs/models/<name>.toml"));
  sc.add(spec("model.dim", kInt, std::nullopt, "hidden size"), atLeast(1));
  sc.add(spec("model.n_layers", kInt, std::nullopt, "number of transformer blocks"), atLeast(1));
  sc.add(spec("model.n_heads", kInt, std::nullopt, "attention heads"), atLeast(1));
  sc.add(spec("model.n_kv_heads", kInt, std::nullopt, "key/value heads (GQA); = n_heads for MHA"),
         atLeast(1));
  sc.add(spec("model.ffn_dim", kInt, std::nullopt, "SwiGLU hidden size"), atLeast(1));
  sc.add(spec("model.vocab_size", kInt, std::nullopt, "vocabulary size"), atLeast(1));
  sc.add(spec("model.max_seq_len", kInt, std::nullopt, "longest sequence the model supports"),
         atLeast(1));
  sc.add(spec("model.rope_theta", kFloat, f(10000.0), "RoPE base frequency"), above(0));
  sc.add(spec("model.norm_eps", kFloat, f(1e-5), "RMSNorm epsilon"), above(0));
  sc.add(spec("model.tie_embeddings", kBool, b(false), "share input embedding and output head"));
  sc.add(spec("model.from_pretrained", kString, std::nullopt,
              "Hugging Face model directory (config.json + model*.safetensors) to start from; "
              "its config.json gives every other model.* key"));
}

void addData(Schema& sc) {
  sc.add(spec("data.source", kString, s("synthetic"), "\"synthetic\" or a path to .bin/.jsonl"));
  sc.add(spec("data.seq_len", kInt, i(256), "tokens per sample"), atLeast(1));
  sc.add(spec("data.padding", kString, s("max_length"),
              "\"max_length\" | \"longest\" | \"packing\" (documents concatenated and cut "
              "into seq_len windows)"));
  sc.add(spec("data.num_samples", kInt, i(4096), "synthetic dataset size (samples)"), atLeast(1));
  sc.add(
      spec("data.min_doc_len", kInt, i(0), "synthetic: shortest document in tokens; 0 = seq_len/4"),
      atLeast(0));
  sc.add(spec("data.bin_dtype", kString, s("uint16"),
              "token dtype of .bin files: \"uint16\" | \"uint32\""));
  sc.add(spec("data.pad_id", kInt, i(0), "padding token id"), atLeast(0));
  // JSONL text datasets (trainer/data/text_dataset.h).
  sc.add(spec("data.tokenizer", kString, s(""),
              "sentencepiece model for a .jsonl of texts; \"\" = "
              "<model.from_pretrained>/tokenizer.model if set, else the .jsonl holds input_ids"));
  sc.add(spec("data.text_field", kString, s("text"), "JSONL field with the text to train on"));
  sc.add(spec("data.prompt_field", kString, s(""),
              "JSONL prompt field; with data.completion_field the loss is on the completion "
              "only"));
  sc.add(spec("data.completion_field", kString, s(""), "JSONL completion field"));
}

void addTraining(Schema& sc) {
  sc.add(spec("training.micro_batch_size", kInt, i(1), "samples per rank per micro-batch"),
         atLeast(1));
  sc.add(spec("training.grad_accum_steps", kInt, i(1), "micro-batches per optimizer step"),
         atLeast(1));
  sc.add(spec("training.global_batch_size", kInt, i(0),
              "samples per optimizer step; 0 = micro_batch_size * grad_accum_steps * dp. "
              "When set, grad_accum_steps is derived from it"),
         atLeast(0));
  sc.add(spec("training.max_steps", kInt, i(20), "optimizer steps to run"), atLeast(1));
  sc.add(spec("training.stop_after_seconds", kFloat, f(0.0), "wall-clock limit; 0 = no limit"),
         atLeast(0));
  sc.add(spec("training.lr", kFloat, f(3e-4), "peak learning rate"), atLeast(0));
  sc.add(spec("training.lr_warmup_steps", kInt, i(0), "linear LR warmup steps"), atLeast(0));
  sc.add(spec("training.weight_decay", kFloat, f(0.0), "decoupled weight decay"), atLeast(0));
  sc.add(spec("training.max_grad_norm", kFloat, f(1.0), "gradient clipping norm; 0 = off"),
         atLeast(0));
  sc.add(spec("training.optimizer", kString, s("adamw"), "\"adamw\" | \"adafactor\""));
  sc.add(spec("training.beta1", kFloat, f(0.9), "Adam beta1"), halfOpen(0, 1));
  sc.add(spec("training.beta2", kFloat, f(0.95), "Adam beta2"), halfOpen(0, 1));
  sc.add(spec("training.eps", kFloat, f(1e-8), "Adam epsilon"), above(0));
  sc.add(spec("training.dtype", kString, s("fp32"), "compute dtype: \"fp32\" | \"bf16\""));
  sc.add(spec("training.seed", kInt, i(0), "seed for init and data"), atLeast(0));
  sc.add(spec("training.activation_checkpointing", kString, s("none"),
              "\"none\" | \"full\" | \"every_N\""));
  sc.add(spec("training.threads", kInt, i(0), "intra-op threads; 0 = OMP_NUM_THREADS or 1"),
         atLeast(0));
  sc.add(spec("training.attention", kString, s("fused_softmax"),
              "causal attention kernel: \"fused_softmax\" (q k^T, ftbench's fused fp32 causal "
              "softmax, probs v) | \"sdpa\" (libtorch's scaled_dot_product_attention, a fused "
              "flash-attention kernel; not faster on the CPU in scripts/bench.sh port)",
              kNoTag));
  sc.add(spec("training.fp32_gemm", kString, s("auto"),
              "BLAS of the model's fp32 CPU projections and attention products: \"auto\" (the "
              "faster of the two on a 2048^3 GEMM timed at start) | \"aten\" (libtorch's own, "
              "MKL in the PyPI wheel) | \"openblas\" (libopenblas.so.0); the choice and both "
              "figures are recorded",
              kNoTag));
  // Device placement; recorded in the metrics file's `device` attribute.
  sc.add(spec("training.device", kString, s("auto"),
              "\"auto\" (cuda:LOCAL_RANK when a GPU is visible or parallel.backend is \"nccl\", "
              "else cpu) | \"cpu\" | \"cuda\" (cuda:LOCAL_RANK) | \"cuda:N\"",
              kNoTag));
}

void addParallel(Schema& sc) {
  sc.add(spec("parallel.dp_replicate", kInt, i(0),
              "replicated data-parallel degree; "
              "0 = world/(dp_shard*tp)"),
         atLeast(0));
  sc.add(spec("parallel.dp_shard", kInt, i(1), "sharded data-parallel degree"), atLeast(1));
  sc.add(spec("parallel.tp", kInt, i(1), "tensor-parallel degree"), atLeast(1));
  sc.add(spec("parallel.zero_stage", kInt, i(0), "ZeRO stage 0..3"), between(0, 3));
  sc.add(spec("parallel.backend", kString, s("auto"), "\"auto\" | \"gloo\" | \"nccl\""));
  sc.add(
      spec("parallel.timeout_seconds", kFloat, f(300.0), "collective/rendezvous timeout", kNoTag),
      above(0));
  sc.add(spec("parallel.bucket_mb", kFloat, f(25.0),
              "DDP gradient bucket size (MiB of fp32); each bucket's all-reduce starts "
              "during backward as soon as its gradients are ready",
              kNoTag),
         above(0));
  sc.add(spec("parallel.local_collectives", kString, s("auto"),
              "\"auto\": ranks of one host reduce and gather through each other's memory "
              "(process_vm_readv), falling back to the backend where the kernel forbids it; "
              "groups across hosts run in two levels (memory within a host, the backend "
              "across hosts) | \"off\": every collective on the backend",
              kNoTag));
  sc.add(spec("parallel.memory_limit_gb", kFloat, f(0.0),
              "per-rank memory limit (OOM above it); 0 = none"),
         atLeast(0));
}

// Pipeline parallelism (common/pipeline.h): stages outermost in the mesh, then
// dp_replicate, dp_shard, tp. Added keys: tags of runs without a pipeline are unchanged.
void addPipeline(Schema& sc) {
  sc.add(
      addedLater(spec("parallel.pp", kInt, i(1),
                      "pipeline-parallel degree: stages, each holding a contiguous run of blocks "
                      "(the first also the embedding, the last the final norm, output and loss)")),
      atLeast(1));
  sc.add(addedLater(
      spec("parallel.pp_schedule", kString, s("1f1b"),
           "\"gpipe\" | \"1f1b\" | \"interleaved_1f1b\" (with parallel.pp_virtual_stages)")));
  sc.add(addedLater(spec("parallel.pp_virtual_stages", kInt, i(1),
                         "model chunks per stage; > 1 only with pp_schedule \"interleaved_1f1b\"")),
         atLeast(1));
  sc.add(
      addedLater(spec("parallel.pp_microbatches", kInt, i(0),
                      "micro-batches per step through the pipeline; 0 = training.grad_accum_steps. "
                      "When set, grad_accum_steps is derived from it")),
      atLeast(0));
  sc.add(addedLater(
      spec("parallel.pp_split", ValueType::kIntList, Value(std::vector<int64_t>{}),
           "blocks per model chunk in model order (pp * pp_virtual_stages entries summing "
           "to model.n_layers); [] = balanced by FLOPs, the embedding counted on the "
           "first chunk and the output and loss on the last")));
  // The pipeline links' transport (not part of the sweep tag).
  sc.add(spec("parallel.pp_local_p2p", kBool, b(true),
              "true: pipeline links between ranks of one host move activations and gradients "
              "through each other's memory (process_vm_readv/writev), falling back to the "
              "backend where the kernel forbids it | false: every link on the backend",
              kNoTag));
}

void addLora(Schema& sc) {
  sc.add(addedLater(spec("lora.rank", kInt, i(0),
                         "LoRA rank r: adapters A [r, in] and B [out, r] on each target, base "
                         "frozen; 0 = full finetuning")),
         atLeast(0));
  sc.add(addedLater(spec("lora.alpha", kFloat, f(8.0),
                         "LoRA scale numerator: the update is alpha/r B A x")),
         above(0));
  sc.add(addedLater(spec("lora.dropout", kFloat, f(0.0), "dropout on the adapters' input")),
         halfOpen(0, 1));
  sc.add(addedLater(spec("lora.targets", kString, s("q,v"),
                         "comma-separated projections with adapters: q, k, v, o, gate, up, down "
                         "(or their HF names q_proj ... down_proj), or \"all\"; \"q,v\" is "
                         "PEFT's default for Llama")));
  sc.add(addedLater(spec("lora.base_dtype", kString, s("fp32"),
                         "storage of the frozen base weights: \"fp32\" | \"bf16\" (adapters "
                         "and their optimizer state stay fp32)")));
  sc.add(addedLater(spec("lora.from_pretrained", kString, s(""),
                         "PEFT adapter directory (adapter_config.json, "
                         "adapter_model.safetensors) to start from; \"\" = fresh adapters")));
}

void addCheckpoint(Schema& sc) {
  sc.add(spec("checkpoint.dir", kString, s(""),
              "checkpoint directory; \"\" = <run_dir>/checkpoints", kNoTag));
  sc.add(spec("checkpoint.interval", kInt, i(0),
              "steps between checkpoints; 0 = only at the end and on preemption", kNoTag),
         atLeast(0));
  sc.add(spec("checkpoint.resume", kString, s("auto"),
              "\"auto\" (newest complete checkpoint of checkpoint.dir) | \"never\" | path of a "
              "step_N directory",
              kNoTag));
  sc.add(spec("checkpoint.save_final", kBool, b(true),
              "save a checkpoint after the last step (training.max_steps or "
              "stop_after_seconds); false for throughput-only runs. A stop signal or "
              "`launcher ctl stop|save` still saves",
              kNoTag));
  sc.add(spec("checkpoint.keep_last", kInt, i(2),
              "complete checkpoints kept (older ones pruned); 0 = keep all", kNoTag),
         atLeast(0));
  sc.add(spec("checkpoint.preempt_grace_s", kFloat, f(0.0),
              "after a stop signal, seconds to finish the step and save; past them the rank "
              "exits preempted without a partial checkpoint (the previous one stays the resume "
              "point); 0 = no deadline",
              kNoTag),
         atLeast(0));
}

void addMetricsAndOutput(Schema& sc) {
  sc.add(spec("metrics.log_every", kInt, i(1), "rank 0 prints every N steps", kNoTag), atLeast(1));
  sc.add(spec("metrics.peak_tflops", kFloat, f(0.0),
              "hardware peak TFLOP/s per device, MFU's denominator; 0 = computed "
              "(CPU: cores x measured clock x FLOP/cycle; GPU: table)"),
         atLeast(0));
  sc.add(spec("metrics.skip_first_steps", kInt, i(2),
              "the first N steps (warm-up) are left out of summaries (tokens/s, MFU, step "
              "times); not the learning-rate warm-up, training.lr_warmup_steps"),
         atLeast(0));
  sc.add(spec("metrics.price_per_hour", kFloat, f(0.0), "$/hour for cost metrics", kNoTag),
         atLeast(0));
  sc.add(spec("metrics.profile_steps", ValueType::kIntList, Value(std::vector<int64_t>{}),
              "[a, b]: Chrome trace of steps a..b (0-based, inclusive) per rank in "
              "<run_dir>/traces/; [] = off",
              kNoTag));
  sc.add(spec("output.dir", kString, s("results"), "output root", kNoTag));
  sc.add(spec("output.sweep_fmt", kString, s("{model.name}.ws{world_size}.{hash}"),
              "run directory name format", kNoTag));
  sc.add(spec("output.no_sweep_dir", kBool, b(false), "write straight into output.dir", kNoTag));
  // ---- Sweep labels: set by sweep_tagger expand, read by aggregate; not the experiment ----
  sc.add(spec("sweep.layout", kString, s(""),
              "the sweep's layout variant of this run ([layout.NAME] in the sweep file); "
              "aggregate draws one series per variant",
              kNoTag));
  sc.add(spec("sweep.repeat", kInt, i(0),
              "repeat index of a sweep point (sweep key repeats); N > 0 appends .rN to the run "
              "directory name, the config hash stays that of the point",
              kNoTag),
         atLeast(0));
}

// Interference on the rank's CPUs (common/interference.h).
void addInterference(Schema& sc) {
  sc.add(spec("metrics.max_interference", kFloat, f(0.05),
              "a run whose interference (fraction of step time its compute threads were "
              "runnable but not running: run-queue wait + CPU steal; the worst rank) exceeds "
              "this is marked `noisy`; 1 = never",
              kNoTag),
         between(0, 1));
}

}  // namespace

const char* valueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kInt:
      return "int";
    case ValueType::kFloat:
      return "float";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kIntList:
      return "int list";
    case ValueType::kStringList:
      return "string list";
  }
  return "?";
}

std::string formatFixed(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string formatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0.0";  // also -0.0
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  size_t e = s.find('e');
  if (e == std::string::npos) {
    if (s.find('.') == std::string::npos) s += ".0";
    return s;
  }
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  bool neg = !exp.empty() && exp[0] == '-';
  if (!exp.empty() && (exp[0] == '-' || exp[0] == '+')) exp.erase(0, 1);
  exp.erase(0, std::min(exp.find_first_not_of('0'), exp.size() - 1));
  return mant + "e" + (neg ? "-" : "") + exp;
}

std::string valueToString(const Value& v) {
  struct Visitor {
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return formatDouble(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return quoteString(s); }
    std::string operator()(const std::vector<int64_t>& l) const {
      std::string out = "[";
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + std::to_string(l[i]);
      return out + "]";
    }
    std::string operator()(const std::vector<std::string>& l) const {
      std::string out = "[";
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + quoteString(l[i]);
      return out + "]";
    }
  };
  return std::visit(Visitor{}, v);
}

// REQUIRES (programming errors, std::logic_error): key not yet declared; the
// default, if any, has the declared type (an int default for a float key is widened).
Schema& Schema::add(KeySpec spec) {
  if (find(spec.key) != nullptr) throw std::logic_error("schema: duplicate key " + spec.key);
  if (spec.default_value) {
    Value& v = *spec.default_value;
    if (spec.type == ValueType::kFloat && std::holds_alternative<int64_t>(v))
      v = static_cast<double>(std::get<int64_t>(v));
    if (static_cast<ValueType>(v.index()) != spec.type)
      throw std::logic_error("schema: default of " + spec.key + " is not a " +
                             valueTypeName(spec.type));
  }
  keys_.push_back(std::move(spec));
  return *this;
}

Schema& Schema::add(KeySpec spec, Domain domain) {
  if (spec.type != ValueType::kInt && spec.type != ValueType::kFloat)
    throw std::logic_error("schema: a domain on non-numeric key " + spec.key);
  domain.declared = true;
  spec.domain = domain;
  return add(std::move(spec));
}

Domain atLeast(double lo) { return Domain{lo, HUGE_VAL, false, false, true}; }
Domain above(double lo) { return Domain{lo, HUGE_VAL, true, false, true}; }
Domain between(double lo, double hi) { return Domain{lo, hi, false, false, true}; }
Domain halfOpen(double lo, double hi) { return Domain{lo, hi, false, true, true}; }

bool Domain::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  return hi_open ? v < hi : v <= hi;
}

std::string Domain::range() const {
  bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return std::string("in ") + (lo_open ? "(" : "[") + bound(lo) + ", " + bound(hi) +
           (hi_open ? ")" : "]");
  if (has_lo) return (lo_open ? "> " : ">= ") + bound(lo);
  if (has_hi) return (hi_open ? "< " : "<= ") + bound(hi);
  return "";
}

std::string Domain::describe(bool integer) const {
  std::string what = integer ? "an integer" : "a finite number";
  std::string r = range();
  return r.empty() ? what : what + " " + r;
}

const KeySpec* Schema::find(const std::string& key) const {
  for (const KeySpec& s : keys_)
    if (s.key == key) return &s;
  return nullptr;
}

// Closest declared key within edit distance 3 (ties: first declared). A unique
// declared key with the same last component ("model.lr" -> "training.lr") is
// preferred over any fuzzy match farther than distance 1.
std::string Schema::closest(const std::string& key) const {
  constexpr size_t kMaxDistance = 3;
  const KeySpec* best = nullptr;
  size_t best_distance = kMaxDistance + 1;
  for (const KeySpec& s : keys_) {
    size_t d = editDistance(key, s.key);
    if (d < best_distance) {
      best = &s;
      best_distance = d;
    }
  }
  if (best != nullptr && best_distance <= 1) return best->key;
  const std::string leaf = leafName(key);
  const KeySpec* same_leaf = nullptr;
  int same_leaf_count = 0;
  for (const KeySpec& s : keys_) {
    if (leafName(s.key) == leaf && s.key != key) {
      same_leaf = &s;
      ++same_leaf_count;
    }
  }
  if (same_leaf_count == 1) return same_leaf->key;
  return best != nullptr ? best->key : "";
}

const Schema& trainerSchema() {
  static const Schema schema = [] {
    Schema sc;
    addModel(sc);
    addData(sc);
    addTraining(sc);
    addParallel(sc);
    addPipeline(sc);
    addLora(sc);
    addCheckpoint(sc);
    addMetricsAndOutput(sc);
    addInterference(sc);
    return sc;
  }();
  return schema;
}

// Invariant (SchemaTest.RenamedKeysPointToRealKeys): no old name is a key, every new name is.
const std::vector<RenamedKey>& renamedKeys() {
  static const std::vector<RenamedKey> table = {
      {"training.warmup_steps", "metrics.skip_first_steps"},
  };
  return table;
}

const RenamedKey* renamedFrom(const std::string& old_key) {
  for (const RenamedKey& r : renamedKeys())
    if (old_key == r.old_key) return &r;
  return nullptr;
}

const RenamedKey* renamedTo(const std::string& key) {
  for (const RenamedKey& r : renamedKeys())
    if (key == r.key) return &r;
  return nullptr;
}

// torchtitan: JobConfig (torchtitan/config/job_config.py) and its older spellings
// (training.batch_size, training.*_degree). torchrun: its launch flags as sweep keys.
// The Hugging Face Trainer: TrainingArguments names, matched by their last part.
// Invariant (ConfigSchema.ForeignSpellingsNameRealKeys): no spelling is an ftbench key and
// every non-empty key is a trainerSchema() key or a sweep's nodes / nproc_per_node.
const std::vector<ForeignSpelling>& foreignSpellings() {
  static const std::vector<ForeignSpelling> table = {
      {"training.steps", "training.max_steps", "torchtitan"},
      {"training.local_batch_size", "training.micro_batch_size", "torchtitan"},
      {"training.batch_size", "training.micro_batch_size", "torchtitan"},
      {"training.seq_len", "data.seq_len", "torchtitan"},
      {"training.max_norm", "training.max_grad_norm", "torchtitan"},
      {"training.dataset", "data.source", "torchtitan"},
      {"training.dataset_path", "data.source", "torchtitan"},
      {"training.mixed_precision_param", "training.dtype", "torchtitan"},
      {"training.data_parallel_replicate_degree", "parallel.dp_replicate", "torchtitan"},
      {"training.data_parallel_shard_degree", "parallel.dp_shard", "torchtitan"},
      {"training.tensor_parallel_degree", "parallel.tp", "torchtitan"},
      {"training.compile", "", "torchtitan"},
      {"optimizer.name", "training.optimizer", "torchtitan"},
      {"optimizer.lr", "training.lr", "torchtitan"},
      {"optimizer.beta1", "training.beta1", "torchtitan"},
      {"optimizer.beta2", "training.beta2", "torchtitan"},
      {"optimizer.eps", "training.eps", "torchtitan"},
      {"optimizer.weight_decay", "training.weight_decay", "torchtitan"},
      {"lr_scheduler.warmup_steps", "training.lr_warmup_steps", "torchtitan"},
      {"parallelism.data_parallel_replicate_degree", "parallel.dp_replicate", "torchtitan"},
      {"parallelism.data_parallel_shard_degree", "parallel.dp_shard", "torchtitan"},
      {"parallelism.tensor_parallel_degree", "parallel.tp", "torchtitan"},
      {"parallelism.pipeline_parallel_degree", "parallel.pp", "torchtitan"},
      {"parallelism.pipeline_parallel_schedule", "parallel.pp_schedule", "torchtitan"},
      {"parallelism.context_parallel_degree", "", "torchtitan"},
      {"checkpoint.folder", "checkpoint.dir", "torchtitan"},
      {"checkpoint.keep_latest_k", "checkpoint.keep_last", "torchtitan"},
      {"checkpoint.initial_load_path", "checkpoint.resume", "torchtitan"},
      {"activation_checkpoint.mode", "training.activation_checkpointing", "torchtitan"},
      {"metrics.log_freq", "metrics.log_every", "torchtitan"},
      {"job.dump_folder", "output.dir", "torchtitan"},
      {"comm.init_timeout_seconds", "parallel.timeout_seconds", "torchtitan"},
      {"comm.train_timeout_seconds", "parallel.timeout_seconds", "torchtitan"},
      {"model.flavor", "model.name", "torchtitan"},
      {"model.tokenizer_path", "data.tokenizer", "torchtitan"},
      {"model.hf_assets_path", "model.from_pretrained", "torchtitan"},
      {"nnodes", "nodes", "torchrun"},
      {"nproc-per-node", "nproc_per_node", "torchrun"},
      {"learning_rate", "training.lr", "the Hugging Face Trainer"},
      {"per_device_train_batch_size", "training.micro_batch_size", "the Hugging Face Trainer"},
      {"gradient_accumulation_steps", "training.grad_accum_steps", "the Hugging Face Trainer"},
      {"adam_beta1", "training.beta1", "the Hugging Face Trainer"},
      {"adam_beta2", "training.beta2", "the Hugging Face Trainer"},
      {"adam_epsilon", "training.eps", "the Hugging Face Trainer"},
      {"max_seq_length", "data.seq_len", "the Hugging Face Trainer"},
      {"gradient_checkpointing", "training.activation_checkpointing", "the Hugging Face Trainer"},
      {"output_dir", "output.dir", "the Hugging Face Trainer"},
      {"save_steps", "checkpoint.interval", "the Hugging Face Trainer"},
      {"save_total_limit", "checkpoint.keep_last", "the Hugging Face Trainer"},
      {"logging_steps", "metrics.log_every", "the Hugging Face Trainer"},
  };
  return table;
}

std::string closestName(const std::string& name, const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    size_t dot = n.rfind('.');
    if (dot != std::string::npos && n.compare(dot + 1, std::string::npos, name) == 0) return n;
  }
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& n : names) {
    size_t d = editDistance(name, n);
    if (d < best_d) best = n, best_d = d;
  }
  return best;
}

// Edit distance (insert/delete/substitute, cost 1 each).
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A markdown table cell: `|` escaped (GitHub markdown splits cells on it, also inside
// code spans); outside code spans also `<` (`<run_dir>` would render as an unknown HTML
// tag, i.e. not at all); newlines as spaces.
std::string markdownCell(const std::string& text, bool code_span) {
  std::string out;
  for (char c : text) {
    if (c == '|' || (c == '<' && !code_span)) out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string schemaMarkdown(const Schema& schema) {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const KeySpec& k : schema.keys()) {
    std::string def = k.default_value ? valueToString(*k.default_value) : "(preset)";
    if (!k.default_value && k.key.rfind("model.", 0) != 0) def = "(none)";
    std::string doc = k.doc;
    if (!k.affects_experiment) doc += " (not part of the sweep tag)";
    if (k.planned) doc = "**planned** (not implemented yet; refused if set): " + doc;
    std::string type = valueTypeName(k.type);
    if (k.domain.declared) type += " " + k.domain.range();
    out += "| `" + k.key + "` | " + markdownCell(type, false) + " | `" + markdownCell(def, true) +
           "` | " + markdownCell(doc, false) + " |\n";
  }
  return out;
}

}  // namespace ftb
