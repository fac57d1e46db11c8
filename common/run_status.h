// State of a run directory, as recorded by the trainer in rank 0's HDF5 file.
//
// Contract: runState() never throws and never blocks. It returns "held" while a run
// holds the directory's run.lock (see run_lock.h), else the /status `state` attribute of
// <run_dir>/metrics/rank_00000.h5 (running|completed|failed|oom|preempted|invalid),
// "missing" when that file does not exist, or "corrupt" when it cannot be read.
#pragma once

#include <string>

namespace ftb {

std::string runState(const std::string& run_dir);

}  // namespace ftb
