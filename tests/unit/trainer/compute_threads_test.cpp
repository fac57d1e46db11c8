// computeThreadIds (trainer/metrics/perf.h): the threads whose run-queue wait is the rank's
// interference are the caller and the intra-op pool, each once, and no other thread.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "trainer/metrics/perf.h"

namespace ftb {
namespace {

std::set<int> processThreads() {
  std::set<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    out.insert(std::stoi(e.path().filename().string()));
  return out;
}

TEST(ComputeThreads, AreTheCallerAndEachIntraOpThreadOnce) {
  at::set_num_threads(3);
  const int me = static_cast<int>(::syscall(SYS_gettid));
  std::atomic<int> helper{0};
  std::atomic<bool> stop{false};
  std::thread idle([&] {  // a helper thread of the process, not a compute thread
    helper = static_cast<int>(::syscall(SYS_gettid));
    while (!stop.load()) std::this_thread::yield();
  });
  while (helper.load() == 0) std::this_thread::yield();
  // ATen's own parallel work starts its pool; finding the compute threads must use that
  // pool (the same OpenMP team), not start threads of its own.
  (void)torch::randn({1 << 20}).exp().sum().item<float>();
  const std::set<int> before = processThreads();
  const std::vector<int> tids = computeThreadIds();
  EXPECT_EQ(processThreads(), before) << "no thread started";
  for (int tid : tids) EXPECT_TRUE(before.count(tid)) << tid;
  stop = true;
  idle.join();
  EXPECT_TRUE(std::is_sorted(tids.begin(), tids.end()));
  EXPECT_EQ(std::adjacent_find(tids.begin(), tids.end()), tids.end()) << "each thread once";
  EXPECT_NE(std::find(tids.begin(), tids.end(), me), tids.end()) << "the caller";
  EXPECT_EQ(std::find(tids.begin(), tids.end(), helper.load()), tids.end()) << "no helper";
  // The pool's threads (the caller is one of them under OpenMP).
  EXPECT_GE(tids.size(), 3u);
  EXPECT_LE(tids.size(), 4u);
  // The same threads next time: the pool keeps its threads.
  EXPECT_EQ(computeThreadIds(), tids);
}

}  // namespace
}  // namespace ftb
