// The two denominators of the trainer's utilisation figures, resolved once at start.
//
// - mfu = model FLOP/s per device ÷ the HARDWARE peak (PaLM / torchtitan MFU):
//   CPU: common/hw_peak cpuPeak() over the physical cores this rank's intra-op threads
//   can run on (min(threads, bound physical cores)), its measured clock and the best
//   unit for the compute dtype; GPU (device "cuda*"): gpuPeakTable(); metrics.peak_tflops
//   > 0 overrides either. When a GEMM measured here beats that peak, the peak is wrong:
//   mfu is NaN (never > 100 %) and `peak_check` says why.
// - gemm_efficiency = the same model FLOP/s ÷ the best square GEMM measured on this host
//   in the compute dtype with the run's threads and BLAS: how well the step uses the
//   matmul this environment delivers, not the hardware. The GEMM is timed before the
//   first step (resolvePeaks) and after the last (finishGemm); each figure goes to the
//   peak cache (recordGemmFigure, per host and CPU model, keyed by gemmKey()); the
//   denominator is the best figure known when the run starts (the cached best or this
//   start figure), so rows of one host share it. A start figure more than
//   kGemmBusyFraction below the cached best is flagged (gemm_warning): the machine was
//   busy.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/cpu_info.h"
#include "common/h5_metrics.h"
#include "common/hw_peak.h"
#include "common/run_config.h"

namespace ftb {

// The GEMM behind gemm_efficiency: n^3 in the compute dtype, best of kPeakGemmReps, with
// n = kPeakGemmNGpu on a GPU (2048^3 takes ~20 us there, too short to reach its peak) and
// on the CPU the largest power of two up to kPeakGemmN whose product takes at most
// kPeakGemmProductS (perf.h fitGemmSize): 2048 in fp32 on every CPU of ours, less in a
// dtype the CPU has no fast kernel for. With metrics.gemm_probe = false nothing is timed
// (unless training.fp32_gemm = "auto" timed its routes): gemm_flops, gemm_n 0, gemm_key "",
// no re-check, no host-best cache entry; MFU against the hardware peak is unaffected.
inline constexpr int64_t kPeakGemmN = 2048;
inline constexpr int64_t kPeakGemmNGpu = 8192;
inline constexpr int kPeakGemmReps = 3;
inline constexpr double kPeakGemmProductS = 2.0;
int64_t peakGemmSize(const std::string& device, torch::ScalarType dtype);

struct RunPeaks {
  PeakFlops hw;             // hardware peak, or the config override
  PeakCheck check;          // measured GEMM vs hw
  std::string isa;          // CpuInfo::isaString() of this machine
  double gemm_flops = 0;    // the denominator: best GEMM FLOP/s on this host (0 = not measured)
  std::string gemm_source;  // "fp32 GEMM 2048^3, 2 thread(s), best of 3"
  std::vector<std::pair<std::string, AttrValue>> gemm_attrs;  // GemmFigure::attrs
  double gemm_start = 0, gemm_end = 0;  // this run's figures before / after the steps
  double gemm_cached = 0;               // the cache's best before this run (0 = none)
  int64_t gemm_n = kPeakGemmN;          // the GEMM's size (0 = not timed)
  std::string gemm_key, gemm_cache_file;
  std::string gemm_warning;           // "" or why the start figure says the machine was busy
  std::function<double()> remeasure;  // times the same GEMM again (finishGemm)

  // Denominators for StepLog: NaN when the figure cannot be reported.
  double mfuPeak() const;
  double gemmPeak() const;
  // Root attributes of the metrics file: peak_unit, peak_cores, peak_clock_hz,
  // peak_flops_per_cycle, peak_check, cpu_isa, gemm_flops, gemm_source, gemm_flops_start,
  // gemm_flops_cached, gemm_key, gemm_warning (peak_flops and peak_source are RunInfo
  // fields; gemm_flops_end is written by finishGemm).
  std::vector<std::pair<std::string, AttrValue>> attrs() const;
};

// No GEMM and no CPU measurement: for runs refused before they start.
RunPeaks unmeasuredPeaks(const std::string& why);

// Hardware peak of this rank for `dtype` ("fp32"|"bf16") on `device` ("cpu" or
// "cuda[:N]" with its device name in `gpu_name`), override applied. Pure but for the
// cached CPU measurement (loadOrMeasureCpuUnits).
PeakFlops hardwarePeak(const CpuInfo& cpu, const std::string& device, const std::string& gpu_name,
                       const std::string& dtype, int threads, double peak_tflops);

// A GEMM the caller measured on the BLAS its model uses (for fp32 on the CPU, the session's
// choice between ATen and OpenBLAS, trainer/model/linear.h): its FLOP/s, " via <BLAS> (<why>)"
// for gemm_source, and the attributes that record the choice.
struct GemmFigure {
  double flops = 0;
  int64_t n = kPeakGemmN;  // the product's size
  std::string via;
  std::vector<std::pair<std::string, AttrValue>> attrs;
  std::string blas;                   // the BLAS's name, part of gemmKey()
  std::function<double()> remeasure;  // times the same GEMM again
};

// The cache key of a GEMM figure: "<dtype> <n>^3 <threads>t <blas>[ OPENBLAS_CORETYPE=<v>]".
std::string gemmKey(const std::string& dtype, int64_t n, int threads, const std::string& blas);

// REQUIRES: intra-op threads already set (at::set_num_threads). Measures the GEMM
// (a few seconds on one core) unless `measured` gives it or tc.metrics.gemm_probe is false
// (a `measured` with flops 0 counts as not timed), resolves the hardware peak,
// checks one against the other and logs a warning on this rank when the peak is wrong.
RunPeaks resolvePeaks(const TrainConfig& tc, const CpuInfo& cpu, const std::string& device,
                      const std::string& gpu_name, const GemmFigure* measured = nullptr);

// After the last step: times the GEMM again (p.remeasure), records it in the cache
// (later runs divide by it when it is the best), sets p.gemm_end and writes root attr
// gemm_flops_end. No-op when the start GEMM was not measured, or when `run_seconds` (the
// measured steps' wall time) is under 20 times the re-check's cost. Logs the figure.
void finishGemm(RunPeaks& p, const CpuInfo& cpu, MetricsFile& metrics, double run_seconds);

}  // namespace ftb
