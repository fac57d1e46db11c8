// libFuzzer target: SLURM hostlist and tasks-per-node expansion.
//
// Contract checked: expandHostlist / expandTasksPerNode either return or throw
// ConfigError; a hostlist expands to at most kMaxHosts non-empty names without
// ',', '[', ']' or whitespace; tasks per node are positive.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "common/hostlist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ftb;
  const std::string in(reinterpret_cast<const char*>(data), size);
  try {
    for (const std::string& h : expandHostlist(in)) {
      if (h.empty()) std::abort();
      for (char c : h)
        if (c == ',' || c == '[' || c == ']' || std::isspace(static_cast<unsigned char>(c)))
          std::abort();
    }
  } catch (const ConfigError&) {
  }
  try {
    for (int n : expandTasksPerNode(in))
      if (n < 1) std::abort();
  } catch (const ConfigError&) {
  }
  return 0;
}
