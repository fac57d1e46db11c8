// Exclusive ownership of a run directory for the lifetime of one run.
//
// Contract:
// - RunLock::acquire(dir) takes flock(LOCK_EX|LOCK_NB) on <dir>/run.lock and writes
//   "host=H pid=P since=UTC" into it. Only one process (the run's rank 0) calls it per
//   run: every rank writes its own metrics file, so the lock excludes a second *run*,
//   not sibling ranks. Multi-node runs need the output dir on a file system whose
//   flock is seen by every node (local, or NFS v4 / Lustre / GPFS with locking on).
// - Held by another process: ConfigError (exit 2) naming the dir and the holder's
//   host, pid and start time. Nothing in the directory is changed.
// - The file names a previous holder but no process holds the flock (the holder died
//   without releasing, e.g. SIGKILL): the lock is taken over and `takeover` says whose
//   it was (the caller logs it), with whether that pid is still alive on this host.
// - The destructor empties the file and releases the flock (the file itself stays:
//   unlinking a lock file races with processes that have opened it).
// - lockHolder(dir) never throws and never blocks: the holder text if another process
//   holds <dir>/run.lock now, else "". Used by sweep runners to skip held points.
#pragma once

#include <string>

namespace ftb {

inline constexpr const char* kRunLockName = "run.lock";

class RunLock {
 public:
  static RunLock acquire(const std::string& run_dir);
  RunLock(RunLock&& o) noexcept
      : fd_(o.fd_), path_(std::move(o.path_)), takeover_(std::move(o.takeover_)) {
    o.fd_ = -1;
  }
  RunLock& operator=(RunLock&&) = delete;
  RunLock(const RunLock&) = delete;
  ~RunLock();

  const std::string& path() const { return path_; }
  // "" or e.g. "taking over the stale lock of pid 123 on host n1 (process gone)".
  const std::string& takeover() const { return takeover_; }

 private:
  RunLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  std::string takeover_;
};

std::string lockHolder(const std::string& run_dir);

}  // namespace ftb
