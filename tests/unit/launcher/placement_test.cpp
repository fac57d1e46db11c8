#include "launcher/placement.h"

#include <gtest/gtest.h>

#include <map>

#include "common/error.h"

namespace ftb::launcher {
namespace {

std::map<std::string, std::string> asMap(const EnvVars& v) { return {v.begin(), v.end()}; }

Plan threeNodes() {
  Plan p;
  for (int i = 0; i < 3; ++i) {
    NodeInfo n;
    n.node = i;
    n.host = "n0" + std::to_string(i + 1);
    n.ip = "10.0.0." + std::to_string(i + 1);
    n.cores = 8;
    n.nproc = i < 2 ? 2 : 1;
    p.nodes.push_back(n);
  }
  p.master_addr = "10.0.0.1";
  p.master_port = 29500;
  p.run_id = "r1";
  p.max_restarts = 2;
  return p;
}

TEST(Placement, RanksAreAssignedNodeByNode) {
  Plan p = threeNodes();
  EXPECT_EQ(p.worldSize(), 5);
  EXPECT_EQ(p.firstRank(0), 0);
  EXPECT_EQ(p.firstRank(1), 2);
  EXPECT_EQ(p.firstRank(2), 4);
}

TEST(Placement, ContractEnvironment) {
  Plan p = threeNodes();
  auto env = asMap(contractEnv(p, 1, 1, 3));
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "5");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "3");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "r1");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "3");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "2");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "4");  // 8 cores / 2 local workers
  EXPECT_EQ(env.count("GLOO_SOCKET_IFNAME"), 0u);
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(asMap(contractEnv(p, 2, 0, 0))["OMP_NUM_THREADS"], "8");
}

TEST(Placement, InheritedOmpAndGlooWinAndGpusFollowLocalRank) {
  Plan p = threeNodes();
  p.nodes[0].preset["OMP_NUM_THREADS"] = "3";
  p.nodes[0].iface = "eth1";
  p.nodes[0].gpus = {"4", "5"};
  auto env = asMap(contractEnv(p, 0, 1, 0));
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);  // inherited value stays
  EXPECT_EQ(threadsFor(p.nodes[0]), "3");
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth1");
  // torchrun's convention: every local worker sees the node's GPUs it uses, and takes
  // cuda:LOCAL_RANK (here GPU 5 for local rank 1).
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "4,5");
  EXPECT_EQ(asMap(contractEnv(p, 0, 0, 0))["CUDA_VISIBLE_DEVICES"], "4,5");
  p.nodes[0].gpus = {"4", "5", "6"};  // more GPUs than workers: only those used are visible
  EXPECT_EQ(visibleGpus(p.nodes[0]), "4,5");
  p.nodes[0].preset["GLOO_SOCKET_IFNAME"] = "ib0";
  EXPECT_EQ(asMap(contractEnv(p, 0, 0, 0)).count("GLOO_SOCKET_IFNAME"), 0u);
}

TEST(Placement, ThreadsNeverZero) {
  NodeInfo n;
  n.cores = 2;
  n.nproc = 4;
  EXPECT_EQ(threadsFor(n), "1");
}

TEST(Placement, MpiVariablesAreStripped) {
  const char* envp[] = {
      "PATH=/bin", "OMPI_COMM_WORLD_RANK=1", "PMIX_RANK=1", "PMI_SIZE=2", "PMIXY=keep", "RANK=9",
      nullptr};
  auto inherited = inheritableEnv(envp);
  EXPECT_EQ(inherited, (std::vector<std::string>{"PATH=/bin", "PMIXY=keep", "RANK=9"}));
  auto merged = mergeEnv(inherited, {{"RANK", "0"}});
  EXPECT_EQ(merged, (std::vector<std::string>{"PATH=/bin", "PMIXY=keep", "RANK=0"}));
}

TEST(HostsSpec, IssueExample) {
  auto h = parseHostsSpec("n[01-02]:2,n03:1");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].host, "n01");
  EXPECT_EQ(h[0].nproc, 2);
  EXPECT_EQ(h[1].host, "n02");
  EXPECT_EQ(h[1].nproc, 2);
  EXPECT_EQ(h[2].host, "n03");
  EXPECT_EQ(h[2].nproc, 1);
}

TEST(HostsSpec, ListsInsideBracketsAndDefaults) {
  auto h = parseHostsSpec("gpu[1,3-4]:4,login,r[1-2]n[1-2]");
  std::vector<std::string> names;
  for (auto& x : h) names.push_back(x.host + ":" + std::to_string(x.nproc));
  EXPECT_EQ(names, (std::vector<std::string>{"gpu1:4", "gpu3:4", "gpu4:4", "login:0", "r1n1:0",
                                             "r1n2:0", "r2n1:0", "r2n2:0"}));
}

TEST(HostsSpec, Malformed) {
  for (const char* bad : {"", "n[01-", "n01]", "n1:0", "n1:x", "n1:", ":2", "a,,b", "n[3-1]",
                          "n1:2:3", "a/b:2", "a[1-999999],b[1-999999]"}) {
    EXPECT_THROW(parseHostsSpec(bad), ConfigError) << bad;
  }
}

IfAddr addr(const std::string& name, const std::string& ip, int prefix, bool lo = false) {
  return IfAddr{name, ip, prefix, lo};
}

TEST(Addresses, SingleNodeUsesLoopback) {
  std::vector<NodeInfo> nodes(1);
  nodes[0].addrs = {addr("lo", "127.0.0.1", 8, true), addr("eth0", "192.168.1.5", 24)};
  EXPECT_EQ(assignAddresses(nodes), "127.0.0.1");
  EXPECT_EQ(nodes[0].iface, "");
}

TEST(Addresses, MasterIsOnTheSubnetThePeersShare) {
  std::vector<NodeInfo> nodes(2);
  nodes[0].addrs = {addr("lo", "127.0.0.1", 8, true), addr("eth0", "192.168.1.5", 24),
                    addr("ib0", "10.77.0.11", 24)};
  nodes[1].addrs = {addr("lo", "127.0.0.1", 8, true), addr("eth9", "10.77.0.12", 24)};
  EXPECT_EQ(assignAddresses(nodes), "10.77.0.11");
  EXPECT_EQ(nodes[0].iface, "ib0");
  EXPECT_EQ(nodes[1].ip, "10.77.0.12");
  EXPECT_EQ(nodes[1].iface, "eth9");
}

TEST(Addresses, DockerBridgeOnEveryNodeIsNotTheMaster) {
  // docker0 172.17.0.1/16 on every node: its subnet holds every node, while the nodes' real
  // addresses lie in different routed /24s (no shared subnet). The bridge used to win.
  std::vector<NodeInfo> nodes(3);
  for (int i = 0; i < 3; ++i)
    nodes[i].addrs = {addr("lo", "127.0.0.1", 8, true), addr("docker0", "172.17.0.1", 16),
                      addr("eth0", "10.1." + std::to_string(i) + ".5", 24),
                      addr("br-3f2a", "172.18.0.1", 16),
                      addr("virbr0", "192.168.12" + std::to_string(i) + ".1", 16)};
  std::string why;
  EXPECT_EQ(assignAddresses(nodes, &why), "10.1.0.5");
  EXPECT_EQ(nodes[0].iface, "eth0");
  EXPECT_EQ(nodes[1].ip, "10.1.1.5");  // not the bridge address shared by every node
  EXPECT_EQ(nodes[2].iface, "eth0");
  EXPECT_NE(why.find("eth0 10.1.0.5/24"), std::string::npos) << why;
  EXPECT_NE(why.find("docker0 172.17.0.1 (node 1 has the same address)"), std::string::npos) << why;
  EXPECT_NE(why.find("virbr0 192.168.120.1 (container/VM bridge interface)"), std::string::npos)
      << why;
}

TEST(Addresses, AVirtualInterfaceThatIsTheOnlyRouteIsUsed) {
  std::vector<NodeInfo> nodes(2);
  nodes[0].addrs = {addr("lo", "127.0.0.1", 8, true), addr("veth7", "10.9.0.1", 24)};
  nodes[1].addrs = {addr("lo", "127.0.0.1", 8, true), addr("veth3", "10.9.0.2", 24)};
  std::string why;
  EXPECT_EQ(assignAddresses(nodes, &why), "10.9.0.1");
  EXPECT_EQ(nodes[1].ip, "10.9.0.2");
  EXPECT_NE(why.find("no other candidate"), std::string::npos) << why;
  EXPECT_TRUE(isVirtualInterface(addr("docker0", "172.17.0.1", 16)));
  EXPECT_FALSE(isVirtualInterface(addr("eth0", "10.0.0.1", 24)));
  EXPECT_FALSE(isVirtualInterface(addr("bond0", "10.0.0.1", 24)));
}

TEST(Addresses, ExplicitChoiceIsKept) {
  std::vector<NodeInfo> nodes(2);
  nodes[0].addrs = {addr("eth0", "192.168.1.5", 24), addr("ib0", "172.16.0.1", 16)};
  nodes[0].ip = "172.16.0.1";
  nodes[0].iface = "ib0";
  nodes[0].chosen = true;
  nodes[1].addrs = {addr("eth0", "192.168.1.6", 24), addr("ib0", "172.16.0.2", 16)};
  EXPECT_EQ(assignAddresses(nodes), "172.16.0.1");
  EXPECT_EQ(nodes[1].ip, "172.16.0.2");  // same subnet as the master
}

}  // namespace
}  // namespace ftb::launcher

namespace ftb::launcher {
namespace {

TEST(PlanRanks, PrefixSumsOverManyNodes) {
  Plan p;
  p.nodes.resize(100000);
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    p.nodes[i].node = static_cast<int>(i);
    p.nodes[i].nproc = 1 + static_cast<int>(i % 3);
  }
  int expect = 0;
  for (size_t i = 0; i < p.nodes.size(); ++i) {  // quadratic before: 10^10 steps
    ASSERT_EQ(p.firstRank(static_cast<int>(i)), expect);
    expect += p.nodes[i].nproc;
  }
  EXPECT_EQ(p.worldSize(), expect);
}

}  // namespace
}  // namespace ftb::launcher

namespace ftb::launcher {
namespace {

NodeInfo tunedNode(int cores, int nproc, std::vector<int> cpus) {
  NodeInfo n;
  n.cores = cores;
  n.nproc = nproc;
  n.cpus = std::move(cpus);
  return n;
}

TEST(TunedEnv, CoresSplitIntoBlocksAndThreadsMatch) {
  NodeInfo n = tunedNode(4, 2, {2, 3, 6, 7});
  EXPECT_EQ(workerCpus(n, 0), (std::vector<int>{2, 3}));
  EXPECT_EQ(workerCpus(n, 1), (std::vector<int>{6, 7}));
  auto t = tunedEnv(n, 1);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "OMP_NUM_THREADS");
  EXPECT_EQ(t[0].value, "2");
  EXPECT_EQ(t[0].reason, "unset; 2 CPU(s) bound to this worker (6-7)");
  // More workers than CPUs: no binding, at least one thread.
  NodeInfo over = tunedNode(2, 4, {0, 1});
  EXPECT_TRUE(workerCpus(over, 3).empty());
  EXPECT_EQ(tunedEnv(over, 3)[0].value, "1");
}

TEST(TunedEnv, InheritedCountsAboveTheBoundCoresAndABadCoretypeAreCorrected) {
  NodeInfo n = tunedNode(8, 4, {0, 1, 2, 3, 4, 5, 6, 7});
  n.preset = {{"OMP_NUM_THREADS", "16"},
              {"MKL_NUM_THREADS", "1"},
              {"OPENBLAS_NUM_THREADS", "32"},
              {"OPENBLAS_CORETYPE", "Haswell"}};
  n.coretype_fix = "Cooperlake";
  n.coretype_note = "below";
  std::map<std::string, std::string> got;
  for (auto& c : tunedEnv(n, 0)) got[c.name] = c.value;
  EXPECT_EQ(got, (std::map<std::string, std::string>{{"OMP_NUM_THREADS", "2"},
                                                     {"OPENBLAS_NUM_THREADS", "2"},
                                                     {"OPENBLAS_CORETYPE", "Cooperlake"}}));
  Plan p;
  p.nodes = {n};
  EXPECT_EQ(asMap(contractEnv(p, 0, 3, 0))["OPENBLAS_CORETYPE"], "Cooperlake");
}

TEST(TunedEnv, NoTuneEnvChangesNothing) {
  NodeInfo n = tunedNode(8, 2, {0, 1, 2, 3, 4, 5, 6, 7});
  n.tune_env = false;
  n.preset = {{"OMP_NUM_THREADS", "16"}};
  n.coretype_fix = "Cooperlake";
  EXPECT_TRUE(tunedEnv(n, 0).empty());
  EXPECT_TRUE(workerCpus(n, 0).empty());
  EXPECT_EQ(threadsFor(n), "16");
  n.bind_cores = true;  // --no-tune-env --bind-cores: binding only
  EXPECT_EQ(workerCpus(n, 1), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(tunedEnv(n, 1).empty());
}

}  // namespace
}  // namespace ftb::launcher
