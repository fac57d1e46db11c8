#include "trainer/metrics/peaks.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "trainer/kernels/openblas.h"
#include "trainer/metrics/perf.h"
#include "trainer/model/linear.h"

namespace ftb {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kGemmN = 2048;
constexpr int kGemmReps = 3;

std::string gflops(double f) { return formatFixed(f / 1e9, 1) + " GFLOP/s"; }

// training.fp32_gemm: "aten", "openblas", or "auto" = whichever of the two ran the 2048^3
// GEMM faster here and now (both timed when OpenBLAS loads). Fills the route and the GEMM
// figures of `p`; an explicit "openblas" that cannot load is a ConfigError.
void chooseFp32Gemm(const TrainConfig& tc, RunPeaks& p) {
  std::string why;
  const bool have_openblas = kernels::openblas(&why) != nullptr;
  if (tc.fp32_gemm == "openblas" && !have_openblas)
    throw ConfigError("training.fp32_gemm", "config", "\"openblas\" but libopenblas.so.0 does "
                      "not load: " + why, "install libopenblas0 or use \"auto\" or \"aten\"");
  p.fp32_gemm_aten = tc.fp32_gemm == "openblas" ? 0 : measureFp32Gemm(Fp32Gemm::kAten, kGemmN, kGemmReps);
  p.fp32_gemm_openblas = tc.fp32_gemm == "aten" || !have_openblas
                             ? 0 : measureFp32Gemm(Fp32Gemm::kOpenBlas, kGemmN, kGemmReps);
  p.fp32_route = p.fp32_gemm_openblas > p.fp32_gemm_aten ? Fp32Gemm::kOpenBlas : Fp32Gemm::kAten;
  p.gemm_flops = std::max(p.fp32_gemm_aten, p.fp32_gemm_openblas);
  std::string how = "training.fp32_gemm = \"" + tc.fp32_gemm + "\"";
  if (tc.fp32_gemm == "auto")
    how += have_openblas ? ": the faster of ATen " + gflops(p.fp32_gemm_aten) + " and OpenBLAS " +
                               gflops(p.fp32_gemm_openblas)
                         : ": OpenBLAS does not load (" + why + ")";
  p.gemm_source_extra = " via " + fp32GemmName(p.fp32_route) + " (" + how + ")";
}

}  // namespace

double RunPeaks::mfuPeak() const { return hw.flops > 0 && check.ok ? hw.flops : kNaN; }
double RunPeaks::gemmPeak() const { return gemm_flops > 0 ? gemm_flops : kNaN; }

std::vector<std::pair<std::string, AttrValue>> RunPeaks::attrs() const {
  return {{"peak_unit", hw.unit},
          {"peak_cores", int64_t{hw.cores}},
          {"peak_clock_hz", hw.clock_hz},
          {"peak_flops_per_cycle", hw.flops_per_cycle},
          {"peak_check", check.ok ? std::string("ok") : check.message},
          {"cpu_isa", isa},
          {"gemm_flops", gemm_flops},
          {"gemm_source", gemm_source},
          {"fp32_gemm", fp32GemmName(fp32_route)},
          {"fp32_gemm_aten_flops", fp32_gemm_aten},
          {"fp32_gemm_openblas_flops", fp32_gemm_openblas}};
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
                      const std::string& gpu_name) {
  RunPeaks p;
  const bool bf16 = tc.dtype == DType::kBf16;
  const std::string dtype = bf16 ? "bf16" : "fp32";
  const int threads = at::get_num_threads();
  p.isa = cpu.isaString();
  p.hw = hardwarePeak(cpu, device, gpu_name, dtype, threads, tc.peak_tflops);
  if (!bf16 && device == "cpu") {
    chooseFp32Gemm(tc, p);
  } else {
    p.gemm_flops = measureGemmPeak(bf16 ? torch::kBFloat16 : torch::kFloat32, kGemmN, kGemmReps);
  }
  p.gemm_source = dtype + " GEMM " + std::to_string(kGemmN) + "^3 on " + device + ", " +
                  std::to_string(threads) + " thread(s), best of " + std::to_string(kGemmReps) +
                  p.gemm_source_extra;
  p.check = checkGemmAgainstPeak(p.gemm_flops, p.hw);
  if (!p.check.ok) FTB_WARN(p.check.message);
  return p;
}

}  // namespace ftb
