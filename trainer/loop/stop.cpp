#include "trainer/loop/stop.h"

#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <cstring>
#include <ctime>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "trainer/loop/train.h"

namespace ftb {

std::atomic<int> g_stop_signal{0};
std::atomic<int64_t> g_stop_seen_ns{0};

int64_t monotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void noteStopSeen() {
  int64_t none = 0;
  g_stop_seen_ns.compare_exchange_strong(none, monotonicNs());
}

namespace {

void onStopSignal(int sig) {
  g_stop_signal.store(sig);
  noteStopSeen();
}

}  // namespace

namespace {
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP};
}  // namespace

sigset_t stopSignalSet() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kStopSignals) sigaddset(&set, s);
  return set;
}

void installStopSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  // No SA_RESETHAND: launchers send TERM more than once while stopping a job (forward,
  // then stop); a second TERM must not kill a rank mid-collective. A stuck rank is
  // killed by the launcher's SIGKILL after --grace.
  sigemptyset(&sa.sa_mask);
  for (int s : kStopSignals) sigaction(s, &sa, nullptr);
  // `trainer` blocks them before it execs `trainer_cuda` (session.cpp): one that came in
  // between is pending here, and is delivered to the handler now.
  const sigset_t stops = stopSignalSet();
  pthread_sigmask(SIG_UNBLOCK, &stops, nullptr);
}

int stopExitCode(bool complete_checkpoint, bool by_ctl, int sig) {
  return complete_checkpoint ? kExitRequeue : by_ctl ? 1 : 128 + sig;
}

StopRequested::StopRequested(int s, const std::string& phase)
    : std::runtime_error(std::string("stopped by signal ") + strsignal(s) + " during set-up (" +
                         phase + "), before the first step"),
      sig(s) {}

void checkStop(const char* phase) {
  if (int sig = g_stop_signal.load(); sig != 0) throw StopRequested(sig, phase);
}

int StopWatchdog::abandonLocked(const std::string& why, bool final_status) {
  const int sig = g_stop_signal.load() != 0 ? g_stop_signal.load() : SIGTERM;
  const std::string resume = target_.ckpt ? target_.ckpt->abandon() : "";
  const int code = stopExitCode(!resume.empty(), /*by_ctl=*/false, sig);
  const std::string msg =
      std::string("stopped by signal ") + strsignal(sig) + ": " + why +
      "; a save in progress was abandoned (no partial checkpoint); " +
      (resume.empty() ? "no complete checkpoint to resume from" : "resume point " + resume);
  try {
    if (target_.metrics && final_status)
      target_.metrics->setFinalStatus(RunState::Preempted, code, msg);
    if (target_.metrics && !final_status)
      target_.metrics->setStatus(RunState::Preempted, code, msg);
  } catch (const std::exception& e) {
    FTB_ERROR("could not record status in " << target_.metrics->path() << ": " << e.what());
  }
  FTB_WARN(msg << " (exit code " << code << ")");
  target_ = {};
  return code;
}

void StopWatchdog::check(int64_t& saved_until) {
  const int64_t since = g_stop_seen_ns.load();
  if (since == 0) return;
  const int64_t now = monotonicNs();
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  if (const double grace = grace_s_.load(); grace > 0) {
    if (double(now - since) < grace * 1e9) return;
    std::ostringstream why;
    why << "the stop step and its checkpoint did not finish within checkpoint.preempt_grace_s = "
        << grace << " s";
    std::_Exit(abandonLocked(why.str(), /*final_status=*/true));  // mu_ stays held
  }
  if (target_.ckpt && target_.ckpt->saving()) saved_until = now;
  if (double(now - std::max(since, saved_until)) < kStopGraceSeconds * 1e9) return;
  const int sig = g_stop_signal.load() != 0 ? g_stop_signal.load() : SIGTERM;
  FTB_ERROR("stop signal " << strsignal(sig) << " not honoured within " << kStopGraceSeconds
                           << " s (a set-up phase or step is still running); exiting with "
                           << 128 + sig);
  std::_Exit(128 + sig);
}

void StopWatchdog::watch() {
  int64_t saved_until = 0;  // grace 0: when this rank was last seen saving a checkpoint
  while (!done_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    check(saved_until);
  }
}

bool peerLeftAtDeadline(const TrainConfig& tc, const std::exception& e) {
  return tc.checkpoint.preempt_grace_s > 0 && g_stop_seen_ns.load() != 0 &&
         !dynamic_cast<const TrainingDiverged*>(&e) && !dynamic_cast<const OomError*>(&e);
}

}  // namespace ftb
