// readInputFile(): see the contract in files.h.
#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "common/fd.h"

namespace ftb {
namespace {

std::string kindOf(mode_t m) {
  if (S_ISREG(m)) return "";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "a special file";
}

std::string sizeText(size_t bytes) {
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes >> 10) + " KiB)";
}

}  // namespace

std::string notRegularFileReason(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::string("missing: ") + std::strerror(errno);
  return kindOf(st.st_mode);
}

std::string readInputFile(const std::string& path, const std::string& what, size_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    std::error_code ec;
    const int err = errno;
    throw ConfigError("", path, "cannot read " + what,
                      err == ENOENT ? "no such file (relative to " +
                                          std::filesystem::current_path(ec).string() + ")"
                                    : std::string(std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode))
    throw ConfigError("", path, "is " + kindOf(st.st_mode) + ", expected a regular file",
                      "pass the path of a TOML " + what);
  Fd f(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (f.get() < 0)
    throw ConfigError("", path, "cannot read " + what + ": " + std::strerror(errno),
                      "check its permissions");
  if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw ConfigError("", path, "is " + kindOf(st.st_mode) + ", expected a regular file");
  if (static_cast<size_t>(st.st_size) > max_bytes)
    throw ConfigError("", path,
                      what + " is " + sizeText(static_cast<size_t>(st.st_size)) +
                          ", more than the limit of " + sizeText(max_bytes),
                      "is this the right file? configs are a few KiB");
  std::string text;
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(f.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ConfigError("", path, "cannot read " + what + ": " + std::strerror(errno));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes)  // grew after fstat
      throw ConfigError("", path, what + " is more than the limit of " + sizeText(max_bytes));
  }
  return text;
}

}  // namespace ftb
