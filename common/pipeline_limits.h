// What a pipeline's micro-batch count may be, and what planning it costs: nothing per
// micro-batch. `parallel.pp_microbatches = 1000000000000` was accepted and each rank grew to
// 12 GB before the OOM killer ended it; the memory estimate walked a list per micro-batch
// (+320 MB at 10^6, bad_alloc at 10^7).
//
// Contracts:
// - The bound (pp > 1): one step's samples, m (= grad_accum_steps = parallel.pp_microbatches)
//   x micro_batch_size x data-parallel size, at most the samples of the dataset the step
//   draws from: a larger step reads some sample twice within one optimizer step, and the
//   stage executor keeps a few actions per micro-batch. pipeMicrobatchProblem(tc, samples,
//   dataset) gives what and hint (what "" within the bound or without a pipeline); pure
//   arithmetic, no overflow. REQUIRES: samples >= 0.
// - checkPipeMicrobatchBound(cfg, tc): the bound at configuration time (TrainConfig::
//   fromConfig, through checkSizes, so the trainer and `sweep_tagger expand` agree) for
//   synthetic data (data.num_samples); ConfigError naming the key that set m
//   (parallel.pp_microbatches, training.global_batch_size or training.grad_accum_steps). A
//   token file's samples are known when the trainer opens it, which checks them then.
// - pipeInFlight(plan, stage): on one stage under its schedule, the most (micro-batch,
//   block) pairs forwarded and not yet backwarded at once, the most micro-batches whose
//   head forward (the last model chunk) is in flight, and the receives and sends of a step
//   (common/memory_estimate.h "Pipeline stages"). Equal to walking withTransfers(plan,
//   stage, computeOrder(plan, stage)) (common/pipeline.h), in closed form: constant time and
//   memory in m (interleaved 1F1B: O(p·v)).
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/pipeline.h"
#include "common/run_config.h"

namespace ftb {

struct PipeBoundProblem {
  std::string what, hint;  // what == "": within the bound
};
PipeBoundProblem pipeMicrobatchProblem(const TrainConfig& tc, int64_t dataset_samples,
                                       const std::string& dataset);
void checkPipeMicrobatchBound(const Config& cfg, const TrainConfig& tc);

// A stage's most activations alive at once: `blocks` of its chunks' blocks and `heads` head
// micro-batches; `transfers`: its [B, T, D] transfer buffers per step; `weight_blocks`:
// blocks whose weight pass is pending beside them (zb_h1: stage s defers s micro-batches of
// its chunk's weight passes, each keeping its projections' inputs and output gradients).
struct PipeInFlight {
  double blocks = 0, heads = 0, transfers = 0, weight_blocks = 0;
};
PipeInFlight pipeInFlight(const PipePlan& plan, int64_t stage);

}  // namespace ftb
