// `sweep_tagger tune SPACE.toml RESULTS_DIR`: the fastest configuration of a search space
// (tune_space.h) found with a fraction of an exhaustive sweep's runs.
//
// Contract of runTune():
// 1. Prune: every point the trainer refuses, that the estimator says does not fit
//    [machines] memory, or that needs more nodes than `launch` starts, with the reason.
// 2. Model: the machines' figures come from `trainer --probe` run once per (nodes, ranks
//    per node) through the same launch as the runs (cached in RESULTS_DIR/.tune/), or from
//    --gemm-tflops / --link-GBps. Every remaining point gets predictStep()
//    (common/step_time_model.h) and the predicted global tokens/s; points predicted
//    slower than the best prediction / model_keep are set aside unmeasured, with the
//    prediction and its largest term. With --dry-run it stops here.
// 3. Measure (successive halving): round 0 runs every kept point for first_steps steps;
//    each next round keeps the best ceil(n / eta) by measured dataset tokens/s (at least
//    two while two are measured) and runs them for eta× the steps, up to final_steps.
//    The finalists (the last round) then gain repeats (sweep.repeat = 1, 2, ...) of the
//    top two until the ranking (compare.h bestReport) says the winner is beyond noise
//    or each has max_repeats runs.
//    Every run is an ordinary run directory of RESULTS_DIR (training.max_steps = the
//    round's steps, metrics.skip_first_steps = skip_steps, or the base's in the last
//    round, as an exhaustive sweep's runs, no final checkpoint): a
//    completed one is reused, so an interrupted tune resumes where it stopped, and
//    `aggregate RESULTS_DIR` reads them. A run that fails drops its point with the status.
//    With --budget-minutes, no run starts once the runs' machine time (wall time × nodes)
//    exceeds it; the ranking then uses the last round reached.
// 4. Report (RESULTS_DIR/tune/ or --out): report.md (figures, pruned and set-aside
//    points, every point's prediction, every measurement with the model's prediction and
//    error, the ranking, the winner, the machine time), winner.toml (the winner's
//    resolved run config, which `trainer --config` takes as is) and winner.sh (its
//    launcher line and sbatch command). The report is also printed.
// Model error: for each measured point, its latest round's step time p50 against the
// prediction with compute_scale fitted (median of (measured − comm) / (compute + bubble))
// on the other measured points (leave one out), and against compute_scale 1; the
// report gives both medians of |predicted / measured − 1|.
// Exit: 0 with a winner (or a dry run), 1 when no point could be measured, 2 bad input.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ftb {

struct TuneOptions {
  std::string space, results_dir;
  std::string out_dir;                 // "" = <results_dir>/tune
  std::vector<std::string> overrides;  // key=value for every point
  double budget_minutes = 0;           // 0 = none
  bool dry_run = false;
  std::optional<double> gemm_flops, busbw_Bps;  // figures given instead of the probe
  std::string build_dir;                        // holds launcher/launcher, trainer/trainer
};

struct TuneResult {
  int exit_code = 0;
  std::string report;
};

TuneResult runTune(const TuneOptions& o);

}  // namespace ftb
