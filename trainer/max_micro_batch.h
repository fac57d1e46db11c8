// `trainer --max-micro-batch`: the largest training.micro_batch_size of a config and
// layout whose real run fits a per-rank memory budget.
//
// Contract:
// - Budget B: parallel.memory_limit_gb when set, else memoryBudget() (node memory shared
//   by the ranks of one node). Safety margin m (--safety-margin, default 0.10): a size
//   fits when the measured peak RSS of every rank is at most (1 - m) × B, leaving m of
//   the budget for what a short run does not show (longer sequences of real data,
//   allocator growth over hours).
// - Search: the estimator (estimateMemory) gives the largest size whose estimate is at
//   most (1 - m) × B (sizes 1..kMaxSearch). Real runs then confirm it: each try runs
//   the trainer itself (/proc/self/exe) as world_size local ranks for `try_steps` steps
//   in a scratch directory under output.dir (parallel.memory_limit_gb = 0 there, so the
//   run is measured, not refused by the estimate; no checkpoint), and reads the peak RSS
//   (peak_rss_bytes, VmHWM, max over ranks) from its metrics files. The first try's
//   measured peak minus its estimate corrects the estimator for a second guess (the
//   estimate omits allocator and library overhead); from there the search gallops up or
//   down, then interpolates and bisects until it holds a size that fits and the next size up that
//   does not, both measured. A try that ends `oom`, or is killed (e.g. by the kernel's OOM killer),
//   does not fit; any other failure stops the search with the try's log. Every try is bounded by
//   `try_timeout_s`, and a stop signal (SIGTERM, SIGINT) ends the search: the running try is killed
//   and the search fails.
// - Output (stdout): the budget and margin, each try (estimate, measured peak, verdict),
//   and the answer. Returns 0 with an answer, 1 when even size 1 does not fit; a try
//   that failed otherwise, timed out or was stopped throws IoError (exit 4).
#pragma once

#include <string>
#include <vector>

#include "common/config.h"
#include "common/run_config.h"

namespace ftb {

struct MaxMicroBatchOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // the user's, before the search's own
  double safety_margin = 0.10;
  int try_steps = 3;
  double try_timeout_s = 900;
};

inline constexpr int64_t kMaxSearch = 1 << 16;

// Largest micro-batch in [1, kMaxSearch] whose estimate (tc with that size) is at most
// `limit_bytes`; 0 when size 1 is over it. Pure (the estimator is arithmetic).
int64_t largestEstimatedFit(const TrainConfig& tc, double limit_bytes);

int runMaxMicroBatch(const MaxMicroBatchOptions& opts, const TrainConfig& tc, int local_ranks);

}  // namespace ftb
