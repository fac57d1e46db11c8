// common/proc_memory.h: the three readers parse what the kernel reports. Touching 64 MiB
// raises VmRSS by about that much, VmHWM keeps it after the pages are unmapped, and VmSize
// covers both. The kernel's resident counts lag by a few pages (per-thread counters), hence
// kSlack in the comparisons between two readings.
#include "common/proc_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

namespace ftb {
namespace {

TEST(ProcMemory, TouchedPagesShowInTheResidentAndPeakFigures) {
  constexpr size_t kBytes = size_t(64) << 20;
  constexpr int64_t kSlack = int64_t(1) << 20;
  const int64_t before = currentRssBytes();
  ASSERT_GT(before, 0);
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, kBytes);  // every page resident
  const int64_t touched = currentRssBytes();
  EXPECT_GE(touched - before, int64_t(kBytes) * 9 / 10) << before << " -> " << touched;
  EXPECT_GE(peakRssBytes(), touched - kSlack);
  EXPECT_GE(mappedBytes(), touched - kSlack);
  munmap(p, kBytes);
  EXPECT_LT(currentRssBytes(), touched - int64_t(kBytes) / 2) << "unmapped pages leave";
  EXPECT_GE(peakRssBytes(), touched - kSlack) << "the peak stays";
}

}  // namespace
}  // namespace ftb
