// Rank-prefixed stderr logging (see log.h).
//
// Invariant: every logLine() call emits exactly one "<prefix> <msg>\n" line with a
// single write(2) on fd 2 (retried only on EINTR / short writes), so lines from
// several threads or processes sharing the terminal never interleave mid-line.
#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/fd.h"

namespace ftb {
namespace {

std::mutex& prefixMutex() {
  static std::mutex m;
  return m;
}

// Guarded by prefixMutex(). Default until setLogIdentity()/setLogPrefix(): "[host]".
std::string& prefixStorage() {
  static std::string prefix = "[" + hostName() + "]";
  return prefix;
}

// -1: not decided yet (read FTB_LOG_LEVEL on first use).
std::atomic<int> g_level{-1};

int parseLevel(const char* s) {
  if (s == nullptr) return -1;
  std::string v(s);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "debug") return static_cast<int>(LogLevel::kDebug);
  if (v == "info") return static_cast<int>(LogLevel::kInfo);
  if (v == "warn" || v == "warning") return static_cast<int>(LogLevel::kWarn);
  if (v == "error") return static_cast<int>(LogLevel::kError);
  return -1;
}

int currentLevel() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level >= 0) return level;
  int from_env = parseLevel(std::getenv("FTB_LOG_LEVEL"));
  if (from_env < 0) from_env = static_cast<int>(LogLevel::kInfo);
  int expected = -1;
  // A concurrent setLogLevel() wins over the environment.
  g_level.compare_exchange_strong(expected, from_env);
  return g_level.load(std::memory_order_relaxed);
}

}  // namespace

std::string hostName() {
  static const std::string name = [] {
    char buf[HOST_NAME_MAX + 1] = {};
    if (::gethostname(buf, sizeof(buf) - 1) != 0) return std::string("unknown-host");
    return std::string(buf);
  }();
  return name;
}

void setLogIdentity(int rank, int world_size, const std::string& host) {
  setLogPrefix("[rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " " + host +
               "]");
}

void setLogPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(prefixMutex());
  prefixStorage() = prefix;
}

const std::string& logPrefix() {
  std::lock_guard<std::mutex> lock(prefixMutex());
  return prefixStorage();
}

void setLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void logLine(LogLevel level, const std::string& msg) {
  if (static_cast<int>(level) < currentLevel()) return;
  std::string line;
  {
    std::lock_guard<std::mutex> lock(prefixMutex());
    line = prefixStorage();
  }
  line += ' ';
  if (level == LogLevel::kWarn) line += "WARNING: ";
  if (level == LogLevel::kError) line += "ERROR: ";
  // A trailing newline in `msg` would leave an empty line: drop it.
  size_t len = msg.size();
  while (len > 0 && msg[len - 1] == '\n') --len;
  line.append(msg, 0, len);
  line += '\n';
  writeAll(STDERR_FILENO, line.data(), line.size());  // stderr gone: nothing left to do
}

}  // namespace ftb
