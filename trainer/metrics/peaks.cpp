#include "trainer/metrics/peaks.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "common/config.h"
#include "common/log.h"
#include "trainer/metrics/perf.h"

namespace ftb {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

double RunPeaks::mfuPeak() const { return hw.flops > 0 && check.ok ? hw.flops : kNaN; }
double RunPeaks::gemmPeak() const { return gemm_flops > 0 ? gemm_flops : kNaN; }

std::vector<std::pair<std::string, AttrValue>> RunPeaks::attrs() const {
  std::vector<std::pair<std::string, AttrValue>> a = {
      {"peak_unit", hw.unit},
      {"peak_cores", int64_t{hw.cores}},
      {"peak_clock_hz", hw.clock_hz},
      {"peak_flops_per_cycle", hw.flops_per_cycle},
      {"peak_check", check.ok ? std::string("ok") : check.message},
      {"cpu_isa", isa},
      {"gemm_flops", gemm_flops},
      {"gemm_source", gemm_source},
      {"gemm_flops_start", gemm_start},
      {"gemm_flops_cached", gemm_cached},
      {"gemm_key", gemm_key},
      {"gemm_warning", gemm_warning}};
  a.insert(a.end(), gemm_attrs.begin(), gemm_attrs.end());
  return a;
}

RunPeaks unmeasuredPeaks(const std::string& why) {
  RunPeaks p;
  p.hw.source = why;
  p.gemm_source = why;
  return p;
}

PeakFlops hardwarePeak(const CpuInfo& cpu, const std::string& device, const std::string& gpu_name,
                       const std::string& dtype, int threads, double peak_tflops) {
  PeakFlops computed;
  if (device.rfind("cuda", 0) == 0) {
    computed = gpuPeak(gpu_name, dtype);
  } else {
    // A rank's threads can use at most min(threads, bound physical cores) FMA units.
    const int cores = std::min(std::max(threads, 1), std::max(cpu.bound_physical_cores, 1));
    computed = cpuPeak(loadOrMeasureCpuUnits(cpu), dtype, cores);
  }
  return applyPeakOverride(computed, peak_tflops);
}

int64_t peakGemmSize(const std::string& device, torch::ScalarType dtype) {
  if (device.rfind("cuda", 0) == 0) return kPeakGemmNGpu;
  return fitGemmSize(dtype, kPeakGemmN, kPeakGemmProductS);
}

std::string gemmKey(const std::string& dtype, int64_t n, int threads, const std::string& blas) {
  std::string key = dtype + " " + std::to_string(n) + "^3 " + std::to_string(threads) + "t " + blas;
  if (const char* ct = std::getenv("OPENBLAS_CORETYPE"); ct && *ct)
    key += std::string(" OPENBLAS_CORETYPE=") + ct;
  return key;
}

namespace {

std::string gflops(double f) { return formatFixed(f / 1e9, 1) + " GFLOP/s"; }

// The start figure against the host's best: the denominator, and the busy-machine flag.
void applyHostBest(RunPeaks& p, const CpuInfo& cpu) {
  p.gemm_start = p.gemm_flops;
  if (!(p.gemm_start > 0)) return;
  const GemmBest b = recordGemmFigure(cpu, p.gemm_key, p.gemm_start);
  p.gemm_cached = b.cached;
  p.gemm_flops = b.best;
  p.gemm_cache_file = b.cache_file;
  if (b.cached > 0 && p.gemm_start < (1 - kGemmBusyFraction) * b.cached)
    p.gemm_warning = "machine was busy: the GEMM at start-up ran at " + gflops(p.gemm_start) +
                     ", " + formatFixed(100 * (1 - p.gemm_start / b.cached), 0) +
                     " % below the best measured on this host (" + gflops(b.cached) + ", " +
                     b.cache_file +
                     "); gemm_efficiency divides by that best, and this run's "
                     "throughput may be low for the same reason";
}

}  // namespace

RunPeaks resolvePeaks(const TrainConfig& tc, const CpuInfo& cpu, const std::string& device,
                      const std::string& gpu_name, const GemmFigure* measured) {
  RunPeaks p;
  const bool bf16 = tc.training.dtype == DType::kBf16;
  const std::string dtype = bf16 ? "bf16" : "fp32";
  const int threads = at::get_num_threads();
  p.isa = cpu.isaString();
  p.hw = hardwarePeak(cpu, device, gpu_name, dtype, threads, tc.metrics.peak_tflops);
  std::string via, blas = device == "cpu" ? "ATen" : gpu_name.empty() ? device : gpu_name;
  const auto st = bf16 ? torch::kBFloat16 : torch::kFloat32;
  const int64_t n = p.gemm_n = measured              ? measured->n
                                : tc.metrics.gemm_probe ? peakGemmSize(device, st)
                                                        : 0;
  if (measured) {
    p.gemm_flops = measured->flops;
    via = measured->via;
    p.gemm_attrs = measured->attrs;
    if (!measured->blas.empty()) blas = measured->blas;
    p.remeasure = measured->remeasure;
  } else if (tc.metrics.gemm_probe) {
    p.gemm_flops = measureGemmPeak(st, n, kPeakGemmReps);
    p.remeasure = [st, n] { return measureGemmPeak(st, n, kPeakGemmReps); };
  }
  if (!(p.gemm_flops > 0)) {  // not timed: nothing to divide by, to cache or to re-check
    p.gemm_flops = 0;
    p.gemm_n = 0;
    p.remeasure = nullptr;
    p.gemm_source = "not measured (metrics.gemm_probe = false)";
    return p;  // p.check stays ok: no GEMM to hold against the peak
  }
  p.gemm_key = gemmKey(dtype, n, threads, blas);
  applyHostBest(p, cpu);
  p.gemm_source = dtype + " GEMM " + std::to_string(n) + "^3 on " + device +
                  (gpu_name.empty() ? "" : " (" + gpu_name + ")") + ", " + std::to_string(threads) +
                  " thread(s), best of " + std::to_string(kPeakGemmReps) + via +
                  "; the best on this host" +
                  (p.gemm_cache_file.empty() ? std::string(" (no cache: this run's figure)")
                                             : " (" + p.gemm_cache_file + ")") +
                  ", this run's start figure " + gflops(p.gemm_start);
  p.check = checkGemmAgainstPeak(p.gemm_flops, p.hw);
  if (!p.check.ok) FTB_WARN(p.check.message);
  if (!p.gemm_warning.empty()) FTB_WARN(p.gemm_warning);
  return p;
}

void finishGemm(RunPeaks& p, const CpuInfo& cpu, MetricsFile& metrics, double run_seconds) {
  if (!(p.gemm_start > 0) || !p.remeasure) return;
  const double n = double(p.gemm_n), cost = (kPeakGemmReps + 1) * 2 * n * n * n / p.gemm_start;
  // Test hook (tests/e2e/trainer/test_gemm_denominator.py): FTB_TEST_GEMM_RECHECK=1 re-checks
  // after a run of any length.
  const char* always = std::getenv("FTB_TEST_GEMM_RECHECK");
  if (run_seconds < 20 * cost && !(always && std::string(always) == "1")) {
    FTB_INFO("GEMM not re-measured after the last step: the measured steps took "
             << formatFixed(run_seconds, 1) << " s, under 20 x the re-check's ~"
             << formatFixed(cost, 1) << " s");
    return;
  }
  p.gemm_end = p.remeasure();
  recordGemmFigure(cpu, p.gemm_key, p.gemm_end);
  metrics.setRootAttr("gemm_flops_end", p.gemm_end);
  FTB_INFO("GEMM after the last step: " << gflops(p.gemm_end) << " (start " << gflops(p.gemm_start)
                                        << ", this run's denominator " << gflops(p.gemm_flops)
                                        << ")");
}

}  // namespace ftb
