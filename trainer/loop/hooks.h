// The seam between the training loop (loop/train.h) and the work it does at step
// boundaries: the loop's context, where it (re)starts, how each step ended, and the hooks
// called around each step (the checkpoint hook, loop/checkpoint_hook.h; the profiler,
// loop/profiler.h).
//
// Contract: every rank calls each hook at the same point with the same StepEnd (hooks may
// run collectives over ctx.mesh / ctx.world). Exceptions propagate out of train().
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/h5_metrics.h"
#include "common/run_config.h"
#include "trainer/comm/comm.h"
#include "trainer/data/dataset.h"
#include "trainer/model/llama.h"
#include "trainer/optim/optimizer.h"
#include "trainer/parallel/grad_sync.h"
#include "trainer/parallel/mesh.h"
#include "trainer/parallel/step_runner.h"

namespace ftb {

// Where the loop (re)starts. Invariant: `step` is the index of the next step to run;
// the data position and learning rate derive from it.
struct TrainState {
  int64_t step = 0;
};

// The loop's collaborators, built once by train(); what the step functions and the step
// hooks read and modify. Valid for the duration of train().
struct TrainContext {
  const TrainConfig& tc;
  Comm& world;  // all ranks: the step agreement
  Mesh& mesh;
  Transformer& model;
  GradSync& sync;  // sync.optimizerParams(): the tensors the optimizer updates
  Optimizer& opt;
  MetricsFile& metrics;
  const Dataset& ds;
  StepRunner& runner;  // forward and backward of a step's micro-batches (parallel/step_runner.h)
};

// The end of one step, as every rank agreed in the step's all-reduce.
struct StepEnd {
  int64_t step = 0;        // 0-based index of the step just completed
  bool last = false;       // no further step runs (max_steps reached, or stopping)
  int stop_signal = 0;     // a signal on some rank stops the run after this step (else 0)
  bool stop_time = false;  // training.stop_after_seconds reached
  bool save_now = false;   // `launcher ctl save|stop`: checkpoint after this step
  bool stop_ctl = false;   // `launcher ctl stop`: last is true, the run ends as preempted
};

// Work at step boundaries (checkpoints, traces). Every rank calls each hook at the same
// point (hooks may run collectives over ctx.mesh / ctx.world). Exceptions propagate out of
// train().
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // Once, after model, gradient sync and optimizer are built and before the first
  // step: may restore their state and set state.step (then call ctx.sync.paramsLoaded()).
  virtual void onStart(TrainContext& ctx, TrainState& state) { (void)ctx, (void)state; }
  // Before step `step` reads its data (no collective may run here).
  virtual void onStepBegin(TrainContext& ctx, int64_t step) { (void)ctx, (void)step; }
  // After each step's optimizer update and metrics row, before the next step: the model
  // and optimizer hold the state after step end.step (resume at end.step + 1).
  virtual void onStepEnd(TrainContext& ctx, const StepEnd& end) { (void)ctx, (void)end; }
  // The newest checkpoint this run saved or resumed from ("" when none): for ctl replies.
  virtual std::string lastCheckpoint() const { return ""; }
};

// Runs several hooks in the order given; ignores null entries. The session gives the
// profiler first, then the checkpoint hook, so a save after step b is outside the trace.
class HookList final : public StepHooks {
 public:
  explicit HookList(std::vector<StepHooks*> hooks) : hooks_(std::move(hooks)) {}
  void onStart(TrainContext& ctx, TrainState& state) override;
  void onStepBegin(TrainContext& ctx, int64_t step) override;
  void onStepEnd(TrainContext& ctx, const StepEnd& end) override;
  // The first non-empty answer of the hooks, in order.
  std::string lastCheckpoint() const override;

 private:
  std::vector<StepHooks*> hooks_;
};

}  // namespace ftb
