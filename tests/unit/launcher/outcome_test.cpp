#include "launcher/outcome.h"

#include <gtest/gtest.h>

namespace ftb::launcher {
namespace {

Failure fail(int rank, int64_t t, int code, int sig = 0) {
  Failure f;
  f.rank = rank;
  f.time_us = t;
  f.exit_code = code;
  f.signal = sig;
  return f;
}

NodeEnd end(int node, std::vector<Failure> f = {}, int shutdown = 0, bool clean = true) {
  NodeEnd e;
  e.node = node;
  e.failures = std::move(f);
  e.shutdown_signal = shutdown;
  e.all_clean = clean && e.failures.empty();
  return e;
}

TEST(Decide, CleanFinishExitsZero) {
  Decision d = decide({end(0), end(1)}, 0, 3);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.exit_code, 0);
}

TEST(Decide, EarliestFailureIsTheRootCause) {
  Decision d = decide({end(0, {fail(1, 200, 1)}), end(1, {fail(2, 100, 0, 9)})}, 0, 0);
  ASSERT_EQ(d.failures.size(), 2u);
  EXPECT_EQ(d.failures[0].rank, 2);
  EXPECT_EQ(d.exit_code, 137);
  EXPECT_FALSE(d.restart);
}

TEST(Decide, RestartsWhileAllowed) {
  EXPECT_TRUE(decide({end(0, {fail(0, 1, 3)})}, 0, 1).restart);
  Decision last = decide({end(0, {fail(0, 1, 3)})}, 1, 1);
  EXPECT_FALSE(last.restart);
  EXPECT_EQ(last.exit_code, 3);
}

TEST(Decide, ShutdownSignalPreventsRestart) {
  Decision d = decide({end(0, {}, 15, false), end(1)}, 0, 5);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.exit_code, 143);
  EXPECT_EQ(d.shutdown_signal, 15);
  // Workers that handled the signal and exited 0: clean exit.
  EXPECT_EQ(decide({end(0, {}, 15, true)}, 0, 5).exit_code, 0);
  // A genuine failure before the signal keeps its code.
  EXPECT_EQ(decide({end(0, {fail(0, 1, 7)}, 15)}, 0, 5).exit_code, 7);
  EXPECT_FALSE(decide({end(0, {fail(0, 1, 7)}, 15)}, 0, 5).restart);
}

TEST(Decide, WorkersCodeAfterAStopSignalPassesThrough) {
  // USR1 forwarded; the workers saved and exited with a requeue code: no failure, no
  // restart, exit code = the earliest such worker code on any node.
  NodeEnd a = end(0, {}, 10, false), b = end(1, {}, 10, false);
  a.stop_exit_code = 75, a.stop_exit_time_us = 200;
  b.stop_exit_code = 137, b.stop_exit_time_us = 300;
  Decision d = decide({a, b}, 0, 3);
  EXPECT_FALSE(d.restart);
  EXPECT_TRUE(d.failures.empty());
  EXPECT_EQ(d.exit_code, 75);
  EXPECT_EQ(d.shutdown_signal, 10);
  b.stop_exit_time_us = 100;
  EXPECT_EQ(decide({a, b}, 0, 3).exit_code, 137);
}

TEST(Decide, Describe) {
  EXPECT_EQ(fail(0, 0, 3).describe(), "exit code 3");
  EXPECT_EQ(fail(0, 0, 0, 9).describe(), "SIGKILL (137)");
  EXPECT_EQ(signalName(15), "SIGTERM");
}

}  // namespace
}  // namespace ftb::launcher

namespace ftb::launcher {
namespace {

TEST(Decide, LateShutdownSignalStopsRestartsAndSetsTheCode) {
  // Node 1 finished cleanly, then its launcher got SIGTERM and stopped node 0's workers.
  Decision d = decide({end(0, {}, 0, false), end(1)}, 0, 3, 15);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.exit_code, 143);
  EXPECT_EQ(d.shutdown_signal, 15);
  EXPECT_FALSE(decide({end(0, {fail(0, 1, 2)})}, 0, 3, 15).restart);
}

}  // namespace
}  // namespace ftb::launcher
