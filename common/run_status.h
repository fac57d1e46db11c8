// State of a run directory, as recorded by the trainer in rank 0's HDF5 file.
//
// Contract: runState() never throws and never blocks. It returns Held while a run
// holds the directory's run.lock (see run_lock.h), else the /status `state` attribute of
// <run_dir>/metrics/rank_00000.h5 (a recorded RunState: running|completed|failed|oom|
// preempted|invalid), Missing when that file does not exist, or Corrupt when it cannot
// be read (an unknown state included).
#pragma once

#include <optional>
#include <string>

#include "common/run_state.h"

namespace ftb {

RunState runState(const std::string& run_dir);

// How many nodes the run in `run_dir` ran on: run.toml's "# nodes = N" header (written
// since the node count is part of the run identity), else, for a directory written
// before, the highest node_rank attribute of its metrics files + 1; nullopt when neither
// can be read. Never throws; opens regular files only.
std::optional<int> runNodes(const std::string& run_dir);

}  // namespace ftb
