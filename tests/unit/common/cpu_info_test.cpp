// Tests for CPU detection and the OpenBLAS core-type check (common/cpu_info.h).
#include "common/cpu_info.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace ftb {
namespace {

const char* kZen4 =
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
    "model name\t: AMD EPYC 9R14 96-Core Processor\n"
    "flags\t\t: fpu sse2 avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16\n\n"
    "processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: other\nflags\t: sse2\n";
const char* kSpr =
    "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8488C\n"
    "flags\t\t: avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile\n";
const char* kHaswell =
    "vendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU E5-2680 v3\n"
    "flags\t\t: sse2 avx fma avx2\n";

TEST(CpuInfo, ParsesFirstProcessorBlock) {
  CpuInfo c = parseCpuInfo(kZen4);
  EXPECT_EQ(c.model_name, "AMD EPYC 9R14 96-Core Processor");
  EXPECT_EQ(c.vendor, "AuthenticAMD");
  EXPECT_EQ(c.family, 25);
  EXPECT_EQ(c.model, 17);
  EXPECT_TRUE(c.avx512f && c.avx512_bf16 && c.fma && c.avx2);
  EXPECT_FALSE(c.amx_bf16 || c.amx_tile);
  EXPECT_EQ(c.flags_source, "/proc/cpuinfo");
  EXPECT_EQ(c.bestFmaUnit(), "avx512 FMA");
  EXPECT_EQ(c.bestBf16Unit(), "avx512_bf16");
  EXPECT_EQ(c.isaString(), "avx avx2 fma avx512f avx512bw avx512dq avx512vl avx512_bf16");
}

TEST(CpuInfo, UnitsPerIsa) {
  EXPECT_EQ(parseCpuInfo(kSpr).bestBf16Unit(), "amx_bf16");
  EXPECT_EQ(parseCpuInfo(kHaswell).bestFmaUnit(), "avx2 FMA");
  EXPECT_EQ(parseCpuInfo(kHaswell).bestBf16Unit(), "avx2 FMA");
  CpuInfo none = parseCpuInfo("model name: x\nflags: sse sse2\n");
  EXPECT_EQ(none.bestFmaUnit(), "sse2");
  EXPECT_EQ(parseCpuInfo("").model_name, "unknown");
}

TEST(CpuInfo, RecommendedCoretype) {
  EXPECT_EQ(recommendedOpenblasCoretype(parseCpuInfo(kZen4)), "Cooperlake");
  EXPECT_EQ(recommendedOpenblasCoretype(parseCpuInfo(kSpr)), "Cooperlake");
  EXPECT_EQ(recommendedOpenblasCoretype(parseCpuInfo(kHaswell)), "Haswell");
  CpuInfo zen2 = parseCpuInfo("vendor_id: AuthenticAMD\nflags: avx fma avx2\n");
  EXPECT_EQ(recommendedOpenblasCoretype(zen2), "Zen");
  CpuInfo skx = parseCpuInfo(
      "vendor_id: GenuineIntel\nflags: avx fma avx2 avx512f avx512bw "
      "avx512dq avx512vl\n");
  EXPECT_EQ(recommendedOpenblasCoretype(skx), "SkylakeX");
}

TEST(CpuInfo, CoretypeCheckVerdicts) {
  using V = CoretypeCheck::Verdict;
  CpuInfo zen4 = parseCpuInfo(kZen4), hsw = parseCpuInfo(kHaswell);
  EXPECT_EQ(checkOpenblasCoretype(zen4, "").verdict, V::kUnset);
  EXPECT_EQ(checkOpenblasCoretype(zen4, "cooperlake").verdict, V::kOk);  // case-insensitive
  CoretypeCheck below = checkOpenblasCoretype(zen4, "Haswell");
  EXPECT_EQ(below.verdict, V::kBelow);
  EXPECT_NE(below.message.find("OPENBLAS_CORETYPE=Cooperlake"), std::string::npos) << below.message;
  EXPECT_EQ(checkOpenblasCoretype(zen4, "SkylakeX").verdict, V::kBelow);
  EXPECT_EQ(checkOpenblasCoretype(hsw, "SkylakeX").verdict, V::kAbove);
  EXPECT_EQ(checkOpenblasCoretype(hsw, "Zen").verdict, V::kOk);
  EXPECT_EQ(checkOpenblasCoretype(hsw, "Pentium9").verdict, V::kUnknown);
  EXPECT_EQ(checkOpenblasCoretype(parseCpuInfo(kSpr), "SapphireRapids").verdict, V::kOk);
}

TEST(CpuInfo, DetectsThisMachine) {
  CpuInfo c = detectCpu();
  EXPECT_FALSE(c.model_name.empty());
  EXPECT_FALSE(c.flags_source.empty());
  ASSERT_FALSE(c.bound_cpus.empty());
  EXPECT_LE(static_cast<long>(c.bound_cpus.size()), sysconf(_SC_NPROCESSORS_CONF));
  EXPECT_GE(c.bound_physical_cores, 1);
  EXPECT_LE(c.bound_physical_cores, static_cast<int>(c.bound_cpus.size()));
  EXPECT_FALSE(c.boundCpuList().empty());
}

TEST(CpuInfo, BoundCpuListRanges) {
  CpuInfo c;
  c.bound_cpus = {0, 1, 2, 3, 8, 10, 11};
  EXPECT_EQ(c.boundCpuList(), "0-3,8,10-11");
}

}  // namespace
}  // namespace ftb
