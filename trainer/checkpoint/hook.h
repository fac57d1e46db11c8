// The training loop's view of checkpointing: restore before the first step, save
// after a step when due.
//
// Contract: restore() (collective) loads the planned checkpoint into the live model,
// ZeRO shards and optimizer, and returns the loop position; without a plan it returns
// {0, 0}. saveIfDue() (collective; every rank passes the same arguments) saves after
// `steps_done` steps when checkpoint.interval divides it, or when `final` (the last
// step, a stop_after_seconds stop, or a preemption stop). Every rank makes the same
// decision, so the save's collectives match.
#pragma once

#include <optional>
#include <string>

#include "trainer/checkpoint/checkpointer.h"

namespace ftb {

struct LoopPosition {
  int64_t step = 0;         // steps already done
  int64_t next_sample = 0;  // global index of the first sample of step `step`
};

class CheckpointHook {
 public:
  CheckpointHook(const TrainConfig& tc, std::optional<ResumePoint> plan,
                 std::unique_ptr<Checkpointer> saver)
      : tc_(tc), plan_(std::move(plan)), saver_(std::move(saver)) {}

  LoopPosition restore(TransformerImpl& model, ZeroEngine* zero, Optimizer& opt, int64_t tp_rank,
                       int rank);
  bool due(int64_t steps_done, bool final) const {
    const int64_t every = tc_.checkpoint.interval;
    return steps_done != last_saved_ && (final || (every > 0 && steps_done % every == 0));
  }
  // Returns the directory written, "" when no save was due.
  std::string saveIfDue(int64_t steps_done, int64_t next_sample, bool final,
                        TransformerImpl& model, ZeroEngine* zero, Optimizer& opt,
                        int64_t tp_rank, int rank);
  const Checkpointer& saver() const { return *saver_; }

 private:
  const TrainConfig& tc_;
  std::optional<ResumePoint> plan_;
  std::unique_ptr<Checkpointer> saver_;
  int64_t last_saved_ = -1;
};

}  // namespace ftb
