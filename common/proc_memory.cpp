#include "common/proc_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace ftb {
namespace {

// The first bytes of `path` into `buf` (NUL-terminated); false when it cannot be read.
bool readHead(const char* path, char* buf, size_t size) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t got = 0;
  while (got + 1 < size) {
    const ssize_t n = ::read(fd, buf + got, size - 1 - got);
    if (n <= 0) break;
    got += size_t(n);
  }
  ::close(fd);
  buf[got] = '\0';
  return got > 0;
}

// "<field>:   1234 kB" of /proc/self/status in bytes.
int64_t statusBytes(const char* field) {
  char buf[8192];
  if (!readHead("/proc/self/status", buf, sizeof buf)) return 0;
  const size_t len = std::strlen(field);
  for (const char* line = buf; line && *line; line = std::strchr(line, '\n')) {
    if (*line == '\n') ++line;
    if (std::strncmp(line, field, len) == 0 && line[len] == ':')
      return int64_t(std::strtoll(line + len + 1, nullptr, 10)) * 1024;
  }
  return 0;
}

}  // namespace

int64_t peakRssBytes() { return statusBytes("VmHWM"); }
int64_t currentRssBytes() { return statusBytes("VmRSS"); }

int64_t mappedBytes() {
  char buf[64];
  if (!readHead("/proc/self/statm", buf, sizeof buf)) return 0;
  return int64_t(std::strtoll(buf, nullptr, 10)) * int64_t(sysconf(_SC_PAGESIZE));
}

}  // namespace ftb
