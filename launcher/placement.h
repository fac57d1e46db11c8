// Placement: which node runs which global ranks, and the environment each worker gets.
//
// Invariants of a Plan: nodes[i].node == i (node rank = MPI rank of its launcher);
// every nproc >= 1; global ranks are assigned node by node, so node i runs ranks
// [firstRank(i), firstRank(i) + nodes[i].nproc). The world size fits in an int
// (planners refuse larger totals). Node counts are not changed after the first
// firstRank()/worldSize() call (they cache prefix sums, so that plans of 10^6 nodes
// stay linear).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launcher/netif.h"

namespace ftb::launcher {

// What one launcher knows about its node; contributed to the rendezvous.
struct NodeInfo {
  int node = 0;
  std::string host;     // hostname; NOT unique (namespaces share it)
  std::string ip;       // chosen address ("" until assignAddresses)
  std::string iface;    // interface of ip; "" = do not set GLOO_SOCKET_IFNAME
  bool chosen = false;  // ip/iface fixed locally by --iface/--network
  int cores = 1;
  std::vector<std::string> gpus;  // visible GPU ids
  int nproc = 1;
  std::map<std::string, std::string> preset;  // OMP_NUM_THREADS/GLOO_SOCKET_IFNAME if set
  std::vector<IfAddr> addrs;                  // candidates for assignAddresses
  std::string error;                          // local validation failure -> whole job exits 2
};

// Largest world size a plan may have (RANK and WORLD_SIZE are C ints in torch).
inline constexpr int64_t kMaxWorldSize = 2147483647;

struct Plan {
  std::vector<NodeInfo> nodes;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  int max_restarts = 0;
  std::string source;  // "mpi", "single", "--hosts", "slurm": where the node list came from

  int worldSize() const;
  int firstRank(int node) const;  // O(1) after the first call

 private:
  mutable std::vector<int> first_;  // first_[i] = firstRank(i); size nodes.size() + 1
  const std::vector<int>& prefix() const;
};

// Fills ip/iface of every node and returns MASTER_ADDR (see placement.cpp for the rule).
std::string assignAddresses(std::vector<NodeInfo>& nodes);

// OMP_NUM_THREADS a worker on `n` sees: the inherited value, else max(1, cores / nproc).
std::string threadsFor(const NodeInfo& n);

// "n[01-02]:2,n03" -> {n01,2},{n02,2},{n03,0}; 0 = use the default count.
// Throws ConfigError("--hosts") for malformed entries or counts < 1.
struct HostCount {
  std::string host;
  int nproc = 0;
};
// At most kMaxHostlistHosts hosts in total.
std::vector<HostCount> parseHostsSpec(const std::string& spec);

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// The variables the launcher sets for global worker `local_rank` on `node`, sorted by name:
// the torchrun contract (DESIGN.md §Environment contract).
EnvVars contractEnv(const Plan& plan, int node, int local_rank, int attempt);

// True for variables that must not leak into workers: OMPI_*, PMIX_*, PMI_*.
bool isStrippedVar(const std::string& name_or_kv);
// This process's environment (`environ`), K=V, in order.
std::vector<std::string> environList();
// `environ`-style list minus stripped variables, in the original order.
std::vector<std::string> inheritableEnv(const char* const* envp);
// inherited minus names in `set`, then `set` appended: the worker's complete environment.
std::vector<std::string> mergeEnv(const std::vector<std::string>& inherited, const EnvVars& set);

}  // namespace ftb::launcher
