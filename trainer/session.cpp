#include "trainer/session.h"

#include <torch/torch.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "common/config.h"
#include "common/dist_env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/tag.h"
#include "trainer/data/dataset.h"
#include "common/h5_metrics.h"
#include "trainer/metrics/perf.h"
#include "trainer/parallel/dist.h"
#include "trainer/parallel/memory_estimate.h"
#include "common/run_config.h"
#include "trainer/train.h"

namespace ftb {
namespace {

int threadsFor(const TrainConfig& tc) {
  if (tc.threads > 0) return static_cast<int>(tc.threads);
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    int n = std::atoi(omp);
    if (n > 0) return n;
  }
  return 1;
}

// Rank 0 creates <output>/<tag>/ (run.toml); all ranks check they computed the same
// tag. An earlier attempt's metrics/ in the same directory is kept as metrics.attempt_N.
std::string prepareRun(const Config& cfg, const TrainConfig& tc, Distributed& dist) {
  std::string tag = formatTag(cfg, tc.world_size, tc.sweep_fmt);
  std::vector<std::string> tags = dist.allGatherString("tag", tag);
  for (size_t r = 0; r < tags.size(); ++r)
    if (tags[r] != tags[0])
      throw ConfigError("output.sweep_fmt", cfg.where("output.sweep_fmt"),
                        "ranks disagree on the run tag: rank 0 has '" + tags[0] + "', rank " +
                            std::to_string(r) + " has '" + tags[r] + "'",
                        "all ranks must get the same config and overrides");
  std::string dir;
  if (dist.env.rank == 0) {
    RunDir rd = prepareRunDir(cfg, tc.world_size, tc.output_dir, tc.no_sweep_dir);
    dir = rd.path;
    namespace fs = std::filesystem;
    fs::path m = fs::path(dir) / "metrics";
    if (fs::exists(m)) {
      int n = 1;
      while (fs::exists(fs::path(dir) / ("metrics.attempt_" + std::to_string(n)))) ++n;
      fs::rename(m, fs::path(dir) / ("metrics.attempt_" + std::to_string(n)));
    }
  }
  std::vector<std::string> dirs = dist.allGatherString("run_dir", dir);
  return dirs[0];
}

std::string stateFor(const std::exception& e) {
  std::string w = e.what();
  if (dynamic_cast<const OomError*>(&e) || dynamic_cast<const std::bad_alloc*>(&e) ||
      w.find("can't allocate memory") != std::string::npos ||
      w.find("out of memory") != std::string::npos)
    return "oom";
  return "failed";
}

// The validated config for this process: --world-size only plans (--estimate-memory).
TrainConfig resolveConfig(const SessionOptions& opts, const Config& cfg, const DistEnv& env) {
  if (opts.world_size < 0 || (opts.world_size > 0 && !opts.estimate_memory))
    throw ConfigError("--world-size", "command line",
                      "only valid with --estimate-memory, and must be >= 1",
                      "training takes its world size from the launcher's environment");
  return TrainConfig::fromConfig(cfg, opts.world_size > 0 ? opts.world_size : env.world_size);
}

// --estimate-memory, --print-config, --generate-data: answer and return 0; nullopt
// when the session is a training run.
std::optional<int> runInfoCommand(const SessionOptions& opts, const Config& cfg,
                                  const TrainConfig& tc) {
  if (opts.estimate_memory) {
    std::cout << formatMemoryEstimate(tc, estimateMemory(tc), tc.memory_limit_bytes);
    return 0;
  }
  if (opts.print_config) {
    std::cout << cfg.toToml();
    return 0;
  }
  if (!opts.generate_data.empty()) {
    writeSyntheticDataset(tc, opts.generate_data);
    FTB_INFO("wrote " << tc.num_samples << " documents to " << opts.generate_data);
    return 0;
  }
  return std::nullopt;
}

struct Peak {
  double flops = 0;    // per device, for MFU
  std::string source;  // what it was measured against (or that the config gave it)
};

Peak resolvePeak(const TrainConfig& tc) {
  if (tc.peak_tflops > 0) return {tc.peak_tflops * 1e12, "config metrics.peak_tflops"};
  torch::ScalarType dt = tc.dtype == DType::kBf16 ? torch::kBFloat16 : torch::kFloat32;
  return {measureGemmPeak(dt), std::string("measured ") +
                                   (dt == torch::kBFloat16 ? "bf16" : "fp32") +
                                   " GEMM 2048^3, " + std::to_string(at::get_num_threads()) +
                                   " thread(s)"};
}

RunInfo runInfo(const Config& cfg, const TrainConfig& tc, const DistEnv& env,
                const std::string& run_dir, const Peak& peak) {
  RunInfo info;
  info.tag = std::filesystem::path(run_dir).filename().string();
  info.config_hash = configHash(cfg, tc.world_size);
  info.hostname = hostName();
  info.start_utc = utcNowIso8601();
  info.ftbench_version = FTB_VERSION;
  info.torch_version = TORCH_VERSION;
  info.device = "cpu";
  info.peak_source = peak.source;
  info.config_toml = cfg.toToml();
  info.world_size = env.world_size;
  info.rank = env.rank;
  info.local_rank = env.local_rank;
  info.node_rank = env.node_rank;
  info.peak_flops = peak.flops;
  return info;
}

// Records how the loop ended (completed, or preempted by a stop signal) and prints
// rank 0's summary; returns the process exit code.
int finishRun(MetricsFile& metrics, const TrainConfig& tc, const TrainSummary& s,
              const Peak& peak, const std::string& run_dir, int rank) {
  if (s.stop_signal != 0) {
    std::string msg = std::string("stopped by signal ") + strsignal(s.stop_signal) + " after " +
                      std::to_string(s.steps) + " steps";
    metrics.setStatus("preempted", 128 + s.stop_signal, msg);
    FTB_WARN(msg);
    return 128 + s.stop_signal;
  }
  metrics.setStatus("completed", 0, "completed " + std::to_string(s.steps) + " steps");
  metrics.close();
  if (rank == 0) printSummary(tc, s, peak.flops, peak.source, run_dir);
  return 0;
}

// Bad input: reported, recorded as "invalid" if the metrics file exists; exit 2.
int failInvalid(const ConfigError& e, std::optional<MetricsFile>& metrics) {
  std::cerr << logPrefix() << " " << e.what() << "\n";
  if (metrics) metrics->setStatus("invalid", e.exitCode(), e.what());
  return e.exitCode();
}

// Any other failure: "oom" (exit 5) or "failed" (the error's exit code, else 1),
// recorded in the metrics file when it exists.
int failRun(const std::exception& e, std::optional<MetricsFile>& metrics) {
  std::string state = stateFor(e);
  int code = state == "oom" ? 5
                            : (dynamic_cast<const FtbError*>(&e)
                                   ? static_cast<const FtbError&>(e).exitCode()
                                   : 1);
  FTB_ERROR(state << ": " << e.what());
  if (metrics) {
    try {
      metrics->setStatus(state, code, e.what());
    } catch (const std::exception& e2) {
      FTB_ERROR("could not record status in " << metrics->path() << ": " << e2.what());
    }
  }
  return code;
}

}  // namespace

// load + validate -> (info command) -> process group -> run dir -> metrics file ->
// train -> record the outcome.
int runSession(const SessionOptions& opts) {
  std::optional<MetricsFile> metrics;
  try {
    DistEnv env = discoverDistEnv();
    setLogIdentity(env.rank, env.world_size, hostName());
    Config cfg = Config::load(opts.config_path, opts.overrides);
    TrainConfig tc = resolveConfig(opts, cfg, env);
    if (std::optional<int> rc = runInfoCommand(opts, cfg, tc)) return *rc;

    at::set_num_threads(threadsFor(tc));
    Distributed dist = initDistributed(
        env, std::chrono::milliseconds(static_cast<int64_t>(tc.timeout_seconds * 1000)),
        tc.backend);
    std::string run_dir = prepareRun(cfg, tc, dist);
    Peak peak = resolvePeak(tc);
    metrics.emplace(MetricsFile::create(metricsFilePath(run_dir, env.rank),
                                        runInfo(cfg, tc, env, run_dir, peak)));

    TrainSummary s = train(tc, dist, *metrics, peak.flops);
    return finishRun(*metrics, tc, s, peak, run_dir, env.rank);
  } catch (const ConfigError& e) {
    return failInvalid(e, metrics);
  } catch (const std::exception& e) {
    return failRun(e, metrics);
  }
}

}  // namespace ftb
