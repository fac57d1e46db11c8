#include "launcher/report.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>
#include <sstream>

#include "common/error.h"

namespace ftb::launcher {
namespace {

// Left-aligned columns separated by two spaces; no trailing blanks.
std::string table(const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) {
      if (w.size() <= c) w.push_back(0);
      w[c] = std::max(w[c], r[c].size());
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line = indent;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(w[c] - r[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string shellQuote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                        "0123456789_./:=,@%+-") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string rankRange(int first, int count) {
  return count == 1 ? std::to_string(first)
                    : std::to_string(first) + "-" + std::to_string(first + count - 1);
}

std::string formatTimeUs(int64_t time_us) {
  time_t secs = static_cast<time_t>(time_us / 1000000);
  struct tm tm;
  localtime_r(&secs, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  char ms[8];
  snprintf(ms, sizeof ms, ".%03d", static_cast<int>((time_us / 1000) % 1000));
  return std::string(buf) + ms;
}

std::string placementTable(const Plan& plan) {
  std::vector<std::vector<std::string>> rows = {
      {"node", "host", "ip", "cores", "gpus", "nproc", "global ranks", "local ranks", "threads"}};
  for (const auto& n : plan.nodes)
    rows.push_back({std::to_string(n.node), n.host, n.ip.empty() ? "-" : n.ip,
                    std::to_string(n.cores), std::to_string(n.gpus.size()), std::to_string(n.nproc),
                    rankRange(plan.firstRank(n.node), n.nproc), rankRange(0, n.nproc),
                    threadsFor(n)});
  return table(rows, "");
}

std::string gpuSources(const Plan& plan) {
  bool any = false;
  for (const auto& n : plan.nodes) any = any || !n.gpus.empty();
  std::string out;
  for (const auto& n : plan.nodes)
    if (any && !n.gpu_source.empty())
      out +=
          "gpus node " + std::to_string(n.node) + " (host " + n.host + "): " + n.gpu_source + "\n";
  return out;
}

bool isSecretName(const std::string& name) {
  std::string up;
  for (char c : name) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* w : {"TOKEN", "KEY", "SECRET", "PASSWORD"})
    if (up.find(w) != std::string::npos) return true;
  return false;
}

std::string displayValue(const std::string& name, const std::string& value) {
  return isSecretName(name) ? "<masked>" : shellQuote(value);
}

std::string placementSummary(const Plan& plan) {
  std::vector<std::vector<std::string>> rows = {{"nodes", "hosts", "count", "cores", "gpus",
                                                 "nproc", "global ranks", "local ranks",
                                                 "threads"}};
  auto same = [](const NodeInfo& a, const NodeInfo& b) {
    return a.cores == b.cores && a.gpus.size() == b.gpus.size() && a.nproc == b.nproc &&
           threadsFor(a) == threadsFor(b);
  };
  for (size_t i = 0; i < plan.nodes.size();) {
    size_t j = i + 1;
    while (j < plan.nodes.size() && same(plan.nodes[i], plan.nodes[j])) ++j;
    const NodeInfo& a = plan.nodes[i];
    const NodeInfo& b = plan.nodes[j - 1];
    int count = static_cast<int>(j - i);
    int first = plan.firstRank(a.node);
    rows.push_back({rankRange(a.node, count), count == 1 ? a.host : a.host + " .. " + b.host,
                    std::to_string(count), std::to_string(a.cores), std::to_string(a.gpus.size()),
                    std::to_string(a.nproc),
                    rankRange(first, plan.firstRank(b.node) + b.nproc - first),
                    rankRange(0, a.nproc), threadsFor(a)});
    i = j;
  }
  return table(rows, "");
}

void writeWorkerEnv(std::ostream& o, const std::string& probe, const std::string& indent) {
  std::istringstream in(probe);
  std::string line;
  for (bool first = true; std::getline(in, line); first = false)
    o << indent << (first ? "worker environment (local rank 0, probed): " : "") << line << "\n";
}

namespace {

void writeWorker(std::ostream& o, const Plan& plan, const NodeInfo& n, int lr,
                 const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& inherited) {
  o << "\nrank " << plan.firstRank(n.node) + lr << "  node " << n.node << "  host " << n.host
    << "  local " << lr << "/" << n.nproc << "\n  argv:";
  for (const auto& a : argv) o << " " << shellQuote(a);
  o << "\n  env: ";
  std::string replaced;
  for (const auto& [k, v] : contractEnv(plan, n.node, lr, 0)) {
    o << " " << k << "=" << displayValue(k, v);
    auto it = inherited.find(k);
    if (it != inherited.end() && it->second != v)
      replaced += " " + k + "=" + displayValue(k, it->second);
  }
  o << "\n";
  if (!replaced.empty()) o << "  replaces inherited:" << replaced << "\n";
  if (static_cast<size_t>(lr) < n.gpus.size())
    o << "  gpu: " << n.gpus[lr] << " = cuda:" << lr << " (LOCAL_RANK=" << lr
      << " of CUDA_VISIBLE_DEVICES=" << visibleGpus(n) << ")\n";
  std::vector<int> cpus = workerCpus(n, lr);
  if (!cpus.empty()) {
    o << "  cpus: " << cpuList(cpus);
    int phys = physicalCores(n, cpus);
    std::string numa = numaNodes(n, cpus);
    if (phys != static_cast<int>(cpus.size())) o << " (" << phys << " physical core(s))";
    if (!numa.empty()) o << "  NUMA node " << numa;
    o << "\n";
  }
  for (const auto& c : tunedEnv(n, lr))
    o << "  tuned: " << c.name << "=" << displayValue(c.name, c.value) << "  (" << c.reason
      << ")\n";
}

// One line per node: CPU, ISA, BLAS core type, threads against bound CPUs;
// then what probeWorkerEnv() found for the node's first worker.
void writeEnvironmentCheck(std::ostream& o, const NodeInfo& n) {
  o << "environment check, node " << n.node << " (" << n.host << "): ";
  if (n.cpu_model.empty()) {
    o << "CPU unknown (planned without the node)";
  } else {
    o << "CPU " << n.cpu_model << "; ISA " << (n.isa.empty() ? "-" : n.isa);
  }
  auto it = n.preset.find("OPENBLAS_CORETYPE");
  o << "; OPENBLAS_CORETYPE " << (it == n.preset.end() ? "unset" : it->second);
  if (!n.coretype_note.empty()) o << " (" << n.coretype_note << ")";
  if (!n.coretype_fix.empty() && n.tune_env) o << " -> " << n.coretype_fix << " for the workers";
  size_t bound = workerCpus(n, 0).size();
  o << "; threads " << threadsFor(n) << " per worker, "
    << (bound ? std::to_string(bound) + " bound CPU(s) each" : std::string("not bound"));
  if (!n.tune_env) o << " (--no-tune-env: caller's environment unchanged)";
  if (!n.gpu_source.empty()) o << "; GPUs " << n.gpus.size() << ": " << n.gpu_source;
  o << "\n";
  writeWorkerEnv(o, n.worker_env, "  ");
}

void writeEnvironment(std::ostream& o, const std::vector<std::string>& launcher_env, bool all) {
  std::vector<std::string> kept, removed;
  for (const auto& e : launcher_env) (isStrippedVar(e) ? removed : kept).push_back(e);
  std::sort(kept.begin(), kept.end());
  if (!all) {
    o << "environment: each worker inherits this launcher's " << kept.size()
      << " variable(s) unchanged except those listed per worker";
    if (!removed.empty())
      o << ", minus " << removed.size() << " OMPI_*/PMIX_*/PMI_*/FTB_RDZV_SECRET variable(s)";
    o << "; --env all prints them\n";
    return;
  }
  o << "inherited environment (this launcher's, minus OMPI_*, PMIX_*, PMI_*, FTB_RDZV_SECRET; "
       "values of names "
       "containing TOKEN, KEY, SECRET, PASSWORD masked; the variables below each worker "
       "override it):\n";
  for (const auto& e : kept) {
    auto eq = e.find('=');
    std::string k = e.substr(0, eq);
    o << "  " << k << "=" << displayValue(k, eq == std::string::npos ? "" : e.substr(eq + 1))
      << "\n";
  }
  if (!removed.empty()) {
    std::sort(removed.begin(), removed.end());
    o << "removed:";
    for (const auto& e : removed) o << " " << e.substr(0, e.find('='));
    o << "\n";
  }
}

}  // namespace

void writeDryRunReport(std::ostream& o, const Plan& plan, const std::string& program_path,
                       const std::vector<std::string>& argv,
                       const std::vector<std::string>& launcher_env, const DryRunView& view) {
  const bool full = view.full || (!view.summary && plan.worldSize() <= kFullListMaxWorkers);
  o << "launcher --dry-run: " << plan.nodes.size() << " node(s), " << plan.worldSize()
    << " worker(s), nodes from " << plan.source << "; nothing is started\n";
  o << "MASTER_ADDR:MASTER_PORT = " << plan.master_addr << ":" << plan.master_port << "   run id "
    << plan.run_id << "   max restarts " << plan.max_restarts << "\n";
  if (!plan.master_why.empty()) o << "MASTER_ADDR " << plan.master_why << "\n";
  o << "\n";
  if (full) {
    o << placementTable(plan) << "\n";
  } else {
    o << "summary ("
      << (view.summary ? "--summary"
                       : "more than " + std::to_string(kFullListMaxWorkers) + " workers")
      << "): nodes of equal shape share a row, only node 0's workers and the last worker are "
         "shown; --full lists every node and worker\n"
      << placementSummary(plan) << "\n";
  }
  for (const auto& n : plan.nodes) {
    if (!full && n.node != 0) break;
    writeEnvironmentCheck(o, n);
  }
  o << "\nprogram: " << program_path << "\n";
  writeEnvironment(o, launcher_env, view.env_all);
  std::map<std::string, std::string> inherited;
  for (const auto& e : launcher_env)
    if (!isStrippedVar(e)) {
      auto eq = e.find('=');
      if (eq != std::string::npos) inherited[e.substr(0, eq)] = e.substr(eq + 1);
    }
  const NodeInfo* last = plan.nodes.empty() ? nullptr : &plan.nodes.back();
  for (const auto& n : plan.nodes) {
    if (!full && n.node != 0) break;
    for (int lr = 0; lr < n.nproc; ++lr) writeWorker(o, plan, n, lr, argv, inherited);
  }
  if (!full && last && last->node != 0) {
    int shown = plan.nodes[0].nproc, hidden = plan.worldSize() - shown - 1;
    if (hidden > 0)
      o << "\n... " << hidden << " worker(s) not shown (ranks " << rankRange(shown, hidden)
        << "); --full lists them\n";
    writeWorker(o, plan, *last, last->nproc - 1, argv, inherited);
  }
}

std::string failureReport(const Decision& d, int max_restarts) {
  std::ostringstream o;
  if (d.failures.empty() && d.shutdown_signal == 0) {  // they stopped themselves
    o << "launcher: the workers stopped with exit code " << d.exit_code
      << (d.exit_code == kExitRequeue
              ? " (preempted with a checkpoint: `launcher ctl stop`, or a stop signal sent to "
                "them; the same command resumes)"
              : "")
      << "\n";
    return o.str();
  }
  if (d.failures.empty()) {
    o << "launcher: workers stopped by " << signalName(d.shutdown_signal) << "; exit code "
      << d.exit_code << "\n";
    return o.str();
  }
  const Failure& root = d.failures.front();
  o << "launcher: job failed in attempt " << d.attempt << " (max restarts " << max_restarts
    << "): rank " << root.rank << " on node " << root.node << " (host " << root.host << ", "
    << root.ip << ") " << root.describe() << "; exit code " << d.exit_code << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"", "time", "node", "host", "ip", "rank", "local rank", "pid", "exit"}};
  for (size_t i = 0; i < d.failures.size(); ++i) {
    const Failure& f = d.failures[i];
    rows.push_back({i == 0 ? "root cause" : "also failed", formatTimeUs(f.time_us),
                    std::to_string(f.node), f.host, f.ip, std::to_string(f.rank),
                    std::to_string(f.local_rank), std::to_string(f.pid), f.describe()});
  }
  o << table(rows, "  ");
  for (size_t i = 0; i < d.failures.size() && i < 4; ++i) {
    const Failure& f = d.failures[i];
    if (f.stderr_tail.empty()) {
      o << "  rank " << f.rank << ": no stderr output\n";
      continue;
    }
    o << "  last " << f.stderr_tail.size() << " stderr line(s) of rank " << f.rank << " (node "
      << f.node << ", host " << f.host << "):\n";
    for (const auto& l : f.stderr_tail) o << "    | " << l << "\n";
  }
  return o.str();
}

}  // namespace ftb::launcher
