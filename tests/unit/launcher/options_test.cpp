#include "launcher/options.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "common/dist_env.h"
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

TEST(Options, GpuWithoutGpusNamesWhereItLookedAndGpusPerNode) {
  try {
    resolveNproc("gpu", 8, 0, "no GPU variable");
    FAIL();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.exitCode(), 2);
    EXPECT_NE(what.find("'gpu' requested but the node has no GPU (no GPU variable)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("--gpus-per-node N"), std::string::npos) << what;
  }
}

TEST(Options, GpusPerNodeOnlyInDryRuns) {
  EXPECT_EQ(parse({"--dry-run", "--gpus-per-node", "8", "--", "true"}).gpus_per_node, 8);
  EXPECT_EQ(parse({"--dry-run", "--", "true"}).gpus_per_node, -1);
  EXPECT_EQ(exitCodeOf({"--gpus-per-node", "8", "--", "true"}), 2);  // needs --dry-run
  EXPECT_EQ(exitCodeOf({"--dry-run", "--gpus-per-node", "-1", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--dry-run", "--gpus-per-node", "1025", "--", "true"}), 2);
  EXPECT_EQ(exitCodeOf({"--dry-run", "--gpus-per-node", "many", "--", "true"}), 2);
}

TEST(Options, HelpNeedsNoProgram) { EXPECT_TRUE(parse({"--help"}).help); }

}  // namespace
}  // namespace ftb::launcher

namespace ftb::launcher {
namespace {

std::string errorOf(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TorchrunFlags, BothSpellingsOfEveryFlag) {
  for (const std::string& f : {"--nproc_per_node", "--nproc-per-node"})
    EXPECT_EQ(parse({f, "3", "x"}).nproc_per_node, "3");
  auto o = parse({"--nnodes=2", "--node_rank", "1", "--master_addr", "n01", "--master_port=1234",
                  "--max_restarts", "2", "--log_dir", "/tmp/l", "x"});
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.rdzv_host, "n01");
  EXPECT_EQ(o.rdzv_port, 1234);
  EXPECT_EQ(o.master_port, 0) << "workers get a free port; 1234 is the store's";
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.log_dir, "/tmp/l");
  EXPECT_TRUE(o.tcpRendezvous());
  auto e = parse({"--nnodes", "2:2", "--node-rank", "0", "--rdzv_endpoint", "h:29401",
                  "--rdzv-backend", "c10d", "--rdzv_id", "job7", "x"});
  EXPECT_EQ(e.rdzv_host, "h");
  EXPECT_EQ(e.rdzv_port, 29401);
  EXPECT_EQ(e.rdzv_id, "job7");
  EXPECT_EQ(parse({"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "h", "x"}).rdzv_port,
            29400);
  EXPECT_TRUE(parse({"--standalone", "--nproc-per-node", "2", "x"}).standalone);
  EXPECT_FALSE(parse({"--nnodes", "1", "x"}).tcpRendezvous());
}

TEST(TorchrunFlags, StorePortOfASlurmJobIsTheJobsPort) {
  setenv("SLURM_JOB_ID", "4242", 1);
  auto o = parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "h1", "x"});
  EXPECT_EQ(o.rdzv_port, slurmJobPort(4242, readIpLocalPortRange()));
  EXPECT_NE(o.rdzv_port, parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "h1",
                                "--master-port", "1", "x"})
                             .rdzv_port);
  setenv("SLURM_JOB_ID", "24242", 1);  // 20000 apart: another port
  EXPECT_NE(parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "h1", "x"}).rdzv_port,
            o.rdzv_port);
  unsetenv("SLURM_JOB_ID");
  EXPECT_EQ(parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "h1", "x"}).rdzv_port,
            29500);
}

TEST(TorchrunFlags, UnknownFlagGetsDidYouMean) {
  EXPECT_EQ(errorOf({"--nproc-per-nod", "2", "x"}),
            "config error: command line: key '--nproc-per-nod': unknown option\n"
            "  hint: did you mean '--nproc-per-node'?");
  EXPECT_NE(errorOf({"--master_adr=a", "x"}).find("did you mean '--master-addr'?"),
            std::string::npos);
  EXPECT_NE(errorOf({"--zzzzzzzz", "x"}).find("see launcher --help"), std::string::npos);
}

// A value that does not parse names its flag (it used to be "key 'arguments':
// Argument ‘abc’ failed to parse"), says a number was expected and what the flag is.
TEST(TorchrunFlags, UnparsableValueNamesItsFlag) {
  EXPECT_EQ(errorOf({"--rdzv-timeout", "abc", "x"}),
            "config error: command line: key '--rdzv-timeout': expected a number, got 'abc'\n"
            "  hint: --rdzv-timeout: Seconds to wait for every node at rendezvous (see launcher "
            "--help)");
  EXPECT_NE(errorOf({"--max_restarts=two", "x"}).find("key '--max-restarts': expected a number"),
            std::string::npos);
  // A value out of range without a hint of its own gets the flag's help line.
  EXPECT_EQ(errorOf({"--master-port", "99999", "x"}),
            "config error: command line: key '--master-port': must be in 1..65535, got 99999\n"
            "  hint: --master-port: Fixed MASTER_PORT (default: node 0 binds a free port per "
            "attempt) (see launcher --help)");
}

TEST(TorchrunFlags, RendezvousErrors) {
  EXPECT_NE(errorOf({"--nnodes", "2", "--master-addr", "a", "x"}).find("'--node-rank': required"),
            std::string::npos);
  EXPECT_NE(errorOf({"--nnodes", "2", "--node-rank", "0", "x"}).find("'--master-addr': required"),
            std::string::npos);
  EXPECT_NE(errorOf({"--nnodes", "2", "--node-rank", "2", "--master-addr", "a", "x"})
                .find("must be in 0..1"),
            std::string::npos);
  EXPECT_NE(errorOf({"--nnodes", "1:4", "x"}).find("elastic"), std::string::npos);
  EXPECT_NE(errorOf({"--nnodes", "0", "x"}).find("'--nnodes'"), std::string::npos);
  EXPECT_NE(
      errorOf({"--nnodes", "2", "--node-rank", "0", "--standalone", "--master-addr", "a", "x"})
          .find("'--standalone'"),
      std::string::npos);
  EXPECT_NE(errorOf({"--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:0", "x"})
                .find("'--rdzv-endpoint'"),
            std::string::npos);
  EXPECT_NE(errorOf({"--rdzv-backend", "etcd", "x"}).find("'static' or 'c10d'"), std::string::npos);
}

}  // namespace
}  // namespace ftb::launcher
