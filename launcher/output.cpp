#include "launcher/output.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fd.h"
#include "common/log.h"

namespace ftb::launcher {
namespace {
constexpr size_t kMaxLine = 64 * 1024;  // longer lines are emitted in pieces
}

int writeAllReporting(int fd, const char* data, size_t size) {
  return fd < 0 ? 0 : ftb::writeAll(fd, data, size);
}

void writeAll(int fd, const std::string& data) { writeAllReporting(fd, data.data(), data.size()); }

void StreamPump::writeFile(const char* data, size_t n) {
  const int err = writeAllReporting(file_.get(), data, n);
  if (err == 0) {
    file_bytes_ += n;
    return;
  }
  const bool fallback = console_fd_ < 0 && fallback_fd_ >= 0;
  FTB_WARN("cannot write worker log " << (file_path_.empty() ? "(unnamed)" : file_path_) << ": "
                                      << std::strerror(err) << "; it holds the first "
                                      << file_bytes_ << " bytes of the stream, the rest "
                                      << (console_fd_ >= 0 ? "is on the console only"
                                          : fallback       ? "goes to the launcher's console"
                                                           : "is lost"));
  file_.reset();  // nothing more: a later write after freed space would leave a gap
  if (fallback) console_fd_ = fallback_fd_;
}

StreamPump::StreamPump(Fd source, Fd file, int console_fd, std::string prefix, size_t tail_lines)
    : source_(std::move(source)),
      file_(std::move(file)),
      console_fd_(console_fd),
      prefix_(std::move(prefix)),
      tail_lines_(tail_lines) {}

void StreamPump::consume(const char* data, size_t n) {
  if (file_) writeFile(data, n);
  partial_.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
    emitLine(partial_.substr(start, nl - start));
  partial_.erase(0, start);
  if (partial_.size() > kMaxLine) {
    emitLine(partial_);
    partial_.clear();
  }
}

void StreamPump::emitLine(const std::string& line) {
  if (console_fd_ >= 0) writeAll(console_fd_, prefix_ + line + "\n");
  if (tail_lines_ == 0) return;
  tail_.push_back(line);
  if (tail_.size() > tail_lines_) tail_.pop_front();
}

void StreamPump::pump() {
  char buf[16384];
  while (source_) {
    ssize_t n = read(source_.get(), buf, sizeof buf);
    if (n > 0) {
      consume(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      source_.reset();
    } else if (errno != EINTR) {
      if (errno != EAGAIN) source_.reset();
      return;
    }
  }
}

void StreamPump::finish() {
  pump();
  source_.reset();
  if (!partial_.empty()) {
    emitLine(partial_);
    partial_.clear();
  }
}

}  // namespace ftb::launcher
