// readInputFile() and the durable writes: see the contracts in files.h.
#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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

// Creates or truncates `path`, writes `text`, fsyncs and closes it. Returns "" or the OS
// error and the step that failed ("No space left on device (write of <path>)").
std::string writeAndSync(const std::string& path, const std::string& text) {
  auto failed = [&](const char* step, int err) {
    return std::string(std::strerror(err)) + " (" + step + " of " + path + ")";
  };
  Fd f(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (!f) return failed("open", errno);
  if (int err = writeAll(f.get(), text.data(), text.size())) return failed("write", err);
  if (::fsync(f.get()) != 0) return failed("fsync", errno);
  if (::close(f.release()) != 0) return failed("close", errno);
  return "";
}

std::string sizeText(size_t bytes) {
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes >> 10) + " KiB)";
}

}  // namespace

std::string ownExecutableDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

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

void fsyncPath(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!f) throw IoError("cannot open " + path + " to fsync it: " + std::strerror(errno));
  if (::fsync(f.get()) != 0) throw IoError("fsync of " + path + " failed: " + std::strerror(errno));
}

void renameDurably(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw IoError("cannot rename " + from + " to " + to + ": " + std::strerror(errno));
  std::string parent = std::filesystem::path(to).parent_path().string();
  fsyncPath(parent.empty() ? "." : parent);
}

void writeFileAndFsync(const std::string& path, const std::string& text) {
  const std::string failed = writeAndSync(path, text);
  if (!failed.empty()) throw IoError("cannot write " + path + ": " + failed);
}

void writeFileDurably(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::string failed = writeAndSync(tmp, text);
  if (failed.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
    failed = std::string(std::strerror(errno)) + " (rename of " + tmp + ")";
  if (!failed.empty()) {
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + path + ": " + failed + "; " + path + " is unchanged");
  }
  std::string parent = std::filesystem::path(path).parent_path().string();
  fsyncPath(parent.empty() ? "." : parent);
}

}  // namespace ftb

namespace ftb {

void requireWritableDir(const std::string& dir, const std::string& key, const std::string& where,
                        const std::string& hint) {
  auto refuse = [&](const std::string& why) {
    throw ConfigError(key, where, "cannot write in '" + dir + "': " + why, hint);
  };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) refuse(ec.message());
  std::string probe = (std::filesystem::path(dir) / ".ftb_write_test.XXXXXX").string();
  const int fd = mkstemp(probe.data());  // root passes access(W_OK) on a read-only mount
  if (fd < 0) refuse(std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace ftb
