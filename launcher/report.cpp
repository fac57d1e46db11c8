#include "launcher/report.h"

#include <algorithm>
#include <ctime>
#include <sstream>

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

std::string dryRunReport(const Plan& plan, const std::string& program_path,
                         const std::vector<std::string>& argv,
                         const std::vector<std::string>& inherited) {
  std::ostringstream o;
  o << "launcher --dry-run: " << plan.nodes.size() << " node(s), " << plan.worldSize()
    << " worker(s), nodes from " << plan.source << "; nothing is started\n";
  o << "MASTER_ADDR:MASTER_PORT = " << plan.master_addr << ":" << plan.master_port << "   run id "
    << plan.run_id << "   max restarts " << plan.max_restarts << "\n\n";
  o << placementTable(plan) << "\n";
  o << "program: " << program_path << "\n";
  o << "inherited environment (this launcher's, minus OMPI_*, PMIX_*, PMI_*; the variables "
       "below each worker override it):\n";
  std::vector<std::string> env = inherited;
  std::sort(env.begin(), env.end());
  for (const auto& e : env) {
    auto eq = e.find('=');
    o << "  " << e.substr(0, eq + 1) << shellQuote(e.substr(eq + 1)) << "\n";
  }
  for (const auto& n : plan.nodes) {
    for (int lr = 0; lr < n.nproc; ++lr) {
      o << "\nrank " << plan.firstRank(n.node) + lr << "  node " << n.node << "  host " << n.host
        << "  local " << lr << "/" << n.nproc << "\n  argv:";
      for (const auto& a : argv) o << " " << shellQuote(a);
      o << "\n  env: ";
      for (const auto& [k, v] : contractEnv(plan, n.node, lr, 0))
        o << " " << k << "=" << shellQuote(v);
      o << "\n";
    }
  }
  return o.str();
}

std::string failureReport(const Decision& d, int max_restarts) {
  std::ostringstream o;
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
