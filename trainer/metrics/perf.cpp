#include "trainer/metrics/perf.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <mutex>

#include "trainer/metrics/deadline.h"

namespace ftb {
namespace {

// jemalloc's mallctl, or null when malloc is not jemalloc's.
using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);
MallctlFn mallctlFn() {
  static const MallctlFn fn = reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl"));
  return fn;
}

}  // namespace

int64_t allocatorDirtyBytes() {
  MallctlFn ctl = mallctlFn();
  if (!ctl) return -1;
  uint64_t epoch = 1;
  size_t len = sizeof epoch;
  if (ctl("epoch", &epoch, &len, &epoch, len) != 0) return -1;  // refresh the stats
  size_t pdirty = 0, pmuzzy = 0, page = 0;
  len = sizeof(size_t);
  // 4096 = MALLCTL_ARENAS_ALL: the sum over arenas.
  if (ctl("stats.arenas.4096.pdirty", &pdirty, &len, nullptr, 0) != 0) return -1;
  len = sizeof(size_t);
  if (ctl("stats.arenas.4096.pmuzzy", &pmuzzy, &len, nullptr, 0) != 0) return -1;
  len = sizeof(size_t);
  if (ctl("arenas.page", &page, &len, nullptr, 0) != 0) return -1;
  return int64_t((pdirty + pmuzzy) * page);
}

bool purgeAllocatorPages() {
  MallctlFn ctl = mallctlFn();
  return ctl && ctl("arena.4096.purge", nullptr, nullptr, nullptr, 0) == 0;
}

namespace {

// The best of `reps` timed n^3 products after a warm-up (measureGemmPeak's contract).
double timeGemm(torch::ScalarType dtype, int64_t n, int reps) {
  torch::NoGradGuard no_grad;
  const torch::Device dev = computeDevice();
  torch::Tensor a = torch::randn({n, n}).to(dev, dtype), b = torch::randn({n, n}).to(dev, dtype);
  torch::Tensor c = torch::matmul(a, b);  // warm-up: thread pools, packing buffers, kernels
  const int batch = dev.is_cuda() ? kGpuGemmBatch : 1;
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    double t0 = phaseEnd();
    for (int j = 0; j < batch; ++j) c = torch::matmul(a, b);
    best = std::min(best, (phaseEnd() - t0) / batch);
  }
  return 2.0 * double(n) * double(n) * double(n) / best;
}

}  // namespace

int64_t fitGemmSize(torch::ScalarType dtype, int64_t max_n, double budget_s) {
  const std::string what = "the start-up GEMM's size (" + std::string(c10::toString(dtype)) +
                           " products from " + std::to_string(kFitGemmMinN) + "^3 on cpu)";
  const double n = measureWithDeadline(
      what, gemmMeasureBytes(dtype, max_n, false), kMeasureDeadlineS, [&] {
        int64_t fit = std::min(kFitGemmMinN, max_n);
        // One timed product after a warm-up one: its seconds are 2 fit^3 / its FLOP/s.
        auto seconds = [&](double m) { return 2 * m * m * m / timeGemm(dtype, int64_t(m), 1); };
        while (fit * 2 <= max_n && 8 * seconds(double(fit)) <= budget_s) fit *= 2;
        return double(fit);
      });
  return static_cast<int64_t>(n);
}

double measureGemmPeak(torch::ScalarType dtype, int64_t n, int reps) {
  const torch::Device dev = computeDevice();
  const std::string what = "the start-up GEMM (" + std::to_string(n) + "^3 " +
                           c10::toString(dtype) + " on " + dev.str() + ", ATen)";
  return measureWithDeadline(what, gemmMeasureBytes(dtype, n, dev.is_cuda()), kMeasureDeadlineS,
                             [&] { return timeGemm(dtype, n, reps); });
}

namespace {

struct TidSink {
  std::mutex m;
  std::vector<int> tids;
};

void recordTid(void* sink) {
  auto* s = static_cast<TidSink*>(sink);
  const int tid = static_cast<int>(::syscall(SYS_gettid));
  std::lock_guard<std::mutex> lock(s->m);
  s->tids.push_back(tid);
}

}  // namespace

std::vector<int> computeThreadIds() {
  TidSink sink;
  recordTid(&sink);
  // ATen's OpenMP parallel_for is a `#pragma omp parallel` inlined from its headers, which
  // this file (built without -fopenmp) would run serially: open the same parallel region
  // through the OpenMP runtime libtorch loaded (libgomp's entry point, default team size:
  // at::set_num_threads' omp_set_num_threads), so its team is the intra-op pool.
  using GompParallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
  static const auto gomp = reinterpret_cast<GompParallel>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
  if (gomp != nullptr) {
    gomp(recordTid, &sink, 0, 0);
  } else {  // ATen's native pool: its parallel_for runs inside libtorch
    const int64_t n = std::max(at::get_num_threads(), 1);
    at::parallel_for(0, n, 1, [&](int64_t, int64_t) { recordTid(&sink); });
  }
  std::vector<int> tids = std::move(sink.tids);
  std::sort(tids.begin(), tids.end());
  tids.erase(std::unique(tids.begin(), tids.end()), tids.end());
  return tids;
}

std::string utcNowIso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace ftb
