// The whole single-node path in process: rendezvous over LocalTransport, spawn, supervise,
// decide. Multi-node behaviour is covered end to end under mpirun (tests/e2e/launcher).
#include "launcher/launcher.h"

#include <gtest/gtest.h>

#include "launcher/transport.h"

namespace ftb::launcher {
namespace {

int launch(std::vector<std::string> program, int nproc, int max_restarts = 0) {
  LaunchOptions o;
  o.nproc_per_node = std::to_string(nproc);
  o.max_restarts = max_restarts;
  o.grace_s = 1;
  o.program = std::move(program);
  o.log_dir = testing::TempDir() + "ftb_launcher_test_logs";
  LocalTransport t;
  SignalChannel signals;
  return Launcher(o, t, signals, Clock::now()).run();
}

TEST(Launcher, CleanRunExitsZero) { EXPECT_EQ(launch({"/bin/sh", "-c", "exit 0"}, 2), 0); }

TEST(Launcher, FailingRankDecidesTheExitCode) {
  EXPECT_EQ(launch({"/bin/sh", "-c", "[ $RANK = 1 ] && exit 3; sleep 20"}, 2), 3);
}

TEST(Launcher, KilledRankGives128PlusSignal) {
  EXPECT_EQ(launch({"/bin/sh", "-c", "[ $RANK = 0 ] && kill -9 $$; sleep 20"}, 2), 137);
}

TEST(Launcher, RestartSucceedsOnSecondAttempt) {
  EXPECT_EQ(launch({"/bin/sh", "-c", "exit $((TORCHELASTIC_RESTART_COUNT == 0 ? 4 : 0))"}, 2, 1),
            0);
  EXPECT_EQ(launch({"/bin/sh", "-c", "exit 4"}, 1, 2), 4);
}

TEST(Launcher, BadInputFoundOnTheNodeExits2) {
  EXPECT_EQ(launch({"no-such-program-ftb-test"}, 1), 2);
}

}  // namespace
}  // namespace ftb::launcher
