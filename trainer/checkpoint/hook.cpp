#include "trainer/checkpoint/hook.h"

#include "common/error.h"
#include "common/log.h"
#include "trainer/metrics/perf.h"

namespace ftb {

LoopPosition CheckpointHook::restore(TransformerImpl& model, ZeroEngine* zero, Optimizer& opt,
                                     int64_t tp_rank, int rank) {
  if (!plan_) return {};
  const double t0 = nowSeconds();
  std::vector<ckpt::StatePiece> pieces = ckpt::collectState(model, zero, opt, tp_rank, rank);
  std::map<std::string, int64_t> st;
  try {
    st = saver_->load(*plan_, pieces);
  } catch (const CheckpointError& e) {  // verified before: the files changed under us
    throw IoError(logPrefix() + " loading checkpoint " + plan_->dir + ": " + e.what());
  }
  if (zero) zero->afterLoad();
  opt.setStepCount(st.at("optimizer_step"));
  LoopPosition pos{st.at("step"), st.at("next_sample")};
  last_saved_ = pos.step;
  if (rank == 0)
    FTB_INFO("resumed from " << plan_->dir << " (step " << pos.step << ", saved with world "
                             << plan_->manifest.layout.world << ", zero_stage "
                             << plan_->manifest.layout.zero_stage << ", tp "
                             << plan_->manifest.layout.tp << ") in " << nowSeconds() - t0 << " s");
  return pos;
}

std::string CheckpointHook::saveIfDue(int64_t steps_done, int64_t next_sample, bool final,
                                      TransformerImpl& model, ZeroEngine* zero, Optimizer& opt,
                                      int64_t tp_rank, int rank) {
  if (!due(steps_done, final)) return "";
  std::vector<ckpt::StatePiece> pieces = ckpt::collectState(model, zero, opt, tp_rank, rank);
  std::map<std::string, int64_t> st{{"next_sample", next_sample},
                                    {"optimizer_step", opt.stepCount()},
                                    {"global_batch", tc_.globalBatch()}};
  std::string dir = saver_->save(steps_done, pieces, st);
  last_saved_ = steps_done;
  if (rank == 0)
    FTB_INFO("checkpoint " << dir << " saved in " << saver_->lastSaveSeconds() << " s ("
                           << saver_->lastSaveBytes() << " bytes on rank 0)");
  return dir;
}

}  // namespace ftb
