#include "launcher/report.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace ftb::launcher {
namespace {

TEST(Report, ShellQuote) {
  EXPECT_EQ(shellQuote("plain-word_1.0/x=y"), "plain-word_1.0/x=y");
  EXPECT_EQ(shellQuote("a b"), "'a b'");
  EXPECT_EQ(shellQuote(""), "''");
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
}

TEST(Report, RankRange) {
  EXPECT_EQ(rankRange(4, 1), "4");
  EXPECT_EQ(rankRange(2, 2), "2-3");
}

TEST(Report, PlacementTable) {
  Plan p;
  for (int i = 0; i < 2; ++i) {
    NodeInfo n;
    n.node = i;
    n.host = i ? "b" : "a";
    n.cores = 4;
    n.nproc = 2 - i;
    p.nodes.push_back(n);
  }
  EXPECT_EQ(placementTable(p),
            "node  host  ip  cores  gpus  nproc  global ranks  local ranks  threads\n"
            "0     a     -   4      0     2      0-1           0-1          2\n"
            "1     b     -   4      0     1      2             0            4\n");
}

TEST(Report, FailureTableNamesRootCause) {
  Decision d;
  d.exit_code = 137;
  Failure f;
  f.node = 1;
  f.host = "hostb";
  f.ip = "10.77.0.12";
  f.rank = 2;
  f.pid = 77;
  f.signal = 9;
  f.stderr_tail = {"boom"};
  d.failures = {f};
  std::string r = failureReport(d, 0);
  EXPECT_NE(r.find("rank 2 on node 1 (host hostb, 10.77.0.12) SIGKILL (137)"), std::string::npos)
      << r;
  EXPECT_NE(r.find("root cause"), std::string::npos);
  EXPECT_NE(r.find("    | boom"), std::string::npos);
}

// `launcher ctl stop` (every rank exits with the requeue code by itself) printed "job failed"
// and a failure table.
TEST(Report, WorkersThatStoppedThemselvesAreNoFailure) {
  Decision d;
  d.exit_code = kExitRequeue;
  std::string r = failureReport(d, 0);
  EXPECT_EQ(r,
            "launcher: the workers stopped with exit code 75 (preempted with a checkpoint: "
            "`launcher ctl stop`, or a stop signal sent to them; the same command resumes)\n");
}

}  // namespace
}  // namespace ftb::launcher
