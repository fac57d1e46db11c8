// Per-rank memory estimate for a model, layout and batch, without training.
//
// Contract: estimateMemory() sums the tensors this trainer allocates, term by term (see
// trainer/parallel/zero.h for the stage semantics), in bytes per rank. It is a model, not a
// measurement: allocator overhead, libtorch temporaries and thread stacks are not in
// it (README "Memory" benchmark: within ~10 % of measured peak RSS on the tested
// configs). Terms:
//   parameters   fp32 model/master weights (stages 0-2: the full tp slice; stage 3:
//                the 1/N shard)
//   gradients    fp32 (stage 0: full tp slice; stage 1: full tp slice + this rank's
//                shard; stage 2: the shard + the root unit's and one block's full
//                gradients, the units still in backward; stage 3: the shard)
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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/run_config.h"

namespace ftb {

struct MemoryEstimate {
  int64_t params_local = 0;  // parameters held by this tp rank (before ZeRO sharding)
  double parameters = 0, gradients = 0, optimizer = 0, gathered = 0;
  double activations_full = 0, activations_checkpointed = 0;  // per micro-batch
  double comm_buffers = 0, runtime = 0;
  bool checkpointing = false;  // which activation figure the total uses

  double modelStates() const { return parameters + gradients + optimizer; }
  double total() const {
    return modelStates() + gathered + (checkpointing ? activations_checkpointed : activations_full) +
           comm_buffers + runtime;
  }
};

// The process baseline measured on these machines (PyTorch 2.11's libtorch on the CPU, one
// thread, jemalloc): the peak RSS of a 3-step run of the 0.16 M-parameter tiny model,
// 431-447 MiB (fp32 with either BLAS, bf16). It includes both BLAS libraries and the
// start-up GEMM's buffers.
inline constexpr double kRuntimeBaselineBytes = 445.0 * (1 << 20);

MemoryEstimate estimateMemory(const TrainConfig& tc);

// Memory this node offers its ranks: the smaller of physical memory (sysconf) and the
// cgroup limit (v2 memory.max, v1 memory.limit_in_bytes) when one is set. Bytes.
double nodeMemoryBytes();

struct MemoryBudget {
  double bytes = 0;     // per rank
  std::string source;   // "parallel.memory_limit_gb" or "physical memory 15.6 GiB / 2 ranks"
};
// parallel.memory_limit_gb when set, else nodeMemoryBytes() shared by the node's ranks.
MemoryBudget memoryBudget(const TrainConfig& tc, int ranks_on_node);

// "" when e.total() fits `budget`, else a message naming the total, the budget and
// the largest term with the keys that shrink it. Pure arithmetic: call it before
// allocating anything.
std::string memoryFitProblem(const TrainConfig& tc, const MemoryEstimate& e,
                             const MemoryBudget& budget);

// Human-readable per-component table, and whether it fits `limit_bytes` (0 = none).
std::string formatMemoryEstimate(const TrainConfig& tc, const MemoryEstimate& e,
                                 double limit_bytes);

}  // namespace ftb
