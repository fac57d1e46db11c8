#include "launcher/placement.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/hostlist.h"

namespace ftb::launcher {

const std::vector<int>& Plan::prefix() const {
  if (first_.size() != nodes.size() + 1) {
    first_.assign(1, 0);
    first_.reserve(nodes.size() + 1);
    for (const auto& n : nodes) first_.push_back(first_.back() + n.nproc);
  }
  return first_;
}

int Plan::worldSize() const { return prefix().back(); }

int Plan::firstRank(int node) const { return prefix().at(node); }

bool isVirtualInterface(const IfAddr& a) {
  if (a.loopback) return true;
  for (const char* p :
       {"docker", "br-", "virbr", "veth", "cni", "flannel", "cali", "lxcbr", "podman"})
    if (a.name.rfind(p, 0) == 0) return true;
  return false;
}

namespace {

// Why node 0's address `a` is not a candidate ("" = it is): loopback, a container/VM
// bridge, or an address another node holds as well (docker0's 172.17.0.1 on every node).
std::string excluded(const IfAddr& a, const std::vector<NodeInfo>& nodes) {
  if (a.loopback) return "loopback";
  for (size_t i = 1; i < nodes.size(); ++i)
    for (const auto& b : nodes[i].addrs)
      if (b.ip == a.ip) return "node " + std::to_string(i) + " has the same address";
  if (isVirtualInterface(a)) return "container/VM bridge interface";
  return "";
}

// Other nodes with an address in a's subnet.
int peersOnSubnet(const IfAddr& a, const std::vector<NodeInfo>& nodes) {
  int score = 0;
  for (size_t i = 1; i < nodes.size(); ++i)
    for (const auto& b : nodes[i].addrs)
      if (!b.loopback && sameSubnet(a, b.ip)) {
        ++score;
        break;
      }
  return score;
}

// Node 0's address: the candidate whose subnet holds an address of the most other nodes
// (first in interface order on ties). Candidates: addresses excluded() accepts; if there are
// none, the virtual ones too (a bridge that is the only route); then any non-loopback one.
const IfAddr* pickMaster(const std::vector<NodeInfo>& nodes, std::string* why) {
  const IfAddr* master = nullptr;
  std::string skipped;
  for (int tier = 0; tier < 3 && !master; ++tier) {
    int best = -1;
    for (const auto& a : nodes[0].addrs) {
      std::string reason = excluded(a, nodes);
      bool ok = reason.empty() || (tier == 1 && reason == "container/VM bridge interface") ||
                (tier == 2 && !a.loopback);
      if (tier == 0 && !reason.empty() && !a.loopback)
        skipped += (skipped.empty() ? "" : ", ") + a.name + " " + a.ip + " (" + reason + ")";
      if (!ok) continue;
      int score = peersOnSubnet(a, nodes);
      if (score > best) best = score, master = &a;
    }
    if (master)
      *why = master->name + " " + master->ip + "/" + std::to_string(master->prefix) +
             ": its subnet holds an address of " + std::to_string(best) + " of " +
             std::to_string(nodes.size() - 1) + " other node(s)" +
             (tier ? " (no other candidate)" : "") +
             (skipped.empty() ? "" : "; not used: " + skipped);
  }
  return master;
}

}  // namespace

// Rule: a node that chose with --iface/--network keeps its choice. Otherwise node 0 takes
// pickMaster()'s address; every other node takes its address in node 0's subnet, else its
// first non-loopback address that is not a container/VM bridge, else its first non-loopback
// one. A lone node without a choice uses 127.0.0.1 and no interface.
std::string assignAddresses(std::vector<NodeInfo>& nodes, std::string* why) {
  std::string reason;
  if (nodes.empty()) return "127.0.0.1";
  NodeInfo& n0 = nodes[0];
  if (n0.chosen) {
    reason = n0.iface + " " + n0.ip + ": chosen by --iface/--network";
  } else {
    const IfAddr* master = nodes.size() > 1 ? pickMaster(nodes, &reason) : nullptr;
    n0.ip = master ? master->ip : "127.0.0.1";
    n0.iface = master ? master->name : "";
    if (!master)
      reason = nodes.size() == 1 ? "127.0.0.1: one node" : "127.0.0.1: node 0 has no address";
  }
  for (size_t i = 1; i < nodes.size(); ++i) {
    NodeInfo& n = nodes[i];
    if (n.chosen) continue;
    const IfAddr* pick = nullptr;
    for (const auto& a : n.addrs)
      if (!pick && !a.loopback && sameSubnet(a, n0.ip)) pick = &a;
    for (const auto& a : n.addrs)
      if (!pick && !isVirtualInterface(a)) pick = &a;
    for (const auto& a : n.addrs)
      if (!pick && !a.loopback) pick = &a;
    n.ip = pick ? pick->ip : "127.0.0.1";
    n.iface = pick ? pick->name : "";
  }
  if (why) *why = reason;
  return n0.ip;
}

const char* const kPresetVars[5] = {"OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME", "MKL_NUM_THREADS",
                                    "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE"};

namespace {

int coreOf(const NodeInfo& n, size_t i) {  // i indexes the placement order
  if (n.cpus.empty()) return static_cast<int>(i);
  return n.cpu_core.size() == n.cpus.size() ? n.cpu_core[i] : n.cpus[i];
}

}  // namespace

std::vector<int> workerCpus(const NodeInfo& n, int local_rank) {
  if (!(n.tune_env || n.bind_cores) || n.nproc < 1) return {};
  const size_t cores = static_cast<size_t>(std::max(1, n.cores));
  const size_t usable = n.cpus.empty() ? cores : std::min(n.cpus.size(), cores);
  // starts[k] = first placement index of physical core k among the usable CPUs.
  std::vector<size_t> starts;
  for (size_t i = 0; i < usable; ++i)
    if (i == 0 || coreOf(n, i) != coreOf(n, i - 1)) starts.push_back(i);
  starts.push_back(usable);
  const size_t ncores = starts.size() - 1, nproc = static_cast<size_t>(n.nproc);
  size_t lo = 0, hi = 0;
  if (nproc <= ncores) {
    size_t per = ncores / nproc;
    lo = starts[per * local_rank];
    hi = starts[per * (local_rank + 1)];
  } else {
    size_t block = usable / nproc;
    lo = block * local_rank;
    hi = block * (local_rank + 1);
  }
  std::vector<int> out;
  for (size_t i = lo; i < hi; ++i) out.push_back(n.cpus.empty() ? static_cast<int>(i) : n.cpus[i]);
  std::sort(out.begin(), out.end());
  return out;
}

int physicalCores(const NodeInfo& n, const std::vector<int>& cpus) {
  if (n.cpu_core.size() != n.cpus.size() || n.cpus.empty()) return static_cast<int>(cpus.size());
  std::set<int> cores;
  for (size_t i = 0; i < n.cpus.size(); ++i)
    if (std::find(cpus.begin(), cpus.end(), n.cpus[i]) != cpus.end()) cores.insert(n.cpu_core[i]);
  return static_cast<int>(cores.size());
}

std::string numaNodes(const NodeInfo& n, const std::vector<int>& cpus) {
  if (n.cpu_numa.size() != n.cpus.size()) return "";
  std::set<int> nodes;
  for (size_t i = 0; i < n.cpus.size(); ++i)
    if (n.cpu_numa[i] >= 0 && std::find(cpus.begin(), cpus.end(), n.cpus[i]) != cpus.end())
      nodes.insert(n.cpu_numa[i]);
  return cpuList({nodes.begin(), nodes.end()});
}

std::vector<int> parseCpuList(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    int a = 0, b = 0;
    char dash = 0;
    std::istringstream ps(part);
    if (!(ps >> a)) continue;
    if (ps >> dash && dash == '-' && ps >> b && b >= a && b - a < (1 << 20)) {
      for (int c = a; c <= b; ++c) out.push_back(c);
    } else {
      out.push_back(a);
    }
  }
  return out;
}

std::string cpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]) +
           (j > i ? "-" + std::to_string(cpus[j]) : "");
    i = j + 1;
  }
  return out;
}

long parsedCount(const std::string& v) {
  if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stol(v);
}

std::vector<EnvChange> tunedEnv(const NodeInfo& n, int local_rank) {
  std::vector<EnvChange> out;
  if (!n.tune_env) return out;
  std::vector<int> cpus = workerCpus(n, local_rank);
  const int phys = physicalCores(n, cpus);
  long threads = cpus.empty() ? std::max(1, n.cores / std::max(1, n.nproc)) : phys;
  std::string basis =
      cpus.empty()
          ? std::to_string(threads) + " of the node's " + std::to_string(n.cores) +
                " cores per worker (not bound: " + std::to_string(n.nproc) + " workers, " +
                std::to_string(n.cpus.empty() ? n.cores : static_cast<int>(n.cpus.size())) +
                " CPUs)"
          : std::to_string(cpus.size()) + " CPU(s) bound to this worker (" + cpuList(cpus) + ")" +
                (phys != static_cast<int>(cpus.size())
                     ? ", " + std::to_string(phys) + " physical core(s): one thread each"
                     : "");
  for (const char* name : {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    auto it = n.preset.find(name);
    bool omp = std::string(name) == "OMP_NUM_THREADS";
    if (it == n.preset.end() || it->second.empty()) {
      if (omp) out.push_back({name, std::to_string(threads), "unset; " + basis});
    } else if (parsedCount(it->second) > threads || parsedCount(it->second) == 0) {
      out.push_back(
          {name, std::to_string(threads), "inherited " + it->second + " exceeds " + basis});
    }
  }
  if (!n.coretype_fix.empty())
    out.push_back({"OPENBLAS_CORETYPE", n.coretype_fix, n.coretype_note});
  return out;
}

std::string threadsFor(const NodeInfo& n) {
  for (const auto& c : tunedEnv(n, 0))
    if (c.name == "OMP_NUM_THREADS") return c.value;
  auto it = n.preset.find("OMP_NUM_THREADS");
  return it != n.preset.end() ? it->second : "-";
}

std::vector<HostCount> parseHostsSpec(const std::string& spec) {
  auto bad = [&](const std::string& why) {
    throw ConfigError("--hosts", "command line", "'" + spec + "': " + why,
                      "expected host[:nproc],... e.g. 'n[01-02]:2,n03:1'");
  };
  // Split at commas outside brackets.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : spec) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) bad("unbalanced ']'");
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) bad("unbalanced '['");
  items.push_back(cur);
  std::vector<HostCount> out;
  for (const auto& item : items) {
    if (item.empty()) bad("empty entry");
    std::string expr = item;
    int count = 0;
    auto colon = item.rfind(':');
    if (colon != std::string::npos && item.find(']', colon) == std::string::npos) {
      std::string c = item.substr(colon + 1);
      if (c.empty() || c.size() > 6 || !std::all_of(c.begin(), c.end(), ::isdigit) ||
          std::stoi(c) < 1)
        bad("count '" + c + "' of '" + item + "' must be an integer >= 1");
      count = std::stoi(c);
      expr = item.substr(0, colon);
    }
    if (expr.empty()) bad("entry '" + item + "' has no host name");
    std::vector<std::string> hosts = expandHostlist(expr, "--hosts");
    if (out.size() + hosts.size() > kMaxHostlistHosts)
      bad("more than " + std::to_string(kMaxHostlistHosts) + " hosts");
    for (auto& h : hosts) out.push_back({std::move(h), count});
  }
  return out;
}

EnvVars contractEnv(const Plan& plan, int node, int local_rank, int attempt) {
  const NodeInfo& n = plan.nodes.at(node);
  EnvVars v = {
      {"GROUP_RANK", std::to_string(node)},
      {"GROUP_WORLD_SIZE", std::to_string(plan.nodes.size())},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(n.nproc)},
      {"MASTER_ADDR", plan.master_addr},
      {"MASTER_PORT", std::to_string(plan.master_port)},
      {"RANK", std::to_string(plan.firstRank(node) + local_rank)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(plan.max_restarts)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_RUN_ID", plan.run_id},
      {"WORLD_SIZE", std::to_string(plan.worldSize())},
  };
  for (auto& c : tunedEnv(n, local_rank)) v.emplace_back(c.name, c.value);
  if (!n.iface.empty() && !n.preset.count("GLOO_SOCKET_IFNAME"))
    v.emplace_back("GLOO_SOCKET_IFNAME", n.iface);
  if (std::string gpus = visibleGpus(n); !gpus.empty())
    v.emplace_back("CUDA_VISIBLE_DEVICES", std::move(gpus));
  std::sort(v.begin(), v.end());
  return v;
}

std::string visibleGpus(const NodeInfo& n) {
  std::string out;
  for (size_t i = 0; i < n.gpus.size() && i < static_cast<size_t>(std::max(0, n.nproc)); ++i)
    out += (out.empty() ? "" : ",") + n.gpus[i];
  return out;
}

bool isStrippedVar(const std::string& s) {
  return s.rfind("OMPI_", 0) == 0 || s.rfind("PMIX_", 0) == 0 || s.rfind("PMI_", 0) == 0 ||
         s.rfind("FTB_RDZV_SECRET=", 0) == 0;
}

std::vector<std::string> environList() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

std::vector<std::string> inheritableEnv(const char* const* envp) {
  std::vector<std::string> out;
  for (; envp && *envp; ++envp)
    if (!isStrippedVar(*envp)) out.emplace_back(*envp);
  return out;
}

std::vector<std::string> mergeEnv(const std::vector<std::string>& inherited, const EnvVars& set) {
  std::set<std::string> names;
  for (const auto& kv : set) names.insert(kv.first);
  std::vector<std::string> out;
  for (const auto& e : inherited)
    if (!names.count(e.substr(0, e.find('=')))) out.push_back(e);
  for (const auto& kv : set) out.push_back(kv.first + "=" + kv.second);
  return out;
}

}  // namespace ftb::launcher
