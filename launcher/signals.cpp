#include "launcher/signals.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.h"

namespace ftb::launcher {

SignalChannel::SignalChannel() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&set, s);
  if (pthread_sigmask(SIG_BLOCK, &set, &old_mask_) != 0) throw DistError("pthread_sigmask failed");
  fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) throw DistError(std::string("signalfd failed: ") + std::strerror(errno));
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old_pipe_);
}

SignalChannel::~SignalChannel() {
  close(fd_);
  sigaction(SIGPIPE, &old_pipe_, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

std::vector<int> SignalChannel::drain() {
  std::vector<int> out;
  signalfd_siginfo info;
  while (read(fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
    out.push_back(static_cast<int>(info.ssi_signo));
  return out;
}

bool isShutdownSignal(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGHUP; }
bool isForwardedSignal(int sig) {
  return isShutdownSignal(sig) || sig == SIGUSR1 || sig == SIGUSR2;
}

}  // namespace ftb::launcher
