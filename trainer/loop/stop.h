// Stopping a run: the stop flags and signal handlers, the stop checks between set-up
// phases, the watchdog that ends a stop at its deadline, and the exit-code rules.
//
// Exit codes of a stopped run: kExitRequeue (common/error.h) when a complete checkpoint of
// the run remains to resume from, 1 after `launcher ctl stop` without one, else
// 128 + signal (stopExitCode).
#pragma once

#include <atomic>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/h5_metrics.h"
#include "common/run_config.h"
#include "trainer/loop/checkpoint_hook.h"

namespace ftb {

// Set by the signal handler (installed by runSession() before set-up, which polls it
// between set-up phases; train() installs it too); polled once per step.
extern std::atomic<int> g_stop_signal;
// The stop signals: TERM, INT, USR1, USR2 and HUP (SLURM's --signal, launchers' stops).
sigset_t stopSignalSet();
void installStopSignalHandlers();
// When this rank first learned of a stop signal, CLOCK_MONOTONIC in ns (0 = not yet):
// its own signal (the handler) or the step agreement reporting another rank's
// (noteStopSeen). checkpoint.preempt_grace_s counts from here.
extern std::atomic<int64_t> g_stop_seen_ns;
void noteStopSeen();  // sets g_stop_seen_ns once; async-signal-safe
int64_t monotonicNs();

// The exit code of a run stopped by signal `sig` (or by `launcher ctl stop`).
int stopExitCode(bool complete_checkpoint, bool by_ctl, int sig);

// A stop signal seen between set-up phases (handlers are installed before set-up).
struct StopRequested : std::runtime_error {
  int sig;
  StopRequested(int s, const std::string& phase);
};
// Throws StopRequested naming `phase` when a stop signal has arrived.
void checkStop(const char* phase);

// What the stop watchdog abandons and records when it ends a run at the grace deadline.
struct StopTarget {
  MetricsFile* metrics = nullptr;
  CheckpointHook* ckpt = nullptr;
};

// Invariant: once this rank has learned of a stop signal (g_stop_seen_ns: its own, or
// the step agreement's), the process ends by a deadline, unless the run's outcome is
// already being recorded (disarm()):
// - checkpoint.preempt_grace_s = G > 0: G seconds later. A step or save still running
//   then is abandoned: no partial checkpoint (Checkpointer::abandon), status `preempted`
//   with kExitRequeue when a complete checkpoint remains (the one saved or resumed from
//   last), else 128+signal, and that exit code.
// - G = 0: kStopGraceSeconds of time outside checkpoint saves (a save takes what it needs;
//   its store waits are bounded by parallel.timeout_seconds), then 128+signal, naming the
//   stuck phase; the HDF5 file keeps its last flushed rows and status.
class StopWatchdog {
 public:
  static constexpr double kStopGraceSeconds = 10;
  StopWatchdog() : thread_([this] { watch(); }) {}
  ~StopWatchdog() {
    done_.store(true);
    thread_.join();
  }
  void setGrace(double seconds) { grace_s_.store(seconds); }
  void arm(StopTarget t) {
    std::lock_guard<std::mutex> lock(mu_);
    target_ = t;
  }
  // The main thread records the outcome from here on: the watchdog no longer ends the run.
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    target_ = {};
    finished_ = true;
  }
  // The main thread ends the stop as at the deadline (a peer left at its own deadline
  // and this rank's collectives failed): returns the exit code.
  int abandon(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    return abandonLocked(why, /*final_status=*/false);
  }

 private:
  int abandonLocked(const std::string& why, bool final_status);
  void check(int64_t& saved_until);  // one poll: exits the process past the deadline
  void watch();

  std::atomic<bool> done_{false};
  std::atomic<double> grace_s_{0};
  std::mutex mu_;  // guards target_, finished_; held while abandoning (then until _Exit)
  StopTarget target_;
  bool finished_ = false;
  std::thread thread_;  // last: started once the members above exist
};

// A failure during a stop with a grace deadline: most likely a peer that reached its
// deadline first and left (its collectives and store waits then fail here). Such a rank
// ends as the peer did (StopWatchdog::abandon), not as failed; a divergence or an oom
// keeps its own status.
bool peerLeftAtDeadline(const TrainConfig& tc, const std::exception& e);

}  // namespace ftb
