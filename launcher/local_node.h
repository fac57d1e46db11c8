// Facts about the machine this launcher runs on.
#pragma once

#include <string>
#include <vector>

#include "common/dist_env.h"
#include "common/fd.h"
#include "launcher/options.h"
#include "launcher/placement.h"

namespace ftb::launcher {

std::vector<int> allowedCpus();  // sched_getaffinity, sorted

// The GPUs this node may hand to its workers, and where that came from.
struct GpuSet {
  std::vector<std::string> ids;  // values for the workers' CUDA_VISIBLE_DEVICES
  std::string source;            // e.g. "SLURM_GPUS_ON_NODE=2, ids 0,1 from CUDA_VISIBLE_DEVICES"
};
// Rule, first match wins (what the scheduler granted beats what the machine shows):
//  1. CUDA_VISIBLE_DEVICES set: its entries minus "NoDevFiles" (SLURM's value for GRES
//     without device files: no GPU), "-1", "none" and empty ones; set but empty = no GPU.
//     With SLURM_GPUS_ON_NODE=n only its first n entries.
//  2. SLURM_JOB_GPUS (else SLURM_STEP_GPUS): its ids, the first SLURM_GPUS_ON_NODE of them.
//  3. SLURM_GPUS_ON_NODE=n alone: ids 0..n-1.
//  4. Inside a SLURM job (SLURM_JOB_ID set) without any of these: no GPU (the job was
//     granted none; /dev/nvidiaN may be visible without being granted).
//  5. Outside SLURM: the N of every `dev_dir`/nvidiaN, sorted.
// `env` null = the process environment. Malformed SLURM_GPUS_ON_NODE: ConfigError.
GpuSet detectGpus(const EnvLookup& env = nullptr, const std::string& dev_dir = "/dev");

// The GPUs a dry run plans for every node (the nodes are not asked), first match wins:
//  1. `gpus_per_node` >= 0 (--gpus-per-node N): ids 0..N-1.
//  2. Any of CUDA_VISIBLE_DEVICES (set, even empty), SLURM_JOB_GPUS, SLURM_STEP_GPUS,
//     SLURM_GPUS_ON_NODE: detectGpus() rules 1-3 (what SLURM granted the node this runs on,
//     taken as every node's).
//  3. SLURM_GPUS_PER_NODE ("[type:]N", several comma-separated types summed): the job's
//     request, ids 0..N-1.
//  4. None: no ids and source "" (this machine's /dev/nvidiaN never count: the plan is for
//     other nodes).
// `env` null = the process environment. Malformed SLURM_GPUS_PER_NODE or
// SLURM_GPUS_ON_NODE: ConfigError naming the variable.
GpuSet plannedGpus(int gpus_per_node, const EnvLookup& env = nullptr);
// The variables plannedGpus() reads, for messages when it found none.
inline constexpr const char* kPlannedGpuSources =
    "no --gpus-per-node, SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES or "
    "SLURM_GPUS_PER_NODE";

// Refuses more workers than GPUs on a node that has GPUs (two workers would share a GPU):
// ConfigError("--nproc-per-node") naming the counts, the GPU source and the fixes.
void requireGpuPerWorker(int nproc, const GpuSet& gpus);

// This launcher's CPUs in placement order, with the physical core and NUMA node of each.
// Order: NUMA node, package, physical core (its lowest CPU id), CPU id; so the SMT siblings
// of a core are adjacent and a block of consecutive entries stays on one node and socket
// as far as its size allows. Read from `sys_root`/cpu/cpuN/topology/{thread_siblings_list,
// physical_package_id} and `sys_root`/node/nodeK/cpulist; a CPU whose files are missing
// is its own core on node -1 (unknown).
struct CpuTopology {
  std::vector<int> cpus;  // placement order
  std::vector<int> core;  // core[i]: lowest CPU id of cpus[i]'s SMT siblings
  std::vector<int> numa;  // numa[i]: NUMA node of cpus[i], -1 unknown
};
CpuTopology readCpuTopology(const std::vector<int>& cpus,
                            const std::string& sys_root = "/sys/devices/system");

// Fills n.cpus, cpu_model, isa and the OPENBLAS_CORETYPE check (coretype_fix/note) from
// this machine (common/cpu_info) and the inherited OPENBLAS_CORETYPE; tune_env/bind_cores
// from opts.
void fillTuning(const LaunchOptions& opts, NodeInfo& n);

// CPUs a node's workers may use: --cores-per-node when given (> 0), else
// SLURM_CPUS_PER_TASK (what the job asked per launcher task; under TaskPlugin=task/none the
// affinity mask is the whole machine) when it is a positive integer, at most `allowed`
// (the affinity mask's size), else `allowed`.
int coresForNode(int cores_per_node, int allowed, const char* slurm_cpus_per_task);

// This node's contribution to the rendezvous. Local validation problems (unknown
// interface, nproc=gpu without GPUs, PROGRAM not found, log dir not creatable) are
// returned in `error` rather than thrown, so that every node learns about them and the
// whole job exits 2 together. `program_path` receives the resolved PROGRAM.
NodeInfo localNodeInfo(const LaunchOptions& opts, int node, std::string* program_path);

// A TCP port held for the workers' MASTER_PORT: bound on every IPv4 address (0.0.0.0) with
// SO_REUSEADDR and never listened on. While `fd` stays open no other job can bind the port
// (a bind without SO_REUSEADDR gets EADDRINUSE) and connect() never takes it as a source
// port, but a worker's server that sets SO_REUSEADDR (c10d's TCPStore does, like every
// torch store) binds and listens on it. Invariant: port > 0 and fd open, or both empty.
struct ReservedPort {
  int port = 0;
  Fd fd;
};
// Reserves a free port other than `avoid` (the kernel's choice of bind to port 0). Throws
// DistError naming the errno when no socket or port can be had.
ReservedPort reserveFreePort(int avoid);

// "20241122-101502-4242-3fa9c01b": local time, this launcher's pid and 32 random bits, so
// launchers started in the same second (one machine, or several sharing a --log-dir) differ.
std::string generateRunId();

}  // namespace ftb::launcher
