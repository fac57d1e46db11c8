// Sweep tag: a run directory name derived from the resolved config.
//
// Contract (sweep_tagger/README.md § Tags; docs/architecture.md § Data flow):
// - configHash() covers every resolved key whose KeySpec::affects_experiment is
//   true (keys unknown to the schema count) except a key with hash_default = false
//   at its default (a key added later leaves earlier tags unchanged), plus world_size, plus the
//   node count when it is over 1 (so every single-node tag is what it was before nodes counted; a
//   multi-node run directory written before is recognised by runNodes(), see
//   sweep_tagger/README.md "Run identity and node count"). Keys are sorted by
//   bytes; each leaf is serialized type-tagged and length-prefixed (see
//   canonicalRecord) and the stream is hashed with SHA-256; the first 8 bytes are the
//   hash, as 16 lower-case hex chars. It does not depend on key order or TOML
//   spelling (1e-4 == 0.0001, inline table == [table]) and is identical on every
//   machine and compiler.
// - formatTag() expands a fmt string (default kDefaultTagFmt): `{key}` for any
//   flattened config key (`{key[i]}` for a list element), `{world_size}`, `{hash}`;
//   `{{` and `}}` are literal braces; `/` separates subdirectories. Substituted values
//   are path-safe (pathSafe). The result is a relative path with no empty, `.` or
//   `..` component and no component over 255 bytes, else ConfigError with the exact
//   message documented in sweep_tagger/README.md (golden tests in
//   tests/data/sweep_tagger/fmt_cases.txt). A config whose sweep.repeat is N > 0 (a
//   repeat of a sweep point, not part of the hash) gets ".rN" appended to the tag.
// - prepareRunDir() creates `<output_dir>/<tag>/` (or uses output_dir itself when
//   no_sweep_dir) and writes run.toml exactly once (atomic link, so concurrent
//   ranks or nodes race safely). An existing run.toml recording another config hash
//   or world size is a "tag collision" ConfigError; the same config reuses the dir.
//   The run directory (and every directory of the tag's path) must be this user's, no
//   symlink of another user's (common/own_dir.h), else ConfigError naming its owner.
#pragma once

#include <string>

#include "common/config.h"

namespace ftb {

inline constexpr const char* kDefaultTagFmt = "{model.name}.ws{world_size}.{hash}";
inline constexpr size_t kMaxTagValueLen = 64;     // longer values are shortened
inline constexpr size_t kMaxPathComponent = 255;  // bytes, as in most file systems

// `nodes`: how many nodes the world_size ranks run on (1 = one node).
std::string configHash(const Config& cfg, int world_size, int nodes = 1);
std::string formatTag(const Config& cfg, int world_size, const std::string& fmt, int nodes = 1);

struct RunDir {
  std::string path;  // output_dir/tag, or output_dir when no_sweep_dir
  std::string tag;
  bool created;  // true iff this call wrote run.toml
};
// REQUIRES: nodes >= 1. An existing run.toml of another node count (its "# nodes" header,
// or for a directory written before that header its metrics files' node_rank) is a tag
// collision.
RunDir prepareRunDir(const Config& cfg, int world_size, const std::string& output_dir,
                     bool no_sweep_dir, int nodes = 1);
// The run directory prepareRunDir() makes: output_dir/<tag>, or output_dir itself when
// no_sweep_dir. Pure: nothing is created.
std::string runDirPath(const Config& cfg, int world_size, const std::string& output_dir,
                       bool no_sweep_dir, int nodes = 1);

// ---- Building blocks, exposed for sweeps, aggregation and tests -------------

// Value of a "# name = value" header line of run.toml text (tag, config_hash,
// world_size, nodes), "" if absent.
std::string runTomlField(const std::string& run_toml_text, const std::string& name);

// The byte stream hashed by configHash() (for tests and debugging).
std::string canonicalStream(const Config& cfg, int world_size, int nodes = 1);
// A value as it appears in a tag before pathSafe(): strings raw, floats by formatDouble
// (common/config.h), ints in decimal, lists joined by '-'.
std::string tagValueString(const Value& v);
// Maps every byte outside [A-Za-z0-9._-] to '_', a leading '.' to '_', "" to "_";
// values longer than kMaxTagValueLen keep their first 55 bytes + '_' + 8 hex of
// SHA-256 of the whole value (64 bytes in all).
std::string pathSafe(const std::string& value);

}  // namespace ftb
