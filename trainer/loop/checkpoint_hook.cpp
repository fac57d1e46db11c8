#include "trainer/loop/checkpoint_hook.h"

#include "common/error.h"
#include "common/log.h"
#include "trainer/loop/stop.h"
#include "trainer/metrics/perf.h"
#include "trainer/model/linear.h"

namespace ftb {

CheckpointHook::CheckpointHook(const TrainConfig& tc, std::optional<ResumePoint> plan,
                               std::unique_ptr<Checkpointer> saver, int rank)
    : tc_(tc), plan_(std::move(plan)), saver_(std::move(saver)), rank_(rank) {
  saver_->setStopSeen([] { return g_stop_seen_ns.load() != 0; });
}

void CheckpointHook::checkPlanFits(TrainContext& ctx, const std::vector<ckpt::StatePiece>& pieces) {
  auto fits = [&pieces](const ResumePoint& rp) { return Checkpointer::loadProblem(rp, pieces); };
  const std::string problem = saver_->agreedProblem("ckpt/fits", fits(*plan_));
  if (problem.empty()) return;
  if (tc_.checkpoint.resume != "auto")
    throw ConfigError("checkpoint.resume", "",
                      "checkpoint " + plan_->dir + " does not fit this model: " + problem,
                      "pick another step_N directory, or checkpoint.resume=auto to take the "
                      "newest usable one");
  if (rank_ == 0)
    FTB_WARN("skipping checkpoint " << plan_->dir << ", it does not fit this model: " << problem);
  plan_ = saver_->fallBackFrom(*plan_, tc_, fits);
  ctx.metrics.moveResumePoint(plan_ ? std::optional<int64_t>(plan_->manifest.state.at("step"))
                                    : std::nullopt);
  if (!plan_ && rank_ == 0) FTB_WARN("no usable checkpoint left: starting from step 0");
}

void CheckpointHook::onStart(TrainContext& ctx, TrainState& state) {
  if (!plan_) return;
  const double t0 = nowSeconds();
  std::vector<ckpt::StatePiece> pieces =
      ckpt::collectState(ctx.sync, ctx.opt, ctx.mesh.tp_rank, ctx.mesh.tp, rank_);
  checkPlanFits(ctx, pieces);  // before any tensor is read; may fall back to an older plan
  if (!plan_) return;
  std::map<std::string, int64_t> st;
  int64_t bytes = 0;
  try {
    st = saver_->load(*plan_, pieces, &bytes);
  } catch (const CheckpointError& e) {  // verified before: the files changed under us
    throw IoError(logPrefix() + " loading checkpoint " + plan_->dir + ": " + e.what());
  }
  ctx.sync.paramsLoaded();
  ctx.opt.setStepCount(st.at("optimizer_step"));
  state.step = st.at("step");
  last_saved_ = state.step;
  const CkptLayout& l = plan_->manifest.layout;
  const double secs = nowSeconds() - t0;
  if (rank_ == 0)
    FTB_INFO("resumed from " << plan_->dir << " (step " << state.step << ", saved with world "
                             << l.world << ", zero_stage " << l.zero_stage << ", tp " << l.tp
                             << ") in " << secs << " s");
  // One line per rank, parsed by scripts/bench_ckpt_report.py.
  FTB_INFO("checkpoint load: rank " << rank_ << " read " << bytes << " bytes in " << secs << " s");
}

void CheckpointHook::onStepEnd(TrainContext& ctx, const StepEnd& end) {
  const int64_t done = end.step + 1, every = tc_.checkpoint.interval;
  const bool final_due = end.last && (tc_.checkpoint.save_final || end.stop_signal != 0);
  if (done == last_saved_ || !(final_due || end.save_now || (every > 0 && done % every == 0)))
    return;
  ctx.metrics.flush();  // rows up to the checkpoint are on disk before it exists
  std::vector<ckpt::StatePiece> pieces =
      ckpt::collectState(ctx.sync, ctx.opt, ctx.mesh.tp_rank, ctx.mesh.tp, rank_);
  std::map<std::string, int64_t> st{{"next_sample", done * tc_.globalBatch()},
                                    {"optimizer_step", ctx.opt.stepCount()},
                                    {"global_batch", tc_.globalBatch()},
                                    // how fp32 projections rounded (a resume keeps it)
                                    {"fp32_gemm_openblas", fp32Gemm() == Fp32Gemm::kOpenBlas}};
  last_dir_ = saver_->save(done, pieces, st);
  last_saved_ = done;
  if (rank_ == 0)
    FTB_INFO("checkpoint " << last_dir_ << " saved in " << saver_->lastSaveSeconds() << " s ("
                           << saver_->lastSaveBytes() << " bytes on rank 0)");
  // One line per rank, parsed by scripts/bench_ckpt_report.py.
  FTB_INFO("checkpoint save: rank " << rank_ << " wrote " << saver_->lastSaveBytes() << " bytes in "
                                    << saver_->lastWriteSeconds()
                                    << " s (serialize, write, fsync, checksum); whole save "
                                    << saver_->lastSaveSeconds() << " s");
}

}  // namespace ftb
