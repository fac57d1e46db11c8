// What the training loop measures per step, and where it goes: one HDF5 row per step
// (flushed every log_every steps), rank 0's progress line, and the run summary.
//
// Contracts:
// - StepRecord holds one step's phase times (s) and its global figures (identical on
//   every rank: loss, grad norm, token counts from the step's all-reduce).
// - StepLog::record() appends the row for 0-based step index `step`; the row's `step`
//   column is that index, and the progress line counts steps done ("step s+1/max").
//   Steps >= metrics.skip_first_steps enter the summary.
// - StepLog::finish() is collective (the peak RSS max over ranks).
// - mfu divides the model FLOP/s per device by the hardware peak, gemm_efficiency by
//   the GEMM measured at start (trainer/metrics/peaks.h); either is NaN when its
//   denominator is (printed "n/a").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/h5_metrics.h"
#include "common/run_config.h"
#include "trainer/metrics/peaks.h"
#include "trainer/comm/comm.h"

namespace ftb {

struct StepRecord {
  double data = 0, fwd = 0, bwd = 0, opt = 0, comm = 0, total = 0;  // seconds
  double agree = 0;  // seconds in the step's agreement all-reduce (part of comm)
  double loss = 0, grad_norm = 0, lr = 0;
  double padded = 0, dataset = 0;  // global token counts
};

struct TrainSummary {
  int64_t steps = 0;
  int64_t measured_steps = 0;  // steps after warmup
  double train_seconds = 0;    // wall time of the measured steps
  double tokens_per_s_padded = 0, tokens_per_s_dataset = 0;  // global, measured steps
  double mfu = 0, gemm_efficiency = 0;  // NaN: not reported
  double step_p50 = 0, step_p90 = 0;
  double data_frac = 0, fwd_frac = 0, bwd_frac = 0, opt_frac = 0, comm_frac = 0;
  double peak_rss_max = 0;  // bytes, max over ranks
  double first_loss = 0, last_loss = 0;
  int stop_signal = 0;  // non-zero when a signal ended the run
  bool stopped_by_ctl = false;  // `launcher ctl stop` ended the run
};

class StepLog {
 public:
  // Declares the step metrics in `metrics`; starts the run clock (elapsed()). time_s =
  // metrics.resumedTimeS() + elapsed(): a resumed run's clock continues.
  StepLog(const TrainConfig& tc, MetricsFile& metrics, const RunPeaks& peaks, int rank,
          int world);
  void record(int64_t step, const StepRecord& r);
  double elapsed() const;  // seconds since construction
  TrainSummary finish(Comm& world);

 private:
  void printProgress(int64_t step, const StepRecord& r, double tps_padded, double tps_dataset,
                     double mfu, double gemm_eff) const;
  double flopsPerDevice(double tokens_per_s) const;

  const TrainConfig& tc_;
  MetricsFile& metrics_;
  double mfu_peak_, gemm_peak_, flops_per_token_, t_start_;
  int rank_, world_;
  TrainSummary sum_;
  int64_t first_step_ = 0;  // the first step this process ran (a resumed run starts later)
  StepRecord acc_;  // sums over measured steps
  std::vector<double> step_times_;
};

void printSummary(const TrainConfig& tc, const TrainSummary& s, const RunPeaks& peaks,
                  const std::string& run_dir);

}  // namespace ftb
