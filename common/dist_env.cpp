// Rank/world discovery from environment variables (see dist_env.h for the order).
//
// Conventions: a variable set to the empty string counts as unset. A rank source
// is used only when both its rank and its size variables are set ("complete");
// a half-set source is skipped. Numbers must be plain decimal integers.
#include "common/dist_env.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/hostlist.h"

namespace ftb {
namespace {

class Env {
 public:
  explicit Env(const EnvLookup& fn) : fn_(fn) {}

  std::optional<std::string> str(const char* name) const {
    const char* v = fn_ ? fn_(name) : std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  }

  // REQUIRES: value, if set, is a decimal integer in [min, max]; else ConfigError.
  std::optional<long> num(const char* name, long min = 0, long max = 1L << 30) const {
    std::optional<std::string> v = str(name);
    if (!v) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long n = std::strtol(v->c_str(), &end, 10);
    if (errno != 0 || end == v->c_str() || *end != '\0')
      throw ConfigError(name, "environment", "not an integer: '" + *v + "'");
    if (n < min || n > max)
      throw ConfigError(name, "environment",
                        "value " + *v + " out of range [" + std::to_string(min) + ", " +
                            std::to_string(max) + "]");
    return n;
  }

  // The first of `names` that is set, parsed as a number.
  std::optional<long> firstNum(std::initializer_list<const char*> names) const {
    for (const char* n : names)
      if (auto v = num(n)) return v;
    return std::nullopt;
  }

 private:
  const EnvLookup& fn_;
};

struct RankSource {
  const char* name;
  const char* rank_var;
  const char* size_var;
};

constexpr RankSource kSources[] = {
    {"torchrun", "RANK", "WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS"},
    {"pmi", "PMI_RANK", "PMI_SIZE"},
};

// Local world size: explicit variables first, then SLURM's per-node task counts.
std::optional<long> localWorldSize(const Env& env) {
  if (auto v = env.firstNum({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"})) return v;
  if (auto tpn = env.str("SLURM_TASKS_PER_NODE")) {
    std::vector<int> tasks = expandTasksPerNode(*tpn, "SLURM_TASKS_PER_NODE");
    long node = env.num("SLURM_NODEID").value_or(0);
    if (node < static_cast<long>(tasks.size())) return tasks[node];
  }
  return env.num("MPI_LOCALNRANKS");
}

}  // namespace

DistEnv discoverDistEnv(const EnvLookup& getenv_fn) {
  Env env(getenv_fn);
  DistEnv d;
  d.source = "single";
  for (const RankSource& s : kSources) {
    if (!env.str(s.rank_var) || !env.str(s.size_var)) continue;
    d.rank = static_cast<int>(*env.num(s.rank_var));
    d.world_size = static_cast<int>(*env.num(s.size_var, 1));
    d.source = s.name;
    if (d.rank >= d.world_size)
      throw ConfigError(s.rank_var, "environment",
                        "rank(" + std::to_string(d.rank) + ") >= world_size(" +
                            std::to_string(d.world_size) + ")",
                        std::string("check ") + s.rank_var + " and " + s.size_var);
    break;
  }

  d.local_rank = static_cast<int>(
      env.firstNum({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
          .value_or(0));
  d.local_world_size = static_cast<int>(localWorldSize(env).value_or(1));
  if (d.local_world_size < 1) d.local_world_size = 1;
  d.node_rank = static_cast<int>(env.firstNum({"GROUP_RANK", "SLURM_NODEID"}).value_or(0));
  if (auto groups = env.num("GROUP_WORLD_SIZE")) {
    d.nodes = static_cast<int>(*groups);
  } else if (auto tpn = env.str("SLURM_TASKS_PER_NODE")) {
    d.nodes = static_cast<int>(expandTasksPerNode(*tpn, "SLURM_TASKS_PER_NODE").size());
  } else {
    d.nodes = d.world_size / d.local_world_size;
  }
  if (d.nodes < 1) d.nodes = 1;
  d.restart_count = static_cast<int>(env.num("TORCHELASTIC_RESTART_COUNT").value_or(0));
  d.agent_store = env.str("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";

  if (auto addr = env.str("MASTER_ADDR")) {
    d.master_addr = *addr;
  } else {
    for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
      if (auto list = env.str(var)) {
        d.master_addr = expandHostlist(*list, var).front();
        break;
      }
    }
  }

  if (auto port = env.num("MASTER_PORT", 1, 65535)) {
    d.master_port = static_cast<int>(*port);
  } else if (auto job = env.num("SLURM_JOB_ID", 0, 0x7fffffffL)) {
    d.master_port = slurmJobPort(*job, readIpLocalPortRange());
  }
  return d;
}

int slurmJobPort(long long job_id, const std::string& ip_local_port_range) {
  long lo = 32768, hi = 60999;
  std::istringstream in(ip_local_port_range);
  long a = 0, b = 0;
  if (in >> a >> b && 1 <= a && a <= b && b <= 65535) lo = a, hi = b;
  long first = kJobPortLow, size = 1024;
  if (lo - kJobPortLow >= 1024) {
    size = lo - kJobPortLow;
  } else if (65535 - hi >= 1024) {
    first = hi + 1;
    size = 65535 - hi;
  }
  uint64_t z = static_cast<uint64_t>(job_id) + 0x9e3779b97f4a7c15ULL;  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<int>(first + static_cast<long>(z % static_cast<uint64_t>(size)));
}

std::string readIpLocalPortRange() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  std::stringstream ss;
  ss << f.rdbuf();
  return f ? ss.str() : "";
}

}  // namespace ftb
