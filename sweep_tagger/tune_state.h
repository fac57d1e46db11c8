// What `sweep_tagger tune` knows about each point while it runs (tune.cpp) and reports
// (tune_report.cpp). Internal to the two.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/median.h"
#include "common/run_config.h"
#include "common/step_time_model.h"
#include "sweep_tagger/aggregate.h"
#include "sweep_tagger/sweep.h"
#include "sweep_tagger/tune.h"
#include "sweep_tagger/tune_space.h"

namespace ftb {

struct TuneRun {
  int round = 0;
  int64_t steps = 0;
  SweepPoint point;     // the round's point: its tag is the run directory
  RunRow row;           // summarizeRun() after the run
  double wall_s = 0;    // launch to exit (recorded when it ran, also for a reused run)
  bool reused = false;  // completed by an earlier tune
};

struct TuneCandidate {
  SweepPoint point;  // round 0's point without the round's keys: the configuration
  std::string name;  // its axes: "layout=zero3 training.micro_batch_size=4"
  std::optional<TrainConfig> tc;
  MachineFigures fig;  // of its (nodes, nproc_per_node)
  StepPrediction pred;
  double tokens_per_step = 0;  // global padded tokens per optimizer step
  std::string fate;            // why it left the search; "" while in it
  std::vector<TuneRun> runs;
  double predictedTokensPerS(double scale = 1) const {
    return tokens_per_step / pred.total(scale);
  }
  // Its runs of the highest round it reached that completed with a figure.
  std::vector<const TuneRun*> lastRound() const;
  std::optional<double> measuredStepS() const;  // median step p50 of lastRound()
  std::optional<double> measuredTokensPerS() const;  // median dataset tokens/s of lastRound()
  // What the halving rounds rank by: dataset tokens/s scaled to the run's fastest measured
  // steps (x its steps' p90 / p50 tokens/s), median over lastRound(). Interference on a
  // shared machine only slows a step, so a short run's fastest steps tell its speed better
  // than its median; the final ranking uses the medians, as `aggregate --best` does.
  std::optional<double> screenTokensPerS() const;
};

struct TuneState {
  TuneOptions opts;
  TuneSpace space;
  std::vector<TuneCandidate> cands;     // in prediction order after planning
  double machine_s = 0;                 // wall × nodes of every run counted
  std::map<std::string, double> walls;  // earlier tunes' run wall times by tag (walls.tsv)
  int runs_started = 0, runs_reused = 0;
  int last_round = -1;
  bool budget_spent = false;
  std::string ranking;     // bestReport text of the final table
  int winner = -1;         // index into cands
};

// The report, winner.toml and winner.sh under the out dir; returns the report text.
std::string writeTuneReport(const TuneState& s);

}  // namespace ftb
