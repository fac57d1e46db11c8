// RunLock: see the contract in run_lock.h.
#include "common/run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "common/error.h"
#include "common/log.h"

namespace ftb {
namespace {

std::string readAll(int fd) {
  std::string text;
  char buf[512];
  ssize_t n;
  off_t off = 0;
  while ((n = ::pread(fd, buf, sizeof buf, off)) > 0 && text.size() < 4096) {
    text.append(buf, static_cast<size_t>(n));
    off += n;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

// Value of "name=VALUE" in a holder line, "" if absent.
std::string field(const std::string& holder, const std::string& name) {
  size_t p = holder.find(name + "=");
  if (p == std::string::npos) return "";
  p += name.size() + 1;
  return holder.substr(p, holder.find(' ', p) - p);
}

std::string utcNow() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string takeoverText(const std::string& old) {
  const std::string host = field(old, "host"), pid = field(old, "pid");
  std::string fate = "on another host; it no longer holds the lock";
  if (host == hostName()) {
    long p = std::atol(pid.c_str());
    fate = p > 0 && ::kill(static_cast<pid_t>(p), 0) == 0
               ? "pid alive but not holding the lock (reused pid?)"
               : "process gone";
  }
  return "taking over the stale lock of pid " + pid + " on host " + host + " (" + fate + ")";
}

}  // namespace

RunLock RunLock::acquire(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / kRunLockName).string();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot open run lock " + path + ": " + std::strerror(errno));
  RunLock lock(fd, path);
  // lockHolder() probes hold LOCK_SH for microseconds: retry for 200 ms before
  // concluding that another run holds the lock.
  int tries = 0;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR || (err == EWOULDBLOCK && ++tries < 20)) {
      ::usleep(10000);
      continue;
    }
    if (err != EWOULDBLOCK) throw IoError("cannot lock " + path + ": " + std::strerror(err));
    std::string holder = readAll(fd);
    throw ConfigError(
        "", run_dir,
        "run directory is in use by another run (" +
            (holder.empty() ? std::string("holder starting up") : holder) + ")",
        "wait for that run to finish, or choose another output.dir; the lock is " + path);
  }
  const std::string old = readAll(fd);
  if (!old.empty()) lock.takeover_ = takeoverText(old);
  const std::string me =
      "host=" + hostName() + " pid=" + std::to_string(::getpid()) + " since=" + utcNow() + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size()))
    throw IoError("cannot write run lock " + path + ": " + std::strerror(errno));
  return lock;
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) != 0) {
    // The next holder will report a stale takeover; harmless.
  }
  ::close(fd_);  // releases the flock
}

std::string lockHolder(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / kRunLockName).string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  std::string holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    holder = readAll(fd);
    if (holder.empty()) holder = "holder starting up";
  }
  ::close(fd);
  return holder;
}

}  // namespace ftb
