#include "launcher/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "launcher/env_probe.h"
#include "launcher/report.h"

namespace ftb::launcher {
namespace {

constexpr size_t kTailLines = 20;

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Fd openLog(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot open worker log " + path + ": " + std::strerror(errno));
  return Fd(fd);
}

std::string ms(double v) {
  char b[32];
  snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// The tuned variables of one worker and why, once per worker (values masked like --dry-run).
void logTuning(int rank, const NodeInfo& n, int local_rank) {
  std::string line;
  for (const auto& c : tunedEnv(n, local_rank))
    line += "; " + c.name + "=" + displayValue(c.name, c.value) + " (" + c.reason + ")";
  if (!line.empty()) FTB_INFO("rank " << rank << " tuned environment" << line.substr(1));
}

}  // namespace

void Runtime::pollStops() {
  while (auto m = transport.tryRecv(kTagStop)) noteStop(decodeStop(m->payload));
}

void Runtime::broadcastStop(int attempt, int signal, const std::string& reason) {
  StopMsg m{attempt, transport.rank(), signal, reason};
  for (int n = 0; n < transport.size(); ++n)
    if (n != transport.rank()) transport.send(n, kTagStop, encode(m));
  noteStop(m);
}

Supervisor::Supervisor(Runtime& rt, const Plan& plan, int attempt)
    : rt_(rt), plan_(plan), attempt_(attempt), node_(rt.transport.rank()) {
  end_.attempt = attempt;
  end_.node = node_;
}

void Supervisor::spawnAll() {
  const NodeInfo& me = plan_.nodes.at(node_);
  std::string dir;
  if (!rt_.opts.log_dir.empty()) {
    dir = rt_.opts.log_dir + "/" + plan_.run_id + "/attempt_" + std::to_string(attempt_);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw IoError("cannot create log directory " + dir + ": " + ec.message());
  }
  const bool console = rt_.opts.log_dir.empty() || rt_.opts.tee;
  const auto t0 = Clock::now();
  std::string pids;
  for (int lr = 0; lr < me.nproc; ++lr) {
    Worker w;
    w.local_rank = lr;
    w.rank = plan_.firstRank(node_) + lr;
    PipeFds out = makePipe(), err = makePipe();
    SpawnRequest req;
    req.path = rt_.program_path;
    req.argv = rt_.opts.program;
    req.env = mergeEnv(rt_.inherited_env, contractEnv(plan_, node_, lr, attempt_));
    req.cpus = workerCpus(me, lr);
    if (attempt_ == 0) logTuning(w.rank, me, lr);
    req.stdout_fd = out.write.get();
    req.stderr_fd = err.write.get();
    req.mask = &rt_.signals.originalMask();
    w.proc = std::make_unique<WorkerProcess>(req);
    if (rt_.reaper) rt_.reaper->add(w.proc->pid());  // pgid == pid (setpgid in the child)
    std::string base = dir + "/rank_" + std::to_string(w.rank);
    std::string prefix = rt_.opts.tee ? "[" + std::to_string(w.rank) + "] " : "";
    w.out = std::make_unique<StreamPump>(std::move(out.read),
                                         dir.empty() ? Fd() : openLog(base + ".out"),
                                         console ? 1 : -1, prefix, 0);
    w.err = std::make_unique<StreamPump>(std::move(err.read),
                                         dir.empty() ? Fd() : openLog(base + ".err"),
                                         console ? 2 : -1, prefix, kTailLines);
    if (!dir.empty()) {  // a log file that fails (full disk): warned, lines to the console
      w.out->onFileFailure(base + ".out", 1);
      w.err->onFileFailure(base + ".err", 2);
    }
    pids += (pids.empty() ? "" : ",") + std::to_string(w.proc->pid());
    workers_.push_back(std::move(w));
  }
  auto deadline = after(kExecTimeoutS);
  for (auto& w : workers_) {
    try {
      w.exec_error = w.proc->waitExec(deadline);
    } catch (const DistError& e) {
      throw DistError("node " + std::to_string(node_) + " (" + me.host + "): rank " +
                      std::to_string(w.rank) + ": " + e.what());
    }
    if (!w.exec_error.empty()) FTB_ERROR("rank " << w.rank << ": " << w.exec_error);
  }
  FTB_INFO("attempt " << attempt_ << ": " << (me.nproc == 1 ? "rank " : "ranks ")
                      << rankRange(plan_.firstRank(node_), me.nproc) << " started (pids " << pids
                      << "); all exec'd " << ms(msSince(t0)) << " ms after fork, "
                      << ms(msSince(rt_.start)) << " ms after launcher start"
                      << (dir.empty() ? "" : "; logs in " + dir));
  if (attempt_ == 0) {  // after the workers started: the probe does not delay them
    std::ostringstream o;
    writeWorkerEnv(o, probeWorkerEnv(me, rt_.program_path, rt_.inherited_env), "");
    std::string text = o.str();
    if (!text.empty()) text.pop_back();
    FTB_INFO(text);
  }
}

bool Supervisor::anyRunning() const {
  for (const auto& w : workers_)
    if (w.proc->running()) return true;
  return false;
}

void Supervisor::beginStop(int sig_sent, const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  kill_at_ = after(rt_.opts.grace_s);
  const bool failure = sig_sent == 0 && !signal_stop_ && !rt_.shutdown_signal;
  for (auto& w : workers_)
    if (failure && !w.reported && w.proc->stopSignal()) recordStopped(w);
  for (auto& w : workers_) {
    if (!w.proc->running()) continue;
    if (sig_sent == 0) w.proc->signalGroup(SIGTERM);
    if (w.proc->stopSignal()) w.proc->signalGroup(SIGCONT);  // else the signal waits
  }
  if (anyRunning())
    FTB_WARN("stopping local workers (" << why
                                        << "): " << (sig_sent ? signalName(sig_sent) : "SIGTERM")
                                        << " sent, SIGKILL in " << rt_.opts.grace_s << " s");
}

Failure Supervisor::failureOf(const Worker& w) const {
  Failure f;
  f.time_us = nowUs();
  f.node = node_;
  f.host = plan_.nodes[node_].host;
  f.ip = plan_.nodes[node_].ip;
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.pid = w.proc->pid();
  return f;
}

void Supervisor::recordFailure(Worker& w) {
  Failure f = failureOf(w);
  f.exit_code = w.proc->exitCode();
  f.signal = w.proc->termSignal();
  f.note = w.exec_error;
  w.err->pump();  // what the worker wrote before dying is still in the pipe
  f.stderr_tail = w.err->tail();
  FTB_ERROR("rank " << f.rank << " (local rank " << f.local_rank << ", pid " << f.pid << ") "
                    << f.describe());
  end_.failures.push_back(std::move(f));
}

void Supervisor::recordStopped(Worker& w) {
  Failure f = failureOf(w);
  const double for_s = double(f.time_us - w.proc->stoppedSinceUs()) / 1e6;
  f.time_us = w.proc->stoppedSinceUs();
  f.signal = w.proc->stopSignal();
  f.note = "stopped, not running for " + ms(for_s) +
           " s when the job failed: the ranks waiting for it time out";
  w.err->pump();
  f.stderr_tail = w.err->tail();
  FTB_ERROR("rank " << f.rank << " (local rank " << f.local_rank << ", pid " << f.pid << ") "
                    << f.describe());
  end_.failures.push_back(std::move(f));
}

void Supervisor::noteStopped(Worker& w) {
  const int64_t since = w.proc->stoppedSinceUs();
  if (since == w.stop_logged_us) return;
  if (since)
    FTB_WARN("rank " << w.rank << " (pid " << w.proc->pid() << ") was stopped by "
                     << signalName(w.proc->stopSignal())
                     << ": it does not run; ranks that wait for it will time out");
  else
    FTB_INFO("rank " << w.rank << " (pid " << w.proc->pid() << ") runs again");
  w.stop_logged_us = since;
}

void Supervisor::reap() {
  std::string first;
  for (auto& w : workers_) {
    if (w.reported) continue;
    if (!w.proc->tryReap()) {
      noteStopped(w);
      continue;
    }
    w.reported = true;
    bool bad = w.proc->termSignal() != 0 || w.proc->exitCode() != 0;
    if (bad) end_.all_clean = false;
    // The requeue code is a stop the workers agreed on (`launcher ctl stop`, a signal sent to
    // them): each rank ends so by itself, no failure to restart from or report.
    const bool self_stop = w.proc->termSignal() == 0 && w.proc->exitCode() == kExitRequeue;
    if (bad && !stopping_ && !signal_stop_ && !self_stop) {  // exits after a stop are consequences
      recordFailure(w);
      if (first.empty())
        first = "rank " + std::to_string(w.rank) + " " + end_.failures.back().describe();
    } else if (bad && end_.stop_exit_code == 0) {
      int sig = w.proc->termSignal();
      end_.stop_exit_code = sig ? 128 + sig : w.proc->exitCode();
      end_.stop_exit_time_us = nowUs();
    }
    if (signal_stop_ && !stopping_ && first.empty()) {
      // The workers are ending after a USR1/USR2: the rest get --grace, then SIGKILL.
      std::string code = bad ? "code " + std::to_string(end_.stop_exit_code) : "code 0";
      beginStop(end_.shutdown_signal, "rank " + std::to_string(w.rank) + " exited (" + code +
                                          ") after " + signalName(end_.shutdown_signal));
    }
  }
  if (!first.empty() && !stopping_) {
    rt_.broadcastStop(attempt_, 0, first);
    beginStop(0, first);
  }
}

void Supervisor::forward(int sig, const std::string& from) {
  FTB_INFO("forwarding " << signalName(sig) << from << " to local workers");
  for (auto& w : workers_)
    if (w.proc->running()) w.proc->signalGroup(sig);
  if (!end_.shutdown_signal) end_.shutdown_signal = sig;
}

void Supervisor::handleSignals() {
  for (int sig : rt_.signals.drain()) {
    if (!isForwardedSignal(sig)) continue;  // SIGCHLD: reap() looks at every worker
    const bool shutdown = isShutdownSignal(sig);
    if (shutdown && rt_.shutdown_signal) {
      FTB_WARN("second " << signalName(sig) << ": killing local workers now");
      for (auto& w : workers_) w.proc->signalGroup(SIGKILL);
      killed_ = true;
      abandon_at_ = after(kKillWaitS);
      continue;
    }
    if (shutdown) rt_.shutdown_signal = sig;
    forward(sig, "");
    std::string why = "launcher on node " + std::to_string(node_) + " received " + signalName(sig);
    // Other nodes forward it too (a USR1 may reach only some launchers); the first stop
    // signal of each kind is announced.
    if (shutdown ? !stopping_ : !signal_stop_) rt_.broadcastStop(attempt_, sig, why);
    signal_stop_ = true;
    if (shutdown && !stopping_) beginStop(sig, why);
  }
}

void Supervisor::checkStops() {
  rt_.pollStops();
  for (const StopMsg& m : rt_.remote_signals)
    if (m.attempt == attempt_) {
      forward(m.signal, " from node " + std::to_string(m.from_node));
      signal_stop_ = true;
    }
  rt_.remote_signals.clear();
  auto it = rt_.stops.find(attempt_);
  if (it != rt_.stops.end() && !stopping_ && it->second.from_node != node_) {
    if (it->second.signal) {
      signal_stop_ = true;
      if (!end_.shutdown_signal) end_.shutdown_signal = it->second.signal;
    }
    beginStop(0, "node " + std::to_string(it->second.from_node) + ": " + it->second.reason);
  }
}

int Supervisor::pollTimeoutMs() const {
  double s = rt_.opts.monitor_interval_s;
  auto now = Clock::now();
  if (stopping_ && !killed_) s = std::min(s, std::chrono::duration<double>(kill_at_ - now).count());
  return std::max(1, static_cast<int>(s * 1000));
}

NodeEnd Supervisor::run() {
  end_.shutdown_signal = rt_.shutdown_signal;
  rt_.pollStops();
  if (rt_.stops.count(attempt_)) return end_;  // stopped elsewhere before we started
  spawnAll();
  if (rt_.shutdown_signal) beginStop(0, "shutdown requested before the attempt");
  while (anyRunning()) {
    std::vector<pollfd> fds{{rt_.signals.fd(), POLLIN, 0}};
    std::vector<StreamPump*> pumps;
    for (auto& w : workers_)
      for (StreamPump* p : {w.out.get(), w.err.get()})
        if (p->open()) {
          fds.push_back({p->fd(), POLLIN, 0});
          pumps.push_back(p);
        }
    int n = poll(fds.data(), fds.size(), pollTimeoutMs());
    if (n < 0 && errno != EINTR) throw DistError(std::string("poll: ") + std::strerror(errno));
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) pumps[i - 1]->pump();
    // Signals and STOPs first: an exit that follows a stop signal is then not a failure.
    handleSignals();
    checkStops();
    reap();
    auto now = Clock::now();
    if (stopping_ && !killed_ && now >= kill_at_ && anyRunning()) {
      FTB_WARN("workers still running " << rt_.opts.grace_s << " s after stop; sending SIGKILL");
      for (auto& w : workers_)
        if (w.proc->running()) w.proc->signalGroup(SIGKILL);
      killed_ = true;
      abandon_at_ = after(kKillWaitS);
    }
    if (killed_ && now >= abandon_at_ && anyRunning()) {
      for (auto& w : workers_)
        if (w.proc->running())
          FTB_ERROR("rank " << w.rank << " (pid " << w.proc->pid() << ") still not reaped "
                            << kKillWaitS << " s after SIGKILL; giving up on it");
      break;
    }
  }
  for (auto& w : workers_) {
    w.out->finish();
    w.err->finish();
    w.proc->signalGroup(SIGKILL);  // leftovers of the worker's process group
    if (rt_.reaper && !w.proc->running()) rt_.reaper->remove(w.proc->pid());
  }
  checkStops();
  return end_;
}

}  // namespace ftb::launcher
