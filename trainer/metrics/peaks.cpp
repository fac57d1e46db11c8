#include "trainer/metrics/peaks.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>

#include "common/log.h"
#include "trainer/metrics/perf.h"

namespace ftb {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

double RunPeaks::mfuPeak() const { return hw.flops > 0 && check.ok ? hw.flops : kNaN; }
double RunPeaks::gemmPeak() const { return gemm_flops > 0 ? gemm_flops : kNaN; }

std::vector<std::pair<std::string, AttrValue>> RunPeaks::attrs() const {
  std::vector<std::pair<std::string, AttrValue>> a = {{"peak_unit", hw.unit},
          {"peak_cores", int64_t{hw.cores}},
          {"peak_clock_hz", hw.clock_hz},
          {"peak_flops_per_cycle", hw.flops_per_cycle},
          {"peak_check", check.ok ? std::string("ok") : check.message},
          {"cpu_isa", isa},
          {"gemm_flops", gemm_flops},
          {"gemm_source", gemm_source}};
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

RunPeaks resolvePeaks(const TrainConfig& tc, const CpuInfo& cpu, const std::string& device,
                      const std::string& gpu_name, const GemmFigure* measured) {
  RunPeaks p;
  const bool bf16 = tc.dtype == DType::kBf16;
  const std::string dtype = bf16 ? "bf16" : "fp32";
  const int threads = at::get_num_threads();
  p.isa = cpu.isaString();
  p.hw = hardwarePeak(cpu, device, gpu_name, dtype, threads, tc.peak_tflops);
  std::string via;
  if (measured) {
    p.gemm_flops = measured->flops;
    via = measured->via;
    p.gemm_attrs = measured->attrs;
  } else {
    p.gemm_flops = measureGemmPeak(bf16 ? torch::kBFloat16 : torch::kFloat32, kPeakGemmN, kPeakGemmReps);
  }
  p.gemm_source = dtype + " GEMM " + std::to_string(kPeakGemmN) + "^3 on " + device + ", " +
                  std::to_string(threads) + " thread(s), best of " + std::to_string(kPeakGemmReps) +
                  via;
  p.check = checkGemmAgainstPeak(p.gemm_flops, p.hw);
  if (!p.check.ok) FTB_WARN(p.check.message);
  return p;
}

}  // namespace ftb
