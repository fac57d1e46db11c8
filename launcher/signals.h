// The launcher's signals, delivered synchronously through a signalfd.
//
// Contract: the constructor blocks SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2
// in the calling thread and ignores SIGPIPE. REQUIRES: constructed in main() before any
// thread is created (MPI's threads inherit the mask, so no signal reaches them).
// The destructor restores the previous mask and dispositions.
#pragma once

#include <signal.h>

#include <vector>

namespace ftb::launcher {

class SignalChannel {
 public:
  SignalChannel();
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const { return fd_; }  // readable when a signal is pending
  std::vector<int> drain();       // pending signals, in arrival order; never blocks
  // The mask the launcher started with; workers get it back before execve.
  const sigset_t& originalMask() const { return old_mask_; }

 private:
  int fd_ = -1;
  sigset_t old_mask_;
  struct sigaction old_pipe_;
};

// Signals forwarded to workers; TERM/INT/HUP also stop the job (no restart).
bool isForwardedSignal(int sig);
bool isShutdownSignal(int sig);

}  // namespace ftb::launcher
