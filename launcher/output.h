// Routing of one worker stream (stdout or stderr).
//
// Contract: bytes go unchanged to the log file (when there is one); whole lines go to the
// console fd (when there is one) with `prefix` in front; the last `tail_lines` lines are
// kept for the failure report. A final partial line is completed with '\n' by finish().
// A failed write to the log file (a full disk, EIO) is never silent: a warning names the
// file, the bytes it holds and the OS error; the file gets nothing more (no gap inside
// it), and without a console the lines go to the fallback fd (onFileFailure) instead.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "launcher/process.h"

namespace ftb::launcher {

class StreamPump {
 public:
  StreamPump(Fd source, Fd file, int console_fd, std::string prefix, size_t tail_lines);
  int fd() const { return source_.get(); }
  bool open() const { return static_cast<bool>(source_); }
  // Reads everything available now (non-blocking). Closes the source at EOF.
  void pump();
  // Reads what is left without blocking, flushes a partial line and closes the source.
  void finish();
  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }
  // The log file's path (for the warning of a failed write) and the fd that takes the
  // lines from then on when there is no console (-1: none).
  void onFileFailure(std::string path, int fallback_fd) {
    file_path_ = std::move(path);
    fallback_fd_ = fallback_fd;
  }

  // Testing seam: feed bytes as if read from the source.
  void consume(const char* data, size_t n);

 private:
  void emitLine(const std::string& line);
  void writeFile(const char* data, size_t n);

  Fd source_;
  Fd file_;
  int console_fd_;
  std::string prefix_;
  size_t tail_lines_;
  std::string partial_;
  std::deque<std::string> tail_;
  std::string file_path_;
  int fallback_fd_ = -1;
  uint64_t file_bytes_ = 0;  // written to the log file
};

// write(2) all of `data`, retrying on EINTR / short writes; errors are ignored (a closed
// console must not stop the supervision).
void writeAll(int fd, const std::string& data);
// The same, returning 0 when all of `data` was written, else the errno of the failure.
int writeAllReporting(int fd, const char* data, size_t n);

}  // namespace ftb::launcher
