// Runs one attempt on this node: spawns the local workers, forwards signals, pumps their
// output, and stops them all (SIGTERM, SIGKILL after --grace) as soon as any worker on any
// node fails or a shutdown signal arrives.
//
// Contract: run() returns only when every local worker has been reaped (or abandoned after
// SIGKILL + kKillWaitS, which is logged), with this node's NodeEnd. A local failure is
// announced to every other node with a STOP message before the local stop begins.
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
    bool reported = false;  // exit already accounted for
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
