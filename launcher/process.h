// Worker processes: fork/execve (never a shell), each in its own process group, killed by
// the kernel if the launcher dies (PR_SET_PDEATHSIG = SIGKILL).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/fd.h"

namespace ftb::launcher {

struct PipeFds {
  Fd read;   // O_CLOEXEC | O_NONBLOCK
  Fd write;  // O_CLOEXEC (dup2'ed into the child, which clears it)
};
PipeFds makePipe();

// Opens /dev/null on whichever of fds 0, 1, 2 is closed, so that no pipe the launcher
// creates later can land there (the child dup2()s onto them).
void ensureStdFds();

// Resolves PROGRAM like execvp would (names with '/' are taken as paths). Throws
// ConfigError("PROGRAM") when nothing executable is found.
std::string resolveProgram(const std::string& name, const std::string& path_env);

struct SpawnRequest {
  std::string path;               // resolved executable
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::vector<std::string> env;   // complete environment, "K=V"
  std::vector<int> cpus;          // empty: keep the launcher's affinity
  int stdout_fd = -1;             // become the child's fd 1 / 2; stdin is /dev/null
  int stderr_fd = -1;
  const sigset_t* mask = nullptr;  // signal mask to restore in the child
};

// A started worker. Owns its pid until reaped; the destructor SIGKILLs the process group
// and reaps the leader, so no exit path of the launcher leaves a worker behind.
class WorkerProcess {
 public:
  explicit WorkerProcess(const SpawnRequest& req);  // forks; throws DistError if fork fails
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Blocks until the child has exec'd or failed to, at most until `deadline`.
  // Returns "" on success, else what failed ("execve: Permission denied"). Throws
  // DistError on timeout.
  std::string waitExec(std::chrono::steady_clock::time_point deadline);
  bool running() const { return running_; }
  // waitpid(WNOHANG | WUNTRACED | WCONTINUED). Returns true when the worker has exited (now
  // or before). A stop (SIGSTOP, SIGTSTP, ...) or a continue it sees is recorded below.
  bool tryReap();
  // While the worker is stopped (as of the last tryReap()): the stop signal and when
  // tryReap() first saw it (CLOCK_REALTIME, us); 0 while it runs.
  int stopSignal() const { return stopped_since_us_ ? stop_signal_ : 0; }
  int64_t stoppedSinceUs() const { return stopped_since_us_; }
  int exitCode() const { return exit_code_; }  // valid after exit, when termSignal() == 0
  int termSignal() const { return term_signal_; }
  // kill(-pgid, sig); harmless after exit (remaining group members get it).
  void signalGroup(int sig) const;

 private:
  pid_t pid_ = -1;
  Fd exec_status_;  // read end; EOF = exec succeeded, 4 bytes = errno of the failure
  bool running_ = true;
  int exit_code_ = 0;
  int term_signal_ = 0;
  int stop_signal_ = 0;
  int64_t stopped_since_us_ = 0;
};

}  // namespace ftb::launcher
