// Owning handle for a POSIX file descriptor (files, pipes, sockets): the one RAII fd
// class of the repository.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace ftb {

// Writes all `size` bytes of `data` to `fd`, retrying short writes and EINTR. Returns 0, or
// the errno of the write that failed (EIO when one wrote nothing). Async-signal-safe (write
// and errno only): signal handlers use it too.
inline int writeAll(int fd, const char* data, size_t size) {
  size_t off = 0;
  while (off < size) {
    const ssize_t n = ::write(fd, data + off, size - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    off += static_cast<size_t>(n);
  }
  return 0;
}

// Invariant: get() is -1 or an open fd that this object closes exactly once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Gives up ownership: the caller closes the returned fd.
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  // Closes the owned fd (if any) and owns `fd` instead.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace ftb
