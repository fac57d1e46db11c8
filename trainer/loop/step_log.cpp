#include "trainer/loop/step_log.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <utility>

#include "common/config.h"
#include "common/log.h"
#include "common/memory_estimate.h"
#include "common/pipeline.h"
#include "common/proc_memory.h"
#include "common/step_columns.h"
#include "trainer/metrics/perf.h"

namespace ftb {
namespace {

// "44.1%" or "n/a" (NaN: not reported).
std::string pct(double v) {
  if (std::isnan(v)) return "n/a";
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << 100 * v << "%";
  return o.str();
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Test hook (tests/e2e/trainer/test_soak.py): FTB_TEST_LEAK_BYTES_PER_STEP=N keeps N
// more bytes alive (touched) after every step, a leak the RSS watch must report.
void testLeak() {
  static const int64_t per_step = [] {
    const char* v = std::getenv("FTB_TEST_LEAK_BYTES_PER_STEP");
    return v ? std::atoll(v) : int64_t(0);
  }();
  static std::vector<std::vector<char>> kept;
  if (per_step > 0) kept.emplace_back(size_t(per_step), char(1));
}


}  // namespace

void RssWatch::observe(double since_measured_s, int64_t in_use_bytes) {
  if (since_measured_s < kSettleS) return;
  const double t = since_measured_s - kSettleS, in_use = double(in_use_bytes);
  if (!samples_.empty() && t - samples_.back().first < kSampleS) return;
  samples_.emplace_back(t, in_use);
  if (in_use <= high_) return;
  high_ = in_use;
  const double g = growth();
  if (!(g > next_warn_)) return;
  while (g > next_warn_) next_warn_ += kWarnFraction;
  FTB_WARN("memory in use keeps rising after warm-up (RSS less the allocator's kept pages): "
           << formatMib(samples_.front().second) << " -> " << formatMib(in_use) << " (+"
           << formatFixed(100 * g, 1) << " %, " << formatFixed(slopeMibPerS(), 2) << " MiB/s over "
           << formatFixed(t, 1)
           << " s): memory that is never freed; the peak RSS figure includes it "
              "(rss_growth in the metrics file)");
}

double RssWatch::growth() const {
  if (samples_.size() < 2) return std::nan("");
  return (samples_.back().second - samples_.front().second) / samples_.front().second;
}

double RssWatch::slopeMibPerS() const {
  const size_t n = samples_.size();
  if (n < 2) return std::nan("");
  double mt = 0, mr = 0;
  for (auto [t, r] : samples_) mt += t / double(n), mr += r / double(n);
  double num = 0, den = 0;
  for (auto [t, r] : samples_) num += (t - mt) * (r - mr), den += (t - mt) * (t - mt);
  return den > 0 ? num / den / (1 << 20) : std::nan("");
}

double RssWatch::windowS() const {
  return samples_.size() < 2 ? std::nan("") : samples_.back().first - samples_.front().first;
}

bool KeptPagesBound::observe(double since_measured_s, double run_s, bool warmup_follows,
                             int64_t step, int64_t kept) {
  if (base_ == kOff) return false;
  if (last_purge_step_ < 0 && !firstPurgeDue(since_measured_s, run_s, warmup_follows)) return false;
  if (kept < 0) {
    base_ = kOff;  // not jemalloc: nothing to bound
    return false;
  }
  if (last_purge_step_ < 0) return purge(kept, step);  // once, when lazy state exists
  if (base_ < 0) {  // the first step end after that purge: what one step keeps
    base_ = kept;
    return false;
  }
  if (kept <= base_ + std::max(base_ / 4, kSlackBytes)) return false;
  if (step - last_purge_step_ < kMinStepsApart) base_ = kept;
  return purge(kept, step);
}

bool KeptPagesBound::purge(int64_t kept, int64_t step) {
  if (!purgeAllocatorPages()) {
    base_ = kOff;
    return false;
  }
  ++purges_;
  last_purge_step_ = step;
  if (first_purge_step_ < 0) first_purge_step_ = step;
  FTB_DEBUG("allocator kept " << formatMib(double(kept)) << " of freed pages at step " << step
                              << (base_ < 0 ? " (the first return)"
                                            : " (a step keeps " + formatMib(double(base_)) + ")")
                              << ": returned them to the OS");
  return true;
}

StepLog::StepLog(const TrainConfig& tc, MetricsFile& metrics, const RunPeaks& peaks, int rank,
                 int world)
    : tc_(tc),
      metrics_(metrics),
      mfu_peak_(peaks.mfuPeak()),
      gemm_peak_(peaks.gemmPeak()),
      t_start_(nowSeconds()),
      flops_(trainingFlops(tc)),
      rank_(rank),
      world_(world),
      interference_(at::get_num_threads()) {
  interference_.setComputeTids(computeThreadIds());  // helper threads' waits do not count
  metrics_.declareStepColumns();
  metrics_.setRootAttr("flops_formula", flops_.formula);
  metrics_.setRootAttr("flops_per_token_causal", flops_.per_token_causal);
  metrics_.setRootAttr("flops_per_token_hardware", flops_.per_token_hardware);
  metrics_.setRootAttr("trainable_params", flops_.trainable_params);
  metrics_.setRootAttr("total_params", flops_.total_params);
}

double StepLog::elapsed() const { return nowSeconds() - t_start_; }

Utilization StepLog::utilization(double tokens_per_s) const {
  const double per_device = tokens_per_s / world_;
  return {flops_.per_token * per_device / mfu_peak_,
          flops_.per_token_causal * per_device / mfu_peak_,
          flops_.per_token_hardware * per_device / mfu_peak_,
          flops_.per_token * per_device / gemm_peak_};
}

void StepLog::record(int64_t step, const StepRecord& r) {
  const InterferenceFigures itf = interference_.next();  // since the previous step end
  interf_all_.add(itf);
  if (step >= tc_.metrics.skip_first_steps) interf_measured_.add(itf);
  interf_last_ = itf.interference;
  double tps_padded = r.padded / r.total, tps_dataset = r.dataset / r.total;
  const Utilization u = utilization(tps_padded);
  testLeak();
  if (step >= tc_.metrics.skip_first_steps && t_measured_ < 0) t_measured_ = elapsed();
  const double since_measured = t_measured_ < 0 ? -1 : elapsed() - t_measured_;
  int64_t kept = allocatorDirtyBytes();  // -1 off jemalloc
  if (kept_.observe(since_measured, elapsed(), step + 1 < tc_.metrics.skip_first_steps, step, kept))
    kept = allocatorDirtyBytes();  // what the purge left
  const int64_t rss = currentRssBytes();
  rss_.observe(kept_.settled(step) ? since_measured : -1, rss - std::max<int64_t>(kept, 0));
  appendRow(step, r, itf, u, rss, kept);
  if ((step + 1) % tc_.metrics.log_every == 0) metrics_.flush();
  if (sum_.steps == 0) {
    sum_.first_loss = r.loss;
    first_step_ = step;
  }
  sum_.last_loss = r.loss;
  sum_.steps = step + 1;
  if (step >= tc_.metrics.skip_first_steps) {
    step_times_.push_back(r.total);
    for (auto [a, b] : {std::pair{&acc_.data, r.data},
                        {&acc_.fwd, r.fwd},
                        {&acc_.bwd, r.bwd},
                        {&acc_.opt, r.opt},
                        {&acc_.comm, r.comm},
                        {&acc_.total, r.total},
                        {&acc_.padded, r.padded},
                        {&acc_.dataset, r.dataset},
                        {&acc_.bubble, r.bubble},
                        {&acc_.pipe, r.pipe},
                        {&acc_.makespan, r.makespan},
                        {&acc_.p2p_bytes, r.p2p_bytes}})
      *a += b;
  }
  if (rank_ == 0 && (step + 1) % tc_.metrics.log_every == 0)
    printProgress(step, r, tps_padded, tps_dataset, u);
}

double StepLog::tokensPerCpuS(double padded, double cpu_thread_s) const {
  if (!(cpu_thread_s > 0)) return std::nan("");
  return padded / double(world_) / (cpu_thread_s / double(interference_.computeThreads()));
}

void StepLog::appendRow(int64_t step, const StepRecord& r, const InterferenceFigures& itf,
                        const Utilization& u, int64_t rss, int64_t kept) {
  using C = StepCol;
  StepRow row;
  row.set(C::kStep, double(step))
      .set(C::kTimeS, metrics_.resumedTimeS() + elapsed())
      .set(C::kStepTimeS, r.total)
      .set(C::kDataS, r.data)
      .set(C::kForwardS, r.fwd)
      .set(C::kBackwardS, r.bwd)
      .set(C::kOptimizerS, r.opt)
      .set(C::kCommS, r.comm)
      .set(C::kAgreeS, r.agree)
      .set(C::kLoss, r.loss)
      .set(C::kGradNorm, r.grad_norm)
      .set(C::kLr, r.lr)
      .set(C::kTokensPadded, r.padded)
      .set(C::kTokensDataset, r.dataset)
      .set(C::kTokensPerSPadded, r.padded / r.total)
      .set(C::kTokensPerSDataset, r.dataset / r.total)
      .set(C::kTokensPerSPerDevice, r.padded / r.total / world_)
      .set(C::kMfu, u.mfu)
      .set(C::kMfuCausal, u.mfu_causal)
      .set(C::kHfu, u.hfu)
      .set(C::kGemmEfficiency, u.gemm_efficiency)
      .set(C::kFlopsPerToken, flops_.per_token)
      .set(C::kRssBytes, double(rss))
      .set(C::kPeakRssBytes, double(peakRssBytes()))
      .set(C::kAllocatorKeptBytes, kept < 0 ? std::nan("") : double(kept))
      .set(C::kPpBubbleS, r.bubble)
      .set(C::kPpBubbleFraction, pipelineIdleFraction(r.pipe, r.bubble, r.makespan))
      .set(C::kPpMakespanS, r.makespan)
      .set(C::kPpP2pBytes, r.p2p_bytes)
      .set(C::kInterference, itf.interference)
      .set(C::kRunqueueWaitFrac, itf.wait_frac)
      .set(C::kCpuStealFrac, itf.steal_frac)
      .set(C::kOtherLoadCpus, itf.other_load)
      .set(C::kInvoluntarySwitches, itf.nivcsw)
      .set(C::kCpuThreadS, itf.cpu_thread_s)
      .set(C::kTokensPerCpuS, tokensPerCpuS(r.padded, itf.cpu_thread_s));
  metrics_.appendStep(row);
}

void StepLog::printProgress(int64_t step, const StepRecord& r, double tps_padded,
                            double tps_dataset, const Utilization& u) const {
  // Steps done so far / planned; ETA from this process's mean step time.
  const double elapsed = this->elapsed(), done = double(step + 1 - first_step_);
  const double eta = done > 0 ? elapsed / done * double(tc_.training.max_steps - step - 1) : 0;
  std::ostringstream os;
  os << std::fixed << "step " << step + 1 << "/" << tc_.training.max_steps << " | loss "
     << std::setprecision(5) << r.loss << " | global tok/s " << std::setprecision(0) << tps_padded
     << " padded, " << tps_dataset << " dataset | MFU " << pct(u.mfu) << " (hw peak), GEMM eff "
     << pct(u.gemm_efficiency) << " | step " << std::setprecision(3) << r.total << " s (fwd "
     << std::setprecision(0) << 100 * r.fwd / r.total << "% bwd " << 100 * r.bwd / r.total
     << "% opt " << 100 * r.opt / r.total << "% comm " << 100 * r.comm / r.total
     << "%) | interference " << pct(interf_last_) << " | rss " << currentRssBytes() / (1 << 20)
     << " MiB | elapsed " << std::setprecision(1) << elapsed << " s, ETA " << eta << " s";
  FTB_INFO(os.str());
}

TrainSummary StepLog::finish(Comm& world) {
  metrics_.flush();
  TrainSummary s = sum_;
  s.first_step = s.steps > 0 ? first_step_ : 0;
  s.measured_steps = static_cast<int64_t>(step_times_.size());
  s.train_seconds = acc_.total;
  if (acc_.total > 0) {
    s.tokens_per_s_padded = acc_.padded / acc_.total;
    s.tokens_per_s_dataset = acc_.dataset / acc_.total;
    const Utilization u = utilization(s.tokens_per_s_padded);
    s.mfu = u.mfu;
    s.mfu_causal = u.mfu_causal;
    s.hfu = u.hfu;
    s.gemm_efficiency = u.gemm_efficiency;
    s.data_frac = acc_.data / acc_.total;
    s.fwd_frac = acc_.fwd / acc_.total;
    s.bwd_frac = acc_.bwd / acc_.total;
    s.opt_frac = acc_.opt / acc_.total;
    s.comm_frac = acc_.comm / acc_.total;
  }
  s.step_p50 = percentile(step_times_, 0.5);
  s.step_p90 = percentile(step_times_, 0.9);
  finishMemory(world, s);
  if (tc_.layout.pp > 1) finishPipeline(world, s);
  finishInterference(world, s);
  return s;
}

// The worst rank's interference over the measured steps (all steps when none was
// measured), and the verdict against metrics.max_interference (collective).
void StepLog::finishInterference(Comm& world, TrainSummary& s) {
  const InterferenceFigures mine =
      (interf_measured_.empty() ? interf_all_ : interf_measured_).figures();
  constexpr double kNone = -1;  // not measured on that rank
  auto known = [](double v) { return std::isnan(v) ? kNone : v; };
  const double own_per_cpu =
      interf_measured_.empty() ? std::nan("") : tokensPerCpuS(acc_.padded, mine.cpu_thread_s);
  torch::Tensor row =
      torch::tensor({known(mine.interference), known(mine.wait_frac), known(mine.steal_frac),
                     known(mine.other_load), known(mine.nivcsw), mine.wall_s, known(own_per_cpu)},
                    torch::kFloat64);
  torch::Tensor all = torch::zeros({world_, 7}, torch::kFloat64);
  world.allGather(all, row);
  torch::Tensor per_cpu = all.select(1, 6);
  s.tokens_per_cpu_s = (per_cpu < 0).any().item<bool>() ? std::nan("") : per_cpu.sum().item<double>();
  metrics_.setRootAttr("tokens_per_cpu_s", s.tokens_per_cpu_s);
  metrics_.setRootAttr("tokens_per_cpu_s_own", own_per_cpu);
  const int64_t worst = all.select(1, 0).argmax().item<int64_t>();
  auto at = [&](int col) {
    const double v = all[worst][col].item<double>();
    return v == kNone ? std::nan("") : v;
  };
  InterferenceFigures& w = s.interference;
  w.interference = at(0), w.wait_frac = at(1), w.steal_frac = at(2), w.other_load = at(3);
  w.nivcsw = at(4), w.wall_s = all[worst][5].item<double>();
  s.interference_rank = std::isnan(w.interference) ? -1 : static_cast<int>(worst);
  s.interference_text = describeInterference(w, interference_.boundCpus().size());
  if (w.interference > tc_.metrics.max_interference)
    s.noisy = s.interference_text + " on rank " + std::to_string(worst) +
              " > metrics.max_interference " + formatFixed(100 * tc_.metrics.max_interference, 1) +
              " %: other work held this run's CPUs, so its times overstate the layout's";
  metrics_.setRootAttr("interference", w.interference);
  metrics_.setRootAttr("interference_rank", int64_t{s.interference_rank});
  metrics_.setRootAttr("interference_own", mine.interference);
  metrics_.setRootAttr("runqueue_wait_frac", mine.wait_frac);
  metrics_.setRootAttr("cpu_steal_frac", mine.steal_frac);
  metrics_.setRootAttr("other_load_cpus", mine.other_load);
  metrics_.setRootAttr("involuntary_switches", mine.nivcsw);
  metrics_.setRootAttr("max_interference", tc_.metrics.max_interference);
  metrics_.setRootAttr("noisy", s.noisy);
  if (!s.noisy.empty()) FTB_WARN("noisy run: " << s.noisy);
}

// The bubble fraction over the measured steps, max and min over ranks (collective), beside
// the schedule's theory (common/pipeline.h) in the root attributes.
void StepLog::finishPipeline(Comm& world, TrainSummary& s) {
  const double frac = pipelineIdleFraction(acc_.pipe, acc_.bubble, acc_.makespan);
  torch::Tensor t = torch::tensor({frac, -frac}, torch::kFloat64);
  world.allReduceMax(t);
  s.bubble_frac_max = t[0].item<double>();
  s.bubble_frac_min = -t[1].item<double>();
  const size_t n = step_times_.size();
  s.p2p_bytes_per_step = n > 0 ? acc_.p2p_bytes / double(n) : 0.0;
  metrics_.setRootAttr("pp_bubble_theory", theoreticalBubble(tc_.pipeline));
  metrics_.setRootAttr("pp_bubble_fraction", frac);
  metrics_.setRootAttr("pp_bubble_fraction_max", s.bubble_frac_max);
  metrics_.setRootAttr("pp_p2p_bytes_per_step", s.p2p_bytes_per_step);
  pipelineMemory(s);
}

// Per stage: the peak RSS of its ranks (max) beside the estimator's figure for the stage;
// this rank's stage's pair in the root attributes. REQUIRES: finishMemory ran.
void StepLog::pipelineMemory(TrainSummary& s) {
  const int inner = world_ / static_cast<int>(tc_.layout.pp);
  s.stage_peak_rss.assign(tc_.layout.pp, 0.0);
  for (int r = 0; r < world_ && r < int(s.rank_peak_rss.size()); ++r)
    s.stage_peak_rss[r / inner] = std::max(s.stage_peak_rss[r / inner], s.rank_peak_rss[r]);
  for (int64_t st = 0; st < tc_.layout.pp; ++st)
    s.stage_estimate.push_back(estimateStage(tc_, st).total());
  const int mine = rank_ / inner;
  metrics_.setRootAttr("pp_stage", int64_t{mine});
  metrics_.setRootAttr("pp_stage_peak_rss_bytes", s.stage_peak_rss[mine]);
  metrics_.setRootAttr("pp_stage_memory_estimate_bytes", s.stage_estimate[mine]);
}

// The leak watch's root attributes; the peak RSS and RSS growth over ranks (collective).
void StepLog::finishMemory(Comm& world, TrainSummary& s) {
  metrics_.setRootAttr("rss_growth", rss_.growth());
  metrics_.setRootAttr("rss_growth_mib_per_s", rss_.slopeMibPerS());
  metrics_.setRootAttr("rss_growth_window_s", rss_.windowS());
  metrics_.setRootAttr("allocator_purges",
                       allocatorDirtyBytes() < 0 ? int64_t(-1) : kept_.purges());
  // Per rank: peak RSS, growth (kNone when not measured), slope.
  constexpr double kNone = -1e300;
  const double g = rss_.growth();
  const DeviceMemoryPeaks dev = deviceMemoryPeaks();  // -1 on the CPU
  if (dev.allocated >= 0) {
    metrics_.setRootAttr("device_peak_allocated_bytes", dev.allocated);
    metrics_.setRootAttr("device_peak_reserved_bytes", dev.reserved);
  }
  torch::Tensor mine =
      torch::tensor({double(peakRssBytes()), std::isnan(g) ? kNone : g, rss_.slopeMibPerS(),
                     double(dev.allocated), double(dev.reserved)},
                    torch::kFloat64);
  torch::Tensor all = torch::zeros({world_, 5}, torch::kFloat64);
  world.allGather(all, mine);
  s.peak_rss_max = all.select(1, 0).max().item<double>();
  for (int r = 0; r < world_; ++r) s.rank_peak_rss.push_back(all[r][0].item<double>());
  s.device_peak_allocated_max = all.select(1, 3).max().item<double>();
  s.device_peak_reserved_max = all.select(1, 4).max().item<double>();
  const int64_t worst = all.select(1, 1).argmax().item<int64_t>();
  s.rss_growth_max =
      all[worst][1].item<double>() == kNone ? std::nan("") : all[worst][1].item<double>();
  s.rss_slope_max = all[worst][2].item<double>();
  s.rss_window_s = rss_.windowS();
}

namespace {

void summaryRow(std::ostream& os, const std::string& k, const std::string& v) {
  os << "  " << std::left << std::setw(28) << k << v << "\n";
}

// The figures of the measured steps (only when there are some).
// The MFU of the other FLOP counts (FlopsCount), beside the PaLM-convention row.
void otherConventionRows(std::ostream& os, const TrainConfig& tc, const TrainSummary& s) {
  summaryRow(os, "MFU, causal attention",
             formatFixed(100 * s.mfu_causal, 1) +
                 " % (attention counted 6·L·H·hd·T, the causal half of the scores)");
  const double recomputed = recomputedBlocks(tc, double(tc.model.n_layers));
  summaryRow(os, "HFU (recomputation counted)",
             formatFixed(100 * s.hfu, 1) + " % (" +
                 (recomputed > 0 ? "the forward of " + formatFixed(recomputed, 0) +
                                       " recomputed block(s) per micro-batch added"
                                 : std::string("nothing recomputed: equal to MFU")) +
                 ")");
}

void measuredRows(std::ostream& os, const TrainConfig& tc, const TrainSummary& s,
                  const RunPeaks& peaks) {
  const int world = tc.layout.world_size;
  summaryRow(os, "tokens/s (padded, global)", formatFixed(s.tokens_per_s_padded, 1));
  summaryRow(os, "tokens/s (dataset, global)", formatFixed(s.tokens_per_s_dataset, 1));
  summaryRow(os, "tokens/s per device", formatFixed(s.tokens_per_s_padded / world, 1));
  summaryRow(os, "tokens per CPU-second (padded, global)",
             std::isnan(s.tokens_per_cpu_s)
                 ? std::string("not reported: /proc/self/task/*/schedstat unreadable")
                 : formatFixed(s.tokens_per_cpu_s, 1) +
                       " (per second of each rank's own CPU time per compute thread: other "
                       "processes on its CPUs stretch tokens/s, not this)");
  summaryRow(os, "MFU (hardware peak)",
             !peaks.check.ok ? "not reported: " + peaks.check.message
             : std::isnan(s.mfu)
                 ? "not reported: " + peaks.hw.source
                 : formatFixed(100 * s.mfu, 1) + " % of " + formatFixed(peaks.hw.flops / 1e9, 1) +
                       " GFLOP/s (" + peaks.hw.source + "); model FLOPs " +
                       trainingFlops(tc).formula + " (attention 12·L·H·hd·T, as PaLM)");
  if (!std::isnan(s.mfu)) otherConventionRows(os, tc, s);
  summaryRow(os, "GEMM efficiency",
             std::isnan(s.gemm_efficiency)
                 ? "not reported: " + peaks.gemm_source
                 : formatFixed(100 * s.gemm_efficiency, 1) + " % of " +
                       formatFixed(peaks.gemm_flops / 1e9, 1) + " GFLOP/s (" + peaks.gemm_source +
                       (peaks.gemm_end > 0 ? ", after the last step " +
                                                 formatFixed(peaks.gemm_end / 1e9, 1) + " GFLOP/s"
                                           : std::string()) +
                       ")");
  if (!peaks.gemm_warning.empty()) summaryRow(os, "GEMM warning", peaks.gemm_warning);
  summaryRow(os, "step time p50 / p90",
             formatFixed(s.step_p50, 4) + " / " + formatFixed(s.step_p90, 4) + " s");
  summaryRow(os, "breakdown",
             "data " + formatFixed(100 * s.data_frac, 1) + "%, fwd " +
                 formatFixed(100 * s.fwd_frac, 1) + "%, bwd " + formatFixed(100 * s.bwd_frac, 1) +
                 "%, opt " + formatFixed(100 * s.opt_frac, 1) + "%, comm " +
                 formatFixed(100 * s.comm_frac, 1) + "%");
}

// The measured bubble beside the schedule's theory, and the activation traffic.
void pipelineRows(std::ostream& os, const TrainConfig& tc, const TrainSummary& s) {
  const PipePlan& plan = tc.pipeline;
  const std::string formula = theoreticalBubbleFormula(plan);
  summaryRow(os, "pipeline bubble",
             formatFixed(100 * s.bubble_frac_min, 1) + " - " +
                 formatFixed(100 * s.bubble_frac_max, 1) +
                 " % of the pipeline's makespan idle, min - max over ranks; theory " +
                 formatFixed(100 * theoreticalBubble(plan), 1) + " % = " + formula + " (" +
                 pipeScheduleName(tc.pipeline.schedule) + ", p " + std::to_string(tc.layout.pp) + ", m " +
                 std::to_string(tc.training.grad_accum_steps) + ", v " +
                 std::to_string(tc.pipeline.virtual_stages) + ")");
  summaryRow(os, "pipeline p2p sent (rank 0)",
             formatFixed(s.p2p_bytes_per_step / 1e6, 3) + " MB/step");
  for (size_t st = 0; st < s.stage_peak_rss.size() && st < s.stage_estimate.size(); ++st)
    summaryRow(os, "stage " + std::to_string(st) + " peak RSS",
               formatMib(s.stage_peak_rss[st]) + " (max over its ranks); estimate " +
                   formatMib(s.stage_estimate[st]) + " (trainer --estimate-memory), " +
                   formatFixed(100 * (s.stage_estimate[st] / s.stage_peak_rss[st] - 1), 1) +
                   " % against the measured peak");
}

}  // namespace

void printSummary(const TrainConfig& tc, const TrainSummary& s, const RunPeaks& peaks,
                  const std::string& run_dir) {
  std::ostringstream os;
  // Warm-up steps this process ran: those of [first_step, steps) below skip_first_steps.
  const int64_t warmup =
      std::max<int64_t>(0, std::min(tc.metrics.skip_first_steps, s.steps) - s.first_step);
  os << "\n== ftbench summary (";
  if (s.first_step > 0)  // a resumed attempt: its own figures, and the run's whole count beside
    os << "this attempt, resumed at step " << s.first_step << ": ";
  os << s.measured_steps << " measured steps after " << warmup << " warmup";
  if (s.first_step > 0)
    os << "; the run has done " << s.steps << " steps over all its attempts, which "
       << "`sweep_tagger aggregate` covers";
  os << ") ==\n";
  summaryRow(os, "model",
             tc.model.name + " (" + formatFixed(tc.model.numParams() / 1e6, 2) + " M params)");
  summaryRow(os, "layout",
             "world " + std::to_string(tc.layout.world_size) + " = dp " +
                 std::to_string(tc.layout.dpSize()) + " (replicate " +
                 std::to_string(tc.layout.dp_replicate) + " x shard " +
                 std::to_string(tc.layout.dp_shard) + ", ZeRO stage " +
                 std::to_string(tc.layout.effectiveZeroStage()) + ") x tp " +
                 std::to_string(tc.layout.tp) + ", micro-batch " +
                 std::to_string(tc.training.micro_batch_size) + " x accum " +
                 std::to_string(tc.training.grad_accum_steps) + ", seq " +
                 std::to_string(tc.data.seq_len) + ", " +
                 (tc.training.dtype == DType::kBf16 ? "bf16" : "fp32"));
  if (s.measured_steps > 0)
    measuredRows(os, tc, s, peaks);
  else  // nothing was timed: no figure to print, say why
    summaryRow(os, "throughput",
               s.steps == 0 ? "not measured: this process ran no step"
                            : "not measured: every step of this process was warm-up "
                              "(metrics.skip_first_steps = " +
                                  std::to_string(tc.metrics.skip_first_steps) + ")");
  if (tc.layout.pp > 1 && s.measured_steps > 0) pipelineRows(os, tc, s);
  summaryRow(os, "interference (worst rank)",
             s.interference_text +
                 (s.interference_rank < 0
                      ? std::string()
                      : ", rank " + std::to_string(s.interference_rank) +
                            (s.noisy.empty()
                                 ? ": within metrics.max_interference " +
                                       formatFixed(100 * tc.metrics.max_interference, 1) + " %"
                                 : ": NOISY, exceeds metrics.max_interference " +
                                       formatFixed(100 * tc.metrics.max_interference, 1) + " %")));
  summaryRow(os, "peak RSS (max over ranks)", formatFixed(s.peak_rss_max / (1 << 20), 1) + " MiB");
  if (s.device_peak_allocated_max >= 0)
    summaryRow(os, "GPU peak alloc / reserved",
               formatFixed(s.device_peak_allocated_max / (1 << 20), 1) + " / " +
                   formatFixed(s.device_peak_reserved_max / (1 << 20), 1) +
                   " MiB (CUDA caching allocator, max over ranks)");
  summaryRow(os, "memory in use, growth after warm-up",
             std::isnan(s.rss_growth_max)
                 ? "not measured: fewer than two samples " + formatFixed(RssWatch::kSettleS, 0) +
                       " s after warm-up"
                 : formatFixed(100 * s.rss_growth_max, 1) + " % (max over ranks; " +
                       formatFixed(s.rss_slope_max, 2) + " MiB/s over " +
                       formatFixed(s.rss_window_s, 1) + " s)");
  if (s.steps > 0)
    summaryRow(os, "loss first / last",
               formatFixed(s.first_loss, 5) + " / " + formatFixed(s.last_loss, 5));
  if (tc.metrics.price_per_hour > 0 && s.tokens_per_s_dataset > 0) {
    const double mt_per_hour = s.tokens_per_s_dataset * 3600 / 1e6;
    summaryRow(os, "M tokens/hour (dataset)", formatFixed(mt_per_hour, 3));
    summaryRow(os, "$ per M tokens",
               formatFixed(tc.metrics.price_per_hour * tc.layout.world_size / mt_per_hour, 4) +
                   " (at $" + formatFixed(tc.metrics.price_per_hour, 2) + "/device-hour)");
  }
  summaryRow(os, "run directory", run_dir);
  std::fputs(os.str().c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace ftb
