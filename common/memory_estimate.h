// Per-rank memory estimate for a model, layout and batch, without training.
//
// Contract: estimateMemory() sums the tensors this trainer allocates, term by term (see
// trainer/parallel/zero.h for the stage semantics), in bytes per rank. It is a model, not a
// measurement: allocator overhead, libtorch temporaries and thread stacks are not in
// it (README "Memory" benchmark: within ~10 % of measured peak RSS on the tested
// configs). Terms:
//   parameters   fp32 model/master weights (stages 0-2: the full tp slice; stage 3:
//                the 1/N shard); bf16 weights and gradients with training.master_weights
//                = "none" (stage 0), plus 2 bytes per weight of Kahan compensation
//   gradients    fp32 (stage 0: full tp slice, with training.optimizer_in_backward only
//                the largest tensor's, or across ranks one DDP bucket's; stage 1: full
//                tp slice + this rank's shard; stage 2: the shard + the root unit's and
//                one block's full gradients, the units still in backward; stage 3: the
//                shard)
//   gathered     stage 3 only: the fp32 root unit and its gradients for the whole
//                step, plus one block gathered in the compute dtype and its gradients
//   optimizer    AdamW m and v (8 bytes/param) or Adafactor row/col moments
//   activations  autograd-saved tensors of one micro-batch, with and without
//                activation checkpointing, plus the logits
//   comm buffers flat all-reduce / reduce-scatter / all-gather staging buffers
//   runtime      the process baseline (libtorch, BLAS buffers, allocator), measured
// The closed forms it reduces to (ZeRO paper, Adam in mixed precision, 16Ψ bytes of
// model state): stage 0: 16Ψ, stage 1: 8Ψ + 8Ψ/N, stage 2: 4Ψ + 12Ψ/N (+ units in
// backward), stage 3: 16Ψ/N (+ gathered units).
//
// Pipeline stages (parallel.pp > 1) are estimated one by one (estimateStage): a stage's
// model states are those of its own blocks, plus the embedding on the first stage and the
// final norm and output projection on the last (with tied embeddings the last holds a
// copy of the embedding as its output projection). Its activations are one micro-batch's
// per block times the (micro-batch, block) pairs alive at once under its schedule, read
// from the stage's own compute order (common/pipeline.h computeOrder): 1F1B keeps at most
// p − s micro-batches on stage s (p on stage 0), GPipe all m, interleaved 1F1B more:
// Megatron's warm-up of 2(p − s − 1) + (v − 1)·p chunk forwards plus the one before the
// first backward, so stage 0 holds p·v + p − 1 chunks of L/(p·v) blocks, p + (p − 1)/v
// micro-batches' worth of its blocks, (1 + (p − 1)/(p·v)) times 1F1B's p (Narayanan et al.
// 2021); for m·v below the warm-up, all m·v. The logits count once per micro-batch whose
// head forward is in flight. The stage's transfer buffers (every receive
// of a step is posted at its start, every send kept until its end: parallel/pipeline.h)
// are [B, T, D] each, in the communication buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/run_config.h"

namespace ftb {

struct MemoryEstimate {
  int64_t params_local = 0;  // parameters held by this tp rank (before ZeRO sharding)
  int64_t pp_stage = -1;     // the pipeline stage estimated; -1 without a pipeline
  // Per micro-batch figures times what is in flight: (micro-batch, block) pairs alive at
  // once (the stage's blocks without a pipeline) and micro-batches whose logits are.
  double blocks_in_flight = 0, logits_in_flight = 0;
  double parameters = 0, gradients = 0, optimizer = 0, gathered = 0;
  double activations_full = 0, activations_checkpointed = 0;  // of everything in flight
  double comm_buffers = 0, runtime = 0;
  double scratch = 0;          // an NF4 base's one dequantized matrix (lora.base_dtype = "nf4")
  double weight_passes = 0;    // zb_h1: the inputs and output gradients its deferred passes keep
  // training.optimizer_offload = "host" on a GPU: the optimizer state, the host copy of the
  // parameters it updates and their gradients' buffer, in host memory (not in total()).
  double host_offloaded = 0;
  bool checkpointing = false;  // which activation figure the total uses
  bool device = false;         // a GPU's memory (estimateDeviceMemory), else the host's RSS

  double modelStates() const { return parameters + gradients + optimizer; }
  double total() const {
    return modelStates() + gathered + scratch + weight_passes +
           (checkpointing ? activations_checkpointed : activations_full) + comm_buffers + runtime;
  }
};

// The process baseline measured on these machines (PyTorch 2.11's libtorch on the CPU, one
// thread, jemalloc): the peak RSS of a 3-step run of the 0.16 M-parameter tiny model in the
// CPU build of the trainer (`trainer`, which loads no CUDA library: trainer/metrics/device.h),
// 152 MiB in bf16 and 199-216 MiB in fp32 (OpenBLAS, ATen's MKL), the start-up GEMM's buffers
// included. The CUDA build peaks at 446 MiB on the same run; a GPU run's estimate has no host
// baseline (describeBudget).
inline constexpr double kRuntimeBaselineBytes = 216.0 * (1 << 20);

// Without a pipeline, the rank's estimate; with one, the estimate of the stage with the
// largest total (what every rank must be able to hold).
MemoryEstimate estimateMemory(const TrainConfig& tc);
// The estimate of a rank on a GPU, whatever tc.training.device says: the device's memory
// (the CUDA caching allocator's bytes), so the GPU's kernels (training.device taken as
// "cuda": flash attention, the composed kernels' activations) and no host runtime baseline.
MemoryEstimate estimateDeviceMemory(const TrainConfig& tc);
// The estimate for a rank of pipeline stage `stage`. REQUIRES: 0 <= stage < tc.pp.
MemoryEstimate estimateStage(const TrainConfig& tc, int64_t stage);

// Memory this node offers its ranks: the smaller of physical memory (sysconf) and the
// cgroup limit (v2 memory.max, v1 memory.limit_in_bytes) when one is set. Bytes.
double nodeMemoryBytes();

struct MemoryBudget {
  double bytes = 0;     // per rank
  std::string source;   // "parallel.memory_limit_gb" or "physical memory 15.6 GiB / 2 ranks"
  bool device = false;  // a GPU's memory: compare estimateDeviceMemory(), not estimateMemory()
};
// training.device_memory_limit_gb when set (a GPU's budget), else parallel.memory_limit_gb,
// else nodeMemoryBytes() shared by the node's ranks.
MemoryBudget memoryBudget(const TrainConfig& tc, int ranks_on_node);

// "80.00 GiB per rank (SOURCE): device memory ..." (a GPU's budget) or "... (SOURCE), host
// estimate: ...": the budget and which estimate it is compared with, for listings.
std::string describeBudget(const MemoryBudget& budget);

// "" when e.total() fits `budget`, else a message naming the total, the budget and
// the largest term with the keys that shrink it. Pure arithmetic: call it before
// allocating anything.
std::string memoryFitProblem(const TrainConfig& tc, const MemoryEstimate& e,
                             const MemoryBudget& budget);

// Human-readable per-component table, and whether it fits `limit_bytes` (0 = none).
std::string formatMemoryEstimate(const TrainConfig& tc, const MemoryEstimate& e,
                                 double limit_bytes);

}  // namespace ftb
