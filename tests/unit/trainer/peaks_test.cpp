// The two utilisation denominators (trainer/metrics/peaks.h), and the start-up environment
// check (common/env_check.h) detecting a process that links libtorch and its BLAS, so that
// the OpenBLAS introspection runs (common_tests links no BLAS).
#include "trainer/metrics/peaks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "common/env_check.h"

namespace ftb {
namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(EnvCheck, DetectsThisProcess) {
  CpuInfo cpu = detectCpu();
  EnvFacts f = detectEnv(cpu, 3);
  EXPECT_EQ(f.intra_threads, 3);
  EXPECT_EQ(f.bound_cpus, static_cast<int>(cpu.bound_cpus.size()));
  EXPECT_GE(f.online_cpus, f.bound_cpus);
  EXPECT_EQ(f.cpu_isa_level, cpuIsaLevel(cpu));
  // libtorch here links OpenBLAS: its config and core name come from the library itself.
  if (has(f.blas, "OpenBLAS")) {
    EXPECT_FALSE(f.blas_core.empty());
    EXPECT_GT(f.blas_threads, 0);
    EXPECT_EQ(f.blas_isa_level, openblasCoretypeLevel(f.blas_core));
  }
  const char* ct = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(f.openblas_coretype, ct ? ct : "");
  EXPECT_FALSE(f.allocator.empty());
}

TEST(RunPeaks, MfuIsNaNWhenTheGemmBeatsThePeak) {
  RunPeaks p;
  p.hw.flops = 100e9;
  p.hw.unit = "avx512 FMA";
  p.hw.cores = 2;
  p.gemm_flops = 110e9;
  p.check = checkGemmAgainstPeak(p.gemm_flops, p.hw);
  EXPECT_TRUE(std::isnan(p.mfuPeak()));  // never MFU > 100 %
  EXPECT_EQ(p.gemmPeak(), 110e9);
  p.gemm_flops = 90e9;
  p.check = checkGemmAgainstPeak(p.gemm_flops, p.hw);
  EXPECT_EQ(p.mfuPeak(), 100e9);
  std::map<std::string, AttrValue> a;
  for (auto& [k, v] : p.attrs()) a[k] = v;
  EXPECT_EQ(std::get<std::string>(a.at("peak_check")), "ok");
  EXPECT_EQ(std::get<int64_t>(a.at("peak_cores")), 2);
  EXPECT_EQ(std::get<double>(a.at("gemm_flops")), 90e9);
  EXPECT_TRUE(std::isnan(unmeasuredPeaks("refused").mfuPeak()));
  EXPECT_TRUE(std::isnan(unmeasuredPeaks("refused").gemmPeak()));
}

TEST(RunPeaks, HardwarePeakPerDevice) {
  CpuInfo cpu = detectCpu();
  if (!cpu.avx2 && !cpu.avx512f) GTEST_SKIP() << "no FMA unit on " << cpu.model_name;
  char tmpl[] = "/tmp/ftb_env_check_test_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  setenv("FTB_CACHE_DIR", dir.c_str(), 1);
  // One thread can use one core, whatever the binding.
  PeakFlops one = hardwarePeak(cpu, "cpu", "", "fp32", 1, 0);
  EXPECT_EQ(one.cores, 1);
  EXPECT_GT(one.flops, 1e9);
  PeakFlops many = hardwarePeak(cpu, "cpu", "", "fp32", 1000, 0);
  EXPECT_EQ(many.cores, cpu.bound_physical_cores);
  EXPECT_EQ(hardwarePeak(cpu, "cuda:1", "NVIDIA A100-SXM4-80GB", "bf16", 1, 0).flops, 312e12);
  PeakFlops over = hardwarePeak(cpu, "cpu", "", "fp32", 1, 2.5);
  EXPECT_EQ(over.flops, 2.5e12);
  EXPECT_EQ(over.unit, "config");
  unsetenv("FTB_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ftb
