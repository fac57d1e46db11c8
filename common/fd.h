// Owning handle for a POSIX file descriptor (files, pipes, sockets): the one RAII fd
// class of the repository.
#pragma once

#include <unistd.h>

namespace ftb {

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
