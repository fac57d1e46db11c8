#include "launcher/options.h"

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <set>

#include "common/cli_args.h"  // cxxopts, as in every ftbench program
#include "common/config.h"
#include "common/dist_env.h"
#include "common/error.h"

namespace ftb::launcher {
namespace {

// The TCP rendezvous store's port without --master-port: in a SLURM job the job's port
// (slurmJobPort, common/dist_env.h: launchers of two jobs on one node do not collide),
// else torchrun's 29500.
int defaultStorePort() {
  const char* job = std::getenv("SLURM_JOB_ID");
  std::string j = job ? job : "";
  if (j.empty() || j.size() > 15 || j.find_first_not_of("0123456789") != std::string::npos)
    return 29500;
  return slurmJobPort(std::stoll(j), readIpLocalPortRange());
}

}  // namespace

namespace {

cxxopts::Options makeParser() {
  cxxopts::Options o("launcher",
                     "Start and supervise PROGRAM workers on this node; one launcher per node "
                     "(mpirun --map-by ppr:1:node, srun --ntasks-per-node=1, or alone).");
  o.custom_help("[OPTION...] -- PROGRAM [ARGS...]");
  o.add_options()("nproc-per-node", "Workers on this node: N, auto (GPUs, else cores), cpu, gpu",
                  cxxopts::value<std::string>()->default_value("1"))(
      "max-restarts", "Restart every worker up to K times after a failure",
      cxxopts::value<int>()->default_value("0"))("monitor-interval",
                                                 "Seconds between checks of remote stop messages",
                                                 cxxopts::value<double>()->default_value("0.1"))(
      "grace", "Seconds between SIGTERM and SIGKILL when stopping workers",
      cxxopts::value<double>()->default_value("5"))("rdzv-timeout",
                                                    "Seconds to wait for every node at rendezvous",
                                                    cxxopts::value<double>()->default_value("60"))(
      "log-dir", "Write rank_<r>.{out,err} under DIR/<run_id>/attempt_<k>/",
      cxxopts::value<std::string>())(
      "tee", "Also echo worker output to the console, each line prefixed [rank]")(
      "iface", "Use this interface's IPv4 address (MASTER_ADDR on node 0)",
      cxxopts::value<std::string>())("network",
                                     "Use the address inside this CIDR, e.g. 10.0.0.0/24",
                                     cxxopts::value<std::string>())(
      "master-port", "Fixed MASTER_PORT (default: node 0 binds a free port per attempt)",
      cxxopts::value<int>())("run-id",
                             "TORCHELASTIC_RUN_ID and log subdirectory (default: generated)",
                             cxxopts::value<std::string>())(
      "dry-run", "Print placement, argv and environment of every worker; start nothing")(
      "full", "With --dry-run: list every node and worker (default only up to 64 workers)")(
      "summary", "With --dry-run: grouped node rows and node 0's workers only")(
      "env",
      "With --dry-run: 'set' (default) prints the variables the launcher sets; 'all' also "
      "the inherited environment (secrets masked)",
      cxxopts::value<std::string>())(
      "hosts", "Plan a dry run without MPI: 'n[01-02]:2,n03:1' (host[:nproc],...)",
      cxxopts::value<std::string>())(
      "cores-per-node", "Cores used for OMP_NUM_THREADS and nproc=cpu (default: detected)",
      cxxopts::value<int>())(
      "gpus-per-node", "With --dry-run: plan N GPUs per node (default: SLURM's GPU variables)",
      cxxopts::value<int>())("bind-cores",
                             "Pin each worker to cores/nproc cores of the launcher's CPU set "
                             "(the default; kept for --no-tune-env)")(
      "no-tune-env",
      "Keep the caller's environment: no core binding, no thread counts, no "
      "OPENBLAS_CORETYPE fix (only the torchrun variables are set)")(
      "nnodes", "torchrun: number of nodes, N or N:N (static rendezvous without MPI)",
      cxxopts::value<std::string>())("node-rank", "torchrun: this node's rank, 0..nnodes-1",
                                     cxxopts::value<int>())(
      "master-addr",
      "torchrun: node 0's address; with --nnodes > 1 its launcher hosts the "
      "rendezvous store on --master-port (default 29500)",
      cxxopts::value<std::string>())(
      "rdzv-endpoint", "torchrun: HOST[:PORT] of the rendezvous store (default port 29400)",
      cxxopts::value<std::string>())(
      "rdzv-backend", "torchrun: 'static' or 'c10d'; both rendezvous statically by --node-rank",
      cxxopts::value<std::string>())("rdzv-id", "torchrun: job id every node must agree on",
                                     cxxopts::value<std::string>())(
      "standalone", "torchrun: one node, no MPI and no rendezvous store")("h,help",
                                                                          "Print this help");
  return o;
}

// Without a hint of its own, the flag's help line is the hint (optionHint).
[[noreturn]] void bad(const std::string& flag, const std::string& what,
                      const std::string& hint = "") {
  throw ConfigError(flag, "command line", what,
                    hint.empty() ? optionHint(makeParser(), flag) : hint);
}

// "--nproc_per_node=2" -> "--nproc-per-node=2": torchrun accepts both spellings.
std::string normalizeFlag(const std::string& a) {
  if (a.rfind("--", 0) != 0) return a;
  size_t eq = std::min(a.find('='), a.size());
  std::string out = a;
  std::replace(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(eq), '_', '-');
  return out;
}

// Long names of every option, and those that take no value.
struct KnownFlags {
  std::vector<std::string> all;
  std::set<std::string> boolean;
};

KnownFlags knownFlags() {
  KnownFlags k;
  auto parser = makeParser();
  for (const auto& d : parser.group_help("").options)
    for (const auto& name : d.l) {
      k.all.push_back("--" + name);
      if (d.is_boolean) k.boolean.insert("--" + name);
    }
  k.boolean.insert("-h");
  return k;
}

// Splits argv into launcher options (returned, argv[0] first, spelling normalized) and
// PROGRAM ARGS... (out.program): PROGRAM starts after "--" or at the first non-option.
// Unknown flags throw ConfigError with the closest known flag as hint.
std::vector<std::string> splitCommandLine(int argc, const char* const* argv, LaunchOptions& out) {
  const KnownFlags known = knownFlags();
  std::vector<std::string> opts{argc > 0 ? argv[0] : "launcher"};
  for (int i = 1; i < argc; ++i) {
    std::string a = normalizeFlag(argv[i]);
    if (a == "--") {
      out.program.assign(argv + i + 1, argv + argc);
      break;
    }
    if (a.empty() || a[0] != '-') {
      out.program.assign(argv + i, argv + argc);
      break;
    }
    std::string name = a.substr(0, a.find('='));
    if (name != "-h" && std::find(known.all.begin(), known.all.end(), name) == known.all.end()) {
      std::string near = closestName(name, known.all);  // common/config.h
      bad(name, "unknown option",
          near.empty() ? "see launcher --help" : "did you mean '" + near + "'?");
    }
    opts.push_back(a);
    if (a.find('=') == std::string::npos && !known.boolean.count(a) && i + 1 < argc)
      opts.push_back(argv[++i]);
  }
  return opts;
}

// Copies the parsed values into `out`.
void readOptions(const cxxopts::ParseResult& r, LaunchOptions& out) {
  out.nproc_per_node = r["nproc-per-node"].as<std::string>();
  out.nproc_given = r.count("nproc-per-node") > 0;
  out.max_restarts = r["max-restarts"].as<int>();
  out.monitor_interval_s = r["monitor-interval"].as<double>();
  out.grace_s = r["grace"].as<double>();
  out.rdzv_timeout_s = r["rdzv-timeout"].as<double>();
  if (r.count("log-dir")) out.log_dir = r["log-dir"].as<std::string>();
  out.tee = r.count("tee") > 0;
  if (r.count("iface")) out.iface = r["iface"].as<std::string>();
  if (r.count("network")) out.network = r["network"].as<std::string>();
  if (r.count("master-port")) out.master_port = r["master-port"].as<int>();
  if (r.count("run-id")) out.run_id = r["run-id"].as<std::string>();
  out.dry_run = r.count("dry-run") > 0;
  if (r.count("hosts")) out.hosts = r["hosts"].as<std::string>();
  out.full = r.count("full") > 0;
  out.summary = r.count("summary") > 0;
  if (r.count("env")) {
    std::string e = r["env"].as<std::string>();
    if (e != "all" && e != "set") bad("--env", "expected 'set' or 'all', got '" + e + "'");
    out.env_all = e == "all";
  }
  if (r.count("cores-per-node")) out.cores_per_node = r["cores-per-node"].as<int>();
  if (r.count("gpus-per-node")) out.gpus_per_node = r["gpus-per-node"].as<int>();
  out.bind_cores = r.count("bind-cores") > 0;
  out.tune_env = r.count("no-tune-env") == 0;
}

// A positive integer of at most 6 digits, or throws naming `flag`.
int smallCount(const std::string& flag, const std::string& v) {
  if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(v) < 1)
    bad(flag, "expected an integer in 1..999999, got '" + v + "'");
  return std::stoi(v);
}

// --nnodes, --node-rank, --master-addr/--rdzv-endpoint, --standalone (torchrun static
// rendezvous). With --nnodes > 1, --master-port is the store's port, not the workers'.
void readRendezvous(const cxxopts::ParseResult& r, LaunchOptions& out) {
  if (r.count("nnodes")) {
    std::string v = r["nnodes"].as<std::string>();
    auto colon = v.find(':');
    out.nnodes = smallCount("--nnodes", v.substr(0, colon));
    if (colon != std::string::npos && smallCount("--nnodes", v.substr(colon + 1)) != out.nnodes)
      bad("--nnodes", "'" + v + "': elastic node counts (MIN:MAX) are not supported",
          "give a fixed count, e.g. --nnodes 2");
  }
  if (r.count("node-rank")) out.node_rank = r["node-rank"].as<int>();
  if (out.node_rank < 0 || out.node_rank >= out.nnodes)
    bad("--node-rank", "must be in 0.." + std::to_string(out.nnodes - 1) + " for --nnodes " +
                           std::to_string(out.nnodes) + ", got " + std::to_string(out.node_rank));
  out.standalone = r.count("standalone") > 0;
  if (r.count("rdzv-id")) out.rdzv_id = r["rdzv-id"].as<std::string>();
  if (r.count("rdzv-backend")) {
    std::string b = r["rdzv-backend"].as<std::string>();
    if (b != "static" && b != "c10d")
      bad("--rdzv-backend", "expected 'static' or 'c10d', got '" + b + "'");
  }
  if (r.count("rdzv-endpoint")) {
    std::string e = r["rdzv-endpoint"].as<std::string>();
    auto colon = e.rfind(':');
    out.rdzv_host = e.substr(0, colon);
    out.rdzv_port = colon == std::string::npos ? 29400 : std::atoi(e.c_str() + colon + 1);
    if (out.rdzv_host.empty() || out.rdzv_port < 1 || out.rdzv_port > 65535)
      bad("--rdzv-endpoint", "expected HOST[:PORT] with PORT in 1..65535, got '" + e + "'");
  }
  if (r.count("master-addr")) {
    if (r.count("rdzv-endpoint"))
      bad("--master-addr", "give either --master-addr or --rdzv-endpoint, not both");
    out.rdzv_host = r["master-addr"].as<std::string>();
    out.rdzv_port = out.master_port > 0 ? out.master_port : defaultStorePort();
    if (out.rdzv_host.empty()) bad("--master-addr", "address is empty");
  }
  if (!out.tcpRendezvous()) return;
  if (out.standalone)
    bad("--standalone", "means one node; it contradicts --nnodes " + std::to_string(out.nnodes));
  if (!r.count("node-rank"))
    bad("--node-rank", "required with --nnodes " + std::to_string(out.nnodes),
        "give each launcher its own --node-rank 0.." + std::to_string(out.nnodes - 1));
  if (out.rdzv_host.empty())
    bad("--master-addr", "required with --nnodes " + std::to_string(out.nnodes),
        "give node 0's address: --master-addr HOST [--master-port P] or --rdzv-endpoint "
        "HOST:PORT (or start the launchers with mpirun/srun and no --nnodes)");
  if (r.count("hosts")) bad("--hosts", "plans without rendezvous; it contradicts --nnodes");
  if (r.count("master-addr")) out.master_port = 0;  // the store has it; workers get a free one
}

}  // namespace

std::string usage() { return makeParser().help(); }

int resolveNproc(const std::string& spec, int cores, int gpus, const std::string& gpu_source) {
  if (spec == "cpu") return cores;
  if (spec == "auto") return gpus > 0 ? gpus : cores;
  if (spec == "gpu") {
    if (gpus <= 0)
      bad("--nproc-per-node",
          "'gpu' requested but the node has no GPU" +
              (gpu_source.empty() ? std::string() : " (" + gpu_source + ")"),
          "to plan a GPU job from a machine without one, add --gpus-per-node N to --dry-run "
          "(one worker per GPU); on the nodes, ask SLURM for GPUs (sbatch --gpus-per-node), "
          "or use --nproc-per-node cpu");
    return gpus;
  }
  static const std::regex kNumber("[0-9]+");
  if (!std::regex_match(spec, kNumber))
    bad("--nproc-per-node", "expected N, auto, cpu or gpu, got '" + spec + "'");
  if (spec.size() > 6 || std::stoi(spec) < 1)
    bad("--nproc-per-node", "must be between 1 and 999999, got " + spec);
  return std::stoi(spec);
}

namespace {

// Everything that can be checked without looking at the machine.
void validateOptions(const cxxopts::ParseResult& r, const LaunchOptions& out) {
  if (out.program.empty())
    bad("PROGRAM", "no program given", "usage: launcher [OPTION...] -- PROGRAM [ARGS...]");
  if (out.program[0].empty()) bad("PROGRAM", "program name is empty");
  if (out.nproc_per_node != "auto" && out.nproc_per_node != "cpu" && out.nproc_per_node != "gpu")
    resolveNproc(out.nproc_per_node, 1, 0);  // throws for 0, negative, garbage
  if (out.max_restarts < 0)
    bad("--max-restarts", "must be >= 0, got " + std::to_string(out.max_restarts));
  if (!(out.monitor_interval_s > 0 && out.monitor_interval_s <= 60))
    bad("--monitor-interval",
        "must be in (0, 60] seconds, got " + std::to_string(out.monitor_interval_s));
  if (!(out.grace_s >= 0 && out.grace_s <= 3600))
    bad("--grace", "must be in [0, 3600] seconds, got " + std::to_string(out.grace_s));
  if (!(out.rdzv_timeout_s > 0))
    bad("--rdzv-timeout", "must be > 0 seconds, got " + std::to_string(out.rdzv_timeout_s));
  if (r.count("master-port") &&
      (r["master-port"].as<int>() < 1 || r["master-port"].as<int>() > 65535))
    bad("--master-port", "must be in 1..65535, got " + std::to_string(r["master-port"].as<int>()));
  if (!out.iface.empty() && !out.network.empty())
    bad("--iface", "give either --iface or --network, not both");
  if (r.count("iface") && out.iface.empty()) bad("--iface", "interface name is empty");
  if (r.count("network") && out.network.empty()) bad("--network", "CIDR is empty");
  static const std::regex kRunId("[A-Za-z0-9._-]{1,128}");
  if (r.count("run-id") &&
      (!std::regex_match(out.run_id, kRunId) || out.run_id == "." || out.run_id == ".."))
    bad("--run-id", "must match [A-Za-z0-9._-]{1,128}, got '" + out.run_id + "'",
        "it names a log directory");
  if (r.count("hosts") && !out.dry_run)
    bad("--hosts", "only valid with --dry-run", "real runs take nodes from mpirun/srun");
  if (r.count("hosts") && out.hosts.empty()) bad("--hosts", "host list is empty");
  for (const char* f : {"full", "summary", "env", "gpus-per-node"})
    if (r.count(f) && !out.dry_run)
      bad(std::string("--") + f, "only valid with --dry-run", "add --dry-run");
  if (out.full && out.summary) bad("--full", "give either --full or --summary, not both");
  if (r.count("cores-per-node") && out.cores_per_node < 1)
    bad("--cores-per-node", "must be >= 1, got " + std::to_string(out.cores_per_node));
  if (r.count("log-dir") && out.log_dir.empty()) bad("--log-dir", "directory is empty");
  if (r.count("gpus-per-node") && (out.gpus_per_node < 0 || out.gpus_per_node > kMaxGpusPerNode))
    bad("--gpus-per-node", "must be in 0.." + std::to_string(kMaxGpusPerNode) + ", got " +
                               std::to_string(out.gpus_per_node));
}

}  // namespace

LaunchOptions parseOptions(int argc, const char* const* argv) {
  LaunchOptions out;
  std::vector<std::string> opts = splitCommandLine(argc, argv, out);
  std::vector<const char*> cargv;
  for (auto& s : opts) cargv.push_back(s.c_str());
  auto parser = makeParser();
  cxxopts::ParseResult r;
  try {
    r = parser.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw cliError(parser, e, opts);
  }
  if (r.count("help")) {
    out.help = true;
    return out;
  }
  readOptions(r, out);
  validateOptions(r, out);
  readRendezvous(r, out);
  return out;
}

}  // namespace ftb::launcher
