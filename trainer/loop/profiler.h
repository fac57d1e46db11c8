// metrics.profile_steps = [a, b]: a Chrome trace of training steps a..b (0-based,
// inclusive) per rank, from libtorch 1.13's autograd profiler (the legacy CPU profiler:
// Debian's libtorch has no usable Kineto), written to <run_dir>/traces/rank_NNNNN.json.
//
// Contracts:
// - The trace is a JSON object {"traceEvents": [...], ...} (chrome://tracing and
//   Perfetto both read it): one complete ("X") event per recorded range, with ts/dur in
//   microseconds, pid = the rank, tid = the recording thread; metadata events name the
//   process "rank R (host)".
// - Recorded on the training thread: every aten op, autograd node, and the named
//   ranges forward, backward, optimizer, data, and one per collective wait (the name is
//   the collective: "allreduce(sum)", "allgather", "reduce_scatter", ...).
// - Written once, when step b ends or when the run ends earlier (stop signal,
//   max_steps, divergence): a partial window is written, and the trace says which
//   steps it holds ("ftbench": {"first_step", "last_step"}). Written to a .tmp file
//   and renamed, so a reader never sees half a trace.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/loop/hooks.h"

namespace ftb {

class StepProfiler final : public StepHooks {
 public:
  // `steps` is TrainConfig::profile_steps ({} = off); the trace goes to `path`.
  StepProfiler(std::vector<int64_t> steps, std::string path, int rank);
  ~StepProfiler() override;  // writes a window still open (the run ended in it)
  void onStepBegin(TrainContext& ctx, int64_t step) override;
  void onStepEnd(TrainContext& ctx, const StepEnd& end) override;
  // Whether a trace was written, and where.
  const std::string& written() const { return written_; }

 private:
  void start(int64_t step);
  void stop(int64_t last_step);
  std::vector<int64_t> steps_;
  std::string path_, written_;
  int rank_ = 0;
  bool recording_ = false;
  int64_t first_ = -1, last_done_ = -1;  // steps recorded so far
};

// <run_dir>/traces/rank_NNNNN.json
std::string tracePath(const std::string& run_dir, int rank);

}  // namespace ftb
