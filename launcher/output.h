// Routing of one worker stream (stdout or stderr).
//
// Contract: bytes go unchanged to the log file (when there is one); whole lines go to the
// console fd (when there is one) with `prefix` in front; the last `tail_lines` lines are
// kept for the failure report. A final partial line is completed with '\n' by finish().
#pragma once

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

  // Testing seam: feed bytes as if read from the source.
  void consume(const char* data, size_t n);

 private:
  void emitLine(const std::string& line);

  Fd source_;
  Fd file_;
  int console_fd_;
  std::string prefix_;
  size_t tail_lines_;
  std::string partial_;
  std::deque<std::string> tail_;
};

// write(2) all of `data`, retrying on EINTR / short writes; errors are ignored (a closed
// console must not stop the supervision).
void writeAll(int fd, const std::string& data);

}  // namespace ftb::launcher
