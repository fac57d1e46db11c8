// The training loop and its measurements.
//
// Contracts:
// - Step s consumes global samples [s·G, (s+1)·G), G = TrainConfig::globalBatch();
//   data-parallel rank r takes the contiguous slice [r·G/dp, (r+1)·G/dp) and splits
//   it into grad_accum_steps micro-batches. The loss of micro-batch m is
//   Σ token CE / (non-padding tokens of the whole global batch), so after the
//   gradient sum over ranks every layout optimises the same objective, and the
//   logged loss is the global per-token mean.
// - Every rank runs the same number of steps: the stop decision (max_steps,
//   stop_after_seconds measured on rank 0, a signal on any rank) travels inside the
//   per-step all-reduce of the loss.
// - Each step appends one row to the metrics file and flushes every log_every steps.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/h5_metrics.h"
#include "trainer/parallel/dist.h"
#include "common/run_config.h"

namespace ftb {

struct TrainSummary {
  int64_t steps = 0;
  int64_t measured_steps = 0;  // steps after warmup
  double train_seconds = 0;    // wall time of the measured steps
  double tokens_per_s_padded = 0, tokens_per_s_dataset = 0;  // global, measured steps
  double mfu = 0;
  double step_p50 = 0, step_p90 = 0;
  double data_frac = 0, fwd_frac = 0, bwd_frac = 0, opt_frac = 0, comm_frac = 0;
  double peak_rss_max = 0;  // bytes, max over ranks
  double first_loss = 0, last_loss = 0;
  int stop_signal = 0;  // non-zero when a signal ended the run
  int64_t start_step = 0;       // > 0 when resumed from a checkpoint
  std::string last_checkpoint;  // directory of the last checkpoint saved, "" if none
};

class CheckpointHook;

// Set by the signal handler (installed by train() before the first step; until then
// signals keep their default action); polled once per step.
extern std::atomic<int> g_stop_signal;
void installStopSignalHandlers();

// Restores from / saves checkpoints through `ckpt` (trainer/checkpoint/hook.h).
TrainSummary train(const TrainConfig& tc, Distributed& dist, MetricsFile& metrics,
                   double peak_flops, CheckpointHook& ckpt);

void printSummary(const TrainConfig& tc, const TrainSummary& s, double peak_flops,
                  const std::string& peak_source, const std::string& run_dir);

}  // namespace ftb
