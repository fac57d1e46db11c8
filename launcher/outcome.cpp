#include "launcher/outcome.h"

#include <algorithm>
#include <csignal>
#include <cstring>

namespace ftb::launcher {

std::string signalName(int sig) {
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

std::string Failure::describe() const {
  std::string s = signal > 0 ? signalName(signal) + " (" + std::to_string(code()) + ")"
                             : "exit code " + std::to_string(exit_code);
  return note.empty() ? s : s + ", " + note;
}

Decision decide(const std::vector<NodeEnd>& ends, int attempt, int max_restarts, int late_signal) {
  Decision d;
  d.attempt = attempt;
  d.shutdown_signal = late_signal;
  bool clean = true;
  const NodeEnd* stopped = nullptr;  // earliest worker exit after a stop
  for (const auto& e : ends) {
    d.failures.insert(d.failures.end(), e.failures.begin(), e.failures.end());
    if (e.shutdown_signal && !d.shutdown_signal) d.shutdown_signal = e.shutdown_signal;
    clean = clean && e.all_clean;
    if (e.stop_exit_code && (!stopped || e.stop_exit_time_us < stopped->stop_exit_time_us))
      stopped = &e;
  }
  std::stable_sort(d.failures.begin(), d.failures.end(), [](const Failure& a, const Failure& b) {
    return a.time_us != b.time_us ? a.time_us < b.time_us : a.rank < b.rank;
  });
  if (!d.failures.empty()) {
    d.exit_code = d.failures.front().code();
    d.restart = d.shutdown_signal == 0 && attempt < max_restarts;
  } else if (!clean) {
    d.exit_code = stopped             ? stopped->stop_exit_code
                  : d.shutdown_signal ? 128 + d.shutdown_signal
                                      : 1;
  }
  return d;
}

}  // namespace ftb::launcher
