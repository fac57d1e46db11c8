#include "trainer/train.h"

#include <csignal>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "trainer/checkpoint/hook.h"
#include "trainer/data/dataset.h"
#include "trainer/metrics/perf.h"
#include "trainer/model/llama.h"
#include "trainer/optim/optimizer.h"
#include "trainer/parallel/ddp.h"
#include "trainer/parallel/mesh.h"
#include "trainer/parallel/zero.h"

namespace ftb {

std::atomic<int> g_stop_signal{0};

namespace {

void onStopSignal(int sig) { g_stop_signal.store(sig); }

// Per-step timings (seconds) and counts.
struct StepRecord {
  double data = 0, fwd = 0, bwd = 0, opt = 0, comm = 0, total = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  double padded = 0, dataset = 0;  // global token counts
};

const char* kMetrics[] = {"step", "time_s", "step_time_s", "data_s", "forward_s", "backward_s",
                          "optimizer_s", "comm_s", "loss", "grad_norm", "lr",
                          "tokens_padded", "tokens_dataset", "tokens_per_s_padded",
                          "tokens_per_s_dataset", "tokens_per_s_per_device", "mfu", "flops_per_token",
                          "rss_bytes", "peak_rss_bytes"};
bool isIntMetric(const std::string& m) {
  return m == "step" || m == "tokens_padded" || m == "tokens_dataset" || m == "rss_bytes" ||
         m == "peak_rss_bytes";
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double lrAt(const TrainConfig& tc, int64_t step) {
  if (tc.lr_warmup_steps > 0 && step < tc.lr_warmup_steps)
    return tc.lr * double(step + 1) / double(tc.lr_warmup_steps);
  return tc.lr;
}

}  // namespace

void installStopSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  // No SA_RESETHAND: launchers send TERM more than once while stopping a job (forward,
  // then stop); a second TERM must not kill a rank mid-collective. A stuck rank is
  // killed by the launcher's SIGKILL after --grace.
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) sigaction(s, &sa, nullptr);
}

TrainSummary train(const TrainConfig& tc, Distributed& dist, MetricsFile& metrics,
                   double peak_flops, CheckpointHook& ckpt) {
  Comm& comm = *dist.world;
  const int rank = comm.rank(), world = comm.size();
  Mesh mesh = buildMesh(dist, tc);
  const int64_t dp = tc.dpSize(), G = tc.globalBatch(), per_rank = G / dp;
  const int64_t mbs = tc.micro_batch_size;
  torch::ScalarType dtype = tc.dtype == DType::kBf16 ? torch::kBFloat16 : torch::kFloat32;

  // Model math in model/, its sharding here: ZeRO shards each unit as it is built.
  std::unique_ptr<ZeroEngine> zero;
  TransformerImpl::UnitBuilt on_unit;
  if (tc.effectiveZeroStage() > 0) {
    zero = std::make_unique<ZeroEngine>(static_cast<int>(tc.effectiveZeroStage()), *mesh.shard_comm,
                                        *mesh.replicate_comm, dtype);
    on_unit = [&zero](int64_t layer, torch::nn::Module& unit) { zero->addUnit(layer, unit); };
  }
  Transformer model(tc.model, mesh.tpContext(), dtype, tc.checkpoint_every,
                    static_cast<uint64_t>(tc.seed), on_unit);
  if (zero && zero->stage() == 3) model->setBlockExecutor(zero.get());

  std::vector<torch::Tensor> params = model->parameters();
  std::vector<torch::Tensor> opt_params = zero ? zero->masterShards() : params;
  // Grad-norm weights: tensor-parallel-replicated entries count 1/tp per rank.
  std::vector<torch::Tensor> norm_weights;
  if (zero) {
    norm_weights = zero->normWeights(tc.tp);
  } else if (tc.tp > 1) {
    for (auto& np : model->named_parameters())
      norm_weights.push_back(TransformerImpl::isTpReplicated(np.key())
                                 ? torch::full({}, 1.0 / double(tc.tp), torch::kFloat64)
                                 : torch::Tensor());
  }
  std::unique_ptr<GradReducer> reducer;
  if (!zero) reducer = std::make_unique<GradReducer>(params, *mesh.dp_comm);
  OptimizerOptions oo{tc.optimizer, tc.beta1, tc.beta2, tc.eps, tc.weight_decay};
  std::unique_ptr<Optimizer> opt = makeOptimizer(opt_params, oo);
  std::unique_ptr<Dataset> ds = makeDataset(tc);
  const double flops_per_token = tc.model.flopsPerToken(tc.seq_len);

  for (const char* m : kMetrics) metrics.declareMetric(m, isIntMetric(m));
  if (rank == 0)
    FTB_INFO("model " << tc.model.name << ": " << tc.model.numParams() / 1e6 << " M params, "
                      << flops_per_token / 1e6 << " MFLOP/token; global batch " << G
                      << " x " << tc.seq_len << " tokens, world " << world);

  installStopSignalHandlers();  // from here on, a signal stops every rank after one step
  const LoopPosition pos = ckpt.restore(*model, zero.get(), *opt, mesh.tp_rank, rank);
  // Global sample index of step s's first sample (the checkpoint records where the
  // next step starts, so a resume continues the same sample sequence).
  const int64_t sample0 = pos.next_sample - pos.step * G;
  TrainSummary sum;
  sum.start_step = pos.step;
  sum.steps = pos.step;
  std::vector<double> step_times;
  StepRecord acc;  // sums over measured steps
  const double t_start = nowSeconds();
  for (int64_t step = pos.step; step < tc.max_steps; ++step) {
    StepRecord r;
    const double t0 = nowSeconds();
    const int64_t first = sample0 + step * G + mesh.dpRank() * per_rank;  // tp ranks share data
    const double global_positions =
        double(countPositions(*ds, sample0 + step * G, G, tc.seq_len));
    r.data += nowSeconds() - t0;
    if (zero) {
      const double tg = nowSeconds();
      zero->beginStep();  // ZeRO-3: all-gather of the root unit
      r.comm += nowSeconds() - tg;
    }
    double local_loss = 0, local_padded = 0, local_dataset = 0;
    for (int64_t m = 0; m < tc.grad_accum_steps; ++m) {
      double ta = nowSeconds();
      Batch b = makeBatch(*ds, first + m * mbs, mbs, tc.seq_len, tc.pad_longest, tc.pad_id);
      double tb = nowSeconds();
      torch::Tensor logits = model->forward(b.inputs);
      torch::Tensor loss_sum = model->lossSum(logits, b.targets, b.mask);
      double tc0 = nowSeconds();
      (loss_sum / global_positions).backward();
      double td = nowSeconds();
      r.data += tb - ta;
      r.fwd += tc0 - tb;
      r.bwd += td - tc0;
      local_loss += loss_sum.item<double>();
      local_padded += double(b.padded_tokens);
      local_dataset += double(b.dataset_tokens);
    }
    double tcomm = nowSeconds();
    if (zero)
      zero->reduceGradients();
    else
      reducer->reduce();
    std::vector<torch::Tensor> grads;
    if (zero) {
      grads = zero->gradShards();
    } else {
      for (auto& p : params) grads.push_back(p.grad());
    }
    // Each rank's share of the squared global grad norm: shards are disjoint across
    // the shard group; replicas (dp without ZeRO, dp_replicate) hold equal copies.
    const double tnorm = nowSeconds();  // a local reduction: timed as optimizer work
    double sq_local = gradSquaredNorm(grads, norm_weights) /
                      double(zero ? tc.dp_replicate : tc.dpSize());
    const double norm_s = nowSeconds() - tnorm;
    // [loss sum, padded, dataset, stop flag, grad norm², over memory limit]: one small world all-reduce
    // carries the step's global counts and the stop decision, so all ranks stop after
    // the same step. tp ranks hold identical data, hence the division by tp.
    double stop = g_stop_signal.load() != 0 ? 1.0 : 0.0;
    if (rank == 0 && tc.stop_after_seconds > 0 && nowSeconds() - t_start >= tc.stop_after_seconds)
      stop = std::max(stop, 0.5);
    double over = tc.memory_limit_bytes > 0 && double(peakRssBytes()) > tc.memory_limit_bytes;
    torch::Tensor red = torch::tensor(
        {local_loss, local_padded, local_dataset, stop, sq_local, over}, torch::kFloat64);
    comm.allReduceSum(red);
    r.comm += nowSeconds() - tcomm - norm_s;
    auto rv = red.accessor<double, 1>();
    const double tpd = double(tc.tp);
    r.loss = rv[0] / tpd / global_positions;
    r.padded = rv[1] / tpd;
    r.dataset = rv[2] / tpd;

    double to = nowSeconds();
    r.grad_norm = std::sqrt(rv[4]);
    if (tc.max_grad_norm > 0 && r.grad_norm > tc.max_grad_norm)
      scaleGrads(grads, tc.max_grad_norm / (r.grad_norm + 1e-6));
    r.lr = lrAt(tc, step);
    opt->step(grads, r.lr);
    if (zero)
      zero->afterStep();
    else
      for (auto& p : params) p.mutable_grad() = torch::Tensor();
    r.opt = nowSeconds() - to + norm_s;
    r.total = nowSeconds() - t0;

    double tps_padded = r.padded / r.total, tps_dataset = r.dataset / r.total;
    double mfu = peak_flops > 0 ? flops_per_token * tps_padded / world / peak_flops : 0;
    metrics.appendStep({{"step", double(step)}, {"time_s", nowSeconds() - t_start},
                        {"step_time_s", r.total}, {"data_s", r.data}, {"forward_s", r.fwd},
                        {"backward_s", r.bwd}, {"optimizer_s", r.opt}, {"comm_s", r.comm},
                        {"loss", r.loss}, {"grad_norm", r.grad_norm}, {"lr", r.lr},
                        {"tokens_padded", r.padded}, {"tokens_dataset", r.dataset},
                        {"tokens_per_s_padded", tps_padded},
                        {"tokens_per_s_dataset", tps_dataset},
                        {"tokens_per_s_per_device", tps_padded / world}, {"mfu", mfu},
                        {"flops_per_token", flops_per_token},
                        {"rss_bytes", double(currentRssBytes())},
                        {"peak_rss_bytes", double(peakRssBytes())}});
    if ((step + 1) % tc.log_every == 0) metrics.flush();

    if (rv[5] > 0)  // some rank is over parallel.memory_limit_gb: every rank ends as oom
      throw OomError(logPrefix() + " " + std::to_string(int(rv[5])) + " rank(s) exceeded " +
                     "parallel.memory_limit_gb (" +
                     std::to_string(int64_t(tc.memory_limit_bytes) >> 20) + " MiB) at step " +
                     std::to_string(step) + "; this rank's peak RSS is " +
                     std::to_string(peakRssBytes() >> 20) + " MiB");
    if (step == pos.step) sum.first_loss = r.loss;
    sum.last_loss = r.loss;
    sum.steps = step + 1;
    if (step - pos.step >= tc.warmup_steps) {
      step_times.push_back(r.total);
      for (auto [a, b] : {std::pair{&acc.data, r.data}, {&acc.fwd, r.fwd}, {&acc.bwd, r.bwd},
                          {&acc.opt, r.opt}, {&acc.comm, r.comm}, {&acc.total, r.total},
                          {&acc.padded, r.padded}, {&acc.dataset, r.dataset}})
        *a += b;
    }
    if (rank == 0 && (step + 1) % tc.log_every == 0) {
      std::ostringstream os;
      os << std::fixed << "step " << step + 1 << "/" << tc.max_steps << " | loss "
         << std::setprecision(5) << r.loss << " | " << std::setprecision(0) << tps_padded
         << " tok/s (dataset " << tps_dataset << ") | MFU " << std::setprecision(1)
         << 100 * mfu << "% | step " << std::setprecision(3) << r.total << " s (fwd "
         << std::setprecision(0) << 100 * r.fwd / r.total << "% bwd " << 100 * r.bwd / r.total
         << "% opt " << 100 * r.opt / r.total << "% comm " << 100 * r.comm / r.total
         << "%) | rss " << currentRssBytes() / (1 << 20) << " MiB";
      FTB_INFO(os.str());
    }
    const bool final = rv[3] > 0 || step + 1 == tc.max_steps;
    if (ckpt.due(step + 1, final)) {
      metrics.flush();  // rows up to the checkpoint are on disk before it exists
      std::string dir = ckpt.saveIfDue(step + 1, sample0 + (step + 1) * G, final, *model,
                                       zero.get(), *opt, mesh.tp_rank, rank);
      if (!dir.empty()) sum.last_checkpoint = dir;
    }
    if (rv[3] >= 1.0) {
      sum.stop_signal = g_stop_signal.load() != 0 ? g_stop_signal.load() : SIGTERM;
      break;
    }
    if (rv[3] > 0) break;  // stop_after_seconds
  }
  metrics.flush();

  sum.measured_steps = static_cast<int64_t>(step_times.size());
  sum.train_seconds = acc.total;
  if (acc.total > 0) {
    sum.tokens_per_s_padded = acc.padded / acc.total;
    sum.tokens_per_s_dataset = acc.dataset / acc.total;
    sum.mfu = peak_flops > 0 ? flops_per_token * sum.tokens_per_s_padded / world / peak_flops : 0;
    sum.data_frac = acc.data / acc.total;
    sum.fwd_frac = acc.fwd / acc.total;
    sum.bwd_frac = acc.bwd / acc.total;
    sum.opt_frac = acc.opt / acc.total;
    sum.comm_frac = acc.comm / acc.total;
  }
  sum.step_p50 = percentile(step_times, 0.5);
  sum.step_p90 = percentile(step_times, 0.9);
  torch::Tensor rss = torch::tensor({double(peakRssBytes())}, torch::kFloat64);
  torch::Tensor all = torch::zeros({world}, torch::kFloat64);
  comm.allGather(all, rss);
  sum.peak_rss_max = all.max().item<double>();
  return sum;
}

void printSummary(const TrainConfig& tc, const TrainSummary& s, double peak_flops,
                  const std::string& peak_source, const std::string& run_dir) {
  const int world = tc.world_size;
  std::ostringstream os;
  auto row = [&os](const std::string& k, const std::string& v) {
    os << "  " << std::left << std::setw(28) << k << v << "\n";
  };
  auto fmt = [](double v, int prec) {
    std::ostringstream o;
    o << std::fixed << std::setprecision(prec) << v;
    return o.str();
  };
  os << "\n== ftbench summary (" << s.measured_steps << " measured steps after "
     << std::min(tc.warmup_steps, s.steps) << " warmup) ==\n";
  row("model", tc.model.name + " (" + fmt(tc.model.numParams() / 1e6, 2) + " M params)");
  row("layout", "world " + std::to_string(world) + " = dp " + std::to_string(tc.dpSize()) +
                    " x tp " + std::to_string(tc.tp) + ", micro-batch " +
                    std::to_string(tc.micro_batch_size) + " x accum " +
                    std::to_string(tc.grad_accum_steps) + ", seq " + std::to_string(tc.seq_len) +
                    ", " + (tc.dtype == DType::kBf16 ? "bf16" : "fp32"));
  row("tokens/s (padded, global)", fmt(s.tokens_per_s_padded, 1));
  row("tokens/s (dataset, global)", fmt(s.tokens_per_s_dataset, 1));
  row("tokens/s per device", fmt(s.tokens_per_s_padded / world, 1));
  row("MFU", fmt(100 * s.mfu, 1) + " % of " + fmt(peak_flops / 1e9, 1) + " GFLOP/s (" +
                 peak_source + ")");
  row("step time p50 / p90", fmt(s.step_p50, 4) + " / " + fmt(s.step_p90, 4) + " s");
  row("breakdown", "data " + fmt(100 * s.data_frac, 1) + "%, fwd " + fmt(100 * s.fwd_frac, 1) +
                       "%, bwd " + fmt(100 * s.bwd_frac, 1) + "%, opt " +
                       fmt(100 * s.opt_frac, 1) + "%, comm " + fmt(100 * s.comm_frac, 1) + "%");
  row("peak RSS (max over ranks)", fmt(s.peak_rss_max / (1 << 20), 1) + " MiB");
  row("loss first / last", fmt(s.first_loss, 5) + " / " + fmt(s.last_loss, 5));
  if (tc.price_per_hour > 0 && s.tokens_per_s_dataset > 0) {
    double mt_per_hour = s.tokens_per_s_dataset * 3600 / 1e6;
    row("M tokens/hour (dataset)", fmt(mt_per_hour, 3));
    row("$ per M tokens", fmt(tc.price_per_hour * world / mt_per_hour, 4) + " (at $" +
                              fmt(tc.price_per_hour, 2) + "/device-hour)");
  }
  row("run directory", run_dir);
  std::fputs(os.str().c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace ftb
