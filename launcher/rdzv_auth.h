// Who may join a TCP rendezvous (tcp_transport.h): every launcher proves that it knows the
// job's rendezvous secret before node 0 reads any other frame from it, and node 0 proves
// the same back. The proofs are HMAC-SHA256 over both sides' random nonces; the secret
// itself never travels.
//
// Where the secret comes from (the first that is set), the same on every node:
// 1. FTB_RDZV_SECRET in the environment (at least 16 characters). The environment of the
//    srun/mpirun/ssh that starts the launchers reaches every node, and /proc/PID/environ
//    is readable by the same user only (a command-line flag would show in `ps`).
// 2. FTB_RDZV_SECRET_FILE: a file owned by this user that no one else may read or write.
// 3. ~/.ftbench/rdzv_secret, created (0600, 32 random bytes as hex) the first time it is
//    needed; a home directory shared by the nodes gives every node the same one.
// SHA-256's compression has no branch or table lookup that depends on the data, and
// proofs are compared in constant time.
#pragma once

#include <string>

namespace ftb::launcher {

inline constexpr size_t kMinSecretChars = 16;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;

struct RdzvSecret {
  std::string key;
  std::string source;  // for messages: "FTB_RDZV_SECRET", "file /home/u/.ftbench/rdzv_secret"
};

// Resolves the secret as above. Throws ConfigError (exit 2) naming the variable or file and
// what is wrong with it: too short, a symlink, not a regular file, owned by another user,
// readable or writable by others, no HOME to keep the default file in.
RdzvSecret loadRdzvSecret();

// Reads a secret file with the checks above. REQUIRES: `key` names it in messages.
std::string readSecretFile(const std::string& path, const std::string& key);

// kNonceBytes bytes from getrandom(2). Throws DistError when the kernel gives none.
std::string randomNonce();

// HMAC-SHA256 (RFC 2104) of `msg` under `key`: kMacBytes raw bytes.
std::string hmacSha256(const std::string& key, const std::string& msg);

// True when a and b are equal; the time taken depends on their lengths only.
bool constantTimeEqual(const std::string& a, const std::string& b);

}  // namespace ftb::launcher
