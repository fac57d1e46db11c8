// libFuzzer target: run tag formatting (sweep_fmt) and path-safe values.
//
// Input: a tag fmt; after a first '\n', an override value for model.name.
// Contract checked (common/tag.h): formatTag returns a relative path with no empty,
// '.' or '..' component and none over kMaxPathComponent bytes, or throws
// ConfigError; pathSafe maps anything to [A-Za-z0-9._-], no leading '.', at most
// kMaxTagValueLen bytes.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "common/tag.h"

namespace {

const char* kBase = R"([model]
name = "m"
dim = 8
n_layers = 1
n_heads = 2
n_kv_heads = 2
ffn_dim = 16
vocab_size = 32
max_seq_len = 16
[data]
seq_len = 16
)";

void checkTag(const std::string& tag) {
  if (tag.empty() || tag.front() == '/') std::abort();
  size_t start = 0;
  while (true) {
    size_t slash = tag.find('/', start);
    std::string part = tag.substr(start, slash == std::string::npos ? slash : slash - start);
    if (part.empty() || part == "." || part == ".." || part.size() > ftb::kMaxPathComponent)
      std::abort();
    if (slash == std::string::npos) return;
    start = slash + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ftb;
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  const std::string fmt = in.substr(0, nl);
  const std::string value = nl == std::string::npos ? "m" : in.substr(nl + 1);
  const std::string safe = pathSafe(value);
  if (safe.empty() || safe.size() > kMaxTagValueLen || safe.front() == '.') std::abort();
  for (char c : safe)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      std::abort();
  try {
    Config cfg = Config::fromString(kBase, "fuzz.toml", {});
    cfg.set("model.name", Value(value), "fuzz");
    checkTag(formatTag(cfg, 4, fmt));
  } catch (const ConfigError&) {
  }
  return 0;
}
