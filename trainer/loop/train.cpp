#include "trainer/loop/train.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <ctime>
#include <mutex>
#include <optional>
#include <sstream>

#include "common/log.h"
#include "common/proc_memory.h"
#include "common/run_control.h"
#include "trainer/comm/phase_timer.h"
#include "trainer/data/dataset.h"
#include "trainer/hf/peft_adapter.h"
#include "trainer/hf/pretrained.h"
#include "trainer/kernels/tensor_runs.h"
#include "trainer/metrics/perf.h"
#include "trainer/optim/offload.h"
#include "trainer/parallel/parallelize.h"

namespace ftb {

namespace {

double lrAt(const TrainConfig& tc, int64_t step) {
  if (tc.training.lr_warmup_steps > 0 && step < tc.training.lr_warmup_steps)
    return tc.training.lr * double(step + 1) / double(tc.training.lr_warmup_steps);
  return tc.training.lr;
}

// What all ranks agree on after a step's gradients are reduced: one small world
// all-reduce of [loss sum, padded, dataset, stop votes (StopVote), grad norm², over memory limit,
// control command and request id (rank 0 only, common/run_control.h)], and with a pipeline
// each stage's forward-backward span (its ranks' mean: each adds its span / ranks per stage
// in its stage's entry), whose largest is the step's pipeline makespan.
struct Agreement {
  double loss_sum = 0, padded = 0, dataset = 0, stop = 0, grad_sq = 0, over_memory = 0;
  double ctl = 0, ctl_id = 0;
  std::vector<double> stage_span;  // pp entries (parallel.pp > 1), else empty
};

Agreement agree(Comm& world, const Agreement& local) {
  std::vector<double> all = {local.loss_sum, local.padded,      local.dataset, local.stop,
                             local.grad_sq,  local.over_memory, local.ctl,     local.ctl_id};
  all.insert(all.end(), local.stage_span.begin(), local.stage_span.end());
  torch::Tensor red = torch::tensor(all, torch::kFloat64);
  world.allReduceSum(red);
  auto v = red.accessor<double, 1>();
  Agreement g{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], {}};
  for (int64_t i = 8; i < v.size(0); ++i) g.stage_span.push_back(v[i]);
  return g;
}

// Rank 0: a pending `launcher ctl` request goes into this step's agreement.
void pollControl(const std::string& run_dir, int rank, Agreement& a) {
  if (rank != 0 || run_dir.empty()) return;
  if (std::optional<CtlRequest> req = takeRequest(run_dir)) {
    a.ctl = double(static_cast<int>(req->command));
    a.ctl_id = double(req->id);  // < 2^53: exact
  }
}

// Why a rank votes to stop after this step. The votes are summed in the agreement, and
// only rank 0 votes kTime, so a sum >= kSignal means some rank got a stop signal and a sum
// of kTime alone that rank 0's clock passed training.stop_after_seconds.
enum class StopVote { kNone = 0, kTime = 1, kSignal = 2 };

StopVote stopVote(const TrainConfig& tc, int rank, double elapsed) {
  if (g_stop_signal.load() != 0) return StopVote::kSignal;
  return rank == 0 && tc.training.stop_after_seconds > 0 &&
                 elapsed >= tc.training.stop_after_seconds
             ? StopVote::kTime
             : StopVote::kNone;
}

// The global batch's non-padding positions (the loss normaliser): each rank counts
// its own samples, one world all-reduce sums them (each sample is loaded by `copies`
// ranks: tp ranks, and every stage of a pipeline, hold identical data).
double globalPositions(Comm& world, int64_t local, int64_t copies) {
  torch::Tensor n = torch::tensor({double(local)}, torch::kFloat64);
  world.allReduceSum(n);
  return n.item<double>() / double(copies);  // integers below 2^53: exact
}

// Data, forward and backward of every micro-batch of `step`: adds this rank's
// [loss sum, padded, dataset] to `a` and the phase times to `r`; returns the global
// batch's non-padding positions (the loss normaliser).
double forwardBackward(const TrainContext& ctx, int64_t step, PhaseTimer& timer, StepRecord& r,
                       Agreement& a) {
  const TrainConfig& tc = ctx.tc;
  StepBatches mine;
  {
    RECORD_USER_SCOPE("data");  // named ranges for traces: trainer/loop/profiler.h
    mine = rankBatches(ctx.ds, tc, step, ctx.mesh.dpRank());  // tp ranks and stages share data
  }
  timer.end(r.data);
  const double positions = globalPositions(ctx.world, mine.positions, ctx.runner.sampleCopies());
  if (tc.training.optimizer_in_backward) ctx.opt.startStep();  // updates come during backward
  ctx.sync.beginStep();  // ZeRO-3: all-gather of the root unit
  timer.end(r.comm);
  const FwdBwdStats st = ctx.runner.run(mine, positions);  // every micro-batch (step_runner.h)
  timer.end(r.pipe);
  if (ctx.mesh.pp > 1) {  // every stage's span, for the makespan (agree())
    timer.settle();       // r.pipe now (a pipeline's transfers have waited for the device)
    a.stage_span.assign(size_t(ctx.mesh.pp), 0.0);
    a.stage_span[size_t(ctx.mesh.pp_rank)] = r.pipe * double(ctx.mesh.pp) / ctx.mesh.world;
  }
  r.bubble = st.bubble_s;
  r.p2p_bytes = double(st.p2p_bytes);
  r.fwd += st.fwd_s;
  r.bwd += st.bwd_s;
  r.comm += st.comm_s;
  a.loss_sum += st.loss_sum;
  a.padded += st.padded;
  a.dataset += st.dataset;
  return positions;
}

// Gradient sync, the step agreement and the optimizer update. The gradient norm's local
// reduction is timed as optimizer work, the agreement as comm (and r.agree).
Agreement syncAndUpdate(const TrainContext& ctx, int64_t step, double positions, double elapsed,
                        PhaseTimer& timer, StepRecord& r, Agreement a) {
  const TrainConfig& tc = ctx.tc;
  {
    RECORD_USER_SCOPE("gradient_sync");
    ctx.sync.finishGradients();
  }
  timer.end(r.comm);
  a.grad_sq = ctx.sync.localSquaredNorm();
  timer.end(r.opt);
  a.stop = double(static_cast<int>(stopVote(tc, ctx.world.rank(), elapsed)));
  a.over_memory =
      tc.comm.memory_limit_bytes > 0 && double(peakRssBytes()) > tc.comm.memory_limit_bytes;
  Agreement g = agree(ctx.world, a);
  timer.end(r.comm, &r.agree);
  if (!g.stage_span.empty()) r.makespan = r.pipe;  // at least this rank's own span
  for (double span : g.stage_span) r.makespan = std::max(r.makespan, span);
  const double tp = double(tc.layout.tp);  // tp ranks hold identical data
  r.loss = g.loss_sum / tp / positions;
  r.padded = g.padded / tp;
  r.dataset = g.dataset / tp;
  r.grad_norm = std::sqrt(g.grad_sq);
  r.lr = lrAt(tc, step);
  if (!tc.training.optimizer_in_backward) {  // else every parameter was stepped in backward
    RECORD_USER_SCOPE("optimizer");
    std::vector<torch::Tensor> grads = ctx.sync.gradients();
    if (tc.training.max_grad_norm > 0 && r.grad_norm > tc.training.max_grad_norm)
      scaleGrads(grads, tc.training.max_grad_norm / (r.grad_norm + 1e-6));
    ctx.opt.step(grads, r.lr, ctx.sync.optimizerZeroesGrads());
  }
  ctx.sync.afterOptimizer();
  timer.end(r.opt);
  return g;
}

// Ends the run on every rank alike when the agreement says so (oom, divergence).
void checkStep(const TrainConfig& tc, int64_t step, const StepRecord& r, const Agreement& g) {
  if (g.over_memory > 0)  // some rank is over parallel.memory_limit_gb: every rank ends as oom
    throw OomError(logPrefix() + " " + std::to_string(int(g.over_memory)) + " rank(s) exceeded " +
                   "parallel.memory_limit_gb (" +
                   std::to_string(int64_t(tc.comm.memory_limit_bytes) >> 20) + " MiB) at step " +
                   std::to_string(step) + "; this rank's peak RSS is " +
                   std::to_string(peakRssBytes() >> 20) + " MiB");
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    std::ostringstream os;
    os << logPrefix() << " training diverged at step " << step << " (HDF5 row " << step
       << "): loss " << r.loss << ", grad norm " << r.grad_norm << " at lr " << r.lr
       << "; lower training.lr or set training.max_grad_norm";
    throw TrainingDiverged(os.str());
  }
}

// How step `step` ends, as every rank agreed in `g`.
StepEnd stepEnd(const TrainConfig& tc, int64_t step, const Agreement& g) {
  const auto cmd = static_cast<CtlCommand>(int(g.ctl));
  StepEnd end;
  end.step = step;
  end.stop_ctl = cmd == CtlCommand::kStop;
  end.save_now = cmd == CtlCommand::kSave || end.stop_ctl;
  end.last = step + 1 == tc.training.max_steps || g.stop > 0 || end.stop_ctl;
  if (g.stop >= double(static_cast<int>(
                    StopVote::kSignal))) {  // a signal on some rank (this one may not have seen it)
    end.stop_signal = g_stop_signal.load() != 0 ? g_stop_signal.load() : SIGTERM;
    noteStopSeen();  // this rank's grace deadline starts now if its own signal did not
  }
  end.stop_time = g.stop > 0 && end.stop_signal == 0;
  return end;
}

// Every rank answers the step's control request (after its checkpoint, if any). A reply
// that cannot be written is a warning: control never ends a run by failing.
void replyControl(const std::string& run_dir, const Agreement& g, const StepEnd& end,
                  const StepRecord& r, const StepLog& log, const StepHooks& hooks,
                  const TrainConfig& tc, const Comm& world, int64_t first_step) {
  if (g.ctl == 0 || run_dir.empty()) return;
  CtlReply rep;
  rep.id = int64_t(g.ctl_id);
  rep.rank = world.rank();
  rep.world_size = world.size();
  rep.host = hostName();
  rep.pid = getpid();
  rep.command = ctlCommandName(static_cast<CtlCommand>(int(g.ctl)));
  rep.state = end.last ? RunState::Stopping : RunState::Running;
  rep.steps_done = end.step + 1;
  rep.max_steps = tc.training.max_steps;
  rep.loss = r.loss;
  rep.tokens_per_s = r.total > 0 ? r.dataset / r.total : 0;
  const double per_step = log.elapsed() / double(std::max<int64_t>(1, rep.steps_done - first_step));
  rep.eta_s = end.last ? 0 : per_step * double(tc.training.max_steps - rep.steps_done);
  rep.last_checkpoint = hooks.lastCheckpoint();
  try {
    writeReply(run_dir, rep);
  } catch (const std::exception& e) {
    FTB_WARN("could not answer control request " << rep.id << ": " << e.what());
  }
}

// The default CPU generator (the seeds of LoRA dropout's masks, drawn per forward) starts
// from training.seed: libtorch seeds it at random in every process, so two runs of one
// config would draw different masks, and a GPU run other masks than a CPU run.
void seedDefaultGenerator(int64_t seed) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(static_cast<uint64_t>(seed));
}

// Which transport each process group uses: root attribute `collectives` and one log line.
void recordTransports(const Distributed& dist, MetricsFile& metrics) {
  if (dist.transports.empty()) return;
  std::string all;
  for (const std::string& t : dist.transports) all += (all.empty() ? "" : "; ") + t;
  metrics.setRootAttr("collectives", all);
  if (dist.env.rank == 0) FTB_INFO("collectives: " << all);
}

// training.optimizer_in_backward: the gradient sync hands each final gradient to the
// optimizer at the learning rate of the step running (`step`, read at each call).
void armInBackward(const TrainConfig& tc, GradSync& sync, Optimizer& opt, const int64_t& step) {
  if (!tc.training.optimizer_in_backward) return;
  auto apply = [&tc, &opt, &step](size_t i, const torch::Tensor& g) {
    opt.update(i, g, lrAt(tc, step));
  };
  if (!sync.applyInBackward(apply))
    throw std::logic_error(
        "training.optimizer_in_backward: this layout's gradient sync cannot step inside "
        "backward (run_config.cpp checkOptimizerInBackward should have refused it)");
}

}  // namespace

TrainSummary train(const TrainConfig& tc, const Dataset& ds, Distributed& dist,
                   MetricsFile& metrics, const RunPeaks& peaks, StepHooks* hooks,
                   const std::string& run_dir) {
  Comm& world = *dist.world;
  Mesh mesh = buildMesh(dist, tc);
  recordTransports(dist, metrics);
  ParallelModel pm = parallelize(tc, mesh);
  if (!tc.from_pretrained.empty()) hf::loadPretrained(tc, mesh, *pm.sync);
  if (!tc.lora.from_pretrained.empty()) hf::loadAdapter(tc, mesh, *pm.sync);  // hf/peft_adapter.h
  OptimizerOptions oo{tc.training.optimizer,   tc.training.beta1,
                      tc.training.beta2,       tc.training.eps,
                      tc.training.weight_decay, tc.training.bf16_update,
                      static_cast<uint64_t>(tc.training.seed)};
  std::unique_ptr<Optimizer> opt = tc.training.optimizer_offload == "host"
                                       ? offloadOptimizer(pm.sync->optimizerParams(), oo)
                                       : makeOptimizer(pm.sync->optimizerParams(), oo);
  const FlopsCount flops = trainingFlops(tc.model, tc.lora, tc.data.seq_len);
  if (world.rank() == 0)
    FTB_INFO("model " << tc.model.name << ": " << flops.total_params / 1e6 << " M params, "
                      << flops.trainable_params / 1e6 << " M trained, " << flops.per_token / 1e6
                      << " MFLOP/token (" << flops.formula << "); global batch " << tc.globalBatch()
                      << " x " << tc.data.seq_len << " tokens, world " << world.size());
  TrainContext ctx{tc, world, mesh, pm.model, *pm.sync, *opt, metrics, ds, *pm.runner};
  StepHooks no_hooks;
  if (!hooks) hooks = &no_hooks;
  seedDefaultGenerator(tc.training.seed);
  TrainState state;
  armInBackward(tc, *pm.sync, *opt, state.step);
  hooks->onStart(ctx, state);  // a resume restores the generator's state saved with the step

  installStopSignalHandlers();  // from here on, a signal stops every rank after one step
  StepLog log(tc, metrics, peaks, world.rank(), world.size());
  StepEnd end;
  const int64_t first_step = state.step;
  for (; state.step < tc.training.max_steps; ++state.step) {
    hooks->onStepBegin(ctx, state.step);
    PhaseTimer timer;
    StepRecord r;
    Agreement a;
    const double positions = forwardBackward(ctx, state.step, timer, r, a);
    pollControl(run_dir, world.rank(), a);
    Agreement g = syncAndUpdate(ctx, state.step, positions, log.elapsed(), timer, r, a);
    r.total = timer.elapsed();
    log.record(state.step, r);
    checkStep(tc, state.step, r, g);
    end = stepEnd(tc, state.step, g);
    hooks->onStepEnd(ctx, end);
    replyControl(run_dir, g, end, r, log, *hooks, tc, world, first_step);
    if (g.stop > 0 || end.stop_ctl) break;
  }
  TrainSummary sum = log.finish(world);
  sum.stop_signal = end.stop_signal;
  sum.stopped_by_ctl = end.stop_ctl;
  return sum;
}

}  // namespace ftb
