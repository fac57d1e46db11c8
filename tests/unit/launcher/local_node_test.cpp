// Facts about a node: GPUs granted, CPU topology, the reserved MASTER_PORT, cores.
#include "launcher/local_node.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "common/error.h"

namespace ftb::launcher {
namespace {

namespace fs = std::filesystem;

EnvLookup envOf(const std::map<std::string, std::string>& vars) {
  return [vars](const char* k) -> const char* {
    auto it = vars.find(k);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// A /dev with nvidia0..nvidia3 (plus the control devices, which are not GPUs).
std::string fakeDev() {
  fs::path d = fs::path(testing::TempDir()) / "ftb_fake_dev";
  fs::create_directories(d);
  for (const char* f : {"nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"})
    std::ofstream(d / f) << "";
  return d.string();
}

TEST(Gpus, ScheduledGrantBeatsWhatTheMachineShows) {
  const std::string dev = fakeDev();
  // SLURM's value for GRES without device files is not a GPU.
  GpuSet g =
      detectGpus(envOf({{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}, {"SLURM_JOB_ID", "7"}}), dev);
  EXPECT_TRUE(g.ids.empty());
  EXPECT_NE(g.source.find("NoDevFiles"), std::string::npos) << g.source;
  // Inside a job without a GPU variable: none granted, /dev not counted.
  g = detectGpus(envOf({{"SLURM_JOB_ID", "7"}}), dev);
  EXPECT_TRUE(g.ids.empty());
  EXPECT_NE(g.source.find("none granted"), std::string::npos) << g.source;
  // SLURM_GPUS_ON_NODE bounds the id list.
  g = detectGpus(
      envOf(
          {{"SLURM_GPUS_ON_NODE", "2"}, {"CUDA_VISIBLE_DEVICES", "2,3,5"}, {"SLURM_JOB_ID", "7"}}),
      dev);
  EXPECT_EQ(g.ids, (std::vector<std::string>{"2", "3"}));
  EXPECT_EQ(g.source, "SLURM_GPUS_ON_NODE=2, ids 2,3 from CUDA_VISIBLE_DEVICES=2,3,5");
  g = detectGpus(envOf({{"SLURM_JOB_GPUS", "4,6"}, {"SLURM_JOB_ID", "7"}}), dev);
  EXPECT_EQ(g.ids, (std::vector<std::string>{"4", "6"}));
  EXPECT_EQ(g.source, "ids 4,6 from SLURM_JOB_GPUS");
  g = detectGpus(envOf({{"SLURM_GPUS_ON_NODE", "3"}, {"SLURM_JOB_ID", "7"}}), dev);
  EXPECT_EQ(g.ids, (std::vector<std::string>{"0", "1", "2"}));
  // Set but empty hides the GPUs (CPU workers on a GPU node).
  g = detectGpus(envOf({{"CUDA_VISIBLE_DEVICES", ""}}), dev);
  EXPECT_TRUE(g.ids.empty());
  // Outside SLURM without the variable: every /dev/nvidiaN, control devices left out.
  g = detectGpus(envOf({}), dev);
  EXPECT_EQ(g.ids, (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_NE(g.source.find("/nvidiaN"), std::string::npos) << g.source;
  EXPECT_THROW(detectGpus(envOf({{"SLURM_GPUS_ON_NODE", "two"}}), dev), ConfigError);
}

TEST(Gpus, PlannedGpusComeFromTheFlagThenSlurmNeverFromThisMachine) {
  // --gpus-per-node wins over every variable.
  GpuSet g = plannedGpus(3, envOf({{"CUDA_VISIBLE_DEVICES", "5"}, {"SLURM_GPUS_PER_NODE", "8"}}));
  EXPECT_EQ(g.ids, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(g.source, "--gpus-per-node 3: ids 0,1,2 on every node");
  // What SLURM granted the node this runs on (detectGpus rules 1-3) beats the request.
  g = plannedGpus(-1, envOf({{"SLURM_GPUS_ON_NODE", "2"},
                             {"SLURM_JOB_GPUS", "4,5"},
                             {"SLURM_GPUS_PER_NODE", "h100:8"},
                             {"SLURM_JOB_ID", "7"}}));
  EXPECT_EQ(g.ids, (std::vector<std::string>{"4", "5"}));
  EXPECT_EQ(g.source, "SLURM_GPUS_ON_NODE=2, ids 4,5 from SLURM_JOB_GPUS");
  // The job's request alone: [type:]count, several types summed.
  g = plannedGpus(-1, envOf({{"SLURM_GPUS_PER_NODE", "h100:4"}}));
  EXPECT_EQ(g.ids.size(), 4u);
  EXPECT_EQ(g.source, "SLURM_GPUS_PER_NODE=h100:4: ids 0,1,2,3 on every node");
  EXPECT_EQ(plannedGpus(-1, envOf({{"SLURM_GPUS_PER_NODE", "a100:2,gpu:v100:1"}})).ids.size(), 3u);
  EXPECT_THROW(plannedGpus(-1, envOf({{"SLURM_GPUS_PER_NODE", "h100:x"}})), ConfigError);
  // Nothing: no GPU, and no /dev/nvidiaN of this machine (the plan is for other nodes).
  g = plannedGpus(-1, envOf({}));
  EXPECT_TRUE(g.ids.empty());
  EXPECT_EQ(g.source, "");
  EXPECT_TRUE(plannedGpus(0, envOf({{"SLURM_GPUS_PER_NODE", "8"}})).ids.empty());
}

TEST(Gpus, MoreWorkersThanGpusIsRefused) {
  GpuSet two{{"0", "1"}, "ids 0,1 from CUDA_VISIBLE_DEVICES=0,1"};
  EXPECT_NO_THROW(requireGpuPerWorker(2, two));
  EXPECT_NO_THROW(requireGpuPerWorker(1, two));
  EXPECT_NO_THROW(requireGpuPerWorker(8, GpuSet{}));  // CPU node: no GPU to share
  try {
    requireGpuPerWorker(3, two);
    FAIL() << "3 workers on 2 GPUs were accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    std::string what = e.what();
    EXPECT_NE(what.find("3 workers on a node with 2 GPU(s)"), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA_VISIBLE_DEVICES=0,1"), std::string::npos) << what;
    EXPECT_NE(what.find("--nproc-per-node gpu"), std::string::npos) << what;
  }
}

// Two sockets, 4 cores each, 2 threads per core; Linux numbering: CPU c and c + 8 are
// siblings, CPUs 0-3 and 8-11 on package 0 / NUMA node 0, 4-7 and 12-15 on package 1 / node 1.
std::string fakeSmtTwoSocketSys() {
  fs::path root = fs::path(testing::TempDir()) / "ftb_fake_sys";
  fs::remove_all(root);
  for (int c = 0; c < 16; ++c) {
    fs::path t = root / ("cpu/cpu" + std::to_string(c)) / "topology";
    fs::create_directories(t);
    int core = c % 8;
    std::ofstream(t / "thread_siblings_list") << core << "," << core + 8 << "\n";
    std::ofstream(t / "physical_package_id") << core / 4 << "\n";
    std::ofstream(t / "core_id") << core % 4 << "\n";
  }
  fs::create_directories(root / "node/node0");
  fs::create_directories(root / "node/node1");
  std::ofstream(root / "node/node0/cpulist") << "0-3,8-11\n";
  std::ofstream(root / "node/node1/cpulist") << "4-7,12-15\n";
  return root.string();
}

NodeInfo nodeOn(const CpuTopology& t, int nproc) {
  NodeInfo n;
  n.cpus = t.cpus;
  n.cpu_core = t.core;
  n.cpu_numa = t.numa;
  n.cores = static_cast<int>(t.cpus.size());
  n.nproc = nproc;
  return n;
}

TEST(CpuTopology, SmtBlocksAreWholeCoresOnOneNumaNode) {
  std::vector<int> all;
  for (int c = 0; c < 16; ++c) all.push_back(c);
  CpuTopology t = readCpuTopology(all, fakeSmtTwoSocketSys());
  EXPECT_EQ(t.cpus, (std::vector<int>{0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15}));
  NodeInfo n = nodeOn(t, 2);
  // Sorted ids would give worker 1 CPUs 8-15: the siblings of worker 0's cores, on both
  // sockets. By core and node: each worker has one socket's 4 cores and their siblings.
  EXPECT_EQ(workerCpus(n, 0), (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(workerCpus(n, 1), (std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15}));
  EXPECT_EQ(numaNodes(n, workerCpus(n, 1)), "1");
  EXPECT_EQ(physicalCores(n, workerCpus(n, 1)), 4);
  // One OpenMP thread per physical core, not per hyperthread.
  auto env = tunedEnv(n, 1);
  ASSERT_FALSE(env.empty());
  EXPECT_EQ(env[0].name, "OMP_NUM_THREADS");
  EXPECT_EQ(env[0].value, "4");
  EXPECT_NE(env[0].reason.find("4 physical core(s)"), std::string::npos) << env[0].reason;
  // 8 workers: one core (two siblings) each, never half of one core and half of another.
  NodeInfo eight = nodeOn(t, 8);
  EXPECT_EQ(workerCpus(eight, 0), (std::vector<int>{0, 8}));
  EXPECT_EQ(workerCpus(eight, 5), (std::vector<int>{5, 13}));
  EXPECT_EQ(tunedEnv(eight, 5)[0].value, "1");
  // 16 workers on 8 cores: one CPU each.
  NodeInfo sixteen = nodeOn(t, 16);
  EXPECT_EQ(workerCpus(sixteen, 1), (std::vector<int>{8}));
  // A launcher given half of each socket keeps its blocks per socket.
  CpuTopology half = readCpuTopology({0, 1, 8, 9, 4, 5, 12, 13}, fakeSmtTwoSocketSys());
  NodeInfo h = nodeOn(half, 2);
  EXPECT_EQ(workerCpus(h, 0), (std::vector<int>{0, 1, 8, 9}));
  EXPECT_EQ(workerCpus(h, 1), (std::vector<int>{4, 5, 12, 13}));
}

TEST(CpuTopology, MissingFilesMeanOneCorePerCpu) {
  CpuTopology t = readCpuTopology({3, 1, 2}, testing::TempDir() + "ftb_no_such_sys");
  EXPECT_EQ(t.cpus, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(t.core, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(t.numa, (std::vector<int>{-1, -1, -1}));
  EXPECT_EQ(numaNodes(nodeOn(t, 1), {1, 2}), "");
}

TEST(Cores, SlurmCpusPerTaskBoundsTheCores) {
  EXPECT_EQ(coresForNode(0, 64, "8"), 8);  // task/none: the mask is the whole machine
  EXPECT_EQ(coresForNode(0, 4, "8"), 4);   // never more than the mask
  EXPECT_EQ(coresForNode(6, 64, "8"), 6);  // --cores-per-node wins
  EXPECT_EQ(coresForNode(0, 64, nullptr), 64);
  EXPECT_EQ(coresForNode(0, 64, "x"), 64);
}

int bindPlain(int port) {  // a socket of another job: no SO_REUSEADDR
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  int err = errno;
  close(s);
  return rc == 0 ? 0 : err;
}

int listenReuse(int port) {  // a worker's store: SO_REUSEADDR, like c10d's TCPStore
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  int rc = bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 ? listen(s, 8) : -1;
  int err = errno;
  close(s);
  return rc == 0 ? 0 : err;
}

TEST(MasterPort, ReservedPortIsHeldForTheWorkersOnly) {
  ReservedPort r = reserveFreePort(0);
  ASSERT_GT(r.port, 0);
  // Another job cannot take the port between the choice and the workers' start...
  EXPECT_EQ(bindPlain(r.port), EADDRINUSE);
  // ...but the worker's store binds and listens on it while the launcher holds it.
  EXPECT_EQ(listenReuse(r.port), 0);
  ReservedPort other = reserveFreePort(r.port);
  EXPECT_NE(other.port, r.port);
  const int port = r.port;
  r = ReservedPort{};  // released
  EXPECT_EQ(bindPlain(port), 0);
}

TEST(RunId, TimePidAndRandomBits) {
  const std::string a = generateRunId(), b = generateRunId();
  const std::regex shape("[0-9]{8}-[0-9]{6}-" + std::to_string(getpid()) + "-[0-9a-f]{8}");
  EXPECT_TRUE(std::regex_match(a, shape)) << a;
  EXPECT_NE(a, b);  // same second, same process: the random part differs
}

}  // namespace
}  // namespace ftb::launcher
