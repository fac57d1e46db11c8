#include "launcher/local_node.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <regex>
#include <sstream>

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

std::vector<std::string> visibleGpus() {
  std::vector<std::string> out;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::stringstream ss(v);
    std::string id;
    while (std::getline(ss, id, ','))
      if (!id.empty() && id != "-1" && id != "none") out.push_back(id);
    return out;
  }
  static const std::regex kDev("nvidia([0-9]+)");
  if (DIR* d = opendir("/dev")) {
    std::vector<int> ids;
    while (dirent* e = readdir(d)) {
      std::cmatch m;
      if (std::regex_match(e->d_name, m, kDev)) ids.push_back(std::stoi(m[1]));
    }
    closedir(d);
    std::sort(ids.begin(), ids.end());
    for (int i : ids) out.push_back(std::to_string(i));
  }
  return out;
}

void fillTuning(const LaunchOptions& opts, NodeInfo& n) {
  n.tune_env = opts.tune_env;
  n.bind_cores = opts.bind_cores;
  CpuInfo cpu = detectCpu();
  n.cpus = allowedCpus();
  n.cpu_model = cpu.model_name;
  n.isa = cpu.isaString();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  CoretypeCheck check = checkOpenblasCoretype(cpu, coretype ? coretype : "");
  n.coretype_note = check.message;
  if (check.verdict == CoretypeCheck::Verdict::kBelow ||
      check.verdict == CoretypeCheck::Verdict::kAbove)
    n.coretype_fix = check.recommended;
}

NodeInfo localNodeInfo(const LaunchOptions& opts, int node, std::string* program_path) {
  NodeInfo n;
  n.node = node;
  n.host = hostName();
  n.cores = opts.cores_per_node > 0 ? opts.cores_per_node : static_cast<int>(allowedCpus().size());
  n.gpus = visibleGpus();
  for (const char* k : kPresetVars)
    if (const char* v = std::getenv(k)) n.preset[k] = v;
  fillTuning(opts, n);
  n.addrs = listInterfaces();
  try {
    n.nproc = resolveNproc(opts.nproc_per_node, n.cores, static_cast<int>(n.gpus.size()));
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

int pickFreePort(const std::string& addr, int avoid) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) break;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = 0;
    if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) sa.sin_addr.s_addr = INADDR_ANY;
    int port = 0;
    if (bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      socklen_t len = sizeof sa;
      if (getsockname(s, reinterpret_cast<sockaddr*>(&sa), &len) == 0) port = ntohs(sa.sin_port);
    }
    close(s);
    if (port > 0 && port != avoid) return port;
  }
  throw DistError("cannot find a free TCP port on " + addr + ": " + std::strerror(errno));
}

std::string generateRunId() {
  time_t t = time(nullptr);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  std::random_device rd;
  char suffix[8];
  snprintf(suffix, sizeof suffix, "-%04x", static_cast<unsigned>(rd() & 0xffff));
  return std::string(buf) + suffix;
}

}  // namespace ftb::launcher
