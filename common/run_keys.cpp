// The key table: every run-config key, one row each (common/run_keys.h). Keys with
// affects_experiment = false (output, checkpointing, logging, timeouts) are left out of the
// sweep tag hash; addedLater keys hash only away from their default (common/tag.h). model.*
// shape keys have no default: they come from the preset named by model.name, the run
// config or model.from_pretrained's config.json.
#include "common/run_keys.h"

#include <stdexcept>
#include <type_traits>
#include <utility>

namespace ftb {
namespace {

KeySpec spec(const char* key, ValueType type, std::optional<Value> def, const char* doc,
             bool affects_experiment = true) {
  return KeySpec{key, type, std::move(def), doc, affects_experiment};
}
// A numeric key's range, checked by Config::checkDomains.
KeySpec ranged(KeySpec k, Domain d) {
  k.domain = d;
  return k;
}
// A string key's accepted values, checked by Config::checkDomains.
KeySpec oneOf(KeySpec k, std::vector<std::string> choices) {
  k.choices = std::move(choices);
  return k;
}
// A key declared for work not landed yet (KeySpec::planned).
[[maybe_unused]] KeySpec planned(KeySpec k) {
  k.planned = true;
  return k;
}
// A string key that also takes a TOML list of strings (KeySpec::comma_list).
KeySpec commaList(KeySpec k) {
  k.comma_list = true;
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
constexpr ValueType kIntList = ValueType::kIntList;
constexpr bool kNoTag = false;  // affects_experiment = false

template <class T>
constexpr ValueType valueTypeOf() {
  if constexpr (std::is_same_v<T, int64_t>) return kInt;
  if constexpr (std::is_same_v<T, double>) return kFloat;
  if constexpr (std::is_same_v<T, bool>) return kBool;
  if constexpr (std::is_same_v<T, std::string>) return kString;
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) return kIntList;
}

template <class T>
T read(const Config& cfg, const std::string& key) {
  if constexpr (std::is_same_v<T, int64_t>) return cfg.getInt(key);
  if constexpr (std::is_same_v<T, double>) return cfg.getFloat(key);
  if constexpr (std::is_same_v<T, bool>) return cfg.getBool(key);
  if constexpr (std::is_same_v<T, std::string>) return cfg.getString(key);
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) return cfg.getIntList(key);
}

// The member at `path` of a TrainConfig: M(training.lr) gives the path's text and its getter.
#define M(path) \
#path, [](TrainConfig & c) -> auto& { return c.path; }

// A key whose value the member holds converted: convert(cfg, key) returns the member's value
// and may throw ConfigError (cfg.fail) for a value it cannot convert.
template <class Get, class Convert>
KeyRow converted(KeySpec k, const char* path, Get get, Convert convert) {
  using T = std::remove_reference_t<decltype(get(std::declval<TrainConfig&>()))>;
  const std::string key = k.key;
  return KeyRow{std::move(k), path,
                [key, get, convert](const Config& cfg, TrainConfig& tc) {
                  if (cfg.has(key)) get(tc) = convert(cfg, key);
                },
                [get] {
                  TrainConfig tc{};
                  return get(tc) == T{};
                },
                ""};
}

// A key whose value the member holds as it is.
// REQUIRES: the member's C++ type is the key's declared type (else std::logic_error).
template <class Get>
KeyRow member(KeySpec k, const char* path, Get get) {
  using T = std::remove_reference_t<decltype(get(std::declval<TrainConfig&>()))>;
  if (valueTypeOf<T>() != k.type)
    throw std::logic_error("key table: " + k.key + " is a " + valueTypeName(k.type) +
                           " but fills " + path + " of another type");
  return converted(std::move(k), path, get, read<T>);
}

// A key read with others by `read_by` (its value has no member of its own).
KeyRow byHand(KeySpec k, const char* read_by) { return KeyRow{std::move(k), "", {}, {}, read_by}; }

// ---- Conversions of a key's value into its member ----------------------------------

DType dtypeOf(const Config& cfg, const std::string& key) {
  return cfg.getString(key) == "bf16" ? DType::kBf16 : DType::kFp32;
}
BaseDType baseDtypeOf(const Config& cfg, const std::string& key) {
  const std::string& v = cfg.getString(key);
  return v == "nf4" ? BaseDType::kNf4 : v == "bf16" ? BaseDType::kBf16 : BaseDType::kFp32;
}
double mib(const Config& cfg, const std::string& key) {
  return cfg.getFloat(key) * double(1 << 20);
}
double gib(const Config& cfg, const std::string& key) {
  return cfg.getFloat(key) * double(1LL << 30);
}

// "none" 0, "full" 1, "every_N" N.
int64_t checkpointingOf(const Config& cfg, const std::string& key) {
  const std::string& v = cfg.getString(key);
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
  cfg.fail(key, "expected \"none\", \"full\" or \"every_N\" (N >= 1), got \"" + v + "\"",
           "\"every_2\" checkpoints every second transformer block");
}

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

// lora.targets as a subset of kLoraTargets in model order.
std::vector<std::string> loraTargetsOf(const Config& cfg, const std::string& key) {
  const std::string& v = cfg.getString(key);
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
      cfg.fail(key, "unknown target \"" + item + "\" in \"" + v + "\"",
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

// data.padding: "longest" and "packing" each set one flag.
KeyRow paddingRow(KeySpec k) {
  KeyRow row{std::move(k), "data.pad_longest, data.pack",
             [](const Config& cfg, TrainConfig& tc) {
               tc.data.pad_longest = cfg.getString("data.padding") == "longest";
               tc.data.pack = cfg.getString("data.padding") == "packing";
             },
             [] {
               TrainConfig tc{};
               return !tc.data.pad_longest && !tc.data.pack;
             },
             ""};
  return row;
}

// ---- The rows --------------------------------------------------------------------

void modelRows(std::vector<KeyRow>& t) {
  t.push_back(
      member(spec("model.name", kString, s("tiny"), "preset name: configs/models/<name>.toml"),
             M(model.name)));
  t.push_back(member(ranged(spec("model.dim", kInt, std::nullopt, "hidden size"), atLeast(1)),
                     M(model.dim)));
  t.push_back(
      member(ranged(spec("model.n_layers", kInt, std::nullopt, "number of transformer blocks"),
                    atLeast(1)),
             M(model.n_layers)));
  t.push_back(
      member(ranged(spec("model.n_heads", kInt, std::nullopt, "attention heads"), atLeast(1)),
             M(model.n_heads)));
  t.push_back(member(ranged(spec("model.n_kv_heads", kInt, std::nullopt,
                                 "key/value heads (GQA); = n_heads for MHA"),
                            atLeast(1)),
                     M(model.n_kv_heads)));
  t.push_back(
      member(ranged(spec("model.ffn_dim", kInt, std::nullopt, "SwiGLU hidden size"), atLeast(1)),
             M(model.ffn_dim)));
  t.push_back(
      member(ranged(spec("model.vocab_size", kInt, std::nullopt, "vocabulary size"), atLeast(1)),
             M(model.vocab_size)));
  t.push_back(member(
      ranged(spec("model.max_seq_len", kInt, std::nullopt, "longest sequence the model supports"),
             atLeast(1)),
      M(model.max_seq_len)));
  t.push_back(
      member(ranged(spec("model.rope_theta", kFloat, f(10000.0), "RoPE base frequency"), above(0)),
             M(model.rope_theta)));
  t.push_back(member(ranged(spec("model.norm_eps", kFloat, f(1e-5), "RMSNorm epsilon"), above(0)),
                     M(model.norm_eps)));
  t.push_back(
      member(spec("model.tie_embeddings", kBool, b(false), "share input embedding and output head"),
             M(model.tie_embeddings)));
  t.push_back(member(spec("model.from_pretrained", kString, std::nullopt,
                          "Hugging Face model directory (config.json + model*.safetensors) to "
                          "start from; its config.json gives every other model.* key"),
                     M(from_pretrained)));
}

void dataRows(std::vector<KeyRow>& t) {
  t.push_back(
      member(spec("data.source", kString, s("synthetic"), "\"synthetic\" or a path to .bin/.jsonl"),
             M(data.data_source)));
  t.push_back(member(ranged(spec("data.seq_len", kInt, i(256), "tokens per sample"), atLeast(1)),
                     M(data.seq_len)));
  t.push_back(paddingRow(
      oneOf(spec("data.padding", kString, s("max_length"),
                 "\"longest\" pads each batch to its longest sample; \"packing\" concatenates "
                 "documents and cuts them into seq_len windows"),
            {"max_length", "longest", "packing"})));
  t.push_back(
      member(ranged(spec("data.num_samples", kInt, i(4096), "synthetic dataset size (samples)"),
                    atLeast(1)),
             M(data.num_samples)));
  t.push_back(member(ranged(spec("data.min_doc_len", kInt, i(0),
                                 "synthetic: shortest document in tokens; 0 = seq_len/4"),
                            atLeast(0)),
                     M(data.min_doc_len)));
  t.push_back(
      member(oneOf(spec("data.bin_dtype", kString, s("uint16"), "token dtype of .bin files"),
                   {"uint16", "uint32"}),
             M(data.bin_dtype)));
  t.push_back(member(ranged(spec("data.pad_id", kInt, i(0), "padding token id"), atLeast(0)),
                     M(data.pad_id)));
  // JSONL text datasets (trainer/data/text_dataset.h).
  t.push_back(member(spec("data.tokenizer", kString, s(""),
                          "tokenizer for a .jsonl of texts: a tokenizer.json (HF tokenizers) or a "
                          "sentencepiece tokenizer.model; \"\" = <model.from_pretrained>/"
                          "tokenizer.json, else its tokenizer.model, when there, else the .jsonl "
                          "holds input_ids (as it may anyway: its first record says)"),
                     M(data.tokenizer)));
  t.push_back(
      member(spec("data.text_field", kString, s("text"), "JSONL field with the text to train on"),
             M(data.text_field)));
  t.push_back(member(spec("data.prompt_field", kString, s(""),
                          "JSONL prompt field; with data.completion_field the loss is on the "
                          "completion only"),
                     M(data.prompt_field)));
  t.push_back(member(spec("data.completion_field", kString, s(""), "JSONL completion field"),
                     M(data.completion_field)));
  t.push_back(member(
      addedLater(oneOf(spec("data.chat_template", kString, s("auto"),
                            "format of JSONL \"messages\" records: \"auto\" = the chat "
                            "template of the tokenizer's directory when it is Llama 3's or "
                            "ChatML; \"llama3\" or \"chatml\" = that format"),
                       {"auto", "llama3", "chatml"})),
      M(data.chat_template)));
}

void trainingBatchRows(std::vector<KeyRow>& t) {
  t.push_back(member(
      ranged(spec("training.micro_batch_size", kInt, i(1), "samples per rank per micro-batch"),
             atLeast(1)),
      M(training.micro_batch_size)));
  t.push_back(member(
      ranged(spec("training.grad_accum_steps", kInt, i(1), "micro-batches per optimizer step"),
             atLeast(1)),
      M(training.grad_accum_steps)));
  t.push_back(byHand(ranged(spec("training.global_batch_size", kInt, i(0),
                                 "samples per optimizer step; 0 = micro_batch_size * "
                                 "grad_accum_steps * dp. When set, grad_accum_steps is derived "
                                 "from it"),
                            atLeast(0)),
                     "gradAccumFor (run_config.cpp): resolves training.grad_accum_steps"));
  t.push_back(
      member(ranged(spec("training.max_steps", kInt, i(20), "optimizer steps to run"), atLeast(1)),
             M(training.max_steps)));
  t.push_back(member(
      ranged(spec("training.stop_after_seconds", kFloat, f(0.0), "wall-clock limit; 0 = no limit"),
             atLeast(0)),
      M(training.stop_after_seconds)));
}

void trainingOptimizerRows(std::vector<KeyRow>& t) {
  t.push_back(member(ranged(spec("training.lr", kFloat, f(3e-4), "peak learning rate"), atLeast(0)),
                     M(training.lr)));
  t.push_back(member(
      ranged(spec("training.lr_warmup_steps", kInt, i(0), "linear LR warmup steps"), atLeast(0)),
      M(training.lr_warmup_steps)));
  t.push_back(member(
      ranged(spec("training.weight_decay", kFloat, f(0.0), "decoupled weight decay"), atLeast(0)),
      M(training.weight_decay)));
  t.push_back(member(
      ranged(spec("training.max_grad_norm", kFloat, f(1.0), "gradient clipping norm; 0 = off"),
             atLeast(0)),
      M(training.max_grad_norm)));
  t.push_back(member(oneOf(spec("training.optimizer", kString, s("adamw"), "the optimizer"),
                           {"adamw", "adafactor"}),
                     M(training.optimizer)));
  t.push_back(member(
      addedLater(spec("training.optimizer_in_backward", kBool, b(false),
                      "step each parameter inside backward as soon as its gradient is final, "
                      "then free the gradient (no stored gradients; needs grad_accum_steps = 1, "
                      "max_grad_norm = 0, no pipeline, DDP or ZeRO-3)")),
      M(training.optimizer_in_backward)));
  t.push_back(member(
      addedLater(oneOf(spec("training.master_weights", kString, s("fp32"),
                            "\"fp32\": fp32 weights the optimizer updates, cast to the compute "
                            "dtype on use | \"none\": the weight matrices are bf16 and updated "
                            "in bf16 (training.bf16_update), no fp32 copy; needs dtype = bf16"),
                       {"fp32", "none"})),
      M(training.master_weights)));
  t.push_back(member(
      addedLater(oneOf(spec("training.bf16_update", kString, s("stochastic"),
                            "with master_weights = \"none\", how an update reaches a bf16 "
                            "weight: \"stochastic\" rounding, \"kahan\" (a bf16 compensation "
                            "buffer per weight) or \"nearest\""),
                       {"stochastic", "kahan", "nearest"})),
      M(training.bf16_update)));
  t.push_back(member(ranged(spec("training.beta1", kFloat, f(0.9), "Adam beta1"), halfOpen(0, 1)),
                     M(training.beta1)));
  t.push_back(member(ranged(spec("training.beta2", kFloat, f(0.95), "Adam beta2"), halfOpen(0, 1)),
                     M(training.beta2)));
  t.push_back(member(ranged(spec("training.eps", kFloat, f(1e-8), "Adam epsilon"), above(0)),
                     M(training.eps)));
}

void trainingComputeRows(std::vector<KeyRow>& t) {
  t.push_back(converted(
      oneOf(spec("training.dtype", kString, s("fp32"), "compute dtype"), {"fp32", "bf16"}),
      M(training.dtype), dtypeOf));
  t.push_back(
      member(ranged(spec("training.seed", kInt, i(0), "seed for init and data"), atLeast(0)),
             M(training.seed)));
  t.push_back(converted(spec("training.activation_checkpointing", kString, s("none"),
                             "\"none\" | \"full\" | \"every_N\": blocks that recompute their "
                             "activations in backward"),
                        M(training.activation_checkpointing), checkpointingOf));
  t.push_back(member(
      addedLater(oneOf(spec("training.activation_offload", kString, s("none"),
                            "\"host\": the input each checkpointed block keeps for backward goes "
                            "to pinned host memory on a side stream and comes back for its "
                            "recompute (GPU runs with activation checkpointing) | \"none\""),
                       {"none", "host"})),
      M(training.activation_offload)));
  t.push_back(member(
      addedLater(oneOf(spec("training.optimizer_offload", kString, s("none"),
                            "\"host\": the optimizer state and a copy of the parameters it "
                            "updates live in host memory and the step runs on the host's CPU, "
                            "gradients down and parameters up on a side stream (GPU runs) | "
                            "\"none\""),
                       {"none", "host"})),
      M(training.optimizer_offload)));
  t.push_back(member(
      ranged(spec("training.threads", kInt, i(0), "intra-op threads; 0 = OMP_NUM_THREADS or 1"),
             atLeast(0)),
      M(training.threads)));
  t.push_back(member(
      oneOf(spec("training.attention", kString, s("fused_softmax"),
                 "causal attention kernel: \"fused_softmax\" (q k^T, ftbench's fused fp32 causal "
                 "softmax, probs v) | \"sdpa\" (libtorch's scaled_dot_product_attention, a fused "
                 "flash-attention kernel; not faster on the CPU in scripts/bench.sh port)",
                 kNoTag),
            {"fused_softmax", "sdpa"}),
      M(training.attention)));
  t.push_back(member(
      oneOf(spec("training.cuda_kernels", kString, s("fused"),
                 "RMSNorm, RoPE, SwiGLU and the cross-entropy on a GPU: \"fused\" (ftbench's CUDA "
                 "kernels, trainer/kernels/cuda) | \"composed\" (ATen ops, as autograd "
                 "differentiates them); the same math; no effect on the CPU",
                 kNoTag),
            {"fused", "composed"}),
      M(training.cuda_kernels)));
  t.push_back(member(
      addedLater(spec("training.cuda_graphs", kBool, b(false),
                      "capture the forward and backward into a CUDA graph once and replay it at "
                      "every later step (one GPU, world size 1, one micro-batch of a fixed shape, "
                      "no LoRA dropout, no offload, no ZeRO; other runs are refused, saying why)")),
      M(training.cuda_graphs)));
  t.push_back(member(
      oneOf(spec("training.fp32_gemm", kString, s("auto"),
                 "BLAS of the model's fp32 CPU projections and attention products: \"auto\" (the "
                 "faster of the two on a 2048^3 GEMM timed at start) | \"aten\" (libtorch's own, "
                 "MKL in the PyPI wheel) | \"openblas\" (libopenblas.so.0); the choice and both "
                 "figures are recorded",
                 kNoTag),
            {"auto", "aten", "openblas"}),
      M(training.fp32_gemm)));
  // Device placement; recorded in the metrics file's `device` attribute.
  t.push_back(member(spec("training.device", kString, s("auto"),
                          "\"auto\" (cuda:LOCAL_RANK when a GPU is visible or parallel.backend is "
                          "\"nccl\", else cpu) | \"cpu\" | \"cuda\" (cuda:LOCAL_RANK) | \"cuda:N\"",
                          kNoTag),
                     M(training.device)));
  t.push_back(converted(
      addedLater(ranged(spec("training.device_memory_limit_gb", kFloat, f(0.0),
                             "cap the GPU's caching allocator at this many GB (GiB) per process, "
                             "so a large GPU answers for a smaller card; beyond it the run ends "
                             "as oom. 0 = the whole device. GPU runs only"),
                        atLeast(0))),
      M(training.device_memory_limit_bytes), gib));
}

void parallelRows(std::vector<KeyRow>& t) {
  t.push_back(member(ranged(spec("parallel.dp_replicate", kInt, i(0),
                                 "replicated data-parallel degree; 0 = world/(pp*dp_shard*tp)"),
                            atLeast(0)),
                     M(layout.dp_replicate)));
  t.push_back(member(
      ranged(spec("parallel.dp_shard", kInt, i(1), "sharded data-parallel degree"), atLeast(1)),
      M(layout.dp_shard)));
  t.push_back(member(ranged(spec("parallel.tp", kInt, i(1), "tensor-parallel degree"), atLeast(1)),
                     M(layout.tp)));
  t.push_back(
      member(ranged(spec("parallel.zero_stage", kInt, i(0), "ZeRO stage 0..3"), between(0, 3)),
             M(layout.zero_stage)));
  t.push_back(member(oneOf(spec("parallel.backend", kString, s("auto"), "process-group backend"),
                           {"auto", "gloo", "nccl"}),
                     M(comm.backend)));
  t.push_back(member(ranged(spec("parallel.timeout_seconds", kFloat, f(300.0),
                                 "collective/rendezvous timeout", kNoTag),
                            above(0)),
                     M(comm.timeout_seconds)));
  t.push_back(converted(ranged(spec("parallel.bucket_mb", kFloat, f(25.0),
                                    "DDP gradient bucket size (MiB of fp32); each bucket's "
                                    "all-reduce starts during backward as soon as its gradients "
                                    "are ready",
                                    kNoTag),
                               above(0)),
                        M(comm.bucket_bytes), mib));
  t.push_back(member(
      oneOf(spec("parallel.local_collectives", kString, s("auto"),
                 "\"auto\": ranks of one host reduce and gather through each other's memory "
                 "(process_vm_readv), falling back to the backend where the kernel forbids it; "
                 "groups across hosts run in two levels (memory within a host, the backend "
                 "across hosts) | \"off\": every collective on the backend",
                 kNoTag),
            {"auto", "off"}),
      M(comm.local_collectives)));
  t.push_back(converted(ranged(spec("parallel.memory_limit_gb", kFloat, f(0.0),
                                    "per-rank memory limit (OOM above it); 0 = none"),
                               atLeast(0)),
                        M(comm.memory_limit_bytes), gib));
}

// Pipeline parallelism (common/pipeline.h): stages outermost in the mesh, then
// dp_replicate, dp_shard, tp. Added keys: tags of runs without a pipeline are unchanged.
void pipelineRows(std::vector<KeyRow>& t) {
  t.push_back(member(
      addedLater(ranged(spec("parallel.pp", kInt, i(1),
                             "pipeline-parallel degree: stages, each holding a contiguous run of "
                             "blocks (the first also the embedding, the last the final norm, "
                             "output and loss)"),
                        atLeast(1))),
      M(layout.pp)));
  const char* plan = "resolvePipeline (pipeline_config.cpp): builds TrainConfig::pipeline";
  t.push_back(byHand(addedLater(oneOf(spec("parallel.pp_schedule", kString, s("1f1b"),
                                           "pipeline schedule (interleaved_1f1b with "
                                           "parallel.pp_virtual_stages; zb_h1: zero-bubble "
                                           "H1, weight gradients in the bubble)"),
                                      {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1"})),
                     plan));
  t.push_back(byHand(addedLater(ranged(spec("parallel.pp_virtual_stages", kInt, i(1),
                                            "model chunks per stage; > 1 only with pp_schedule "
                                            "\"interleaved_1f1b\""),
                                       atLeast(1))),
                     plan));
  t.push_back(byHand(
      addedLater(ranged(spec("parallel.pp_microbatches", kInt, i(0),
                             "micro-batches per step through the pipeline; 0 = "
                             "training.grad_accum_steps. When set, grad_accum_steps is derived "
                             "from it"),
                        atLeast(0))),
      "gradAccumFor (run_config.cpp): resolves training.grad_accum_steps"));
  t.push_back(byHand(
      addedLater(spec("parallel.pp_split", kIntList, Value(std::vector<int64_t>{}),
                      "blocks per model chunk in model order (pp * pp_virtual_stages entries "
                      "summing to model.n_layers); [] = balanced by FLOPs, the embedding counted "
                      "on the first chunk and the output and loss on the last")),
      plan));
  // The pipeline links' transport (not part of the sweep tag).
  t.push_back(member(spec("parallel.pp_local_p2p", kBool, b(true),
                          "true: pipeline links between ranks of one host move activations and "
                          "gradients through each other's memory (process_vm_readv/writev), "
                          "falling back to the backend where the kernel forbids it | false: every "
                          "link on the backend",
                          kNoTag),
                     M(comm.pp_local_p2p)));
}

void loraRows(std::vector<KeyRow>& t) {
  t.push_back(
      member(addedLater(ranged(spec("lora.rank", kInt, i(0),
                                    "LoRA rank r: adapters A [r, in] and B [out, r] on each "
                                    "target, base frozen; 0 = full finetuning"),
                               atLeast(0))),
             M(lora.rank)));
  t.push_back(member(addedLater(ranged(spec("lora.alpha", kFloat, f(8.0),
                                            "LoRA scale numerator: the update is alpha/r B A x"),
                                       above(0))),
                     M(lora.alpha)));
  t.push_back(member(
      addedLater(ranged(spec("lora.dropout", kFloat, f(0.0), "dropout on the adapters' input"),
                        halfOpen(0, 1))),
      M(lora.dropout)));
  t.push_back(converted(addedLater(commaList(spec(
                            "lora.targets", kString, s("q,v"),
                            "projections with adapters, a list or comma-separated: q, k, v, o, "
                            "gate, up, down (or their HF names q_proj ... down_proj), or \"all\"; "
                            "\"q,v\" is PEFT's default for Llama"))),
                        M(lora.targets), loraTargetsOf));
  KeySpec base = addedLater(oneOf(spec("lora.base_dtype", kString, s("fp32"),
                                       "storage of the frozen base weights (adapters and their "
                                       "optimizer state stay fp32): \"nf4\" = QLoRA's 4-bit "
                                       "NormalFloat block projections, embedding and output "
                                       "in bf16"),
                                  {"fp32", "bf16", "nf4"}));
  base.derive = [](const Config& cfg) -> std::optional<Value> {
    if (cfg.getInt("lora.rank") == 0) return std::nullopt;
    return cfg.entries().at("training.dtype").value;
  };
  base.derive_doc = "training.dtype's with lora.rank > 0";
  t.push_back(converted(std::move(base), M(lora.base_dtype), baseDtypeOf));
  t.push_back(member(addedLater(spec("lora.from_pretrained", kString, s(""),
                                     "PEFT adapter directory (adapter_config.json, "
                                     "adapter_model.safetensors) to start from; \"\" = fresh "
                                     "adapters")),
                     M(lora.from_pretrained)));
}

void checkpointRows(std::vector<KeyRow>& t) {
  t.push_back(member(spec("checkpoint.dir", kString, s(""),
                          "checkpoint directory; \"\" = <run_dir>/checkpoints", kNoTag),
                     M(checkpoint.dir)));
  t.push_back(member(
      ranged(spec("checkpoint.interval", kInt, i(0),
                  "steps between checkpoints; 0 = only at the end and on preemption", kNoTag),
             atLeast(0)),
      M(checkpoint.interval)));
  t.push_back(member(spec("checkpoint.resume", kString, s("auto"),
                          "\"auto\" (newest complete checkpoint of checkpoint.dir) | \"never\" | "
                          "path of a step_N directory",
                          kNoTag),
                     M(checkpoint.resume)));
  t.push_back(member(spec("checkpoint.save_final", kBool, b(true),
                          "save a checkpoint after the last step (training.max_steps or "
                          "stop_after_seconds); false for throughput-only runs. A stop signal or "
                          "`launcher ctl stop|save` still saves",
                          kNoTag),
                     M(checkpoint.save_final)));
  t.push_back(
      member(ranged(spec("checkpoint.keep_last", kInt, i(2),
                         "complete checkpoints kept (older ones pruned); 0 = keep all", kNoTag),
                    atLeast(0)),
             M(checkpoint.keep_last)));
  t.push_back(member(
      ranged(spec("checkpoint.preempt_grace_s", kFloat, f(0.0),
                  "after a stop signal, seconds to finish the step and save; past them the rank "
                  "exits preempted without a partial checkpoint (the previous one stays the "
                  "resume point); 0 = no deadline",
                  kNoTag),
             atLeast(0)),
      M(checkpoint.preempt_grace_s)));
}

void metricsRows(std::vector<KeyRow>& t) {
  t.push_back(
      member(ranged(spec("metrics.log_every", kInt, i(1), "rank 0 prints every N steps", kNoTag),
                    atLeast(1)),
             M(metrics.log_every)));
  t.push_back(member(ranged(spec("metrics.peak_tflops", kFloat, f(0.0),
                                 "hardware peak TFLOP/s per device, MFU's denominator; 0 = "
                                 "computed (CPU: cores x measured clock x FLOP/cycle; GPU: table)"),
                            atLeast(0)),
                     M(metrics.peak_tflops)));
  t.push_back(member(ranged(spec("metrics.skip_first_steps", kInt, i(2),
                                 "the first N steps (warm-up) are left out of summaries (tokens/s, "
                                 "MFU, step times); not the learning-rate warm-up, "
                                 "training.lr_warmup_steps"),
                            atLeast(0)),
                     M(metrics.skip_first_steps)));
  t.push_back(member(
      ranged(spec("metrics.price_per_hour", kFloat, f(0.0), "$/hour for cost metrics", kNoTag),
             atLeast(0)),
      M(metrics.price_per_hour)));
  t.push_back(member(spec("metrics.profile_steps", kIntList, Value(std::vector<int64_t>{}),
                          "[a, b]: Chrome trace of steps a..b (0-based, inclusive) per rank in "
                          "<run_dir>/traces/; [] = off",
                          kNoTag),
                     M(metrics.profile_steps)));
  t.push_back(member(addedLater(spec("metrics.link_probe", kBool, b(true),
                                     "with world size > 1, time the all-reduce bus bandwidth "
                                     "of the run's collectives before the first step (root "
                                     "attrs link_*; 1 and 16 MiB, well under a second on one "
                                     "host); false = skip it",
                                     kNoTag)),
                     M(metrics.link_probe)));
  t.push_back(member(addedLater(spec("metrics.gemm_probe", kBool, b(true),
                                     "time an n^3 GEMM in the compute dtype at start-up (about "
                                     "a second of one CPU core): gemm_efficiency's denominator "
                                     "and the busy-machine check against this host's best; "
                                     "false = skip it: gemm_efficiency is not reported, MFU "
                                     "against the hardware peak still is "
                                     "(training.fp32_gemm = \"auto\" times its GEMMs anyway)",
                                     kNoTag)),
                     M(metrics.gemm_probe)));
}

void outputRows(std::vector<KeyRow>& t) {
  t.push_back(member(spec("output.dir", kString, s("results"), "output root", kNoTag),
                     M(output.output_dir)));
  t.push_back(member(spec("output.sweep_fmt", kString, s("{model.name}.ws{world_size}.{hash}"),
                          "run directory name format", kNoTag),
                     M(output.sweep_fmt)));
  t.push_back(
      member(spec("output.no_sweep_dir", kBool, b(false), "write straight into output.dir", kNoTag),
             M(output.no_sweep_dir)));
  // Sweep labels: set by sweep_tagger expand, read by aggregate; not the experiment.
  const char* sweep = "sweep_tagger (expand writes it, aggregate reads it); not the trainer's";
  t.push_back(byHand(spec("sweep.layout", kString, s(""),
                          "the sweep's layout variant of this run ([layout.NAME] in the sweep "
                          "file); aggregate draws one series per variant",
                          kNoTag),
                     sweep));
  t.push_back(byHand(ranged(spec("sweep.repeat", kInt, i(0),
                                 "repeat index of a sweep point (sweep key repeats); N > 0 "
                                 "appends .rN to the run directory name, the config hash stays "
                                 "that of the point",
                                 kNoTag),
                            atLeast(0)),
                     sweep));
  // Interference on the rank's CPUs (common/interference.h).
  t.push_back(member(ranged(spec("metrics.max_interference", kFloat, f(0.05),
                                 "a run whose interference (fraction of step time its compute "
                                 "threads were runnable but not running: run-queue wait + CPU "
                                 "steal; the worst rank) exceeds this is marked `noisy`; 1 = never",
                                 kNoTag),
                            between(0, 1)),
                     M(metrics.max_interference)));
}

#undef M

std::vector<KeyRow> makeRows() {
  std::vector<KeyRow> t;
  modelRows(t);
  dataRows(t);
  trainingBatchRows(t);
  trainingOptimizerRows(t);
  trainingComputeRows(t);
  parallelRows(t);
  pipelineRows(t);
  loraRows(t);
  checkpointRows(t);
  metricsRows(t);
  outputRows(t);
  return t;
}

}  // namespace

const std::vector<KeyRow>& runKeyRows() {
  static const std::vector<KeyRow> rows = makeRows();
  return rows;
}

void fillMembers(const Config& cfg, TrainConfig& tc, const std::string& prefix) {
  for (const KeyRow& row : runKeyRows())
    if (row.fill && row.spec.key.rfind(prefix, 0) == 0) row.fill(cfg, tc);
}

const Schema& trainerSchema() {
  static const Schema schema = [] {
    Schema sc;
    for (const KeyRow& row : runKeyRows()) sc.add(row.spec);
    return sc;
  }();
  return schema;
}

}  // namespace ftb
