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
// Limit: a descendant that leaves the group (setsid/setpgid, e.g. a daemon) escapes; on
// SLURM the job's cgroup still ends it (proctrack/cgroup), elsewhere it is left behind.
#pragma once

#include <sys/types.h>

#include "launcher/process.h"

namespace ftb::launcher {

class Reaper {
 public:
  Reaper();   // throws DistError if pipe or fork fails
  ~Reaper();  // closes the pipe: the reaper kills what is still registered and exits
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  void add(pid_t pgid) { send('+', pgid); }
  void remove(pid_t pgid) { send('-', pgid); }
  pid_t pid() const { return pid_; }

 private:
  void send(char op, pid_t pgid);
  Fd pipe_;  // write end, O_CLOEXEC (workers close it before execve as well)
  pid_t pid_ = -1;
  bool warned_ = false;
};

}  // namespace ftb::launcher
