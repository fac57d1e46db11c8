// TrainConfig: the trainer's view of a resolved Config, validated once.
//
// Contract: fromConfig() checks every invariant the trainer relies on and throws
// ConfigError naming the key, its file:line and the numbers before anything is
// written or any process group is created. Every rank runs the same checks on the
// same input, so every rank fails the same way. No libtorch here.
//
// Each config key is one row of the key table (common/run_keys.cpp): the key, the member
// below it fills, its type, domain, default, help and tag membership. The schema, the
// members' values, `trainer --help-config` and the docs' key table all come from the rows,
// so the members below carry no defaults of their own: a value-initialised section is
// zeros and empty strings (test ConfigKeys.MembersDeclareNoDefaults), and only
// fromConfig gives a TrainConfig the defaults. Checks that span keys are hand-written
// beside the section they check (run_config.cpp; the pipeline's in pipeline_config.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/pipe_plan.h"

namespace ftb {

struct ModelArgs {
  std::string name;
  int64_t dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, ffn_dim = 0;
  int64_t vocab_size = 0, max_seq_len = 0;
  double rope_theta = 0, norm_eps = 0;
  bool tie_embeddings = false;

  int64_t headDim() const { return dim / n_heads; }
  int64_t numParams() const;           // every parameter, tied embedding counted once
  int64_t blockMatrixParams() const;   // one block's projections (tensor-parallel split)
  int64_t numEmbeddingParams() const;  // the input embedding table
  // torchtitan's 6N + 12·L·H·hd·T: N excludes the input embedding table but counts
  // the output projection (a real GEMM even when tied).
  double flopsPerToken(int64_t seq_len) const;
  // One block's forward per token: 2 per block weight (norms included) + the attention
  // scores 4·H·hd·T (q kᵀ and probs v over every key, as flopsPerToken counts them).
  // Forward + backward of a block is 3 times this (common/pipeline.h layerCosts).
  double blockForwardFlops(int64_t seq_len) const;
};

enum class DType { kFp32, kBf16 };
// Storage of LoRA's frozen base matrices (lora.base_dtype): a dtype of its own, so code that
// reads a compute dtype (DType) never meets NF4. kNf4: the block projections as 4-bit NF4
// (trainer/kernels/nf4.h), the embedding and output projection in bf16.
enum class BaseDType { kFp32, kBf16, kNf4 };

// [checkpoint] (trainer/README.md "Checkpoints").
struct CheckpointConfig {
  std::string dir;             // "" = <run_dir>/checkpoints
  int64_t interval = 0;        // 0 = only at the end and on preemption
  bool save_final = false;     // false: no save after the last step (preemption, ctl still save)
  int64_t keep_last = 0;       // 0 = keep all
  std::string resume;          // "auto" | "never" | path of a step_N directory
  double preempt_grace_s = 0;  // 0 = no deadline
};

// What validation may look at besides the config. kAll (trainer, sweep expand) also
// checks this machine: data.source exists, the backend is compiled in. kConfigOnly
// (aggregating runs recorded elsewhere) checks the config and layout alone.
enum class Checks { kAll, kConfigOnly };

// [data] (trainer/README.md "Data").
struct DataConfig {
  std::string data_source;  // "synthetic" or a .bin / .jsonl path
  int64_t seq_len = 0, num_samples = 0, min_doc_len = 0, pad_id = 0;
  bool pad_longest = false;
  bool pack = false;  // data.padding = "packing"
  std::string bin_dtype;
  // JSONL text datasets: tokenizer path ("" = the .jsonl holds input_ids) and fields
  std::string tokenizer, text_field, prompt_field, completion_field;
  std::string chat_template;  // "messages" records: "auto", "llama3" or "chatml"
};

// [training], except training.global_batch_size (it needs the layout:
// TrainConfig::fromConfig resolves it into grad_accum_steps).
struct TrainingConfig {
  int64_t micro_batch_size = 0, grad_accum_steps = 0, max_steps = 0;
  double stop_after_seconds = 0;
  double lr = 0, weight_decay = 0, max_grad_norm = 0, beta1 = 0, beta2 = 0, eps = 0;
  int64_t lr_warmup_steps = 0, seed = 0, threads = 0;
  std::string fp32_gemm;  // "auto" | "aten" | "openblas" (trainer/model/linear.h)
  std::string attention;  // "fused_softmax" | "sdpa" (trainer/model/llama.h)
  std::string cuda_kernels;  // "fused" | "composed" (trainer/kernels/fused_ops.h)
  bool cuda_graphs = false;  // forward and backward replayed (trainer/parallel/graph_runner.h)
  std::string device;     // "auto" | "cpu" | "cuda" | "cuda:N" (checked syntax)
  // training.device_memory_limit_gb in bytes: the CUDA caching allocator's cap; 0 = none.
  double device_memory_limit_bytes = 0;
  std::string optimizer;  // "adamw" | "adafactor"
  // Each parameter stepped as soon as its gradient is final, inside backward, and the
  // gradient freed (trainer/parallel/grad_sync.h applyInBackward).
  bool optimizer_in_backward = false;
  // "fp32" | "none": bf16 weight matrices without an fp32 copy, updated in bf16 by
  // bf16_update = "stochastic" | "kahan" | "nearest" (trainer/optim/optimizer.h).
  std::string master_weights, bf16_update;
  std::string activation_offload;  // "none" | "host" (trainer/model/activation_checkpoint.h)
  std::string optimizer_offload;   // "none" | "host" (trainer/optim/offload.h)
  DType dtype = DType::kFp32;
  // training.activation_checkpointing: 0 = none; n = every n-th block recomputes its
  // activations in backward ("full" = 1). Not checkpoint saves: CheckpointConfig::interval.
  int64_t activation_checkpointing = 0;
};

// [lora] (trainer/README.md "LoRA"): low-rank adapters on a frozen base, as PEFT.
// rank 0 = full finetuning. A target's weight W [out, in] gains A [rank, in] and
// B [out, rank]; the layer computes W x + (alpha / rank) B A dropout(x).
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 0, dropout = 0;
  // Subset of kLoraTargets, in that order ("q,v" is PEFT's default for Llama).
  std::vector<std::string> targets;
  BaseDType base_dtype = BaseDType::kFp32;  // storage of the frozen base weights
  std::string from_pretrained;              // a PEFT adapter directory to start from, "" = none
  bool enabled() const { return rank > 0; }
  bool hasTarget(const std::string& t) const;
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
// The counts of the other conventions users compare with (trainer/docs/metrics.md § MFU
// conventions), from the same model:
//   per_token_causal: per_token with the attention term halved, 6·L·H·hd·T, the causal
//     half of the scores (as some tools report MFU);
//   per_token_hardware: per_token + the forward of every block recomputed in backward
//     (`recomputed_blocks` of them: recomputedBlocks below), blockForwardFlops + 2 per
//     adapter parameter of the block each: the FLOPs the hardware executes, HFU's count.
struct FlopsCount {
  double per_token = 0, per_token_causal = 0, per_token_hardware = 0;
  std::string formula;
  int64_t trainable_params = 0, total_params = 0;
};
FlopsCount trainingFlops(const ModelArgs& m, const LoraConfig& lora, int64_t seq_len,
                         double recomputed_blocks = 0);
// Parameters of every adapter of the whole model (0 when LoRA is off).
int64_t loraParams(const ModelArgs& m, const LoraConfig& lora);

// [parallel], the layout: the degrees over world_size ranks, world = pp · dp_replicate ·
// dp_shard · tp (pipeline stages outermost, tp innermost: trainer/parallel/mesh.h).
// The degrees are resolved (dp_replicate = 0 derived) so that pp · dp_replicate · dp_shard
// · tp = world_size.
struct LayoutConfig {
  int world_size = 1;
  int nodes = 1;  // DistEnv::nodes, set by the trainer session; part of the run identity
  int64_t dp_replicate = 0, dp_shard = 0, tp = 0, zero_stage = 0;
  int64_t pp = 0;  // parallel.pp: pipeline stages

  int64_t dpSize() const { return dp_replicate * dp_shard; }
  // ZeRO over a shard group of one shards nothing: stage 0 then (trainer and estimator).
  int64_t effectiveZeroStage() const { return dp_shard > 1 ? zero_stage : 0; }
};

// [parallel], the rest: process-group backend and timeout, DDP buckets, memory limit.
struct CommConfig {
  std::string backend;
  std::string local_collectives;  // "auto" | "off"
  bool pp_local_p2p = false;      // pipeline links of one host through memory
  double timeout_seconds = 0;
  double memory_limit_bytes = 0;  // 0 = none; above it a run ends with status "oom"
  double bucket_bytes = 0;        // DDP gradient bucket size
};

// [metrics]
struct MetricsConfig {
  int64_t log_every = 0;
  int64_t skip_first_steps = 0;  // steps [0, skip_first_steps) are left out of summaries
  double peak_tflops = 0, price_per_hour = 0;
  std::vector<int64_t> profile_steps;  // {} or {first, last}: steps traced (0-based)
  double max_interference = 0;         // above it a run is `noisy` (common/interference.h)
  bool link_probe = false;  // time the all-reduce bus bandwidth at start (common/link_bandwidth.h)
  bool gemm_probe = false;  // time the start-up GEMM (trainer/metrics/peaks.h)
};

// [output]
struct OutputConfig {
  std::string output_dir, sweep_fmt;
  bool no_sweep_dir = false;
};

// Every section of a run's config, each its own member (tc.data.seq_len, tc.layout.tp).
struct TrainConfig {
  ModelArgs model;
  std::string from_pretrained;  // model.from_pretrained: HF model directory, "" = random init
  DataConfig data;
  TrainingConfig training;
  LayoutConfig layout;
  // The pipeline plan, built once here: stages = layout.pp, microbatches =
  // training.grad_accum_steps, split the given parallel.pp_split or the FLOP-balanced one.
  PipePlan pipeline;
  CommConfig comm;
  CheckpointConfig checkpoint;
  LoraConfig lora;
  MetricsConfig metrics;
  OutputConfig output;

  int64_t globalBatch() const {
    return training.micro_batch_size * training.grad_accum_steps * layout.dpSize();
  }

  // REQUIRES: cfg resolved by Config::load. Runs cfg.checkDomains() (ranges and choices),
  // fills every member from its key's row, then the checks across keys section by section
  // (the layout against the model and the optimizer, then global_batch_size, the pipeline,
  // planned keys; checkSizes last): the first violation throws ConfigError.
  static TrainConfig fromConfig(const Config& cfg, int world_size, Checks checks = Checks::kAll);
};

// Blocks of `blocks` that recompute their forward in backward: all of them under ZeRO-3
// (zero.h), ceil(blocks / n) with training.activation_checkpointing = n (every n-th block,
// the first included), else none.
double recomputedBlocks(const TrainConfig& tc, double blocks);
// trainingFlops of the run: its model, adapters and sequence length, and the recompute of
// its layout and activation checkpointing over all the model's blocks.
FlopsCount trainingFlops(const TrainConfig& tc);

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
