#include "launcher/rdzv_auth.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/fd.h"
#include "common/log.h"
#include "common/sha256.h"

namespace ftb::launcher {
namespace {

constexpr size_t kMaxSecretFileBytes = 4096;
constexpr const char* kSecretHint =
    "give every launcher of the job the same secret: export FTB_RDZV_SECRET=$(head -c 32 "
    "/dev/urandom | od -An -tx1 | tr -d ' \\n') before srun/mpirun/ssh starts them, or "
    "FTB_RDZV_SECRET_FILE=FILE (mode 0600, owned by you)";

std::string hexOf(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string checkedSecret(std::string s, const std::string& key, const std::string& where) {
  s = trimmed(std::move(s));
  if (s.size() < kMinSecretChars)
    throw ConfigError(key, where,
                      "the rendezvous secret has " + std::to_string(s.size()) +
                          " character(s); at least " + std::to_string(kMinSecretChars) +
                          " are needed",
                      kSecretHint);
  return s;
}

// Creates `path` with a new random secret unless it exists; a launcher racing on another
// node of a shared home loses the link() and both read the winner's file.
void createDefaultSecret(const std::string& dir, const std::string& path) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw ConfigError(
        "FTB_RDZV_SECRET", "environment",
        "cannot create " + dir + " for the rendezvous secret: " + std::strerror(errno),
        kSecretHint);
  if (::access(path.c_str(), F_OK) == 0) return;
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  const std::string text = hexOf(randomNonce()) + "\n";
  bool ok = fd && ::write(fd.get(), text.data(), text.size()) == ssize_t(text.size()) &&
            ::fsync(fd.get()) == 0;
  const int err = errno;
  fd.reset();
  if (ok && ::link(tmp.c_str(), path.c_str()) == 0)
    FTB_INFO("created the TCP rendezvous secret "
             << path
             << " (mode 0600); every node of a job needs the "
                "same one (a shared home, or FTB_RDZV_SECRET)");
  ::unlink(tmp.c_str());
  if (!ok)
    throw ConfigError("FTB_RDZV_SECRET", "environment",
                      "cannot write the rendezvous secret " + tmp + ": " + std::strerror(err),
                      kSecretHint);
}

}  // namespace

std::string readSecretFile(const std::string& path, const std::string& key) {
  const std::string where = "file " + path;
  auto refuse = [&](const std::string& what) -> ConfigError {
    return ConfigError(key, where, "rendezvous secret file: " + what, kSecretHint);
  };
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd)
    throw refuse(errno == ELOOP ? "is a symlink (not followed)"
                                : std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw refuse(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw refuse("not a regular file");
  if (st.st_uid != ::geteuid())
    throw refuse("owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                 std::to_string(::geteuid()) + ")");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    throw refuse(std::string("mode ") + mode + ": others may read or write it (chmod 600 " + path +
                 ")");
  }
  if (st.st_size > off_t(kMaxSecretFileBytes))
    throw refuse(std::to_string(st.st_size) + " bytes; at most " +
                 std::to_string(kMaxSecretFileBytes));
  std::string text(static_cast<size_t>(st.st_size), '\0');
  ssize_t n = ::read(fd.get(), text.data(), text.size());
  if (n < 0) throw refuse(std::string("cannot read: ") + std::strerror(errno));
  text.resize(static_cast<size_t>(n));
  return checkedSecret(text, key, where);
}

RdzvSecret loadRdzvSecret() {
  if (const char* s = std::getenv("FTB_RDZV_SECRET"); s && *s)
    return {checkedSecret(s, "FTB_RDZV_SECRET", "environment"), "FTB_RDZV_SECRET"};
  if (const char* f = std::getenv("FTB_RDZV_SECRET_FILE"); f && *f)
    return {readSecretFile(f, "FTB_RDZV_SECRET_FILE"), std::string("file ") + f};
  const char* home = std::getenv("HOME");
  if (!home || !*home)
    throw ConfigError("FTB_RDZV_SECRET", "environment",
                      "no rendezvous secret: FTB_RDZV_SECRET and FTB_RDZV_SECRET_FILE are unset "
                      "and there is no HOME for ~/.ftbench/rdzv_secret",
                      kSecretHint);
  const std::string dir = std::string(home) + "/.ftbench";
  const std::string path = dir + "/rdzv_secret";
  createDefaultSecret(dir, path);
  return {readSecretFile(path, "FTB_RDZV_SECRET_FILE"), "file " + path};
}

std::string randomNonce() {
  std::string n(kNonceBytes, '\0');
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw DistError(std::string("getrandom failed: ") + std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  return n;
}

std::string hmacSha256(const std::string& key, const std::string& msg) {
  constexpr size_t kBlock = 64;
  std::string k = key;
  if (k.size() > kBlock) {
    auto d = Sha256();
    d.update(k);
    auto h = d.finish();
    k.assign(reinterpret_cast<const char*>(h.data()), h.size());
  }
  k.resize(kBlock, '\0');
  std::string ipad(kBlock, '\0'), opad(kBlock, '\0');
  for (size_t i = 0; i < kBlock; ++i) {
    ipad[i] = static_cast<char>(k[i] ^ 0x36);
    opad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.update(ipad);
  inner.update(msg);
  auto ih = inner.finish();
  Sha256 outer;
  outer.update(opad);
  outer.update(ih.data(), ih.size());
  auto oh = outer.finish();
  return std::string(reinterpret_cast<const char*>(oh.data()), oh.size());
}

bool constantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  return diff == 0;
}

}  // namespace ftb::launcher
