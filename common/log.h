// Rank-prefixed logging to stderr: "[rank R/W host] message".
//
// Contract: setLogIdentity() is called once the rank is known; before that the
// prefix is "[launcher host]"-style text given by setLogPrefix(). Thread-safe: each
// call writes one whole line with a single write(2).
#pragma once

#include <chrono>
#include <sstream>
#include <string>

namespace ftb {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void setLogIdentity(int rank, int world_size, const std::string& host);
void setLogPrefix(const std::string& prefix);  // replaces the whole "[...]" prefix
const std::string& logPrefix();                // e.g. "[rank 0/2 myhost]"
void setLogLevel(LogLevel level);              // FTB_LOG_LEVEL=debug|info|warn|error also read
void logLine(LogLevel level, const std::string& msg);

std::string hostName();  // gethostname(), cached

// Seconds from t0 to now on the steady clock, for "... in 1.2 s" lines.
inline double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ftb

#define FTB_LOG(level, expr)                                   \
  do {                                                         \
    std::ostringstream ftb_log_os_;                            \
    ftb_log_os_ << expr;                                       \
    ::ftb::logLine(::ftb::LogLevel::level, ftb_log_os_.str()); \
  } while (0)
#define FTB_INFO(expr) FTB_LOG(kInfo, expr)
#define FTB_WARN(expr) FTB_LOG(kWarn, expr)
#define FTB_ERROR(expr) FTB_LOG(kError, expr)
#define FTB_DEBUG(expr) FTB_LOG(kDebug, expr)
