// The states of a run, with their one string table (docs/architecture.md § Run states).
//
// The names are the on-disk spelling: the HDF5 /status `state` attribute, the ctl reply's
// `state`, aggregate's status column and `sweep_tagger expand --pending`'s state column.
// Do not rename one: h5py readers and run directories written before rely on them.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

namespace ftb {

enum class RunState {
  // Recorded in a rank's HDF5 /status (isRecorded):
  Running,    // started, no final status yet
  Completed,  // every step done
  Failed,     // an error (exit code 1, 3, 4, 6 ...)
  Oom,        // out of memory, or the memory estimate is above metrics.memory_limit_bytes
  Preempted,  // stopped by a signal or `launcher ctl stop`
  Invalid,    // bad input (exit 2)
  // A live run's ctl reply only: the last step is done and the run is closing.
  Stopping,
  // Derived by readers of a run directory (runState(), aggregate), never recorded:
  Held,     // another process holds the directory's run.lock
  Missing,  // no metrics file: not started
  Corrupt,  // a metrics file that cannot be read, or whose numbers are insane
  Killed,   // a rank still says running but no file changed for stale_seconds
  Partial,  // every file says completed, but fewer rank files than world_size
};

// The state's name, e.g. "completed". Every enumerator has one.
const std::string& toString(RunState s);

// The state named `name`, nullopt for an unknown name.
std::optional<RunState> tryParseRunState(std::string_view name);

// The state named `name`. An unknown name throws std::invalid_argument naming it and
// the valid names: "unknown run state 'done' (expected one of running, completed, ...)".
RunState parseRunState(std::string_view name);

// True for the states a run records in its HDF5 /status (running ... invalid).
bool isRecorded(RunState s);

// The names of the recorded states, "running|completed|failed|oom|preempted|invalid".
std::string recordedStateNames();

std::ostream& operator<<(std::ostream& os, RunState s);

}  // namespace ftb
