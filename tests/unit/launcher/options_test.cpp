#include "launcher/options.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace ftb::launcher {
namespace {

LaunchOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "launcher");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parseOptions(static_cast<int>(argv.size()), argv.data());
}

int exitCodeOf(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const FtbError& e) {
    return e.exitCode();
  }
  return 0;
}

TEST(Options, ProgramAfterDoubleDashKeepsItsOwnFlags) {
  auto o = parse({"--nproc-per-node", "2", "--tee", "--", "python3", "-u", "x.py", "--tee"});
  EXPECT_EQ(o.nproc_per_node, "2");
  EXPECT_TRUE(o.nproc_given);
  EXPECT_TRUE(o.tee);
  EXPECT_EQ(o.program, (std::vector<std::string>{"python3", "-u", "x.py", "--tee"}));
}

TEST(Options, ProgramWithoutDoubleDashStartsAtFirstPositional) {
  auto o = parse({"--max-restarts=2", "--grace", "1.5", "worker", "--x", "1"});
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_DOUBLE_EQ(o.grace_s, 1.5);
  EXPECT_EQ(o.program, (std::vector<std::string>{"worker", "--x", "1"}));
}

TEST(Options, Defaults) {
  auto o = parse({"--", "true"});
  EXPECT_EQ(o.nproc_per_node, "1");
  EXPECT_FALSE(o.nproc_given);
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_DOUBLE_EQ(o.monitor_interval_s, 0.1);
  EXPECT_DOUBLE_EQ(o.grace_s, 5.0);
  EXPECT_EQ(o.master_port, 0);
  EXPECT_FALSE(o.dry_run);
}

TEST(Options, BadInputIsExitCode2) {
  EXPECT_EQ(exitCodeOf({}), 2);                                       // no program
  EXPECT_EQ(exitCodeOf({"--tee"}), 2);                                // no program
  EXPECT_EQ(exitCodeOf({"--nproc-per-node", "0", "--", "true"}), 2);  // nproc 0
  EXPECT_EQ(exitCodeOf({"--nproc-per-node", "-1", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--nproc-per-node", "two", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--max-restarts", "-1", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--monitor-interval", "0", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--master-port", "70000", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--iface", "lo", "--network", "10.0.0.0/8", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--hosts", "n1:2", "--", "true"}), 2);  // needs --dry-run
  EXPECT_EQ(exitCodeOf({"--run-id", "a/b", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--no-such-flag", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--grace", "soon", "--", "true"}), 2);
}

TEST(Options, NprocErrorNamesTheFlag) {
  try {
    parse({"--nproc-per-node", "0", "--", "true"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--nproc-per-node"), std::string::npos) << e.what();
  }
}

TEST(Options, ResolveNproc) {
  EXPECT_EQ(resolveNproc("3", 8, 0), 3);
  EXPECT_EQ(resolveNproc("cpu", 8, 2), 8);
  EXPECT_EQ(resolveNproc("auto", 8, 2), 2);
  EXPECT_EQ(resolveNproc("auto", 8, 0), 8);
  EXPECT_EQ(resolveNproc("gpu", 8, 4), 4);
  EXPECT_THROW(resolveNproc("gpu", 8, 0), ConfigError);
  EXPECT_THROW(resolveNproc("0", 8, 0), ConfigError);
}

TEST(Options, HelpNeedsNoProgram) { EXPECT_TRUE(parse({"--help"}).help); }

}  // namespace
}  // namespace ftb::launcher
