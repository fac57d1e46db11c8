// The Open MPI daemons that started this launcher, and how to end them when the job cannot
// end by itself. After a cut link, MPI_Abort reaches mpirun, but mpirun then waits for the
// daemon (orted) behind the cut, and that orted for mpirun: Open MPI 4.1 keeps both up for
// minutes after every rank and launcher is gone. The reaper (reaper.h) uses this to end
// them after a bound.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ftb::launcher {

struct MpiDaemon {
  pid_t pid = 0;
  uint64_t start_time = 0;  // /proc/PID/stat field 22: tells a reused pid apart
  bool head = false;        // mpirun/mpiexec/orterun/prterun (else orted/prted)
  std::string name;
};

// The nearest orted/prted above `pid` (this node's daemon) and the nearest
// mpirun/mpiexec/orterun/prterun (the job's head, when it runs on this machine), found by
// walking the parent chain in /proc; empty outside Open MPI (srun, no MPI).
std::vector<MpiDaemon> mpiDaemonsAbove(pid_t pid);

// "name (pid N)" of each, comma separated.
std::string describeDaemons(const std::vector<MpiDaemon>& daemons);

// Waits until every daemon has exited or `wait_s` passed, then ends the rest: mpirun gets
// SIGTERM twice 0.5 s apart (Open MPI forces its exit at the second), an orted SIGTERM;
// whatever is left 2 s later, SIGKILL. A pid whose start time changed is another process and
// is left alone. Returns how many were ended.
int endMpiDaemons(const std::vector<MpiDaemon>& daemons, double wait_s);

}  // namespace ftb::launcher
