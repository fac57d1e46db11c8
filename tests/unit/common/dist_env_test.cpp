// Tests for rank/world discovery with an injected environment.
#include "common/dist_env.h"

#include <gtest/gtest.h>

#include <map>

#include "common/error.h"

namespace ftb {
namespace {

// Builds an EnvLookup over a fixed map. The map must outlive the lookup.
EnvLookup envOf(const std::map<std::string, std::string>& vars) {
  return [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(DistEnv, SingleProcessDefaults) {
  std::map<std::string, std::string> vars;
  DistEnv d = discoverDistEnv(envOf(vars));
  EXPECT_EQ(d.source, "single");
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.local_rank, 0);
  EXPECT_EQ(d.local_world_size, 1);
  EXPECT_EQ(d.node_rank, 0);
  EXPECT_EQ(d.master_addr, "127.0.0.1");
  EXPECT_EQ(d.master_port, 29500);
  EXPECT_EQ(d.restart_count, 0);
}

// The node count is part of the run identity (common/tag.h).
TEST(DistEnv, NodeCount) {
  std::map<std::string, std::string> none;
  EXPECT_EQ(discoverDistEnv(envOf(none)).nodes, 1);
  std::map<std::string, std::string> launcher = {
      {"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_WORLD_SIZE", "2"}};
  EXPECT_EQ(discoverDistEnv(envOf(launcher)).nodes, 2);
  std::map<std::string, std::string> slurm = {
      {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "5"}, {"SLURM_TASKS_PER_NODE", "2(x2),1"}};
  EXPECT_EQ(discoverDistEnv(envOf(slurm)).nodes, 3);
  std::map<std::string, std::string> mpi = {{"OMPI_COMM_WORLD_RANK", "0"},
                                            {"OMPI_COMM_WORLD_SIZE", "8"},
                                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  EXPECT_EQ(discoverDistEnv(envOf(mpi)).nodes, 2);
  std::map<std::string, std::string> one = {
      {"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "4"}};
  EXPECT_EQ(discoverDistEnv(envOf(one)).nodes, 1);
}

TEST(DistEnv, Torchrun) {
  std::map<std::string, std::string> vars = {
      {"RANK", "3"},           {"WORLD_SIZE", "4"},
      {"LOCAL_RANK", "1"},     {"LOCAL_WORLD_SIZE", "2"},
      {"GROUP_RANK", "1"},     {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "1234"}, {"TORCHELASTIC_RESTART_COUNT", "2"}};
  DistEnv d = discoverDistEnv(envOf(vars));
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.node_rank, 1);
  EXPECT_EQ(d.master_addr, "10.0.0.1");
  EXPECT_EQ(d.master_port, 1234);
  EXPECT_EQ(d.restart_count, 2);
  EXPECT_FALSE(d.agent_store);  // our launcher and torchrun 1.x: rank 0 serves the store
}

TEST(DistEnv, TorchrunAgentStoreMakesEveryRankAClient) {
  std::map<std::string, std::string> vars = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  EXPECT_TRUE(discoverDistEnv(envOf(vars)).agent_store);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(discoverDistEnv(envOf(vars)).agent_store);
}

TEST(DistEnv, OpenMpi) {
  std::map<std::string, std::string> vars = {{"OMPI_COMM_WORLD_RANK", "5"},
                                             {"OMPI_COMM_WORLD_SIZE", "8"},
                                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  DistEnv d = discoverDistEnv(envOf(vars));
  EXPECT_EQ(d.source, "openmpi");
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 4);
}

TEST(DistEnv, Slurm) {
  std::map<std::string, std::string> vars = {{"SLURM_PROCID", "4"},
                                             {"SLURM_NTASKS", "7"},
                                             {"SLURM_LOCALID", "1"},
                                             {"SLURM_NODEID", "2"},
                                             {"SLURM_TASKS_PER_NODE", "2(x2),3"},
                                             {"SLURM_JOB_NODELIST", "n[07-08],m1"},
                                             {"SLURM_JOB_ID", "123456"}};
  DistEnv d = discoverDistEnv(envOf(vars));
  EXPECT_EQ(d.source, "slurm");
  EXPECT_EQ(d.rank, 4);
  EXPECT_EQ(d.world_size, 7);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 3);  // node 2 of "2,2,3"
  EXPECT_EQ(d.node_rank, 2);
  EXPECT_EQ(d.master_addr, "n07");
  EXPECT_EQ(d.master_port, slurmJobPort(123456, readIpLocalPortRange()));
}

TEST(DistEnv, JobPortLiesBelowTheEphemeralRangeAndSeparatesIds20000Apart) {
  const std::string linux_default = "32768\t60999\n";
  int collisions = 0;
  for (long long job = 1; job <= 5000; ++job) {
    int p = slurmJobPort(job, linux_default);
    ASSERT_GE(p, kJobPortLow) << job;
    ASSERT_LT(p, 32768) << job;  // never a port connect() may take as its source port
    collisions += p == slurmJobPort(job + 20000, linux_default);
  }
  // 20000 + id % 20000 gave every such pair one port (5000 collisions); a hash into 22528
  // ports gives a pair the same port with probability 1/22528.
  EXPECT_LE(collisions, 3);
  EXPECT_EQ(slurmJobPort(77, ""), slurmJobPort(77, linux_default));  // unreadable: default
  EXPECT_EQ(slurmJobPort(77, "garbage"), slurmJobPort(77, linux_default));
  for (long long job : {1LL, 99LL, 123456LL, 2147483647LL}) {
    int low = slurmJobPort(job, "40000 60999");  // a site's wider gap below
    EXPECT_TRUE(low >= kJobPortLow && low < 40000) << low;
    int high = slurmJobPort(job, "1024 50000");  // no room below: above the range
    EXPECT_TRUE(high > 50000 && high <= 65535) << high;
    int none = slurmJobPort(job, "1024 65000");  // no room on either side
    EXPECT_TRUE(none >= kJobPortLow && none < kJobPortLow + 1024) << none;
  }
}

TEST(DistEnv, SlurmStepNodelistBeatsJobNodelist) {
  std::map<std::string, std::string> vars = {{"SLURM_STEP_NODELIST", "s[3-4]"},
                                             {"SLURM_JOB_NODELIST", "n[07-08]"}};
  EXPECT_EQ(discoverDistEnv(envOf(vars)).master_addr, "s3");
}

TEST(DistEnv, Pmi) {
  std::map<std::string, std::string> vars = {
      {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}};
  DistEnv d = discoverDistEnv(envOf(vars));
  EXPECT_EQ(d.source, "pmi");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
}

TEST(DistEnv, PrecedenceFirstCompleteSourceWins) {
  std::map<std::string, std::string> vars = {{"RANK", "1"},
                                             {"WORLD_SIZE", "2"},
                                             {"OMPI_COMM_WORLD_RANK", "3"},
                                             {"OMPI_COMM_WORLD_SIZE", "4"},
                                             {"SLURM_PROCID", "5"},
                                             {"SLURM_NTASKS", "6"},
                                             {"PMI_RANK", "7"},
                                             {"PMI_SIZE", "8"},
                                             {"LOCAL_RANK", "0"},
                                             {"SLURM_LOCALID", "1"},
                                             {"MASTER_ADDR", "m"},
                                             {"SLURM_JOB_NODELIST", "n1"},
                                             {"MASTER_PORT", "999"},
                                             {"SLURM_JOB_ID", "5"},
                                             {"GROUP_RANK", "1"},
                                             {"SLURM_NODEID", "3"}};
  DistEnv d = discoverDistEnv(envOf(vars));
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.local_rank, 0);
  EXPECT_EQ(d.master_addr, "m");
  EXPECT_EQ(d.master_port, 999);
  EXPECT_EQ(d.node_rank, 1);

  vars.erase("WORLD_SIZE");  // incomplete torchrun source is skipped
  d = discoverDistEnv(envOf(vars));
  EXPECT_EQ(d.source, "openmpi");
  EXPECT_EQ(d.rank, 3);
  vars.erase("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(discoverDistEnv(envOf(vars)).source, "slurm");
  vars.erase("SLURM_PROCID");
  EXPECT_EQ(discoverDistEnv(envOf(vars)).source, "pmi");
  vars.erase("PMI_SIZE");
  EXPECT_EQ(discoverDistEnv(envOf(vars)).source, "single");
}

TEST(DistEnv, LocalRankOrder) {
  std::map<std::string, std::string> vars = {{"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                             {"SLURM_LOCALID", "3"}};
  EXPECT_EQ(discoverDistEnv(envOf(vars)).local_rank, 2);
  vars.erase("OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(discoverDistEnv(envOf(vars)).local_rank, 3);
}

TEST(DistEnv, EmptyValueCountsAsUnset) {
  std::map<std::string, std::string> vars = {
      {"RANK", ""}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}};
  DistEnv d = discoverDistEnv(envOf(vars));
  EXPECT_EQ(d.source, "single");
  EXPECT_EQ(d.master_addr, "127.0.0.1");
}

TEST(DistEnv, Errors) {
  std::map<std::string, std::string> vars = {{"RANK", "2"}, {"WORLD_SIZE", "2"}};
  try {
    discoverDistEnv(envOf(vars));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "config error: environment: key 'RANK': rank(2) >= world_size(2)\n"
                 "  hint: check RANK and WORLD_SIZE");
  }
  vars = {{"RANK", "x1"}, {"WORLD_SIZE", "2"}};
  try {
    discoverDistEnv(envOf(vars));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "config error: environment: key 'RANK': not an integer: 'x1'");
  }
  vars = {{"RANK", "0"}, {"WORLD_SIZE", "0"}};
  EXPECT_THROW(discoverDistEnv(envOf(vars)), ConfigError);
  vars = {{"MASTER_PORT", "70000"}};
  EXPECT_THROW(discoverDistEnv(envOf(vars)), ConfigError);
  vars = {{"SLURM_JOB_NODELIST", "n[1-"}};
  EXPECT_THROW(discoverDistEnv(envOf(vars)), ConfigError);
}

TEST(DistEnv, DefaultLookupReadsProcessEnvironment) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "3", 1);
  DistEnv d = discoverDistEnv();
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.world_size, 3);
}

}  // namespace
}  // namespace ftb
