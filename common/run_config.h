// TrainConfig: the trainer's view of a resolved Config, validated once.
//
// Contract: fromConfig() checks every invariant the trainer relies on and throws
// ConfigError naming the key, its file:line and the numbers before anything is
// written or any process group is created. Every rank runs the same checks on the
// same input, so every rank fails the same way. No libtorch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"

namespace ftb {

struct ModelArgs {
  std::string name;
  int64_t dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, ffn_dim = 0;
  int64_t vocab_size = 0, max_seq_len = 0;
  double rope_theta = 10000.0, norm_eps = 1e-5;
  bool tie_embeddings = false;

  int64_t headDim() const { return dim / n_heads; }
  int64_t numParams() const;           // every parameter, tied embedding counted once
  int64_t blockMatrixParams() const;   // one block's projections (tensor-parallel split)
  int64_t numEmbeddingParams() const;  // the input embedding table
  // torchtitan's 6N + 12·L·H·hd·T: N excludes the input embedding table but counts
  // the output projection (a real GEMM even when tied).
  double flopsPerToken(int64_t seq_len) const;
};

enum class DType { kFp32, kBf16 };

// [checkpoint] (trainer/README.md "Checkpoints").
struct CheckpointConfig {
  std::string dir;              // "" = <run_dir>/checkpoints
  int64_t interval = 0;         // 0 = only at the end and on preemption
  bool save_final = true;       // false: no save after the last step (preemption, ctl still save)
  int64_t keep_last = 2;        // 0 = keep all
  std::string resume = "auto";  // "auto" | "never" | path of a step_N directory
  double preempt_grace_s = 0;   // 0 = no deadline
  static CheckpointConfig fromConfig(const Config& cfg);
};

// What validation may look at besides the config. kAll (trainer, sweep expand) also
// checks this machine: data.source exists, the backend is compiled in. kConfigOnly
// (aggregating runs recorded elsewhere) checks the config and layout alone.
enum class Checks { kAll, kConfigOnly };

// The sections of a TrainConfig, each parsed and validated by its own fromConfig.
// REQUIRES (every section's fromConfig): cfg resolved by Config::load and
// cfg.checkDomains() passed (TrainConfig::fromConfig runs it first), so the schema
// ranges (sizes >= 1, ...) hold. Each throws ConfigError on a violation.

// [data] (trainer/README.md "Data").
struct DataConfig {
  std::string data_source;  // "synthetic" or a .bin / .jsonl path
  int64_t seq_len = 0, num_samples = 0, min_doc_len = 0, pad_id = 0;
  bool pad_longest = false;
  bool pack = false;  // data.padding = "packing"
  std::string bin_dtype;
  // JSONL text datasets: tokenizer path ("" = the .jsonl holds input_ids) and fields
  std::string tokenizer, text_field, prompt_field, completion_field;
  // Checks against the model: seq_len <= max_seq_len, pad_id and bin_dtype hold the vocabulary.
  static DataConfig fromConfig(const Config& cfg, const ModelArgs& model, Checks checks);
};

// [training], except training.global_batch_size (it needs the layout:
// TrainConfig::fromConfig resolves it into grad_accum_steps).
struct TrainingConfig {
  int64_t micro_batch_size = 1, grad_accum_steps = 1, max_steps = 0;
  double stop_after_seconds = 0;
  double lr = 0, weight_decay = 0, max_grad_norm = 0, beta1 = 0, beta2 = 0, eps = 0;
  int64_t lr_warmup_steps = 0, seed = 0, threads = 0;
  std::string fp32_gemm = "auto";           // "auto" | "aten" | "openblas" (trainer/model/linear.h)
  std::string attention = "fused_softmax";  // "fused_softmax" | "sdpa" (trainer/model/llama.h)
  std::string device = "auto";              // "auto" | "cpu" | "cuda" | "cuda:N" (checked syntax)
  std::string optimizer;                    // "adamw" | "adafactor"
  DType dtype = DType::kFp32;
  // training.activation_checkpointing: 0 = none; n = every n-th block recomputes its
  // activations in backward ("full" = 1). Not checkpoint saves: CheckpointConfig::interval.
  int64_t activation_checkpointing = 0;
  static TrainingConfig fromConfig(const Config& cfg);
};

// [lora] (trainer/README.md "LoRA"): low-rank adapters on a frozen base, as PEFT.
// rank 0 = full finetuning. A target's weight W [out, in] gains A [rank, in] and
// B [out, rank]; the layer computes W x + (alpha / rank) B A dropout(x).
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 8, dropout = 0;
  // Subset of kLoraTargets, in that order ("q,v" is PEFT's default for Llama).
  std::vector<std::string> targets;
  DType base_dtype = DType::kFp32;  // storage of the frozen base weights
  std::string from_pretrained;      // a PEFT adapter directory to start from, "" = none
  bool enabled() const { return rank > 0; }
  bool hasTarget(const std::string& t) const;
  static LoraConfig fromConfig(const Config& cfg);
};
// Every LoRA target in model order, and the weight each names in a block:
// q wq, k wk, v wv, o wo, gate w1, up w3, down w2 (HF q_proj ... down_proj).
inline const std::vector<std::string> kLoraTargets = {"q", "k", "v", "o", "gate", "up", "down"};
// The in and out features of a target's base weight W [out, in] in one block of m (whole,
// before any tp split): q [H·hd, D], k and v [Hkv·hd, D], o [D, H·hd], gate and up [F, D],
// down [D, F]. The one source of these shapes for the model's adapters (trainer/model), the
// PEFT export (trainer/hf), the FLOP count and the memory estimate.
// REQUIRES: target is one of kLoraTargets (else std::invalid_argument).
struct LoraTargetShape {
  int64_t in = 0, out = 0;
};
LoraTargetShape loraTargetShape(const ModelArgs& m, const std::string& target);

// Model FLOPs of training one token, by what is trained (trainer/README.md "FLOPs"):
//   "full-v1": torchtitan's 6N + 12·L·H·hd·T (ModelArgs::flopsPerToken).
//   "lora-v1": forward 2N + 2Na; input gradients 2N + 2Na, less block 0's q/k/v inputs
//              (nothing before block 0 trains: 2·(its q, k, v weights) + 2·(their A's));
//              weight gradients 2Na only (the base is frozen); attention 12·L·H·hd·T.
//   N: every weight but the input embedding (the output projection counted even when
//   tied), Na: the adapters' parameters.
struct FlopsCount {
  double per_token = 0;
  std::string formula;
  int64_t trainable_params = 0, total_params = 0;
};
FlopsCount trainingFlops(const ModelArgs& m, const LoraConfig& lora, int64_t seq_len);
// Parameters of every adapter of the whole model (0 when LoRA is off).
int64_t loraParams(const ModelArgs& m, const LoraConfig& lora);

// [parallel], the layout: the degrees over world_size ranks, world = pp · dp_replicate ·
// dp_shard · tp (pipeline stages outermost, tp innermost: trainer/parallel/mesh.h).
struct LayoutConfig {
  int world_size = 1;
  int nodes = 1;  // DistEnv::nodes, set by the trainer session; part of the run identity
  int64_t dp_replicate = 1, dp_shard = 1, tp = 1, zero_stage = 0;
  int64_t pp = 1;  // parallel.pp: pipeline stages

  int64_t dpSize() const { return dp_replicate * dp_shard; }
  // ZeRO over a shard group of one shards nothing: stage 0 then (trainer and estimator).
  int64_t effectiveZeroStage() const { return dp_shard > 1 ? zero_stage : 0; }
  // dp_replicate = 0 is derived; the degrees' product (with pp) must equal world_size.
  // REQUIRES: world_size >= 1.
  static LayoutConfig fromConfig(const Config& cfg, int world_size);
};

// [parallel] pipeline keys besides pp (common/pipeline.h). Validated after the layout and
// grad_accum_steps (TrainConfig::fromConfig): pp <= n_layers; pp_schedule one of
// gpipe | 1f1b | interleaved_1f1b; pp_virtual_stages > 1 exactly with interleaved_1f1b;
// 1f1b and interleaved need pp_microbatches >= pp (interleaved a multiple of pp); without
// pp_split, pp · pp_virtual_stages divides n_layers for interleaved; a pp_split has
// pp · pp_virtual_stages entries >= 1 summing to n_layers.
struct PipelineConfig {
  std::string pp_schedule = "1f1b";
  int64_t pp_virtual_stages = 1;
  int64_t pp_microbatches = 1;    // resolved: = grad_accum_steps
  std::vector<int64_t> pp_split;  // resolved: the given split or the FLOP-balanced one
};

// [parallel], the rest: process-group backend and timeout, DDP buckets, memory limit.
struct CommConfig {
  std::string backend;
  std::string local_collectives = "auto";  // "auto" | "off"
  bool pp_local_p2p = true;                // pipeline links of one host through memory
  double timeout_seconds = 300;
  double memory_limit_bytes = 0;   // 0 = none; above it a run ends with status "oom"
  double bucket_bytes = 25 << 20;  // DDP gradient bucket size
  static CommConfig fromConfig(const Config& cfg, Checks checks);
};

// [metrics]
struct MetricsConfig {
  int64_t log_every = 1;
  int64_t skip_first_steps = 0;  // steps [0, skip_first_steps) are left out of summaries
  double peak_tflops = 0, price_per_hour = 0;
  std::vector<int64_t> profile_steps;  // {} or {first, last}: steps traced (0-based)
  double max_interference = 0.05;      // above it a run is `noisy` (common/interference.h)
  // profile_steps must lie below max_steps.
  static MetricsConfig fromConfig(const Config& cfg, int64_t max_steps);
};

// [output]
struct OutputConfig {
  std::string output_dir, sweep_fmt;
  bool no_sweep_dir = false;
  static OutputConfig fromConfig(const Config& cfg);
};

// Every section of a run's config, each its own member (tc.data.seq_len, tc.layout.tp).
struct TrainConfig {
  ModelArgs model;
  std::string from_pretrained;  // model.from_pretrained: HF model directory, "" = random init
  DataConfig data;
  TrainingConfig training;
  LayoutConfig layout;
  PipelineConfig pipeline;
  CommConfig comm;
  CheckpointConfig checkpoint;
  LoraConfig lora;
  MetricsConfig metrics;
  OutputConfig output;

  int64_t globalBatch() const {
    return training.micro_batch_size * training.grad_accum_steps * layout.dpSize();
  }

  // REQUIRES: cfg resolved by Config::load. Runs cfg.checkDomains(), then each section's
  // fromConfig with the checks across sections where their keys come (the layout against
  // the model and the optimizer, then global_batch_size, after LayoutConfig; planned keys
  // before CheckpointConfig; checkSizes last): the first violation throws ConfigError.
  static TrainConfig fromConfig(const Config& cfg, int world_size, Checks checks = Checks::kAll);
};

// The trainer's refusal of (cfg, world_size): exactly the text of the ConfigError
// TrainConfig::fromConfig throws (what the trainer prints before exiting 2), or ""
// when it accepts. The one validity check of sweep_tagger expand and aggregate.
std::string refusalOf(const Config& cfg, int world_size, Checks checks = Checks::kAll);

// Whether this build can create an NCCL process group (FTB_USE_NCCL at configure time).
bool ncclCompiledIn();
// training.device syntax: "auto", "cpu", "cuda" or "cuda:N" (N decimal, at most 4 digits).
bool validDeviceName(const std::string& device);

// [model]: runs cfg.checkDomains() (so every size is >= 1), then requires the sizes
// and checks head_dim (dim / n_heads whole and even) and n_kv_heads | n_heads.
// Throws ConfigError.
ModelArgs modelArgsFromConfig(const Config& cfg);

// Every size the trainer derives by multiplying config values (parameter count,
// global batch, tokens per run) fits int64; else ConfigError naming the key most
// likely at fault, with the factors. Called by fromConfig() after the layout is set.
void checkSizes(const Config& cfg, const TrainConfig& c);

// Why a .bin token file with c.bin_dtype cannot hold c's vocabulary, or "" when it
// can (uint16 holds ids below 65536). Used for data.source and --generate-data.
std::string binDtypeProblem(const TrainConfig& c);
std::string binDtypeProblem(const std::string& bin_dtype, int64_t vocab_size);

}  // namespace ftb
