// common/env_check.h, the launcher's half: which BLAS and allocator a program links
// (parseLoaderList) and what loading them shows (detectEnvOf, envSummary).
#include <gtest/gtest.h>

#include <string>

#include "common/env_check.h"

namespace ftb {
namespace {

// `ld.so --list build/release/trainer/trainer` on Debian 12, shortened.
const char* kTrainerList =
    "\tlinux-vdso.so.1 (0x00007ffd5a1f0000)\n"
    "\tlibjemalloc.so.2 => /lib/x86_64-linux-gnu/libjemalloc.so.2 (0x00007f6e6f200000)\n"
    "\tlibtorch_cpu.so.1.13 => /lib/x86_64-linux-gnu/libtorch_cpu.so.1.13 (0x00007f6e67a00000)\n"
    "\tlibmissing.so.9 => not found\n"
    "\tlibblas.so.3 => /lib/x86_64-linux-gnu/libblas.so.3 (0x00007f6e6ed97000)\n"
    "\tlibopenblas.so.0 => /lib/x86_64-linux-gnu/libopenblas.so.0 (0x00007f6e5df18000)\n"
    "\t/lib64/ld-linux-x86-64.so.2 (0x00007f6e6f9d0000)\n";

TEST(LoaderList, PicksTheFirstBlasAndTheAllocator) {
  const LinkedLibs libs = parseLoaderList(kTrainerList);
  EXPECT_EQ(libs.blas, "/lib/x86_64-linux-gnu/libblas.so.3");
  EXPECT_EQ(libs.allocator, "/lib/x86_64-linux-gnu/libjemalloc.so.2");
}

TEST(LoaderList, NothingFoundAndNotFoundLinesAreSkipped) {
  const LinkedLibs libs = parseLoaderList(
      "\tlibblas.so.3 => not found\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n");
  EXPECT_EQ(libs.blas, "");
  EXPECT_EQ(libs.allocator, "");
  EXPECT_EQ(parseLoaderList("").blas, "");
}

TEST(LoaderList, MklAndTcmallocAreRecognised) {
  const LinkedLibs libs = parseLoaderList(
      "\tlibtcmalloc_minimal.so.4 => /usr/lib/libtcmalloc_minimal.so.4 (0x1)\n"
      "\tlibmkl_rt.so.2 => /opt/intel/lib/libmkl_rt.so.2 (0x2)\n");
  EXPECT_EQ(libs.blas, "/opt/intel/lib/libmkl_rt.so.2");
  EXPECT_EQ(libs.allocator, "/usr/lib/libtcmalloc_minimal.so.4");
}

TEST(DetectEnvOf, NamesWhatIsMissingOrDoesNotLoad) {
  const CpuInfo cpu = detectCpu();
  EnvFacts f = detectEnvOf({}, cpu, 2);
  EXPECT_EQ(f.blas, "none linked");
  EXPECT_EQ(f.allocator, "glibc malloc");
  EXPECT_EQ(f.intra_threads, 2);
  EXPECT_EQ(f.cpu_isa_level, cpuIsaLevel(cpu));
  f = detectEnvOf({"/nonexistent/libopenblas.so.0", ""}, cpu, 0);
  EXPECT_NE(f.blas.find("unknown (/nonexistent/libopenblas.so.0 does not load here: "),
            std::string::npos)
      << f.blas;
  const std::string s = envSummary(f);
  EXPECT_EQ(s.find("intra-op"), std::string::npos) << s;  // 0 = not known: left out
  EXPECT_NE(s.find("? BLAS thread(s)"), std::string::npos) << s;
  EXPECT_NE(s.find("; allocator glibc malloc"), std::string::npos) << s;
}

}  // namespace
}  // namespace ftb
