// What the training loop measures per step, and where it goes: one HDF5 row per step
// (flushed every log_every steps), rank 0's progress line, and the run summary.
//
// Contracts:
// - StepRecord holds one step's phase times (s) and its global figures (identical on
//   every rank: loss, grad norm, token counts from the step's all-reduce).
// - StepLog::record() appends the row for 0-based step index `step`; the row's `step`
//   column is that index, and the progress line counts steps done ("step s+1/max").
//   Steps >= metrics.skip_first_steps enter the summary.
// - StepLog::finish() is collective (the peak RSS and RSS growth, max over ranks).
// - RSS watch (trainer/README.md "Metrics"): from the first step at least
//   RssWatch::kSettleS after the first measured step (past warm-up) and at least one step
//   after KeptPagesBound's first return of pages (settled()), this rank's memory in use
//   (RSS less the freed pages jemalloc keeps, column allocator_kept_bytes) is sampled at
//   least every RssWatch::kSampleS; `base` is the first sample. When it reaches a new
//   high more than RssWatch::kWarnFraction above base, it warns (again at
//   each further kWarnFraction). finish() records root attributes rss_growth ((last -
//   base) / base), rss_growth_mib_per_s (least-squares slope of the samples) and
//   rss_growth_window_s (seconds sampled); all NaN when fewer than two samples were
//   taken. allocator_purges (int64): the purges of KeptPagesBound (-1 without jemalloc).
// - mfu divides the model FLOP/s per device by the hardware peak, gemm_efficiency by
//   the GEMM measured at start (trainer/metrics/peaks.h); either is NaN when its
//   denominator is (printed "n/a"). mfu_causal and hfu divide the FLOP/s of the other
//   counts (FlopsCount: causal attention, recomputation counted) by the same peak.
// - Interference (common/interference.h): record() samples this rank's threads at each
//   step end; the step's row holds the figures of the interval since the previous step
//   end (the first: since construction). finish() (collective) takes the measured steps'
//   figures (all steps when every step was warm-up) of every rank; the worst rank's
//   interference is the run's. Above metrics.max_interference the run is noisy: root
//   attributes interference (the run's), interference_rank (that rank),
//   interference_own (this rank's), cpu_steal_frac, other_load_cpus,
//   involuntary_switches (this rank's), max_interference, noisy ("" or the reason).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/h5_metrics.h"
#include "common/interference.h"
#include "common/run_config.h"
#include "trainer/comm/comm.h"
#include "trainer/metrics/peaks.h"

namespace ftb {

struct StepRecord {
  double data = 0, fwd = 0, bwd = 0, opt = 0, comm = 0, total = 0;  // seconds
  double agree = 0;  // seconds in the step's agreement all-reduce (part of comm)
  double loss = 0, grad_norm = 0, lr = 0;
  double padded = 0, dataset = 0;  // global token counts
  // Pipeline (parallel.pp > 1), this rank: seconds blocked receiving from a neighbour stage,
  // seconds of the step's forward-backward phase (its span), bytes sent to neighbours, and
  // the pipeline's makespan (the longest stage's span, agreed over the world).
  double bubble = 0, pipe = 0, p2p_bytes = 0, makespan = 0;
};

// A throughput against the peaks, by each FLOP count (FlopsCount); NaN: not reported.
struct Utilization {
  double mfu = 0, mfu_causal = 0, hfu = 0, gemm_efficiency = 0;
};

struct TrainSummary {
  int64_t steps = 0;           // the run's steps done, over every attempt (the next step's index)
  int64_t first_step = 0;      // the first step this process ran (> 0: it resumed)
  int64_t measured_steps = 0;  // steps after warmup
  double train_seconds = 0;    // wall time of the measured steps
  double tokens_per_s_padded = 0, tokens_per_s_dataset = 0;  // global, measured steps
  double mfu = 0, gemm_efficiency = 0;                       // NaN: not reported
  double mfu_causal = 0, hfu = 0;                            // NaN: not reported
  double step_p50 = 0, step_p90 = 0;
  double data_frac = 0, fwd_frac = 0, bwd_frac = 0, opt_frac = 0, comm_frac = 0;
  double peak_rss_max = 0;  // bytes, max over ranks
  // The CUDA caching allocator's peaks (bytes, max over ranks); -1 on the CPU.
  double device_peak_allocated_max = -1, device_peak_reserved_max = -1;
  double rss_growth_max = 0;  // fraction after warm-up, max over ranks (NaN: not measured)
  double rss_slope_max = 0;   // MiB/s of that rank (NaN: not measured)
  double rss_window_s = 0;    // seconds rank 0 sampled
  double first_loss = 0, last_loss = 0;
  int stop_signal = 0;          // non-zero when a signal ended the run
  bool stopped_by_ctl = false;  // `launcher ctl stop` ended the run
  // Pipeline: idle fraction of the makespan over the measured steps (pipelineIdleFraction,
  // common/pipeline.h), max and min over ranks (NaN without a pipeline); this rank's bytes
  // sent per measured step.
  double bubble_frac_max = NAN, bubble_frac_min = NAN, p2p_bytes_per_step = 0;
  // Per rank, its peak RSS (bytes); with a pipeline, per stage the largest of its ranks'
  // and the memory estimator's figure for that stage (common/memory_estimate.h).
  std::vector<double> rank_peak_rss, stage_peak_rss, stage_estimate;
  // Interference: the worst rank's figures (NaN: not measured), that rank, and the
  // reason the run is noisy ("" when it is not).
  InterferenceFigures interference;
  int interference_rank = -1;
  std::string interference_text;  // describeInterference() of those figures
  // Global padded tokens per second of CPU time per compute thread over the measured steps:
  // the sum over ranks of each one's tokens_per_cpu_s; NaN where a rank could not read it.
  double tokens_per_cpu_s = std::nan("");
  std::string noisy;
};

// This rank's RSS after warm-up (contract above).
class RssWatch {
 public:
  static constexpr double kSettleS = 3.0, kSampleS = 0.5, kWarnFraction = 0.05;
  // Called once per step with the time since the first measured step (< 0: warm-up) and
  // the memory in use: RSS less the freed pages the allocator keeps (KeptPagesBound bounds
  // those apart, and they grow and shrink with its purges, which are not leaks).
  void observe(double since_measured_s, int64_t in_use_bytes);
  double growth() const;        // (last - base) / base; NaN with fewer than two samples
  double slopeMibPerS() const;  // least squares; NaN with fewer than two samples
  double windowS() const;

 private:
  std::vector<std::pair<double, double>> samples_;  // (s, bytes)
  double next_warn_ = kWarnFraction, high_ = 0;
};

// Bounds what the allocator keeps of freed memory (trainer/jemalloc_conf.cpp keeps every
// freed page for reuse, which the next step needs, but fragmentation can make the kept
// set grow without end: tests/e2e/trainer/test_soak.py). At the first step end that is
// firstPurgeDue (lazily created state exists by then) every kept page is returned to the
// OS (purgeAllocatorPages); base = the pages kept at the next step end
// (what one step frees and the next reuses). Invariant from then on: at each step end the
// kept pages (allocatorDirtyBytes) are at most base + max(base / 4, 16 MiB); above it they
// are returned, and the next step faults its working set in again once. Purges closer
// than kMinStepsApart steps raise base to the level found (the working set grew).
// The RSS watch starts at a step end both RssWatch::kSettleS after the first measured
// step and settled() (at least one step after the first purge).
class KeptPagesBound {
 public:
  static constexpr double kPurgeAtS = 2.0;
  static constexpr int64_t kMinStepsApart = 10, kSlackBytes = int64_t(16) << 20;
  // The first purge makes the next step fault its working set in again (D512/L8: +0.55 s,
  // 9 % of that step), so it lands in warm-up where it can: at a step end kPurgeAtS into
  // the run (run_s) with a warm-up step still to come (warmup_follows); otherwise kPurgeAtS
  // after the first measured step (since_measured_s; < 0 before it).
  static bool firstPurgeDue(double since_measured_s, double run_s, bool warmup_follows) {
    return since_measured_s >= kPurgeAtS || (warmup_follows && run_s >= kPurgeAtS);
  }
  // At the end of `step`, with `kept` = allocatorDirtyBytes() (-1: not jemalloc); true when
  // it returned the kept pages to the OS (the caller's `kept` is stale then).
  bool observe(double since_measured_s, double run_s, bool warmup_follows, int64_t step,
               int64_t kept);
  int64_t purges() const { return purges_; }
  // Whether RSS at the end of `step` is the steady state: the first purge (which drops
  // the working set until the next step faults it in) is over, or there is none.
  bool settled(int64_t step) const {
    return base_ == kOff || (first_purge_step_ >= 0 && step > first_purge_step_);
  }

 private:
  static constexpr int64_t kOff = -2;  // not running on jemalloc
  bool purge(int64_t kept, int64_t step);  // true when the pages were returned
  int64_t base_ = -1, purges_ = 0, last_purge_step_ = -1, first_purge_step_ = -1;
};

class StepLog {
 public:
  // Declares the step columns (common/step_columns.h) in `metrics`; starts the run clock
  // (elapsed()). time_s = metrics.resumedTimeS() + elapsed(): a resumed run's clock continues.
  StepLog(const TrainConfig& tc, MetricsFile& metrics, const RunPeaks& peaks, int rank, int world);
  void record(int64_t step, const StepRecord& r);
  double elapsed() const;  // seconds since construction
  TrainSummary finish(Comm& world);

 private:
  // Appends the step's /steps row: every column of common/step_columns.h.
  void appendRow(int64_t step, const StepRecord& r, const InterferenceFigures& itf,
                 const Utilization& u, int64_t rss, int64_t kept);
  void printProgress(int64_t step, const StepRecord& r, double tps_padded, double tps_dataset,
                     const Utilization& u) const;
  // tokens_per_s (padded, global) against the peaks per device.
  Utilization utilization(double tokens_per_s) const;
  void finishMemory(Comm& world, TrainSummary& s);
  void finishPipeline(Comm& world, TrainSummary& s);
  void pipelineMemory(TrainSummary& s);
  void finishInterference(Comm& world, TrainSummary& s);
  // tokens_padded / world / (cpu_thread_s / intra-op threads) (common/step_columns.cpp
  // tokens_per_cpu_s); NaN without a CPU time.
  double tokensPerCpuS(double padded, double cpu_thread_s) const;

  const TrainConfig& tc_;
  MetricsFile& metrics_;
  double mfu_peak_, gemm_peak_, t_start_;
  FlopsCount flops_;
  int rank_, world_;
  TrainSummary sum_;
  int64_t first_step_ = 0;  // the first step this process ran (a resumed run starts later)
  StepRecord acc_;          // sums over measured steps
  std::vector<double> step_times_;
  double t_measured_ = -1;  // elapsed() when the first measured step ended
  RssWatch rss_;
  KeptPagesBound kept_;
  InterferenceSampler interference_;
  InterferenceTotal interf_all_, interf_measured_;
  double interf_last_ = 0;  // the last step's interference (progress line)
};

void printSummary(const TrainConfig& tc, const TrainSummary& s, const RunPeaks& peaks,
                  const std::string& run_dir);

}  // namespace ftb
