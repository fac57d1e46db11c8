// Runs one attempt on this node: spawns the local workers, forwards signals, pumps their
// output, and stops them all (SIGTERM, SIGKILL after --grace) as soon as any worker on any
// node fails or a shutdown signal arrives.
//
// Contract: run() returns only when every local worker has been reaped (or abandoned after
// SIGKILL + kKillWaitS, which is logged), with this node's NodeEnd. A local failure is
// announced to every other node with a STOP message before the local stop begins. A worker
// found stopped (SIGSTOP/SIGTSTP, seen by waitpid) when a failure stop begins is recorded as
// a failure at the time it stopped, so it, not the ranks that timed out waiting for it, is
// the root cause; stopped workers get SIGCONT after the stop signal, so they can act on it.
#pragma once

#include <memory>
#include <vector>

#include "launcher/output.h"
#include "launcher/placement.h"
#include "launcher/process.h"
#include "launcher/runtime.h"

namespace ftb::launcher {

class Supervisor {
 public:
  Supervisor(Runtime& rt, const Plan& plan, int attempt);
  NodeEnd run();

 private:
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    std::unique_ptr<WorkerProcess> proc;
    std::unique_ptr<StreamPump> out, err;
    std::string exec_error;
    bool reported = false;       // exit already accounted for
    int64_t stop_logged_us = 0;  // the stop (stoppedSinceUs()) already logged
  };

  void spawnAll();
  void handleSignals();
  void reap();
  void checkStops();
  void forward(int sig, const std::string& from);
  void beginStop(int sig_sent, const std::string& why);
  bool anyRunning() const;
  int pollTimeoutMs() const;
  void recordFailure(Worker& w);
  // Logs a worker's stop (SIGSTOP, SIGTSTP) or its continue, once each.
  void noteStopped(Worker& w);
  // A failure stop began while `w` was stopped: `w` is a failure since its stop (the ranks
  // that timed out waiting for it are its victims, and fail later).
  void recordStopped(Worker& w);
  Failure failureOf(const Worker& w) const;

  Runtime& rt_;
  const Plan& plan_;
  const int attempt_;
  const int node_;
  std::vector<Worker> workers_;
  NodeEnd end_;
  bool stopping_ = false;     // TERM sent or to be followed by SIGKILL at kill_at_
  bool signal_stop_ = false;  // a stop signal was forwarded: exits are not failures
  bool killed_ = false;
  Clock::time_point kill_at_;     // SIGKILL deadline once stopping
  Clock::time_point abandon_at_;  // give up on unreaped workers
};

}  // namespace ftb::launcher
