// The search space of `sweep_tagger tune`: a sweep file (sweep.h: base, [grid], layouts,
// global_batch_size, nodes, nproc_per_node) whose axes are the space, plus two tables:
//
//   [machines]
//   memory = "24GiB"          # per device (rank): a size or a device type (h100, rtx4090);
//                             #   points the estimator says do not fit are pruned
//   price_per_hour = 2.5      # $ per device-hour (cost column; optional)
//   launch = ["mpirun", "-np", "1", "--host", "a", "{node}", ":", "-np", "1", "--host",
//             "b", "{node}"]  # how one run starts; every "{node}" is replaced by one
//                             #   node's command (launcher ... -- trainer ...). Default
//                             #   ["{node}"]: one launcher on this machine.
//   [tune]
//   first_steps = 4           # steps of a first-round run (the first skip_steps unmeasured,
//                             #   at least one measured)
//   skip_steps = 1            # metrics.skip_first_steps of the rounds before the last (the
//                             #   last round's runs keep the base's, as an exhaustive sweep's)
//   eta = 3                   # each round keeps the best 1/eta and gives them eta× the steps
//   final_steps = 8           # steps of the last round (default: the base's max_steps)
//   model_keep = 1.5          # points the model predicts slower than this × the best
//                             #   prediction are set aside unmeasured
//   max_repeats = 3           # runs of each finalist at most, until the winner is beyond noise
//   run_timeout_s = 900       # one run's deadline (SIGTERM, then SIGKILL 30 s later)
//
// Contract: loadTuneSpace() reads the sweep part with loadSweep() and the two tables; an
// unknown key, a wrong type or a value out of range is a ConfigError naming the file, line
// and key (exit 2). `scripts/sweep.sh SPACE.toml` runs the same file as an exhaustive sweep.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sweep_tagger/sweep.h"

namespace ftb {

struct TuneSettings {
  int64_t first_steps = 4, skip_steps = 1, eta = 3, final_steps = 0, max_repeats = 3;
  int64_t final_skip_steps = 0;  // the base's metrics.skip_first_steps (read, not a [tune] key)
  double model_keep = 1.5, run_timeout_s = 900;
};

struct TuneSpace {
  SweepSpec sweep;                  // memory_budget set from [machines] memory
  std::vector<std::string> launch;  // argv with "{node}" words
  std::optional<double> price_per_hour;
  TuneSettings settings;
};

// overrides: "key=value" for every point (SweepSpec::overrides), before final_steps reads
// the base's training.max_steps.
TuneSpace loadTuneSpace(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace ftb
