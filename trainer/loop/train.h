// The training loop: build -> for each step (data, forward/backward, gradient sync,
// optimizer, metrics, step-end hook) -> close.
//
// Contracts:
// - Step s consumes global samples [s·G, (s+1)·G), G = TrainConfig::globalBatch();
//   data-parallel rank r takes the contiguous slice [r·G/dp, (r+1)·G/dp) and splits
//   it into grad_accum_steps micro-batches. The loss of micro-batch m is
//   Σ token CE / (non-padding tokens of the whole global batch), so after the
//   gradient sum over ranks every layout optimises the same objective, and the
//   logged loss is the global per-token mean.
// - Everything a step reads besides the model and optimizer state is a function of
//   its index s (data, learning rate; LoRA dropout draws from the default CPU generator,
//   seeded from training.seed at start and saved with each checkpoint), so a run
//   restored to the state after step k-1 and started at TrainState::step = k continues
//   exactly as the uninterrupted run.
// - Every rank runs the same number of steps: the stop decision (max_steps,
//   stop_after_seconds measured on rank 0, a signal on any rank, a `launcher ctl`
//   request read by rank 0) travels inside the per-step all-reduce of the loss.
// - A non-finite loss ends the run: train() throws TrainingDiverged (every rank, same
//   step, after the step's row is recorded).
// - Each step appends one row to the metrics file and flushes every log_every steps.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "common/h5_metrics.h"
#include "common/run_config.h"
#include "trainer/data/dataset.h"
#include "trainer/loop/hooks.h"
#include "trainer/loop/step_log.h"
#include "trainer/loop/stop.h"
#include "trainer/parallel/dist.h"

namespace ftb {

// A non-finite loss or gradient norm: status "failed", exit code 6.
class TrainingDiverged : public FtbError {
 public:
  explicit TrainingDiverged(const std::string& msg) : FtbError(msg, 6) {}
};

// hooks may be null. `ds` is makeDataset(tc), built before the run directory so that
// bad data is refused before anything is written. run_dir non-empty: rank 0 polls its
// control channel (common/run_control.h) once per step; the request travels in the
// step's all-reduce.
TrainSummary train(const TrainConfig& tc, const Dataset& ds, Distributed& dist,
                   MetricsFile& metrics, const RunPeaks& peaks, StepHooks* hooks = nullptr,
                   const std::string& run_dir = "");

}  // namespace ftb
