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
  std::vector<std::string> gpus;  // GPU ids for the workers (detectGpus, local_node.h)
  std::string gpu_source;         // where gpus came from; "" = not detected (plan-only)
  int nproc = 1;
  // Inherited values of the variables the launcher may set (kPresetVars), if set.
  std::map<std::string, std::string> preset;
  // Worker environment tuning (default; off with --no-tune-env): bind local rank r to its
  // block of `cpus`, thread counts to match, OPENBLAS_CORETYPE corrected (coretype_fix).
  bool tune_env = true;
  bool bind_cores = false;  // --bind-cores: bind even with --no-tune-env
  // CPU ids this launcher may use, in placement order (readCpuTopology: NUMA node, package,
  // physical core, so SMT siblings are adjacent); empty = 0..cores-1 (plan-only).
  std::vector<int> cpus;
  // Parallel to cpus, or empty (= every CPU its own core, NUMA node unknown): the physical
  // core (lowest sibling id) and NUMA node (-1 unknown) of each CPU.
  std::vector<int> cpu_core, cpu_numa;
  std::string cpu_model, isa;  // common/cpu_info; "" when unknown (plan-only --hosts)
  std::string coretype_fix;    // OPENBLAS_CORETYPE to set; "" = leave as is
  std::string coretype_note;   // checkOpenblasCoretype's message ("" = fine or unset)
  // --dry-run: local worker 0's BLAS, core type, threads and allocator as
  // probeWorkerEnv() found them (launcher/env_probe.h); "" = not probed.
  std::string worker_env;
  std::vector<IfAddr> addrs;  // candidates for assignAddresses
  std::string error;          // local validation failure -> whole job exits 2
};

// Largest world size a plan may have (RANK and WORLD_SIZE are C ints in torch).
inline constexpr int64_t kMaxWorldSize = 2147483647;

struct Plan {
  std::vector<NodeInfo> nodes;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  int max_restarts = 0;
  std::string source;      // "mpi", "single", "--hosts", "slurm": where the node list came from
  std::string master_why;  // how master_addr was chosen (assignAddresses); "" = plan-only

  int worldSize() const;
  int firstRank(int node) const;  // O(1) after the first call

 private:
  mutable std::vector<int> first_;  // first_[i] = firstRank(i); size nodes.size() + 1
  const std::vector<int>& prefix() const;
};

// Fills ip/iface of every node and returns MASTER_ADDR (see placement.cpp for the rule).
// `why`, if given, receives the choice and its reason for the log and the dry run.
std::string assignAddresses(std::vector<NodeInfo>& nodes, std::string* why = nullptr);
// True for interfaces that are not a route between nodes even when every node has one:
// container and VM bridges and their veth ends (docker*, br-*, virbr*, veth*, cni*,
// flannel*, cali*, lxcbr*, podman*) and loopback.
bool isVirtualInterface(const IfAddr& a);

// Variables whose inherited values a node reports in NodeInfo::preset.
extern const char* const kPresetVars[5];

// CPUs local worker `local_rank` of `n` is bound to, sorted. The usable CPUs are the first
// min(|cpus|, cores) of n.cpus in placement order (0..cores-1 when cpus is empty). With at
// most one worker per physical core, worker r gets block r of (usable cores / nproc) whole
// physical cores, with all their SMT siblings: blocks never split a core, and follow the
// NUMA node order. With more workers than cores but not than CPUs, block r of
// usable / nproc CPUs. Empty (not bound) without tuning/--bind-cores or with more workers
// than CPUs.
std::vector<int> workerCpus(const NodeInfo& n, int local_rank);
// Physical cores among `cpus` of node `n` (each CPU its own core without n.cpu_core).
int physicalCores(const NodeInfo& n, const std::vector<int>& cpus);
// NUMA nodes of `cpus` on `n`, "0" or "0,1"; "" when unknown.
std::string numaNodes(const NodeInfo& n, const std::vector<int>& cpus);

// The value of a count such as OMP_NUM_THREADS: -1 unless plain decimal digits (at most 6).
long parsedCount(const std::string& v);

// "0-3,8" for {0,1,2,3,8}.
std::string cpuList(const std::vector<int>& cpus);
// Inverse of cpuList, as Linux writes CPU lists ("0-3,8\n"); malformed parts are skipped.
std::vector<int> parseCpuList(const std::string& text);

// One variable the tuning sets, and why (for --dry-run and the launcher log).
struct EnvChange {
  std::string name, value, reason;
};
// The tuned variables of local worker `local_rank` (empty without tuning): OMP_NUM_THREADS
// = the physical cores of its bound CPUs (SMT siblings share a core's FMA units, so one
// thread per core; cores / nproc when not bound) unless the inherited value is not
// larger; MKL_NUM_THREADS/OPENBLAS_NUM_THREADS lowered to that when larger; OPENBLAS_CORETYPE
// = n.coretype_fix when set.
std::vector<EnvChange> tunedEnv(const NodeInfo& n, int local_rank);

// OMP_NUM_THREADS a worker on `n` sees: the tuned value, else the inherited one, else "-"
// (unset: the library's default).
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

// CUDA_VISIBLE_DEVICES of every worker on `n`: its first nproc GPU ids, "0,1" ("" without
// GPUs). torchrun's convention: local rank r uses device cuda:LOCAL_RANK, the r-th of them
// (n.gpus[r]); the nodes refuse more workers than GPUs (requireGpuPerWorker).
std::string visibleGpus(const NodeInfo& n);

// The variables the launcher sets for worker `local_rank` on `node`, sorted by name: the
// torchrun contract, GLOO_SOCKET_IFNAME, CUDA_VISIBLE_DEVICES (visibleGpus) and tunedEnv().
EnvVars contractEnv(const Plan& plan, int node, int local_rank, int attempt);

// True for variables that must not leak into workers: OMPI_*, PMIX_*, PMI_*, and the
// launchers' FTB_RDZV_SECRET (rdzv_auth.h). `s` is "NAME=VALUE".
bool isStrippedVar(const std::string& name_or_kv);
// This process's environment (`environ`), K=V, in order.
std::vector<std::string> environList();
// `environ`-style list minus stripped variables, in the original order.
std::vector<std::string> inheritableEnv(const char* const* envp);
// inherited minus names in `set`, then `set` appended: the worker's complete environment.
std::vector<std::string> mergeEnv(const std::vector<std::string>& inherited, const EnvVars& set);

}  // namespace ftb::launcher
