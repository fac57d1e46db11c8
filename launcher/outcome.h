// What happened in one attempt, and what the job does next.
//
// Protocol (every attempt): each launcher supervises its workers until all of them have
// exited, then sends a NodeEnd to node 0. Node 0 calls decide() on all NodeEnds and sends
// the Decision to every node. A Failure is a worker that exited non-zero or by a signal
// BEFORE its launcher began stopping workers; exits caused by the stop are not failures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftb::launcher {

struct Failure {
  int64_t time_us = 0;  // CLOCK_REALTIME when the launcher reaped it
  int node = 0;
  std::string host;
  std::string ip;
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // > 0: killed by this signal
  std::string note;   // e.g. "exec failed: No such file or directory"
  std::vector<std::string> stderr_tail;

  // The launcher's exit code for this failure: exit code, or 128 + signal.
  int code() const { return signal > 0 ? 128 + signal : exit_code; }
  std::string describe() const;  // "exit code 3" / "SIGKILL (signal 9)"
};

struct NodeEnd {
  int attempt = 0;
  int node = 0;
  std::vector<Failure> failures;
  // First stop signal (TERM/INT/HUP/USR1/USR2) this launcher received, or was told of by a
  // STOP message, during the attempt. Worker exits after it are not failures.
  int shutdown_signal = 0;
  bool all_clean = true;  // every local worker exited 0
  // The first non-zero code (exit code or 128 + signal) of a local worker that exited after
  // the stop began, and when (CLOCK_REALTIME, us); 0 if none.
  int stop_exit_code = 0;
  int64_t stop_exit_time_us = 0;
};

struct Decision {
  int attempt = 0;
  bool restart = false;
  int exit_code = 0;
  int next_port = 0;              // MASTER_PORT of the next attempt when restart
  std::vector<Failure> failures;  // all failures of the attempt, earliest (root cause) first
  int shutdown_signal = 0;
};

// REQUIRES: one NodeEnd per node, all for `attempt`. `late_signal`: a shutdown signal a
// launcher received after it had reported its NodeEnd (known from its STOP message).
// Restart iff there is a failure, no stop signal and attempt < max_restarts.
// Exit code: 0 when no failure and all clean; the root cause's code (earliest failure;
// ties by rank); else the earliest stop_exit_code of any node (the workers' own code after
// a forwarded stop signal, e.g. a requeue code), else 128 + stop signal, else 1.
Decision decide(const std::vector<NodeEnd>& ends, int attempt, int max_restarts,
                int late_signal = 0);

std::string signalName(int sig);  // "SIGKILL"; "signal 42" when unknown

}  // namespace ftb::launcher
