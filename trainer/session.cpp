#include "trainer/session.h"

#include <pthread.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/config.h"
#include "common/cpu_info.h"
#include "common/dist_env.h"
#include "common/env_check.h"
#include "common/error.h"
#include "common/files.h"
#include "common/h5_metrics.h"
#include "common/link_bandwidth.h"
#include "common/log.h"
#include "common/memory_estimate.h"
#include "common/memory_fit.h"
#include "common/own_dir.h"
#include "common/pipeline_limits.h"
#include "common/run_config.h"
#include "common/run_control.h"
#include "common/run_lock.h"
#include "common/tag.h"
#include "trainer/data/dataset.h"
#include "trainer/hf/peft_adapter.h"
#include "trainer/hf/pretrained.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/loop/checkpoint_hook.h"
#include "trainer/loop/profiler.h"
#include "trainer/loop/stop.h"
#include "trainer/loop/train.h"
#include "trainer/max_micro_batch.h"
#include "trainer/metrics/device.h"
#include "trainer/metrics/peaks.h"
#include "trainer/metrics/perf.h"
#include "trainer/model/linear.h"
#include "trainer/model/llama.h"
#include "trainer/parallel/backend.h"
#include "trainer/parallel/dist.h"
#include "trainer/parallel/link_probe.h"

namespace ftb {
namespace {

// An earlier attempt's metrics/ in `dir` is kept as metrics.attempt_N.
// REQUIRES: the caller holds dir's RunLock.
void keepEarlierAttempt(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path m = fs::path(dir) / "metrics";
  if (!fs::exists(m)) return;
  int n = 1;
  while (fs::exists(fs::path(dir) / ("metrics.attempt_" + std::to_string(n)))) ++n;
  fs::rename(m, fs::path(dir) / ("metrics.attempt_" + std::to_string(n)));
}

int threadsFor(const TrainConfig& tc) {
  if (tc.training.threads > 0) return static_cast<int>(tc.training.threads);
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    int n = std::atoi(omp);
    if (n > 0) return n;
  }
  return 1;
}

std::string checkpointDir(const TrainConfig& tc, const std::string& run_dir) {
  if (!tc.checkpoint.dir.empty()) return tc.checkpoint.dir;
  return (std::filesystem::path(run_dir) / "checkpoints").string();
}

// A checkpoint directory that exists must be this user's (common/own_dir.h): another
// user's, or their symlink, would feed this run their checkpoints or receive its own.
void refuseForeignCheckpointDir(const Config& cfg, const TrainConfig& tc, const std::string& dir) {
  const std::string why = ownDirProblem(dir);
  if (why.empty() || why == "is missing") return;
  const std::string key = tc.checkpoint.dir.empty() ? "output.dir" : "checkpoint.dir";
  throw ConfigError(key, cfg.where(key), "the checkpoint directory " + dir + " " + why,
                    "remove it (this run did not make it), or choose a directory of your own");
}

// Rank 0 creates <output>/<tag>/ (run.toml), takes the run directory's lock (held in
// `lock` for the run's lifetime) and only then moves an earlier attempt's metrics/
// aside as metrics.attempt_N, unless this run resumes (`keep_metrics`): then the files
// continue. It also empties control/ (common/run_control.h). All ranks check they computed the same
// tag, and all ranks throw rank 0's error (e.g. the directory is held by another run).
std::string prepareRun(const Config& cfg, const TrainConfig& tc, Distributed& dist,
                       std::optional<RunLock>& lock, bool keep_metrics) {
  std::string tag = formatTag(cfg, tc.layout.world_size, tc.output.sweep_fmt, tc.layout.nodes);
  std::vector<std::string> tags = dist.allGatherString("tag", tag);
  for (size_t r = 0; r < tags.size(); ++r)
    if (tags[r] != tags[0])
      throw ConfigError("output.sweep_fmt", cfg.where("output.sweep_fmt"),
                        "ranks disagree on the run tag: rank 0 has '" + tags[0] + "', rank " +
                            std::to_string(r) + " has '" + tags[r] + "'",
                        "all ranks must get the same config and overrides");
  // Rank 0: "ok <dir>" or "<exit code> <message>". Never empty: an empty store value
  // costs a 200 ms TCPStore stall (trainer/checkpoint/checkpointer.cpp, gather()).
  std::string result = "-";
  if (dist.env.rank == 0) {
    try {
      RunDir rd = prepareRunDir(cfg, tc.layout.world_size, tc.output.output_dir,
                                tc.output.no_sweep_dir, tc.layout.nodes);
      lock.emplace(RunLock::acquire(rd.path));
      if (!lock->takeover().empty()) FTB_WARN(lock->path() << ": " << lock->takeover());
      if (!keep_metrics) keepEarlierAttempt(rd.path);
      clearControlDir(rd.path);  // leftovers of an earlier run (we hold the lock)
      result = "ok " + rd.path;
    } catch (const FtbError& e) {
      result = std::to_string(e.exitCode()) + " " + e.what();
    }
  }
  std::string r0 = dist.allGatherString("run_dir", result)[0];
  const size_t sp = r0.find(' ');
  const std::string head = r0.substr(0, sp), body = r0.substr(sp + 1);
  if (head == "ok") return body;
  if (head == "2") throw ConfigError(body);
  throw IoError(dist.env.rank == 0 ? body : "rank 0 could not prepare the run directory: " + body);
}

RunState stateFor(const std::exception& e) {
  std::string w = e.what();
  if (dynamic_cast<const OomError*>(&e) || dynamic_cast<const std::bad_alloc*>(&e) ||
      w.find("can't allocate memory") != std::string::npos ||
      w.find("out of memory") != std::string::npos)
    return RunState::Oom;
  return RunState::Failed;
}

// The validated config for this process: --world-size only plans (--estimate-memory).
TrainConfig resolveConfig(const SessionOptions& opts, const Config& cfg, const DistEnv& env) {
  if (opts.world_size < 0 ||
      (opts.world_size > 0 && !opts.estimate_memory && !opts.max_micro_batch))
    throw ConfigError("--world-size", "command line",
                      "only valid with --estimate-memory or --max-micro-batch, and must be >= 1",
                      "training takes its world size from the launcher's environment");
  TrainConfig tc =
      TrainConfig::fromConfig(cfg, opts.world_size > 0 ? opts.world_size : env.world_size);
  tc.layout.nodes = env.nodes;
  return tc;
}

// Whether this run's tensors go to a GPU (wantsCuda). visibleCudaDevices() loads the
// driver: asked only where "auto" depends on it.
bool runWantsCuda(const TrainConfig& tc) {
  const std::string& device = tc.training.device;
  const bool ask = device == "auto" && tc.comm.backend != "nccl";
  return wantsCuda(device, tc.comm.backend, ask ? visibleCudaDevices() : 0);
}

// A run on a GPU continues in `trainer_cuda` (metrics/device.h): the same command line in
// the same process (exec), before any socket or file exists. The answers that touch no
// device (--print-config, --estimate-memory, --generate-data) stay here. Stop signals are
// blocked across the exec, so one that comes in between is pending in the new image
// (installStopSignalHandlers unblocks it); one that came before ends the run here.
void execCudaBuildForAGpuRun(const SessionOptions& opts, const TrainConfig& tc) {
  if (opts.print_config || opts.estimate_memory || !opts.generate_data.empty() || opts.argv.empty())
    return;
  const std::string path = runWantsCuda(tc) ? cudaTrainerPath() : "";
  if (path.empty()) return;
  const sigset_t stops = stopSignalSet();
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &stops, &old);
  checkStop("configuration");
  std::vector<char*> args;
  for (const std::string& a : opts.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::cout.flush();
  execv(path.c_str(), args.data());
  const int err = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  throw IoError("cannot start " + path + " (the CUDA build of the trainer) for training.device \"" +
                tc.training.device + "\": " + std::strerror(err));
}

// training.device: where this rank's tensors live ("cpu" or "cuda:N"), made the process's
// compute device (metrics/device.h). Bad or unsupported placements are ConfigErrors
// (exit 2) before any socket or file exists.
std::string placeTensors(const Config& cfg, const TrainConfig& tc, const DistEnv& env) {
  const DeviceChoice d =
      resolveDevice(tc.training.device, tc.comm.backend, env.local_rank, visibleCudaDevices());
  if (!d.problem.empty())
    throw ConfigError(d.problem_key, cfg.where(d.problem_key), d.problem,
                      "training.device and parallel.backend must agree");
  if (d.cuda && tc.layout.pp > 1)
    throw ConfigError("parallel.pp", cfg.where("parallel.pp"),
                      "pipeline stages run on the CPU only in this build (training.device "
                      "resolves to " +
                          d.device + ")",
                      "use parallel.pp = 1 on GPUs, or training.device = \"cpu\"");
  useComputeDevice(torch::Device(d.device));
  const struct { const char *key, *what; const std::string& value; } offloads[] = {
      {"training.activation_offload", "activations", tc.training.activation_offload},
      {"training.optimizer_offload", "optimizer state", tc.training.optimizer_offload}};
  for (const auto& [key, what, value] : offloads)
    if (value == "host" && !d.cuda)
      throw ConfigError(key, cfg.where(key),
                        std::string("moves a GPU's ") + what +
                            " to host memory, but training.device resolves to " + d.device,
                        std::string("leave ") + key + " = \"none\" on the CPU");
  if (tc.training.cuda_graphs && !d.cuda)
    throw ConfigError("training.cuda_graphs", cfg.where("training.cuda_graphs"),
                      "replays a GPU's captured forward and backward, but training.device "
                      "resolves to " +
                          d.device,
                      "set training.cuda_graphs = false on the CPU");
  const double cap = tc.training.device_memory_limit_bytes;
  if (cap > 0 && !capDeviceMemory(cap))
    throw ConfigError(
        "training.device_memory_limit_gb", cfg.where("training.device_memory_limit_gb"),
        d.cuda ? "is larger than " + d.device + "'s " +
                     formatFixed(deviceTotalMemory() / double(int64_t(1) << 30), 1) + " GiB"
               : "caps a GPU's caching allocator, but training.device resolves to " + d.device,
        d.cuda ? "a cap answers for a smaller card: set it below the device's memory"
               : "for a host memory limit use parallel.memory_limit_gb");
  return d.device;
}

// --max-micro-batch runs its tries on this machine, as world_size local ranks: a device
// the last of them cannot have (training.device = "cuda" without a GPU) is refused before
// the first try (exit 2), so no scratch directory is made.
void requireTryDevice(const Config& cfg, const TrainConfig& tc) {
  const int last = static_cast<int>(tc.layout.world_size) - 1;
  const DeviceChoice d =
      resolveDevice(tc.training.device, tc.comm.backend, last, visibleCudaDevices());
  if (!d.problem.empty())
    throw ConfigError(d.problem_key, cfg.where(d.problem_key),
                      "--max-micro-batch measures its tries on this machine (" +
                          std::to_string(last + 1) + " local rank(s)): " + d.problem,
                      "run --max-micro-batch on a machine with the GPUs the run will have, or "
                      "size it without measuring: trainer --estimate-memory");
}

// The budget --fit lists against: the run's own (memoryBudget: the host's memory shared by
// the ranks); for a GPU run the card's, which training.device_memory_limit_gb must state.
MemoryBudget fitBudget(const Config& cfg, const TrainConfig& tc, bool gpu) {
  MemoryBudget budget = memoryBudget(tc, int(tc.layout.world_size));
  if (!gpu || budget.device) return budget;
  throw ConfigError("training.device_memory_limit_gb", cfg.where("training.device_memory_limit_gb"),
                    "--fit for a GPU run lists against the card's memory, which is not set",
                    "set training.device_memory_limit_gb to the card's memory (24 for a 24 GB card)");
}

// --estimate-memory, --print-config, --generate-data: answer and return 0; nullopt
// when the session is a training run.
std::optional<int> runInfoCommand(const SessionOptions& opts, const Config& cfg,
                                  const TrainConfig& tc) {
  if (opts.estimate_memory) {
    const bool gpu = runWantsCuda(tc);  // a GPU run: its device memory
    const double cap = tc.training.device_memory_limit_bytes;
    if (opts.fit) {
      const MemoryBudget budget = fitBudget(cfg, tc, gpu);
      std::cout << formatFitTable(tc, fitTable(cfg, int(tc.layout.world_size), budget), budget);
      return 0;
    }
    std::cout << formatMemoryEstimate(tc, gpu ? estimateDeviceMemory(tc) : estimateMemory(tc),
                                      gpu && cap > 0 ? cap : tc.comm.memory_limit_bytes);
    return 0;
  }
  if (opts.print_config) {
    std::cout << cfg.toToml();
    return 0;
  }
  if (opts.max_micro_batch) {
    requireTryDevice(cfg, tc);
    return runMaxMicroBatch({opts.config_path, opts.overrides, opts.safety_margin}, tc,
                            static_cast<int>(tc.layout.world_size));
  }
  if (!opts.generate_data.empty()) {
    writeSyntheticDataset(tc, opts.generate_data);
    FTB_INFO("wrote " << tc.data.num_samples << " documents to " << opts.generate_data);
    return 0;
  }
  return std::nullopt;
}

// The environment check (common/env_check.h): rank 0 logs what it found, every
// rank warns about its own problems; returns the env_* attributes for the metrics file.
std::vector<std::pair<std::string, AttrValue>> checkEnvironment(const TrainConfig& tc,
                                                                const CpuInfo& cpu,
                                                                const RunPeaks& peaks, int rank) {
  const EnvFacts f = detectEnv(cpu, at::get_num_threads());
  const std::string dtype = tc.training.dtype == DType::kBf16 ? "bf16" : "fp32";
  std::vector<std::string> warnings = envWarnings(f, peaks.gemm_flops, peaks.hw, dtype);
  if (rank == 0) FTB_INFO("environment: " << envSummary(f));
  for (const std::string& w : warnings) FTB_WARN(w);
  if (!peaks.gemm_warning.empty()) warnings.push_back(peaks.gemm_warning);  // logged already
  return envAttrs(f, warnings);
}

RunInfo runInfo(const Config& cfg, const TrainConfig& tc, const DistEnv& env,
                const std::string& run_dir, const std::string& device, const CpuInfo& cpu,
                const RunPeaks& peaks) {
  RunInfo info;
  info.tag = std::filesystem::path(run_dir).filename().string();
  info.config_hash = configHash(cfg, tc.layout.world_size, tc.layout.nodes);
  info.hostname = hostName();
  info.start_utc = utcNowIso8601();
  info.ftbench_version = FTB_VERSION;
  info.torch_version = TORCH_VERSION;
  info.device = device;
  info.cpu_model = cpu.model_name;
  info.peak_source = peaks.hw.source;
  info.config_toml = cfg.toToml();
  info.world_size = env.world_size;
  info.rank = env.rank;
  info.local_rank = env.local_rank;
  info.node_rank = env.node_rank;
  info.peak_flops = peaks.hw.flops;
  info.extra_attrs = peaks.attrs();
  return info;
}

std::unique_ptr<Checkpointer> makeCheckpointer(const Config& cfg, const TrainConfig& tc,
                                               const RunInfo& info, const std::string& run_dir,
                                               Distributed& dist) {
  Checkpointer::Identity id{
      info.tag, info.config_hash, checkpointCompatKeys(cfg, tc),
      CkptLayout{tc.layout.world_size, tc.layout.dp_replicate, tc.layout.dp_shard, tc.layout.tp,
                 tc.layout.effectiveZeroStage(), tc.layout.nodes, tc.layout.pp}};
  return std::make_unique<Checkpointer>(checkpointDir(tc, run_dir), tc.checkpoint.keep_last,
                                        std::move(id), dist);
}

// Records how the loop ended (completed, or preempted by a stop signal) and prints
// rank 0's summary; returns the process exit code: 0, kExitRequeue
// (preempted with a checkpoint) or 128+signal (preempted without one).
int finishRun(MetricsFile& metrics, const TrainConfig& tc, const TrainSummary& s,
              const RunPeaks& peaks, const std::string& run_dir, int rank,
              const std::string& last_checkpoint) {
  if (s.stop_signal != 0 || s.stopped_by_ctl) {
    std::string msg =
        (s.stopped_by_ctl ? std::string("stopped by `launcher ctl stop`")
                          : std::string("stopped by signal ") + strsignal(s.stop_signal)) +
        " after " + std::to_string(s.steps) + " steps" +
        (last_checkpoint.empty() ? std::string(", no checkpoint")
                                 : "; checkpoint " + last_checkpoint);
    const int code = stopExitCode(!last_checkpoint.empty(), s.stopped_by_ctl, s.stop_signal);
    metrics.setStatus(RunState::Preempted, code, msg);
    metrics.close();
    FTB_WARN(msg << " (exit code " << code << ")");
    if (rank == 0) printSummary(tc, s, peaks, run_dir);  // of the steps done
    return code;
  }
  metrics.setStatus(RunState::Completed, 0,
                    s.steps == 0 ? "completed: no step left to run (training.max_steps = " +
                                       std::to_string(tc.training.max_steps) +
                                       " was reached before this process)"
                                 : "completed " + std::to_string(s.steps) + " steps");
  metrics.close();
  if (rank == 0) printSummary(tc, s, peaks, run_dir);
  return 0;
}

// Bad input: reported, recorded as "invalid" if the metrics file exists; exit 2.
int failInvalid(const ConfigError& e, std::optional<MetricsFile>& metrics) {
  std::cerr << logPrefix() << " " << e.what() << "\n";
  if (metrics) metrics->setStatus(RunState::Invalid, e.exitCode(), e.what());
  return e.exitCode();
}

// Any other failure: "oom" (exit 5) or "failed" (the error's exit code, else 1),
// recorded in the metrics file when it exists.
int failRun(const std::exception& e, std::optional<MetricsFile>& metrics) {
  const RunState state = stateFor(e);
  int code = state == RunState::Oom              ? 5
             : dynamic_cast<const FtbError*>(&e) ? static_cast<const FtbError&>(e).exitCode()
                                                 : 1;
  const std::string what = withoutBacktrace(e.what());  // the backtrace is no user's business
  FTB_ERROR(state << ": " << what);
  if (metrics) {
    try {
      metrics->setStatus(state, code, what);
    } catch (const std::exception& e2) {
      FTB_ERROR("could not record status in " << metrics->path() << ": " << e2.what());
    }
  }
  return code;
}

// The pre-flight memory check: "" or why this layout cannot fit (see memoryFitProblem).
// The run's peaks, and the model's kernels chosen with them: for fp32 on the CPU the BLAS
// of the projections (training.fp32_gemm, timed here), and the attention kernel.
// With "auto" every rank takes rank 0's choice, and a resume the route its checkpoint ran
// with: the two BLAS round differently, so a route that flipped with the machine's load
// would make a resumed run differ from the uninterrupted one.
void agreeFp32Gemm(const TrainConfig& tc, const std::optional<ResumePoint>& plan, Distributed& dist,
                   Fp32GemmChoice& c) {
  if (tc.training.fp32_gemm != "auto") return;
  const auto recorded = plan ? plan->manifest.state.find("fp32_gemm_openblas")
                             : std::map<std::string, int64_t>::const_iterator();
  if (plan && recorded != plan->manifest.state.end() &&
      (recorded->second == 0 || c.openblas_flops > 0)) {
    c.route = recorded->second ? Fp32Gemm::kOpenBlas : Fp32Gemm::kAten;
    c.why += "; resumed with the checkpoint's " + fp32GemmName(c.route);
  }
  const std::vector<std::string> routes =
      dist.allGatherString("fp32_gemm", c.route == Fp32Gemm::kOpenBlas ? "openblas" : "aten");
  const Fp32Gemm first = routes[0] == "openblas" ? Fp32Gemm::kOpenBlas : Fp32Gemm::kAten;
  if (first != c.route && (first == Fp32Gemm::kAten || c.openblas_flops > 0)) {
    c.route = first;
    c.why += "; rank 0's choice";
  }
}

RunPeaks measurePeaks(const TrainConfig& tc, const CpuInfo& cpu, const std::string& device,
                      const std::optional<ResumePoint>& plan, Distributed& dist) {
  setAttentionKernel(tc.training.attention == "sdpa" ? AttentionKernel::kSdpa
                                                     : AttentionKernel::kFusedSoftmax);
  setCudaKernels(tc.training.cuda_kernels == "composed" ? CudaKernels::kComposed
                                                        : CudaKernels::kFused);
  if (device != "cpu")
    return resolvePeaks(tc, cpu, device, cudaDeviceName(computeDevice().index()));
  if (tc.training.dtype != DType::kFp32) return resolvePeaks(tc, cpu, device, "");
  Fp32GemmChoice c =
      chooseFp32Gemm(tc.training.fp32_gemm, kPeakGemmN, kPeakGemmReps, tc.metrics.gemm_probe);
  agreeFp32Gemm(tc, plan, dist, c);
  setFp32Gemm(c.route);
  std::function<double()> remeasure;  // none where the route was taken untimed
  if (c.flops() > 0)
    remeasure = [route = c.route] { return measureFp32Gemm(route, kPeakGemmN, kPeakGemmReps); };
  GemmFigure g{c.flops(),
               kPeakGemmN,
               " via " + fp32GemmName(c.route) + " (" + c.why + ")",
               {{"fp32_gemm", fp32GemmName(c.route)},
                {"fp32_gemm_aten_flops", c.aten_flops},
                {"fp32_gemm_openblas_flops", c.openblas_flops}},
               fp32GemmName(c.route), std::move(remeasure)};
  return resolvePeaks(tc, cpu, device, "", &g);
}

// On a GPU the model lives in the device's memory: the budget is the GPU's (unless
// parallel.memory_limit_gb says otherwise) and the host's runtime baseline is no part of it.
std::string memoryVerdict(const TrainConfig& tc, const DistEnv& env) {
  MemoryBudget budget = memoryBudget(tc, env.local_world_size);
  if (const double gpu = deviceTotalMemory();
      gpu > 0 && !budget.device && !(tc.comm.memory_limit_bytes > 0))
    budget = {gpu,
              computeDevice().str() + "'s memory " +
                  formatFixed(gpu / double(int64_t(1) << 30), 1) + " GiB",
              true};
  return memoryFitProblem(tc, budget.device ? estimateDeviceMemory(tc) : estimateMemory(tc),
                          budget);
}

// The process group of the run: parallel.backend, parallel.local_collectives, and every wait
// bounded by parallel.timeout_seconds.
Distributed joinProcessGroup(const TrainConfig& tc, const DistEnv& env) {
  return initDistributed(
      env, std::chrono::milliseconds(static_cast<int64_t>(tc.comm.timeout_seconds * 1000)),
      tc.comm.backend, tc.comm.local_collectives);
}

// The bytes of one fp32 all-reduce of every trainable parameter's gradient: the link
// probe's sizes are capped by it (a small model's gradients never fill 16 MiB).
int64_t gradientBytes(const TrainConfig& tc) {
  return trainingFlops(tc.model, tc.lora, tc.data.seq_len).trainable_params * 4;
}

// The run's link figure (parallel/link_probe.h) over the world group, the Comm DDP's
// gradients use where the data-parallel group is every rank. Collective. World 1 or
// metrics.link_probe = false: NaN figures, and link_source says which.
LinkFigure measureLink(const TrainConfig& tc, Distributed& dist) {
  if (dist.env.world_size == 1) return unmeasuredLink(kNoLinkSource);
  if (!tc.metrics.link_probe) return unmeasuredLink("not measured (metrics.link_probe = false)");
  return probeLink(*dist.world, worldTransport(dist), dist.env.nodes, gradientBytes(tc));
}

}  // namespace

namespace {

// What set-up builds before the run directory exists: each phase honours stop signals.
struct Setup {
  DistEnv env;
  std::optional<Config> cfg;
  TrainConfig tc;
  std::string device;
  std::string no_fit;  // "" or why the memory estimate says the layout cannot fit
  std::unique_ptr<Dataset> ds;
  std::optional<Distributed> dist;
  std::optional<ResumePoint> plan;
};

// Config, device and memory verdict; the answer of an info command (--estimate-memory ...).
std::optional<int> configure(const SessionOptions& opts, Setup& s, StopWatchdog& watchdog) {
  s.env = discoverDistEnv();
  setLogIdentity(s.env.rank, s.env.world_size, hostName());
  s.cfg.emplace(Config::load(opts.config_path, opts.overrides));
  s.tc = resolveConfig(opts, *s.cfg, s.env);
  execCudaBuildForAGpuRun(opts, s.tc);
  watchdog.setGrace(s.tc.checkpoint.preempt_grace_s);
  if (std::optional<int> rc = runInfoCommand(opts, *s.cfg, s.tc)) return rc;
  s.device = placeTensors(*s.cfg, s.tc, s.env);
  s.tc.training.device = s.device;  // resolved: the estimate below knows the device's kernels
  // From the estimate, before the model exists. A layout that cannot fit still gets its
  // process group, run dir and metrics file, then throws OomError: status oom, exit 5.
  s.no_fit = memoryVerdict(s.tc, s.env);
  checkStop("configuration");
  return std::nullopt;
}

// Data, process group, and every input that can be refused before anything is written.
void connect(Setup& s) {
  const Config& cfg = *s.cfg;
  const TrainConfig& tc = s.tc;
  // Bad data (a malformed JSONL line, a missing field) is refused before anything is
  // written; every rank reads (or tokenizes) the same file.
  s.ds = makeDataset(tc, s.env.rank == 0);
  if (const PipeBoundProblem p = pipeMicrobatchProblem(tc, s.ds->size(), tc.data.data_source);
      !p.what.empty())  // synthetic data was checked with the config (checkPipeMicrobatchBound)
    throw ConfigError("parallel.pp_microbatches", cfg.where("parallel.pp_microbatches"), p.what,
                      p.hint);
  checkStop("data");
  at::set_num_threads(threadsFor(tc));
  s.dist.emplace(joinProcessGroup(tc, s.env));
  s.dist->pp_local_p2p = tc.comm.pp_local_p2p;
  checkStop("process group");
  // Which checkpoint to resume from is decided (and a bad or incompatible one refused)
  // before anything is written to the run directory or the model is allocated.
  hf::checkPretrained(tc,
                      *s.dist);  // a bad HF model directory exits 2 before the run directory exists
  hf::checkAdapter(tc, *s.dist);  // so does a bad PEFT adapter directory (lora.from_pretrained)
  const std::string ckpt_dir =
      checkpointDir(tc, runDirPath(cfg, tc.layout.world_size, tc.output.output_dir,
                                   tc.output.no_sweep_dir, tc.layout.nodes));
  refuseForeignCheckpointDir(cfg, tc, ckpt_dir);  // before a checkpoint is read from it
  s.plan = planResume(tc, cfg, ckpt_dir, *s.dist);
  if (!tc.checkpoint.dir.empty())  // refused now, not at the first save (after the run)
    requireWritableDir(tc.checkpoint.dir, "checkpoint.dir", cfg.where("checkpoint.dir"),
                       "choose a directory this user can write on every node");
}

// The run directory, its peaks and its metrics file (in `metrics`).
struct OpenRun {
  std::string dir;
  CpuInfo cpu;
  RunPeaks peaks;
  LinkFigure link;
  RunInfo info;
};

OpenRun openRun(Setup& s, std::optional<RunLock>& lock, std::optional<MetricsFile>& metrics) {
  OpenRun r;
  r.dir = prepareRun(*s.cfg, s.tc, *s.dist, lock, s.plan.has_value());
  // No stop check between the run directory and its metrics file: a stop signal arriving
  // now is honoured right after the file exists, so the run records "preempted".
  r.cpu = detectCpu();
  r.peaks = s.no_fit.empty() ? measurePeaks(s.tc, r.cpu, s.device, s.plan, *s.dist)
                             : unmeasuredPeaks("not measured (run refused)");
  r.link =
      s.no_fit.empty() ? measureLink(s.tc, *s.dist) : unmeasuredLink("not measured (run refused)");
  r.info = runInfo(*s.cfg, s.tc, s.env, r.dir, s.device, r.cpu, r.peaks);
  for (auto& a : linkAttrs(r.link)) r.info.extra_attrs.push_back(a);
  for (auto& a : checkEnvironment(s.tc, r.cpu, r.peaks, s.env.rank))
    r.info.extra_attrs.push_back(a);
  const std::string mpath = metricsFilePath(r.dir, s.env.rank);
  metrics.emplace(s.plan ? MetricsFile::resume(mpath, r.info, s.plan->manifest.state.at("step"))
                         : MetricsFile::create(mpath, r.info));
  if (!s.no_fit.empty()) throw OomError(s.no_fit);
  checkStop("metrics file");
  return r;
}

// The steps, with checkpoints and traces, under the stop watchdog; the outcome recorded.
int trainAndFinish(Setup& s, OpenRun& r, MetricsFile& metrics, StopWatchdog& watchdog) {
  const TrainConfig& tc = s.tc;
  CheckpointHook ckpt(tc, std::move(s.plan), makeCheckpointer(*s.cfg, tc, r.info, r.dir, *s.dist),
                      s.env.rank);
  StepProfiler profiler(tc.metrics.profile_steps, tracePath(r.dir, s.env.rank), s.env.rank);
  HookList hooks({&profiler, &ckpt});  // the profiler's window excludes checkpoint saves
  watchdog.arm({&metrics, &ckpt});
  struct Disarm {  // before `ckpt` and `metrics` go away, whatever happens
    StopWatchdog& w;
    ~Disarm() { w.disarm(); }
  } disarm{watchdog};
  TrainSummary sum;
  try {
    sum = train(tc, *s.ds, *s.dist, metrics, r.peaks, &hooks, r.dir);
  } catch (const std::exception& e) {
    if (!peerLeftAtDeadline(tc, e)) throw;
    return watchdog.abandon(std::string("the stop did not finish (") + e.what() + ")");
  }
  if (sum.steps > 0 && sum.stop_signal == 0 && !sum.stopped_by_ctl)
    finishGemm(r.peaks, r.cpu, metrics, sum.train_seconds);
  watchdog.disarm();
  return finishRun(metrics, tc, sum, r.peaks, r.dir, s.env.rank, ckpt.lastSaved());
}

// trainer --probe: the process group and the GEMM a run of this config would get, and the
// link figure over its world group; rank 0 prints probeJsonLine (common/link_bandwidth.h).
// No data is read and no run directory, metrics file or checkpoint is written. The GEMM is
// timed whatever metrics.gemm_probe says: it is what the probe is for.
int runProbe(Setup& s) {
  TrainConfig tc = s.tc;
  tc.metrics.gemm_probe = true;
  at::set_num_threads(threadsFor(tc));
  s.dist.emplace(joinProcessGroup(tc, s.env));
  checkStop("process group");
  const RunPeaks peaks = measurePeaks(tc, detectCpu(), s.device, std::nullopt, *s.dist);
  checkStop("GEMM");
  ProbeReport rep;
  rep.link = probeLink(*s.dist->world, worldTransport(*s.dist), s.env.nodes, gradientBytes(tc));
  torch::Tensor lowest = torch::tensor({-peaks.gemm_start}, torch::kFloat64);
  s.dist->world->allReduceMax(lowest);  // the slowest rank's GEMM, negated
  rep.world = s.env.world_size;
  rep.nodes = s.env.nodes;
  rep.threads = at::get_num_threads();
  rep.dtype = tc.training.dtype == DType::kBf16 ? "bf16" : "fp32";
  rep.gemm_flops = peaks.gemm_start;
  rep.gemm_flops_min = -lowest.item<double>();
  rep.gemm_n = peaks.gemm_n;
  if (s.env.rank == 0) std::cout << probeJsonLine(rep) << std::endl;
  return 0;
}

}  // namespace

// config -> (info command) -> data and process group -> run dir and metrics file ->
// train -> record the outcome. Every failure ends here with its exit code.
int runSession(const SessionOptions& opts) {
  installStopSignalHandlers();  // before set-up: every phase honours stop signals
  StopWatchdog watchdog;
  std::optional<RunLock> lock;  // rank 0: the run directory, until the status is recorded
  std::optional<MetricsFile> metrics;
  try {
    Setup s;
    if (std::optional<int> rc = configure(opts, s, watchdog)) return *rc;
    if (opts.probe) return runProbe(s);
    connect(s);
    OpenRun r = openRun(s, lock, metrics);
    return trainAndFinish(s, r, *metrics, watchdog);
  } catch (const ConfigError& e) {
    return failInvalid(e, metrics);
  } catch (const StopRequested& e) {
    FTB_WARN(e.what());
    if (metrics) metrics->setStatus(RunState::Preempted, 128 + e.sig, e.what());
    return 128 + e.sig;
  } catch (const std::exception& e) {
    return failRun(e, metrics);
  }
}

}  // namespace ftb
