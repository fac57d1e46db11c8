// Error types shared by every ftbench program.
//
// Contract: every user-facing failure is one of these exceptions. `main` catches
// FtbError, prints what() once (already rank/host prefixed by the thrower when
// known) and exits with exitCode(): ConfigError -> 2 (bad input), DistError -> 3,
// IoError -> 4, OomError -> 5. Messages carry the numbers: "tp(2) does not divide
// n_kv_heads(3)".
#pragma once

#include <stdexcept>
#include <string>

namespace ftb {

class FtbError : public std::runtime_error {
 public:
  explicit FtbError(const std::string& msg, int exit_code)
      : std::runtime_error(msg), exit_code_(exit_code) {}
  int exitCode() const { return exit_code_; }

 private:
  int exit_code_;
};

// Bad input: unknown key, wrong type, broken invariant, missing file. Exit code 2.
// `where` is "file:line" (or "override 'k=v'" / "command line") and `hint` says
// what to do; both may be empty.
class ConfigError : public FtbError {
 public:
  ConfigError(const std::string& key, const std::string& where, const std::string& what,
              const std::string& hint = "");
  explicit ConfigError(const std::string& msg) : FtbError(msg, 2) {}
};

// A collective, rendezvous or store operation failed or timed out. Exit code 3.
class DistError : public FtbError {
 public:
  explicit DistError(const std::string& msg) : FtbError(msg, 3) {}
};

// A file could not be read or written. Exit code 4.
class IoError : public FtbError {
 public:
  explicit IoError(const std::string& msg) : FtbError(msg, 4) {}
};

// Out of memory (allocation failure or over `memory_limit`). Exit code 5.
class OomError : public FtbError {
 public:
  explicit OomError(const std::string& msg) : FtbError(msg, 5) {}
};

// The first line of an exception message. libtorch's c10::Error appends a C++ backtrace
// after it; users get this line (the backtrace belongs in a debug log, not an error).
inline std::string firstLine(const std::string& what) { return what.substr(0, what.find('\n')); }

// The message without libtorch's C++ backtrace: everything before its "Exception raised
// from" line (NCCL's explanation, on the lines after the first, stays).
inline std::string withoutBacktrace(const std::string& what) {
  const size_t at = what.find("\nException raised from");
  std::string s = what.substr(0, at);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

inline constexpr int kExitBadInput = 2;
// Stopped by a signal (or `launcher ctl stop`) after saving a complete checkpoint: rerunning
// the same command resumes. 75 = EX_TEMPFAIL (sysexits.h, "try again later"), distinct from
// 128+signal (stopped without a checkpoint) and from every failure code; list it in
// slurm.conf's RequeueExit to have SLURM requeue such a job by itself.
inline constexpr int kExitRequeue = 75;

}  // namespace ftb
