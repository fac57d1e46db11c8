// State one launcher shares between rendezvous, attempts and the waits between them.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "launcher/options.h"
#include "launcher/reaper.h"
#include "launcher/signals.h"
#include "launcher/transport.h"
#include "launcher/wire.h"

namespace ftb::launcher {

using Clock = std::chrono::steady_clock;

inline double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

inline Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Extra time, beyond --grace, that a node waits for peers once a stop is known: a peer
// needs up to grace + kKillWaitS to stop its workers, plus message latency.
inline constexpr double kKillWaitS = 5.0;  // after SIGKILL, wait this long for reaping
inline constexpr double kStopSlackS = 10.0;
inline constexpr double kExecTimeoutS = 10.0;  // fork -> execve of one worker

struct Runtime {
  Runtime(const LaunchOptions& o, Transport& t, SignalChannel& s, std::vector<std::string> env,
          std::vector<int> cpu_set, Clock::time_point started)
      : opts(o),
        transport(t),
        signals(s),
        inherited_env(std::move(env)),
        cpus(std::move(cpu_set)),
        start(started) {}

  const LaunchOptions& opts;
  Transport& transport;
  SignalChannel& signals;
  std::string program_path;                // resolved PROGRAM
  std::vector<std::string> inherited_env;  // launcher env minus isStrippedVar()
  std::vector<int> cpus;                   // this launcher's CPU set
  Reaper* reaper = nullptr;                // kills worker process groups if we die; may be null
  Clock::time_point start;                 // launcher process start
  int shutdown_signal = 0;                 // first TERM/INT/HUP this launcher received
  // First STOP per attempt that ends it now: a worker failure or TERM/INT/HUP. Once one is
  // known, waits for the other nodes get a deadline.
  std::map<int, StopMsg> stops;
  std::map<int, int> stop_signals;      // first signal named by any STOP, per attempt
  std::vector<StopMsg> remote_signals;  // USR1/USR2 STOPs from other nodes, not yet forwarded

  // Records a STOP message; returns true if it is the first ending STOP for its attempt.
  // A USR1/USR2 STOP does not end the attempt: the workers decide when to exit (e.g. after
  // a checkpoint); it is queued for the supervisor to forward to the local workers.
  bool noteStop(const StopMsg& m) {
    if (m.signal) stop_signals.emplace(m.attempt, m.signal);
    if (m.signal && !isShutdownSignal(m.signal)) {
      if (m.from_node != transport.rank()) remote_signals.push_back(m);
      return false;
    }
    return stops.emplace(m.attempt, m).second;
  }
  // Drains every STOP message that has arrived (any attempt).
  void pollStops();
  // Sends a STOP for `attempt` to every other node.
  void broadcastStop(int attempt, int signal, const std::string& reason);
};

}  // namespace ftb::launcher
