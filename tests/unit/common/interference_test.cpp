// Tests for the interference figures (common/interference.h): parsing of schedstat and
// /proc/stat, the interval arithmetic, and a live sample that sees a thread kept off
// its CPU.
#include "common/interference.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

namespace ftb {
namespace {

TEST(Interference, ParsesSchedstat) {
  ThreadSched t;
  ASSERT_TRUE(parseSchedstat("113127 2636480 2\n", t));
  EXPECT_EQ(t.run_ns, 113127);
  EXPECT_EQ(t.wait_ns, 2636480);
  EXPECT_EQ(t.slices, 2);
  EXPECT_FALSE(parseSchedstat("", t));
  EXPECT_FALSE(parseSchedstat("12 x 3", t));
  EXPECT_FALSE(parseSchedstat("12 -4 3", t));
  EXPECT_EQ(t.wait_ns, 2636480);  // untouched on failure
}

constexpr const char* kProcStat =
    "cpu  1836412 25186 291672 390659 2978 0 3142 1373 0 0\n"
    "cpu0 906170 11253 160191 195058 550 0 1928 660 0 0\n"
    "cpu1 930241 13932 131480 195601 2428 7 1213 712 0 0\n"
    "cpu12 1 2 3 4 5 6 7 8 0 0\n"
    "intr 9419845 0 0\n";

TEST(Interference, ParsesProcStatForTheBoundCpus) {
  CpuTicks t;
  ASSERT_TRUE(parseProcStat(kProcStat, {1}, t));
  EXPECT_EQ(t.busy, 930241 + 13932 + 131480 + 7 + 1213);
  EXPECT_EQ(t.steal, 712);
  EXPECT_EQ(t.total, 930241 + 13932 + 131480 + 195601 + 2428 + 7 + 1213 + 712);
  ASSERT_TRUE(parseProcStat(kProcStat, {0, 12}, t));  // "cpu1" is not "cpu12"
  EXPECT_EQ(t.steal, 660 + 8);
  EXPECT_FALSE(parseProcStat(kProcStat, {3}, t)) << "a bound CPU with no line";
  EXPECT_FALSE(parseProcStat("cpu0 1 2 3\n", {0}, t)) << "fewer than 8 fields";
}

SchedSample at(double wall, std::map<int, ThreadSched> th, CpuTicks ticks, int64_t nivcsw) {
  SchedSample s;
  s.wall_s = wall;
  s.threads = std::move(th);
  s.ticks_ok = true;
  s.ticks = ticks;
  s.nivcsw = nivcsw;
  return s;
}

TEST(Interference, IntervalFigures) {
  // 2 s, 2 compute threads; thread 1 waited 0.5 s, thread 2 (new) 0.3 s, thread 3 ended.
  const SchedSample a =
      at(10, {{1, {1'000'000'000, 100'000'000, 5}}, {3, {7, 7, 7}}}, {1000, 10, 2000}, 40);
  const SchedSample b =
      at(12, {{1, {2'500'000'000, 600'000'000, 9}}, {2, {500'000'000, 300'000'000, 2}}},
         {1000 + 300, 10 + 8, 2000 + 400}, 46);
  const InterferenceFigures f = interferenceBetween(a, b, 2, 100.0);
  EXPECT_DOUBLE_EQ(f.wall_s, 2);
  EXPECT_NEAR(f.wait_thread_s, 0.8, 1e-12);
  EXPECT_NEAR(f.wait_frac, 0.8 / (2 * 2), 1e-12);
  EXPECT_NEAR(f.steal_frac, 8.0 / 400, 1e-12);
  // busy 300 ticks = 3 s of CPU on the bound CPUs, 2 s of it ours: 1 s / 2 s = 0.5 CPUs.
  EXPECT_NEAR(f.other_load, 0.5, 1e-12);
  EXPECT_EQ(f.nivcsw, 6);
  EXPECT_NEAR(f.interference, 0.2 + 0.02, 1e-12);
  // own CPU time without the process clock: thread 1 ran 1.5 s, thread 2 0.5 s (from 0),
  // thread 3 is gone; with it, its difference.
  EXPECT_NEAR(f.cpu_thread_s, 2.0, 1e-12);
  SchedSample ac = a, bc = b;
  ac.cpu_ns = 5'000'000'000, bc.cpu_ns = 6'750'000'000;
  EXPECT_NEAR(interferenceBetween(ac, bc, 2, 100.0).cpu_thread_s, 1.75, 1e-12);

  InterferenceTotal total;
  total.add(f);
  total.add(f);
  const InterferenceFigures g = total.figures();
  EXPECT_NEAR(g.interference, f.interference, 1e-12);
  EXPECT_NEAR(g.other_load, f.other_load, 1e-12);
  EXPECT_NEAR(g.cpu_thread_s, 4.0, 1e-12);  // summed over the intervals
}

TEST(Interference, UnreadableSourcesAreNaN) {
  SchedSample a = at(1, {{1, {0, 0, 0}}}, {}, 0), b = at(2, {}, {}, 0);
  EXPECT_TRUE(std::isnan(interferenceBetween(a, b, 1, 100).interference));
  EXPECT_TRUE(std::isnan(interferenceBetween(a, b, 1, 100).cpu_thread_s));
  b.threads = {{1, {1, 0, 1}}};
  b.ticks_ok = false;
  const InterferenceFigures f = interferenceBetween(a, b, 1, 100);
  EXPECT_TRUE(std::isnan(f.steal_frac));
  EXPECT_TRUE(std::isnan(f.other_load));
  EXPECT_EQ(f.interference, 0);  // wait known, steal unknown: wait alone
  InterferenceTotal empty;
  EXPECT_TRUE(std::isnan(empty.figures().interference));
}

TEST(Interference, TotalWeightsIntervalsByWallTime) {
  InterferenceFigures x, y;
  x.wall_s = 1, x.wait_frac = 0.5, x.steal_frac = 0, x.other_load = 1, x.nivcsw = 3;
  y.wall_s = 3, y.wait_frac = 0.1, y.steal_frac = 0.1, y.other_load = 0, y.nivcsw = 1;
  InterferenceTotal t;
  t.add(x);
  t.add(y);
  const InterferenceFigures f = t.figures();
  EXPECT_NEAR(f.wait_frac, (0.5 + 0.3) / 4, 1e-12);
  EXPECT_NEAR(f.steal_frac, 0.3 / 4, 1e-12);
  EXPECT_NEAR(f.other_load, 0.25, 1e-12);
  EXPECT_EQ(f.nivcsw, 4);
  EXPECT_NEAR(f.interference, 0.275, 1e-12);
}

// Two threads pinned to one CPU, both spinning: each can run at most about half the time,
// so the sampler must see a run-queue wait of the order of the wall time.
TEST(Interference, LiveSampleSeesACompetingThreadOnTheSameCpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  int cpu = sched_getcpu();
  CPU_SET(cpu, &one);
  cpu_set_t old;
  ASSERT_EQ(sched_getaffinity(0, sizeof(old), &old), 0);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  std::atomic<bool> stop{false};
  std::thread rival([&] {  // inherits the one-CPU mask
    while (!stop.load()) {
    }
  });
  InterferenceSampler s(1);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  volatile uint64_t x = 0;
  while (std::chrono::steady_clock::now() < end) x = x + 1;
  const InterferenceFigures f = s.next();
  stop.store(true);
  rival.join();
  sched_setaffinity(0, sizeof(old), &old);
  ASSERT_FALSE(std::isnan(f.interference)) << "schedstat unreadable on this kernel";
  // Both threads are runnable all the time on one CPU: together they wait ~the interval.
  EXPECT_GT(f.wait_thread_s, 0.3 * f.wall_s) << describeInterference(f, 1);
  EXPECT_GT(f.interference, 0.3) << describeInterference(f, 1);
  // Two threads sharing one CPU: the process's CPU time is about the part of the interval
  // other processes left that CPU (other_load: the share they took), not twice it.
  EXPECT_GT(f.cpu_thread_s, 0.8 * (1 - std::min(f.other_load, 1.0)) * f.wall_s)
      << describeInterference(f, 1);
  EXPECT_LT(f.cpu_thread_s, 1.2 * f.wall_s) << describeInterference(f, 1);
}

// The main thread sleeps while two helper threads spin on its one CPU: every thread of the
// process waits for the CPU about half the interval, but the compute thread (the main one)
// hardly at all. A sampler told the compute threads leaves the helpers' waits out.
TEST(Interference, ComputeTidsLeaveHelperThreadsWaitsOut) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  cpu_set_t old;
  ASSERT_EQ(sched_getaffinity(0, sizeof(old), &old), 0);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  std::atomic<bool> stop{false};
  auto spin = [&] {  // inherits the one-CPU mask
    while (!stop.load()) {
    }
  };
  std::thread helper1(spin), helper2(spin);
  InterferenceSampler every(1);
  InterferenceSampler compute(1);
  compute.setComputeTids({static_cast<int>(::syscall(SYS_gettid))});
  EXPECT_EQ(compute.computeThreads(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const InterferenceFigures all = every.next(), mine = compute.next();
  stop.store(true);
  helper1.join();
  helper2.join();
  sched_setaffinity(0, sizeof(old), &old);
  ASSERT_FALSE(std::isnan(all.interference)) << "schedstat unreadable on this kernel";
  EXPECT_GT(all.wait_thread_s, 0.3 * all.wall_s) << describeInterference(all, 1);
  EXPECT_LT(mine.wait_thread_s, 0.1 * mine.wall_s) << describeInterference(mine, 1);
  EXPECT_LT(mine.wait_frac, 0.1) << describeInterference(mine, 1);
}

}  // namespace
}  // namespace ftb
