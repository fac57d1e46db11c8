// Performance measurement helpers: GEMM peak, memory, clocks.
//
// Contracts:
// - measureGemmPeak(dtype) times square matmuls of size n in `dtype` on the compute
//   device (device.h) with the current intra-op thread count and returns the best FLOP/s
//   over `reps` runs (after one warm-up). On a GPU each run is kGpuGemmBatch products
//   between two device synchronisations, so launch latency does not count. It is the denominator of
//   gemm_efficiency (not of MFU, which uses the hardware peak: peaks.h), so it must run in the same
//   environment (threads, BLAS) as the training it is compared with.
// - fitGemmSize(dtype, max_n, budget_s) (CPU): the largest n of kFitGemmMinN, 2 kFitGemmMinN,
//   ..., max_n whose product, estimated as 8 times the previous size's (timed once after a
//   warm-up), takes at most budget_s; kFitGemmMinN (or max_n when smaller) when even that
//   estimate is over. Where the compute dtype has no fast kernel (bf16 on AVX2 runs at
//   0.1-0.7 GFLOP/s, a 2048^3 product two minutes) the peak GEMM stays seconds long.
//   Runs under measureWithDeadline (deadline.h).
// - computeThreadIds(): the thread ids (gettid) of this rank's compute threads: the
//   calling thread and every thread of the intra-op pool (one parallel region of the
//   OpenMP runtime libtorch uses, each team thread recording itself; ATen's parallel_for
//   where there is none), distinct, sorted. For
//   InterferenceSampler::setComputeTids. REQUIRES: called outside a parallel region.
// - allocatorDirtyBytes(): bytes jemalloc holds in freed pages it has not returned to
//   the OS (all arenas, stats refreshed); -1 when the process does not run on jemalloc
//   (looked up with dlsym, so a build without it links and runs). purgeAllocatorPages()
//   returns every such page to the OS (arena purge: dirty, then muzzy); false without
//   jemalloc.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/metrics/device.h"

namespace ftb {

inline constexpr int kGpuGemmBatch = 10;

inline constexpr int64_t kFitGemmMinN = 256;
double measureGemmPeak(torch::ScalarType dtype, int64_t n = 2048, int reps = 3);
int64_t fitGemmSize(torch::ScalarType dtype, int64_t max_n, double budget_s);
std::vector<int> computeThreadIds();
int64_t allocatorDirtyBytes();
bool purgeAllocatorPages();

inline double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The end of a timed phase: waits for the compute device's queued work (device.h), then
// reads the clock. On the CPU it is nowSeconds().
inline double phaseEnd() {
  syncComputeDevice();
  return nowSeconds();
}

std::string utcNowIso8601();

}  // namespace ftb
