// The whole single-node path in process: rendezvous over LocalTransport, spawn, supervise,
// decide. Multi-node behaviour is covered end to end under mpirun (tests/e2e/launcher).
#include "launcher/launcher.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "launcher/env_probe.h"
#include "launcher/transport.h"

namespace ftb::launcher {
namespace {

// The launcher probes its workers' environment by running `/proc/self/exe __env-probe
// PROGRAM` (launcher/env_probe.h), and /proc/self/exe is this test binary: it answers as
// launcher/main.cpp does, before gtest starts. Without this the probe ran the whole suite
// again and every launch below waited for the probe's 20 s timeout.
const bool kAnsweredEnvProbe = [] {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
  if (argv.size() >= 2 && argv[1] == "__env-probe")
    std::exit(runEnvProbe(std::vector<std::string>(argv.begin() + 2, argv.end())));
  return false;
}();

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
