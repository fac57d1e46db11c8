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
#include "trainer/checkpoint/hook.h"
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

// The run directory prepareRun() will create (nothing is created here).
std::string runDirPath(const Config& cfg, const TrainConfig& tc) {
  if (tc.no_sweep_dir) return tc.output_dir;
  return (std::filesystem::path(tc.output_dir) / formatTag(cfg, tc.world_size, tc.sweep_fmt)).string();
}

std::string checkpointDir(const TrainConfig& tc, const std::string& run_dir) {
  if (!tc.checkpoint.dir.empty()) return tc.checkpoint.dir;
  return (std::filesystem::path(run_dir) / "checkpoints").string();
}

// Rank 0 creates <output>/<tag>/ (run.toml); all ranks check they computed the same
// tag. An earlier attempt's metrics/ in the same directory is kept as metrics.attempt_N,
// unless this run resumes (`keep_metrics`): then the files continue.
std::string prepareRun(const Config& cfg, const TrainConfig& tc, Distributed& dist,
                       bool keep_metrics) {
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
    if (fs::exists(m) && !keep_metrics) {
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

}  // namespace

int runSession(const SessionOptions& opts) {
  std::optional<MetricsFile> metrics;
  try {
    DistEnv env = discoverDistEnv();
    setLogIdentity(env.rank, env.world_size, hostName());
    Config cfg = Config::load(opts.config_path, opts.overrides);
    if (opts.world_size < 0 || (opts.world_size > 0 && !opts.estimate_memory))
      throw ConfigError("--world-size", "command line",
                        "only valid with --estimate-memory, and must be >= 1",
                        "training takes its world size from the launcher's environment");
    TrainConfig tc =
        TrainConfig::fromConfig(cfg, opts.world_size > 0 ? opts.world_size : env.world_size);
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
    at::set_num_threads(threadsFor(tc));
    Distributed dist = initDistributed(
        env, std::chrono::milliseconds(static_cast<int64_t>(tc.timeout_seconds * 1000)),
        tc.backend);
    // Which checkpoint to resume from is decided (and a bad or incompatible one refused)
    // before anything is written to the run directory or the model is allocated.
    std::optional<ResumePoint> plan =
        planResume(tc, cfg, checkpointDir(tc, runDirPath(cfg, tc)), dist);
    std::string run_dir = prepareRun(cfg, tc, dist, plan.has_value());

    torch::ScalarType dt = tc.dtype == DType::kBf16 ? torch::kBFloat16 : torch::kFloat32;
    double peak = tc.peak_tflops * 1e12;
    std::string peak_source = "config metrics.peak_tflops";
    if (peak <= 0) {
      peak = measureGemmPeak(dt);
      peak_source = std::string("measured ") + (dt == torch::kBFloat16 ? "bf16" : "fp32") +
                    " GEMM 2048^3, " + std::to_string(at::get_num_threads()) + " thread(s)";
    }
    RunInfo info;
    info.tag = std::filesystem::path(run_dir).filename().string();
    info.config_hash = configHash(cfg, tc.world_size);
    info.hostname = hostName();
    info.start_utc = utcNowIso8601();
    info.ftbench_version = FTB_VERSION;
    info.torch_version = TORCH_VERSION;
    info.device = "cpu";
    info.peak_source = peak_source;
    info.config_toml = cfg.toToml();
    info.world_size = env.world_size;
    info.rank = env.rank;
    info.local_rank = env.local_rank;
    info.node_rank = env.node_rank;
    info.peak_flops = peak;
    if (plan)
      metrics.emplace(MetricsFile::resume(metricsFilePath(run_dir, env.rank), info,
                                          plan->manifest.state.at("step")));
    else
      metrics.emplace(MetricsFile::create(metricsFilePath(run_dir, env.rank), info));

    Checkpointer::Identity id{info.tag, info.config_hash, checkpointCompatKeys(cfg),
                              CkptLayout{tc.world_size, tc.dp_replicate, tc.dp_shard, tc.tp,
                                         tc.effectiveZeroStage(),
                                         std::max(1, env.world_size / std::max(1, env.local_world_size))}};
    CheckpointHook ckpt(tc, std::move(plan),
                        std::make_unique<Checkpointer>(checkpointDir(tc, run_dir),
                                                       tc.checkpoint.keep_last, id, dist));
    TrainSummary s = train(tc, dist, *metrics, peak, ckpt);
    if (s.stop_signal != 0) {
      std::string msg = std::string("stopped by signal ") + strsignal(s.stop_signal) +
                        " after " + std::to_string(s.steps) + " steps" +
                        (s.last_checkpoint.empty() ? std::string(", no checkpoint")
                                                   : "; checkpoint " + s.last_checkpoint);
      metrics->setStatus("preempted", 128 + s.stop_signal, msg);
      FTB_WARN(msg);
      return 128 + s.stop_signal;
    }
    metrics->setStatus("completed", 0, "completed " + std::to_string(s.steps) + " steps");
    metrics->close();
    if (env.rank == 0) printSummary(tc, s, peak, peak_source, run_dir);
    return 0;
  } catch (const ConfigError& e) {
    std::cerr << logPrefix() << " " << e.what() << "\n";
    if (metrics) metrics->setStatus("invalid", e.exitCode(), e.what());
    return e.exitCode();
  } catch (const std::exception& e) {
    std::string state = stateFor(e);
    int code = state == "oom" ? 5 : (dynamic_cast<const FtbError*>(&e)
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
}

}  // namespace ftb
