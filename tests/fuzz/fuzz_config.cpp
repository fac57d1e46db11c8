// libFuzzer target: config parsing, overrides (both spellings) and validation.
//
// Input: TOML text, then optionally "\n--\n" and one command-line word per line.
// Contract checked: Config::fromString / torchtitanOverrides / TrainConfig::fromConfig
// either succeed or throw ConfigError (anything else escapes and libFuzzer reports
// it); signed overflow is caught by UBSan; a loaded config round-trips through
// toToml() to the same serialization.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/cli_args.h"
#include "common/config.h"
#include "common/error.h"
#include "common/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ftb;
  std::string in(reinterpret_cast<const char*>(data), size);
  std::string toml = in;
  std::vector<std::string> words;
  if (size_t sep = in.find("\n--\n"); sep != std::string::npos) {
    toml = in.substr(0, sep);
    std::string rest = in.substr(sep + 4);
    size_t start = 0;
    while (start <= rest.size()) {
      size_t nl = rest.find('\n', start);
      words.push_back(rest.substr(start, nl == std::string::npos ? nl : nl - start));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  }
  try {
    std::vector<std::string> overrides = torchtitanOverrides(words);
    Config cfg = Config::fromString(toml, "fuzz.toml", overrides);
    const std::string text = cfg.toToml();
    Config again = Config::fromString(text, "fuzz-roundtrip.toml", {});
    if (again.toToml() != text) std::abort();  // serialization must round-trip
    for (int ws : {1, 8}) {
      try {
        TrainConfig::fromConfig(cfg, ws);
      } catch (const ConfigError&) {
      }
    }
  } catch (const ConfigError&) {
  }
  return 0;
}
