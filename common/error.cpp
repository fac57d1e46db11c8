// ConfigError message formatting (see error.h for the exit-code contract).
#include "common/error.h"

#include <cstdio>

#include "common/out_of_memory.h"

namespace ftb {
namespace {

// "config error: <where>: key '<key>': <what>[\n  hint: <hint>]".
// An empty `where` or `key` drops its part (e.g. a TOML syntax error has no key).
std::string formatConfigError(const std::string& key, const std::string& where,
                              const std::string& what, const std::string& hint) {
  std::string msg = "config error: ";
  if (!where.empty()) msg += where + ": ";
  if (!key.empty()) msg += "key '" + key + "': ";
  msg += what;
  if (!hint.empty()) msg += "\n  hint: " + hint;
  return msg;
}

}  // namespace

ConfigError::ConfigError(const std::string& key, const std::string& where, const std::string& what,
                         const std::string& hint)
    : FtbError(formatConfigError(key, where, what, hint), kExitBadInput) {}

int exitOutOfMemory(const char* program, const std::exception& e) {
  std::fprintf(stderr,
               "%s: out of memory: %s: an allocation failed (exit code %d); lower the sizes "
               "the config asks for, or raise the process's memory limit (ulimit -v, cgroup)\n",
               program, e.what(), kExitOutOfMemory);
  std::fflush(stderr);
  return kExitOutOfMemory;
}

}  // namespace ftb
