// State of a run directory, as recorded by the trainer in rank 0's HDF5 file.
//
// Contract: runState() never throws and never blocks. It returns "held" while a run
// holds the directory's run.lock (see run_lock.h), else the /status `state` attribute of
// <run_dir>/metrics/rank_00000.h5 (running|completed|failed|oom|preempted|invalid),
// "missing" when that file does not exist, or "corrupt" when it cannot be read.
#pragma once

#include <optional>
#include <string>

namespace ftb {

std::string runState(const std::string& run_dir);

// How many nodes the run in `run_dir` ran on: run.toml's "# nodes = N" header (written
// since the node count is part of the run identity), else, for a directory written
// before, the highest node_rank attribute of its metrics files + 1; nullopt when neither
// can be read. Never throws; opens regular files only.
std::optional<int> runNodes(const std::string& run_dir);

}  // namespace ftb
