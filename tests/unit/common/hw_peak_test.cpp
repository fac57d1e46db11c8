// Tests for the hardware peak (common/hw_peak.h): the CPU microbenchmark against the
// ISA's FLOPs per cycle, the GPU table, the override and the GEMM-above-peak check.
#include "common/hw_peak.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/log.h"

namespace ftb {
namespace {

// FLOPs per cycle per FMA pipe the ISA defines: lanes × 2 (multiply + add).
double isaFlopsPerPipe(const std::string& unit) {
  if (unit == "avx2 FMA") return 8 * 2;
  if (unit == "avx512 FMA") return 16 * 2;
  if (unit == "avx512_bf16") return 32 * 2;
  if (unit == "amx_bf16") return 1024;  // 16x16x32 MACs per 16 cycles on Sapphire Rapids
  return 0;
}

TEST(HwPeak, CpuPeakIsIsaFlopsPerCycleTimesMeasuredClock) {
  CpuInfo cpu = detectCpu();
  if (!cpu.avx2 && !cpu.avx512f) GTEST_SKIP() << "no FMA unit on " << cpu.model_name;
  CpuUnits u = measureCpuUnits(cpu);
  // The dependent-add clock is a real CPU clock (loose: VMs, turbo, load).
  EXPECT_GT(u.clock_hz, 0.5e9);
  EXPECT_LT(u.clock_hz, 7e9);
  ASSERT_FALSE(u.units.empty());
  for (const CpuUnit& cu : u.units) {
    const double per_pipe = isaFlopsPerPipe(cu.name);
    ASSERT_GT(per_pipe, 0) << cu.name;
    // 1/2 pipe (double-pumped units such as Zen 4 zmm) up to 4 pipes, each within 35 %.
    EXPECT_GE(cu.measured_flops_per_cycle, 0.5 * per_pipe * 0.65) << cu.name;
    EXPECT_LE(cu.measured_flops_per_cycle, 4 * per_pipe * 1.35) << cu.name;
    EXPECT_EQ(cu.flops_per_cycle, roundToPowerOfTwo(cu.measured_flops_per_cycle));
  }
  const std::string fp32_unit = cpu.bestFmaUnit();
  ASSERT_NE(u.find(fp32_unit), nullptr) << fp32_unit;
  PeakFlops p = cpuPeak(u, "fp32", 2);
  EXPECT_DOUBLE_EQ(p.flops, 2 * u.clock_hz * p.flops_per_cycle);
  EXPECT_GE(p.flops_per_cycle, u.find(fp32_unit)->flops_per_cycle);
  EXPECT_NE(p.source.find(cpu.model_name), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("2 core(s)"), std::string::npos) << p.source;
  // bf16 never has a lower peak than fp32: its best unit includes the fp32 FMAs.
  EXPECT_GE(cpuPeak(u, "bf16", 2).flops, p.flops);
}

TEST(HwPeak, RoundToPowerOfTwo) {
  EXPECT_EQ(roundToPowerOfTwo(31.0), 32.0);
  EXPECT_EQ(roundToPowerOfTwo(40.0), 32.0);
  EXPECT_EQ(roundToPowerOfTwo(50.0), 64.0);
  EXPECT_EQ(roundToPowerOfTwo(0.0), 0.0);
}

TEST(HwPeak, CpuPeakPicksBestUnitPerDtype) {
  CpuUnits u;
  u.model_name = "Test CPU";
  u.clock_hz = 2e9;
  u.units = {{"avx2 FMA", 31, 32}, {"avx512 FMA", 60, 64}, {"amx_bf16", 1000, 1024}};
  EXPECT_EQ(cpuPeak(u, "fp32", 4).unit, "avx512 FMA");
  EXPECT_DOUBLE_EQ(cpuPeak(u, "fp32", 4).flops, 4 * 2e9 * 64);
  EXPECT_EQ(cpuPeak(u, "bf16", 1).unit, "amx_bf16");
  EXPECT_DOUBLE_EQ(cpuPeak(u, "bf16", 1).flops, 2e9 * 1024);
  EXPECT_EQ(cpuPeak(u, "fp32", 0).flops, 0);  // no cores: unknown, not zero MFU
}

TEST(HwPeak, CacheRoundTripPerHostAndModel) {
  const std::string dir = testing::TempDir() + "/ftb_peak_cache";
  std::filesystem::remove_all(dir);
  setenv("FTB_CACHE_DIR", dir.c_str(), 1);
  CpuInfo cpu = detectCpu();
  CpuUnits first = loadOrMeasureCpuUnits(cpu);
  EXPECT_FALSE(first.from_cache);
  ASSERT_FALSE(first.cache_file.empty());
  EXPECT_EQ(first.cache_file.rfind(dir, 0), 0u) << first.cache_file;
  CpuUnits second = loadOrMeasureCpuUnits(cpu);
  EXPECT_TRUE(second.from_cache);
  EXPECT_NEAR(second.clock_hz, first.clock_hz, 1e-6 * first.clock_hz);
  ASSERT_EQ(second.units.size(), first.units.size());
  for (size_t i = 0; i < first.units.size(); ++i) {
    EXPECT_EQ(second.units[i].name, first.units[i].name);
    EXPECT_EQ(second.units[i].flops_per_cycle, first.units[i].flops_per_cycle);
  }
  // Another CPU model on the same host does not reuse the figures.
  CpuInfo other = cpu;
  other.model_name = "Some Other CPU";
  EXPECT_NE(cpuPeakCacheFile(other, "h"), cpuPeakCacheFile(cpu, "h"));
  { std::ofstream(first.cache_file) << "ftbench cpu peak v1\nmodel Some Other CPU\n"; }
  EXPECT_FALSE(loadOrMeasureCpuUnits(cpu).from_cache);  // stale file: re-measured
  unsetenv("FTB_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

TEST(HwPeak, GemmFigureLinesKeepTheBestPerKey) {
  const std::string text =
      "ftbench cpu peak v1\nmodel M\ngemm 5e10 fp32 2048 t1 ATen\n"
      "gemm 7e10 fp32 2048 t2 ATen\n";
  EXPECT_EQ(cachedGemmFigure(text, "fp32 2048 t1 ATen"), 5e10);
  EXPECT_EQ(cachedGemmFigure(text, "fp32 2048 t2 ATen"), 7e10);
  EXPECT_EQ(cachedGemmFigure(text, "fp32 2048 t1"), 0) << "a key prefix is another key";
  const std::string updated = withGemmFigure(text, "fp32 2048 t1 ATen", 6e10);
  EXPECT_EQ(cachedGemmFigure(updated, "fp32 2048 t1 ATen"), 6e10);
  EXPECT_EQ(cachedGemmFigure(updated, "fp32 2048 t2 ATen"), 7e10);
  EXPECT_EQ(updated.rfind("ftbench cpu peak v1\nmodel M\n", 0), 0u) << updated;
}

// The best figure per key survives lower figures, other processes' files and a re-measure
// of the CPU units (all in the one cache file per host and CPU model).
TEST(HwPeak, RecordGemmFigureKeepsTheBestInThePeakCache) {
  const std::string dir = testing::TempDir() + "/ftb_gemm_cache";
  std::filesystem::remove_all(dir);
  setenv("FTB_CACHE_DIR", dir.c_str(), 1);
  const CpuInfo cpu = detectCpu();
  GemmBest a = recordGemmFigure(cpu, "fp32 2048 t1 ATen", 4e10);
  EXPECT_EQ(a.cached, 0);
  EXPECT_EQ(a.best, 4e10);
  EXPECT_EQ(a.cache_file, cpuPeakCacheFile(cpu, hostName()));
  GemmBest b = recordGemmFigure(cpu, "fp32 2048 t1 ATen", 3e10);  // a busy start
  EXPECT_EQ(b.cached, 4e10);
  EXPECT_EQ(b.best, 4e10);
  CpuUnits u = loadOrMeasureCpuUnits(cpu);  // the file had no units yet: measured, rewritten
  EXPECT_FALSE(u.from_cache);
  EXPECT_TRUE(loadOrMeasureCpuUnits(cpu).from_cache);
  GemmBest c = recordGemmFigure(cpu, "fp32 2048 t1 ATen", 5e10);
  EXPECT_EQ(c.cached, 4e10) << "the gemm line survived the units' rewrite";
  EXPECT_EQ(recordGemmFigure(cpu, "fp32 2048 t1 ATen", 1).cached, 5e10);
  EXPECT_TRUE(loadOrMeasureCpuUnits(cpu).from_cache) << "gemm lines do not spoil the units";
  unsetenv("FTB_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

TEST(HwPeak, GpuTableLookup) {
  PeakFlops h100 = gpuPeak("NVIDIA H100 80GB HBM3", "bf16");
  EXPECT_DOUBLE_EQ(h100.flops, 989.4e12);
  EXPECT_NE(h100.source.find("H100 SXM"), std::string::npos) << h100.source;
  EXPECT_DOUBLE_EQ(gpuPeak("NVIDIA H100 PCIe", "bf16").flops, 756.0e12);
  EXPECT_DOUBLE_EQ(gpuPeak("NVIDIA A100-SXM4-80GB", "fp32").flops, 19.5e12);
  EXPECT_DOUBLE_EQ(gpuPeak("NVIDIA L40S", "bf16").flops, 362.1e12);
  EXPECT_DOUBLE_EQ(gpuPeak("NVIDIA L4", "bf16").flops, 121.0e12);
  EXPECT_DOUBLE_EQ(gpuPeak("AMD Instinct MI300X", "bf16").flops, 1307.4e12);
  EXPECT_DOUBLE_EQ(gpuPeak("NVIDIA H200", "bf16").flops, 989.4e12);
  PeakFlops unknown = gpuPeak("NVIDIA GeForce GTX 1080", "fp32");
  EXPECT_EQ(unknown.flops, 0);
  EXPECT_NE(unknown.source.find("metrics.peak_tflops"), std::string::npos);
}

TEST(HwPeak, OverrideReplacesComputedPeak) {
  PeakFlops gpu = gpuPeak("NVIDIA A100-SXM4-40GB", "bf16");
  PeakFlops o = applyPeakOverride(gpu, 0.25);
  EXPECT_DOUBLE_EQ(o.flops, 0.25e12);
  EXPECT_EQ(o.unit, "config");
  EXPECT_NE(o.source.find("metrics.peak_tflops"), std::string::npos);
  EXPECT_NE(o.source.find("A100"), std::string::npos) << "keeps the computed figure visible";
  EXPECT_DOUBLE_EQ(applyPeakOverride(gpu, 0).flops, gpu.flops);
}

TEST(HwPeak, GemmAbovePeakIsAPeakErrorNotMfuOver100) {
  PeakFlops p;
  p.flops = 100e9;
  p.source = "CPU test";
  PeakCheck ok = checkGemmAgainstPeak(90e9, p);
  EXPECT_TRUE(ok.ok);
  EXPECT_NEAR(mfuAgainst(45e9, p, ok), 0.45, 1e-12);
  PeakCheck bad = checkGemmAgainstPeak(120e9, p);
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.message.find("peak error"), std::string::npos) << bad.message;
  EXPECT_NE(bad.message.find("120.0"), std::string::npos) << bad.message;
  EXPECT_NE(bad.message.find("metrics.peak_tflops"), std::string::npos) << bad.message;
  EXPECT_TRUE(std::isnan(mfuAgainst(110e9, p, bad)));  // never > 100 %
  EXPECT_TRUE(std::isnan(mfuAgainst(1e9, PeakFlops{}, PeakCheck{})));
}

}  // namespace
}  // namespace ftb
