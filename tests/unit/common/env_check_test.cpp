// Tests for the start-up environment check (common/env_check.h) on made-up facts. Its
// detection in a process that links libtorch's BLAS: tests/unit/trainer/peaks_test.cpp.
#include "common/env_check.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace ftb {
namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// An AVX512-BF16 CPU bound to 2 CPUs, OpenBLAS forced to Haswell kernels.
EnvFacts zen5WithHaswellBlas() {
  EnvFacts f;
  f.blas = "OpenBLAS 0.3.21 DYNAMIC_ARCH";
  f.blas_core = "Haswell";
  f.openblas_coretype = "Haswell";
  f.blas_isa_level = 3;
  f.cpu_isa_level = 5;
  f.recommended_core = "Cooperlake";
  f.cpu_best_unit = "avx512 FMA";
  f.intra_threads = 2;
  f.blas_threads = 2;
  f.bound_cpus = 2;
  f.bound_physical_cores = 2;
  f.bound_cpu_list = "0-1";
  f.online_cpus = 4;
  return f;
}

PeakFlops cpuPeakOf(double gflops) {
  PeakFlops p;
  p.flops = gflops * 1e9;
  p.unit = "avx512 FMA";
  p.cores = 2;
  return p;
}

TEST(EnvCheck, IsaLevelNames) {
  EXPECT_EQ(isaLevelName(3), "avx2 FMA");
  EXPECT_EQ(isaLevelName(openblasCoretypeLevel("SkylakeX")), "avx512");
  EXPECT_EQ(isaLevelName(6), "amx_bf16");
  EXPECT_EQ(isaLevelName(0), "unknown");
}

TEST(EnvCheck, ThreadsAboveBoundCpusWarnWithTheFix) {
  EnvFacts f = zen5WithHaswellBlas();
  EXPECT_TRUE(envWarnings(f, 180e9, cpuPeakOf(200), "fp32").empty());  // 90 %, 2 on 2
  f.intra_threads = 4;
  auto w = envWarnings(f, 180e9, cpuPeakOf(200), "fp32");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(has(w[0], "4 intra-op thread(s) and 2 BLAS thread(s) on 2 bound CPU(s) (0-1)"))
      << w[0];
  EXPECT_TRUE(has(w[0], "fix: training.threads=2")) << w[0];
  f.intra_threads = 2;
  f.blas_threads = 8;  // OpenBLAS's own pool counts too
  EXPECT_EQ(envWarnings(f, 180e9, cpuPeakOf(200), "fp32").size(), 1u);
}

TEST(EnvCheck, GemmBelowSeventyPercentNamesTheCoretypeCause) {
  EnvFacts f = zen5WithHaswellBlas();
  EXPECT_TRUE(envWarnings(f, 141e9, cpuPeakOf(200), "fp32").empty());  // 70.5 %
  auto w = envWarnings(f, 88e9, cpuPeakOf(200), "fp32");               // 44 %
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(has(w[0],
                  "measured fp32 GEMM 88.0 GFLOP/s is 44 % of the fp32 hardware peak "
                  "200.0 GFLOP/s (avx512 FMA, 2 core(s)), below 70 %"))
      << w[0];
  EXPECT_TRUE(has(w[0],
                  "cause: OpenBLAS runs its Haswell (avx2 FMA) kernels because "
                  "OPENBLAS_CORETYPE=Haswell on a CPU with avx512_bf16"))
      << w[0];
  EXPECT_TRUE(has(w[0], "fix: unset OPENBLAS_CORETYPE or set it to Cooperlake")) << w[0];
  EXPECT_EQ(w[0].find('\n'), std::string::npos);  // one line
}

TEST(EnvCheck, GemmCauseFallsBackInOrder) {
  EnvFacts f = zen5WithHaswellBlas();
  f.blas_core = "Cooperlake";
  f.blas_isa_level = 5;
  f.openblas_coretype.clear();
  f.intra_threads = 3;  // oversubscribed: both lines, the GEMM one blames the threads
  auto w = envWarnings(f, 50e9, cpuPeakOf(200), "fp32");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_TRUE(has(w[1], "cause: 3 intra-op thread(s)")) << w[1];
  f.intra_threads = 2;
  w = envWarnings(f, 50e9, cpuPeakOf(200), "bf16");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(has(w[0], "cause: this libtorch's bf16 matmul does not reach the avx512 FMA"))
      << w[0];
  w = envWarnings(f, 50e9, cpuPeakOf(200), "fp32");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(has(w[0], "cause: other processes on these cores")) << w[0];
}

TEST(EnvCheck, ConfigOrGpuPeakIsNotAnFmaPeak) {
  PeakFlops config = applyPeakOverride(PeakFlops{}, 1.0);
  EXPECT_TRUE(envWarnings(zen5WithHaswellBlas(), 1e9, config, "fp32").empty());
}

TEST(EnvCheck, AttrsHoldEveryFactAndTheWarnings) {
  EnvFacts f = zen5WithHaswellBlas();
  std::map<std::string, AttrValue> a;
  for (auto& [k, v] : envAttrs(f, {"one", "two"})) a[k] = v;
  EXPECT_EQ(std::get<std::string>(a.at("env_blas_core")), "Haswell");
  EXPECT_EQ(std::get<std::string>(a.at("env_blas_isa")), "avx2 FMA");
  EXPECT_EQ(std::get<std::string>(a.at("env_cpu_isa_best")), "avx512_bf16");
  EXPECT_EQ(std::get<int64_t>(a.at("env_intra_threads")), 2);
  EXPECT_EQ(std::get<std::string>(a.at("env_core_binding")),
            "bound to CPUs 0-1 (2 of 4 online, 2 physical cores)");
  EXPECT_EQ(std::get<std::string>(a.at("env_warnings")), "one\ntwo");
  for (const char* k : {"env_blas", "env_openblas_coretype", "env_blas_threads",
                        "env_blas_threads_source", "env_omp_num_threads", "env_bound_cpus",
                        "env_bound_physical_cores", "env_online_cpus", "env_allocator"})
    EXPECT_TRUE(a.count(k)) << k;
}

}  // namespace
}  // namespace ftb
