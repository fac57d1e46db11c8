#include "launcher/plan_only.h"

#include <cstdint>
#include <cstdlib>
#include <map>

#include "common/dist_env.h"
#include "common/error.h"
#include "common/hostlist.h"
#include "launcher/local_node.h"
#include "launcher/mpi_transport.h"

namespace ftb::launcher {
namespace {

std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "";
}

}  // namespace

bool isPlanOnly(const LaunchOptions& opts) {
  return opts.dry_run && !launchedByMpi() && !opts.tcpRendezvous() &&
         (!opts.hosts.empty() || !env("SLURM_JOB_NODELIST").empty());
}

namespace {

// The node list and any per-node counts: --hosts, else SLURM_JOB_NODELIST with
// SLURM_TASKS_PER_NODE (unless --nproc-per-node was given). Sets plan.source.
std::vector<HostCount> plannedHosts(const LaunchOptions& opts, Plan& plan) {
  if (!opts.hosts.empty()) {
    plan.source = "--hosts";
    return parseHostsSpec(opts.hosts);
  }
  plan.source = "SLURM_JOB_NODELIST";
  std::vector<HostCount> hosts;
  for (auto& h : expandHostlist(env("SLURM_JOB_NODELIST"), "SLURM_JOB_NODELIST"))
    hosts.push_back({h, 0});
  std::string tpn = env("SLURM_TASKS_PER_NODE");
  if (!opts.nproc_given && !tpn.empty()) {
    auto counts = expandTasksPerNode(tpn);
    if (counts.size() != hosts.size())
      throw ConfigError("SLURM_TASKS_PER_NODE", "environment",
                        "'" + tpn + "' gives " + std::to_string(counts.size()) + " counts for " +
                            std::to_string(hosts.size()) + " nodes in '" +
                            env("SLURM_JOB_NODELIST") + "'");
    for (size_t i = 0; i < hosts.size(); ++i) hosts[i].nproc = counts[i];
  }
  return hosts;
}

// Cores per node (see planWithoutMpi).
std::vector<int> plannedCores(const LaunchOptions& opts, const Plan& plan, size_t nodes) {
  std::vector<int> cores(nodes, static_cast<int>(allowedCpus().size()));
  std::string cpn = env("SLURM_JOB_CPUS_PER_NODE"), cpt = env("SLURM_CPUS_PER_TASK");
  if (opts.cores_per_node > 0) {
    cores.assign(nodes, opts.cores_per_node);
  } else if (plan.source == "SLURM_JOB_NODELIST" && parsedCount(cpt) > 0) {
    cores.assign(nodes, static_cast<int>(parsedCount(cpt)));
  } else if (plan.source == "SLURM_JOB_NODELIST" && !cpn.empty()) {
    auto c = expandTasksPerNode(cpn, "SLURM_JOB_CPUS_PER_NODE");
    if (c.size() == nodes) cores = c;
  }
  return cores;
}

}  // namespace

Plan planWithoutMpi(const LaunchOptions& opts) {
  Plan plan;
  std::vector<HostCount> hosts = plannedHosts(opts, plan);
  std::vector<int> cores = plannedCores(opts, plan, hosts.size());
  const GpuSet gpus = plannedGpus(opts.gpus_per_node);
  const int ngpus = static_cast<int>(gpus.ids.size());
  std::map<std::string, std::string> preset;
  for (const char* k : kPresetVars)
    if (const char* v = std::getenv(k)) preset[k] = v;
  // The nodes' CPUs are unknown here: empty cpus = ids 0..cores-1 stand for each node's CPU
  // set (see workerCpus); CPU model, ISA and the core-type check are left out.
  NodeInfo shape;
  shape.tune_env = opts.tune_env;
  shape.bind_cores = opts.bind_cores;
  shape.gpus = gpus.ids;
  shape.gpu_source = gpus.source;
  std::map<int, int> default_nproc;  // cores -> resolved --nproc-per-node (regex once)
  int64_t world = 0;
  plan.nodes.reserve(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    NodeInfo n = shape;
    n.node = static_cast<int>(i);
    n.host = std::move(hosts[i].host);
    n.cores = cores[i];
    if (hosts[i].nproc > 0) {
      n.nproc = hosts[i].nproc;
    } else {
      auto it = default_nproc.find(n.cores);
      if (it == default_nproc.end())
        it = default_nproc
                 .emplace(n.cores,
                          resolveNproc(opts.nproc_per_node, n.cores, ngpus,
                                       gpus.source.empty() ? kPlannedGpuSources : gpus.source))
                 .first;
      n.nproc = it->second;
    }
    requireGpuPerWorker(n.nproc, gpus);
    n.iface = opts.iface;  // same interface name on every node, if given
    n.preset = preset;
    world += n.nproc;
    plan.nodes.push_back(std::move(n));
  }
  if (world > kMaxWorldSize)
    throw ConfigError(plan.source, opts.hosts.empty() ? "environment" : "command line",
                      std::to_string(world) + " workers in total; at most " +
                          std::to_string(kMaxWorldSize) + " are supported",
                      "check the per-host counts");
  plan.master_addr = plan.nodes.at(0).host;
  std::string job = env("SLURM_JOB_ID");
  plan.master_port = opts.master_port > 0 ? opts.master_port
                     : !job.empty() && job.find_first_not_of("0123456789") == std::string::npos
                         ? slurmJobPort(std::stoll(job.substr(0, 15)), readIpLocalPortRange())
                         : 29500;
  plan.run_id = !opts.run_id.empty() ? opts.run_id : !job.empty() ? job : generateRunId();
  plan.max_restarts = opts.max_restarts;
  return plan;
}

}  // namespace ftb::launcher
