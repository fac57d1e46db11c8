// The training loop's checkpoint hooks (StepHooks, trainer/loop/hooks.h): restore before the
// first step, save after a step when due.
//
// Contract: onStart() (collective) loads the planned checkpoint into the live model,
// gradient-sync shards and optimizer and sets the loop's next step; without a plan it
// does nothing. Before any tensor is read, every rank checks the plan against its pieces
// (Checkpointer::loadProblem). One that does not fit: with checkpoint.resume = PATH,
// ConfigError (exit 2); with "auto", a warning and the newest older checkpoint that fits
// (Checkpointer::fallBackFrom), or step 0 when none does; the metrics file's resume point
// moves with it (MetricsFile::moveResumePoint). onStepEnd() (collective; every rank sees the same
// StepEnd) flushes the metrics file, then saves after step end.step + 1 steps when
// checkpoint.interval divides it, when end.last (the last step, a stop_after_seconds stop, a stop
// signal: preemption, `launcher ctl stop`) or when end.save_now (`launcher ctl save`). Every rank
// makes the same decision, so the save's collectives match. With checkpoint.save_final = false,
// end.last saves only for a stop signal (preemption; `launcher ctl stop` sets save_now).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "trainer/checkpoint/checkpointer.h"
#include "trainer/loop/hooks.h"

namespace ftb {

class CheckpointHook final : public StepHooks {
 public:
  CheckpointHook(const TrainConfig& tc, std::optional<ResumePoint> plan,
                 std::unique_ptr<Checkpointer> saver, int rank);

  void onStart(TrainContext& ctx, TrainState& state) override;
  void onStepEnd(TrainContext& ctx, const StepEnd& end) override;

  const std::string& lastSaved() const { return last_dir_; }  // "" when none
  // The checkpoint saved last, else the one resumed from, else "".
  std::string lastCheckpoint() const override {
    return !last_dir_.empty() ? last_dir_ : plan_ ? plan_->dir : "";
  }
  // Any thread (the stop watchdog, trainer/session.cpp): Checkpointer::abandon(), and the
  // resume point it leaves: the newest checkpoint saved, else the one resumed from, else "".
  std::string abandon() {
    std::string saved = saver_->abandon();
    return !saved.empty() ? saved : plan_ ? plan_->dir : "";
  }
  bool saving() const { return saver_->saving(); }  // any thread

 private:
  // Collective: see the contract above (plan_ may change, or become nullopt).
  void checkPlanFits(TrainContext& ctx, const std::vector<ckpt::StatePiece>& pieces);

  const TrainConfig& tc_;
  std::optional<ResumePoint> plan_;
  std::unique_ptr<Checkpointer> saver_;
  int rank_;
  int64_t last_saved_ = -1;
  std::string last_dir_;
};

}  // namespace ftb
