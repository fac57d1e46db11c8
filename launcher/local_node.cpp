#include "launcher/local_node.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <tuple>

#include "common/cpu_info.h"
#include "common/error.h"
#include "common/log.h"
#include "launcher/process.h"

namespace ftb::launcher {

std::vector<int> allowedCpus() {
  cpu_set_t set;
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  if (out.empty()) out.push_back(0);
  return out;
}

namespace {

std::string envStr(const EnvLookup& env, const char* name) {
  const char* v = env ? env(name) : std::getenv(name);
  return v ? v : "";
}

std::vector<std::string> splitIds(const std::string& list, bool* dropped_nodev) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string id;
  while (std::getline(ss, id, ',')) {
    if (id == "NoDevFiles" && dropped_nodev) *dropped_nodev = true;
    if (!id.empty() && id != "-1" && id != "none" && id != "NoDevFiles") out.push_back(id);
  }
  return out;
}

std::string joinIds(const std::vector<std::string>& ids) {
  std::string s;
  for (const auto& i : ids) s += (s.empty() ? "" : ",") + i;
  return s.empty() ? "none" : s;
}

std::vector<std::string> devNvidiaIds(const std::string& dev_dir) {
  static const std::regex kDev("nvidia([0-9]+)");
  std::vector<int> ids;
  if (DIR* d = opendir(dev_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::cmatch m;
      if (std::regex_match(e->d_name, m, kDev)) ids.push_back(std::stoi(m[1]));
    }
    closedir(d);
  }
  std::sort(ids.begin(), ids.end());
  std::vector<std::string> out;
  for (int i : ids) out.push_back(std::to_string(i));
  return out;
}

}  // namespace

GpuSet detectGpus(const EnvLookup& env, const std::string& dev_dir) {
  std::string on_node = envStr(env, "SLURM_GPUS_ON_NODE");
  long limit = -1;
  if (!on_node.empty()) {
    if (on_node.size() > 6 || on_node.find_first_not_of("0123456789") != std::string::npos)
      throw ConfigError("SLURM_GPUS_ON_NODE", "environment", "'" + on_node + "' is not a GPU count",
                        "expected an integer >= 0");
    limit = std::stol(on_node);
  }
  const std::string gpus_on = limit >= 0 ? "SLURM_GPUS_ON_NODE=" + on_node + ", " : "";
  auto firstN = [&](std::vector<std::string> ids) {
    if (limit >= 0 && static_cast<long>(ids.size()) > limit) ids.resize(limit);
    return ids;
  };
  GpuSet g;
  if (const char* cvd = env ? env("CUDA_VISIBLE_DEVICES") : std::getenv("CUDA_VISIBLE_DEVICES")) {
    bool nodev = false;
    g.ids = firstN(splitIds(cvd, &nodev));
    g.source = gpus_on + "ids " + joinIds(g.ids) + " from CUDA_VISIBLE_DEVICES=" + cvd +
               (nodev ? " (NoDevFiles: SLURM granted GRES without device files, not a GPU)" : "");
    return g;
  }
  for (const char* var : {"SLURM_JOB_GPUS", "SLURM_STEP_GPUS"}) {
    std::string list = envStr(env, var);
    if (list.empty()) continue;
    g.ids = firstN(splitIds(list, nullptr));
    g.source = gpus_on + "ids " + joinIds(g.ids) + " from " + var;
    return g;
  }
  if (limit >= 0) {
    for (long i = 0; i < limit; ++i) g.ids.push_back(std::to_string(i));
    g.source = gpus_on + "ids " + joinIds(g.ids) + " (no id list set)";
  } else if (!envStr(env, "SLURM_JOB_ID").empty()) {
    g.source =
        "none granted: SLURM job without SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS or "
        "CUDA_VISIBLE_DEVICES (" +
        dev_dir + "/nvidia* not counted)";
  } else {
    g.ids = devNvidiaIds(dev_dir);
    g.source = "ids " + joinIds(g.ids) + " from " + dev_dir + "/nvidiaN (no scheduler variable)";
  }
  return g;
}

namespace {

// SLURM_GPUS_PER_NODE's count: "8", "h100:8", "gpu:h100:8", "a100:2,v100:1" (summed).
long gpusPerNodeRequest(const std::string& v) {
  long total = 0;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const std::string n = item.substr(item.rfind(':') + 1);
    if (n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos)
      throw ConfigError("SLURM_GPUS_PER_NODE", "environment",
                        "'" + v + "' is not a GPU request ([type:]count,...)",
                        "expected e.g. 8 or h100:8, as sbatch --gpus-per-node sets it");
    total += std::stol(n);
  }
  return std::min<long>(total, kMaxGpusPerNode);
}

}  // namespace

GpuSet plannedGpus(int gpus_per_node, const EnvLookup& env) {
  auto get = [&](const char* k) { return env ? env(k) : std::getenv(k); };
  GpuSet g;
  long n = gpus_per_node;
  if (gpus_per_node >= 0) {
    g.source = "--gpus-per-node " + std::to_string(gpus_per_node);
  } else if (get("CUDA_VISIBLE_DEVICES") || !envStr(env, "SLURM_JOB_GPUS").empty() ||
             !envStr(env, "SLURM_STEP_GPUS").empty() ||
             !envStr(env, "SLURM_GPUS_ON_NODE").empty()) {
    return detectGpus(env, "");
  } else if (const std::string req = envStr(env, "SLURM_GPUS_PER_NODE"); !req.empty()) {
    n = gpusPerNodeRequest(req);
    g.source = "SLURM_GPUS_PER_NODE=" + req;
  }
  for (long i = 0; i < n; ++i) g.ids.push_back(std::to_string(i));
  if (!g.source.empty()) g.source += ": ids " + joinIds(g.ids) + " on every node";
  return g;
}

void requireGpuPerWorker(int nproc, const GpuSet& gpus) {
  const int n = static_cast<int>(gpus.ids.size());
  if (n == 0 || nproc <= n) return;
  throw ConfigError("--nproc-per-node", "command line",
                    std::to_string(nproc) + " workers on a node with " + std::to_string(n) +
                        " GPU(s) (" + gpus.source + "): workers would share a GPU",
                    "use --nproc-per-node gpu (one worker per GPU) or at most " +
                        std::to_string(n) +
                        ", ask SLURM for more GPUs (--gpus-per-node), or "
                        "run CPU workers with CUDA_VISIBLE_DEVICES= (empty)");
}

namespace {

std::string readSmall(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

CpuTopology readCpuTopology(const std::vector<int>& cpus, const std::string& sys_root) {
  std::map<int, int> node_of;
  if (DIR* d = opendir((sys_root + "/node").c_str())) {
    static const std::regex kNode("node([0-9]+)");
    while (dirent* e = readdir(d)) {
      std::cmatch m;
      if (!std::regex_match(e->d_name, m, kNode)) continue;
      std::string list = readSmall(sys_root + "/node/" + e->d_name + "/cpulist");
      for (int c : parseCpuList(list)) node_of[c] = std::stoi(m[1]);
    }
    closedir(d);
  }
  struct Slot {
    int numa, package, core, cpu;
  };
  std::vector<Slot> slots;
  for (int c : cpus) {
    std::string dir = sys_root + "/cpu/cpu" + std::to_string(c) + "/topology/";
    std::vector<int> sib = parseCpuList(readSmall(dir + "thread_siblings_list"));
    std::string pkg = readSmall(dir + "physical_package_id");
    auto it = node_of.find(c);
    slots.push_back({it == node_of.end() ? -1 : it->second,
                     pkg.empty() ? -1 : std::atoi(pkg.c_str()),
                     sib.empty() ? c : *std::min_element(sib.begin(), sib.end()), c});
  }
  std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    return std::tie(a.numa, a.package, a.core, a.cpu) < std::tie(b.numa, b.package, b.core, b.cpu);
  });
  CpuTopology t;
  for (const auto& s : slots) {
    t.cpus.push_back(s.cpu);
    t.core.push_back(s.core);
    t.numa.push_back(s.numa);
  }
  return t;
}

void fillTuning(const LaunchOptions& opts, NodeInfo& n) {
  n.tune_env = opts.tune_env;
  n.bind_cores = opts.bind_cores;
  CpuInfo cpu = detectCpu();
  CpuTopology topo = readCpuTopology(allowedCpus());
  n.cpus = std::move(topo.cpus);
  n.cpu_core = std::move(topo.core);
  n.cpu_numa = std::move(topo.numa);
  n.cpu_model = cpu.model_name;
  n.isa = cpu.isaString();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  CoretypeCheck check = checkOpenblasCoretype(cpu, coretype ? coretype : "");
  n.coretype_note = check.message;
  if (check.verdict == CoretypeCheck::Verdict::kBelow ||
      check.verdict == CoretypeCheck::Verdict::kAbove)
    n.coretype_fix = check.recommended;
}

int coresForNode(int cores_per_node, int allowed, const char* slurm_cpus_per_task) {
  if (cores_per_node > 0) return cores_per_node;
  long c = parsedCount(slurm_cpus_per_task ? slurm_cpus_per_task : "");
  return c > 0 ? std::min(static_cast<int>(c), allowed) : allowed;
}

NodeInfo localNodeInfo(const LaunchOptions& opts, int node, std::string* program_path) {
  NodeInfo n;
  n.node = node;
  n.host = hostName();
  n.cores = coresForNode(opts.cores_per_node, static_cast<int>(allowedCpus().size()),
                         std::getenv("SLURM_CPUS_PER_TASK"));
  for (const char* k : kPresetVars)
    if (const char* v = std::getenv(k)) n.preset[k] = v;
  fillTuning(opts, n);
  n.addrs = listInterfaces();
  try {
    GpuSet gpus = opts.gpus_per_node >= 0 ? plannedGpus(opts.gpus_per_node) : detectGpus();
    n.gpus = gpus.ids;
    n.gpu_source = gpus.source;
    n.nproc =
        resolveNproc(opts.nproc_per_node, n.cores, static_cast<int>(n.gpus.size()), gpus.source);
    requireGpuPerWorker(n.nproc, gpus);
    if (auto a = selectAddress(n.addrs, listInterfaceNames(), opts.iface, opts.network)) {
      n.ip = a->ip;
      n.iface = a->name;
      n.chosen = true;
    }
    const char* path = std::getenv("PATH");
    *program_path = resolveProgram(opts.program.at(0), path ? path : "/usr/bin:/bin");
    if (!opts.log_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(opts.log_dir, ec);
      if (ec || access(opts.log_dir.c_str(), W_OK) != 0)
        throw ConfigError(
            "--log-dir", "command line",
            "cannot create or write '" + opts.log_dir + "'" + (ec ? ": " + ec.message() : ""),
            "choose a directory this user can write on every node, or drop --log-dir (worker "
            "output then goes to the console)");
    }
  } catch (const FtbError& e) {
    n.error = e.what();
  }
  return n;
}

ReservedPort reserveFreePort(int avoid) {
  errno = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    Fd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s) break;
    int one = 1;
    setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof sa;
    if (bind(s.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        getsockname(s.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
      break;
    int port = ntohs(sa.sin_port);
    if (port > 0 && port != avoid) return ReservedPort{port, std::move(s)};
  }
  throw DistError(std::string("cannot reserve a free TCP port for MASTER_PORT: ") +
                  (errno ? std::strerror(errno)
                         : "the kernel offered only port " + std::to_string(avoid) +
                               ", the previous attempt's"));
}

std::string generateRunId() {
  time_t t = time(nullptr);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  std::random_device rd;
  char suffix[40];
  snprintf(suffix, sizeof suffix, "-%ld-%08x", static_cast<long>(getpid()),
           static_cast<unsigned>(rd()));
  return std::string(buf) + suffix;
}

}  // namespace ftb::launcher
