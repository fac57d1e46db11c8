// A helper process that outlives a SIGKILLed launcher just long enough to kill the process
// groups of its workers. PR_SET_PDEATHSIG reaches only the workers themselves; processes a
// worker starts (data loaders, shells, `sleep`) stay in the worker's process group and
// would otherwise be left under pid 1.
//
// Contract: the constructor forks the reaper. REQUIRES: called while the process has a
// single thread (before MPI_Init), because the reaper keeps running C++ code after fork.
// The reaper runs in its own session (a Ctrl-C on the terminal or a signal to the
// launcher's process group does not reach it) and ignores every catchable signal. The
// launcher registers each worker's process group with add() right after fork and removes
// it with remove() once the leader is reaped and the group SIGKILLed. When the pipe to the
// reaper reaches EOF -- the launcher exited, normally or by SIGKILL -- the reaper sends
// SIGKILL to every group still registered and exits.
// Invariant: a group is registered only while its id cannot be reused (the leader or a
// member still exists), so the reaper never signals an unrelated process group.
// endMpiDaemonsAfterExit() arms one more duty for after that EOF: the Open MPI daemons
// above the launcher (mpi_daemons.h) still up kEndDaemonsWaitS later are ended, so a job
// whose launchers aborted behind a cut link does not keep mpirun and orted for minutes.
// Limit: a descendant that leaves the group (setsid/setpgid, e.g. a daemon) escapes; on
// SLURM the job's cgroup still ends it (proctrack/cgroup), elsewhere it is left behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "launcher/process.h"

namespace ftb::launcher {

// After its launcher exited, how long the reaper lets armed MPI daemons end by themselves
// (an MPI_Abort that reaches every node ends them within about a second).
inline constexpr double kEndDaemonsWaitS = 10.0;

class Reaper {
 public:
  Reaper();   // throws DistError if pipe or fork fails
  ~Reaper();  // closes the pipe: the reaper kills what is still registered and exits
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  void add(pid_t pgid) { send('+', pgid); }
  void remove(pid_t pgid) { send('-', pgid); }
  // Called on the way to MPI_Abort. Returns what it armed ("" when no daemon is above).
  std::string endMpiDaemonsAfterExit();
  pid_t pid() const { return pid_; }

 private:
  void send(char op, pid_t pgid, uint64_t start_time = 0);
  Fd pipe_;  // write end, O_CLOEXEC (workers close it before execve as well)
  pid_t pid_ = -1;
  bool warned_ = false;
};

}  // namespace ftb::launcher
