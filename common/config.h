// Run configuration: a TOML file plus `key=value` overrides on dotted keys.
//
// Contract:
// - Every key must be declared in a Schema (name, type, default, doc). Unknown keys
//   and wrong types throw ConfigError naming the key, "file:line" (or
//   "override 'k=v'") and a hint (closest known key for typos).
// - Overrides: "a.b=VALUE"; VALUE is parsed as a TOML value (1, 1e-4, true, "s",
//   [1,2]); anything that does not parse is taken as a bare string. An override of
//   a key with a declared type is converted when lossless (int 4 -> float 4.0) and
//   rejected otherwise.
// - Integers are accepted where floats are declared. Floats are never silently
//   truncated to ints.
// - Model presets: if `model.name` is set and a preset file `<name>.toml` exists in
//   one of presetDirs(), its [model] keys are used for every model.* key the run
//   config does not set itself. With model.from_pretrained the directory gives the shape
//   and no preset applies; a model.name that names a preset then gives way to the
//   directory's name (common/hf_config.h), so the run is labelled by the model it runs.
// - After load(), the Config holds the resolved values (schema defaults filled in)
//   and toToml() serializes them (sorted by key) for run.toml and HDF5 /config.
#pragma once

#include <cmath>
#include <functional>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace ftb {

enum class ValueType { kInt, kFloat, kBool, kString, kIntList, kStringList };
const char* valueTypeName(ValueType t);
// A string key's choices as messages and --help-config spell them: "\"fp32\" | \"bf16\"".
std::string choiceList(const std::vector<std::string>& choices);

using Value = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                           std::vector<std::string>>;

// The values a numeric key accepts: lo..hi, either end open or unbounded. Floats must
// also be finite (nan and inf are never accepted). TrainConfig::fromConfig checks every
// value against its key's domain before anything else (Config::checkDomains).
struct Domain {
  double lo = -HUGE_VAL, hi = HUGE_VAL;
  bool lo_open = false, hi_open = false;
  bool declared = false;  // false: no range given (a float must still be finite)
  bool contains(double v) const;
  std::string range() const;  // ">= 1", "in [0, 1)", "> 0"; "" when unbounded
  // "an integer >= 1", "a finite number in [0, 1)", "a finite number > 0".
  std::string describe(bool integer) const;
};
Domain atLeast(double lo);              // [lo, inf)
Domain above(double lo);                // (lo, inf)
Domain between(double lo, double hi);   // [lo, hi]
Domain halfOpen(double lo, double hi);  // [lo, hi)

class Config;

struct KeySpec {
  std::string key;  // dotted, e.g. "training.lr"
  ValueType type;
  std::optional<Value> default_value;  // nullopt: optional, no default
  std::string doc;                     // one line, shown by --help-config and in README
  bool affects_experiment = true;  // false for output dirs / logging: excluded from the sweep tag
  // Declared but not implemented yet: a value other than the default is refused (exit 2)
  // by TrainConfig::fromConfig (common/run_config.h), and --help-config marks the key
  // "planned". Drop the flag when it lands.
  bool planned = false;
  // False for a key added after run directories were named by the hash (common/tag.h): at
  // its default it is left out of the hash, so those runs keep their tags; set to any other
  // value it hashes as every key does.
  bool hash_default = true;
  Domain domain{};  // numeric keys only (int, float): Schema::add(spec, domain)
  // String keys only: the values it accepts ({} = any string). Config::checkDomains
  // refuses any other value with the list; --help-config shows it as the key's type.
  std::vector<std::string> choices{};
  // A string key holding a comma-separated list ("q,v"): a TOML list of strings (["q", "v"])
  // is accepted too and stored joined by commas, so both spellings are one value and one tag.
  bool comma_list = false;
  // A default that depends on other keys: when the key is not set, Config::load (after every
  // other default) takes derive(cfg) if it gives a value, else default_value. derive_doc
  // says when, for --help-config ("training.dtype's when lora.rank > 0").
  std::function<std::optional<Value>(const Config&)> derive{};
  std::string derive_doc{};
};

class Schema {
 public:
  Schema& add(KeySpec spec);
  // REQUIRES: spec is an int or float key. Every numeric key should be added this way.
  Schema& add(KeySpec spec, Domain domain);
  const KeySpec* find(const std::string& key) const;
  const std::vector<KeySpec>& keys() const { return keys_; }
  // Closest declared key by edit distance, "" if nothing within distance 3.
  std::string closest(const std::string& key) const;

 private:
  std::vector<KeySpec> keys_;
};

// The schema of trainer run configs: every key the trainer reads (and the planned ones).
const Schema& trainerSchema();

// A resolved leaf: its value and where it came from ("configs/runs/tiny.toml:7",
// "override 'training.lr=1e-3'", "preset configs/models/tiny.toml:3", "default").
struct Entry {
  Value value;
  std::string origin;
};

class Config {
 public:
  // Loads `path`, applies `overrides` in order, fills defaults, validates types.
  // Throws ConfigError (missing file, TOML syntax error with line, unknown key,
  // wrong type, malformed override).
  static Config load(const std::string& path, const std::vector<std::string>& overrides,
                     const Schema& schema = trainerSchema());
  // Same, from TOML text (for tests); `source_name` is used in file:line messages.
  static Config fromString(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides,
                           const Schema& schema = trainerSchema());

  bool has(const std::string& key) const;
  // Typed getters. REQUIRES: key declared in the schema with that type (else
  // ConfigError "internal: ..."). A key with no value and no default throws
  // ConfigError "missing required key".
  int64_t getInt(const std::string& key) const;
  double getFloat(const std::string& key) const;
  bool getBool(const std::string& key) const;
  const std::string& getString(const std::string& key) const;
  const std::vector<int64_t>& getIntList(const std::string& key) const;
  // "file:line" / override / default description, for error messages.
  std::string where(const std::string& key) const;

  // Throws ConfigError(key, where(key), what, hint). For invariant checks by users
  // of the config: cfg.fail("training.micro_batch_size", "must be >= 1, got 0", "...").
  // Without a hint, a declared key's doc line and default are the hint, so every
  // error about a key says what the key is.
  [[noreturn]] void fail(const std::string& key, const std::string& what,
                         const std::string& hint = "") const;
  // An invariant between keys `a` and `b` is broken: throws ConfigError blaming the one
  // the user set more directly (override > run file > model preset > default; a tie blames
  // `a`), so `model.dim=66` blames model.dim, not the preset's n_heads. When the other key
  // came from a preset or the default, the message says so (the user did not write it).
  [[noreturn]] void failEither(const std::string& a, const std::string& b,
                               const std::string& what, const std::string& hint = "") const;
  // Throws ConfigError for the first value (in schema order) outside its key's Domain:
  // "<where>: key 'training.beta1': 1.5 is out of range: expected a finite number in [0, 1)",
  // or not one of its choices: "expected one of \"fp32\" | \"bf16\", got \"fp16\"".
  void checkDomains() const;

  void set(const std::string& key, Value v, const std::string& origin);  // programmatic
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const Schema& schema() const { return *schema_; }
  const std::string& sourcePath() const { return source_path_; }

  // Resolved config as TOML, keys grouped by table and sorted. Round-trips through
  // fromString() to an equal Config. set_only: only the keys the files, presets and
  // overrides set (not defaults, nor values derived from other keys, which depend on the
  // world size): loaded on any world, it resolves as this config would there.
  std::string toToml(bool set_only = false) const;

 private:
  const Schema* schema_ = nullptr;
  std::string source_path_;
  std::map<std::string, Entry> entries_;
};

// Directories searched for model presets, in order: $FTB_MODELS_DIR,
// <dir of config file>/../models, FTB_SOURCE_DIR/configs/models.
std::vector<std::string> presetDirs(const std::string& config_path);
// The first <dir>/<name>.toml of presetDirs(config_path) that is a regular file; "" = none.
std::string presetPathOf(const std::string& name, const std::string& config_path);

// The one float spelling of ftbench (TOML display, messages, --help-config, checkpoint
// compat values, the run-tag hash, sweeps, plots, aggregate): the shortest decimal that
// round-trips to the same double, exponent without '+' or leading zeros, always
// recognisable as a float by TOML; of fixed and scientific the shorter (std::to_chars):
// 0.001 -> "0.001", 1e-4 -> "1e-4", 2 -> "2.0", 1e22 -> "1e22", -0.0 -> "0.0",
// inf -> "inf". Invariant: the run-tag hash (tag.h configHash) serializes floats with
// it, so its output must never change (tests/unit/sweep_tagger/tag_test.cpp pins it).
std::string formatDouble(double v);
// A display figure with `prec` digits after the point ("%.{prec}f": 12.3456, 1 ->
// "12.3"), for messages, summaries and reports; not a round-trip spelling.
std::string formatFixed(double v, int prec);
std::string formatMib(double bytes);  // formatFixed(bytes / 2^20, 1) + " MiB"
std::string valueToString(const Value& v);  // TOML spelling: 1, 1e-4, 0.001, true, "s", [1, 2]
// The inverse of valueToString: `text` read as one TOML value (any spelling: 0.0001 and
// 1e-4 give the same double); nullopt if it is not a TOML value with a Value type.
std::optional<Value> valueFromString(const std::string& text);
// Same value: numbers compare numerically (an int and a float by exact double
// equality), everything else by type and content.
bool sameValue(const Value& a, const Value& b);

// Levenshtein distance (insert/delete/substitute, cost 1 each), for did-you-mean hints.
size_t editDistance(const std::string& a, const std::string& b);

// The did-you-mean candidate for an unknown `name` among `names`: the one whose last
// dotted part equals `name` (seq_len -> data.seq_len), else the nearest within edit
// distance max(2, |name|/3) (ties: first listed); "" if none. (Schema::closest adds the
// schema's own preference rules on top of editDistance.)
std::string closestName(const std::string& name, const std::vector<std::string>& names);

// A setting as another tool spells it, and the ftbench key that means it ("" when ftbench
// has no such setting). `tool` is whose spelling it is ("torchtitan", "torchrun", "the Hugging
// Face Trainer"). A `spelling` without a dot is matched against the last part of a key
// (learning_rate, training.learning_rate).
struct ForeignSpelling {
  const char* spelling;
  const char* key;
  const char* tool;
};
const std::vector<ForeignSpelling>& foreignSpellings();

// A key ftbench renamed: `old_key` is refused (exit 2) with a hint naming `key`, except in a
// recorded run.toml (one that starts with kRecordedConfigMark), which reads it as `key`; the
// tag hashes `key` under `old_key` (common/tag.h), so run directories keep their names.
struct RenamedKey {
  const char* old_key;
  const char* key;
};
const std::vector<RenamedKey>& renamedKeys();
const RenamedKey* renamedFrom(const std::string& old_key);  // nullptr: not an old name
const RenamedKey* renamedTo(const std::string& key);        // nullptr: never renamed

// The first line of every run.toml the trainer writes (common/tag.h): a recorded config.
inline constexpr const char* kRecordedConfigMark = "# ftbench run.toml:";

// The hint for an unknown config `key`, by meaning before spelling:
// - an old name of a renamed key (renamedKeys()): "'training.warmup_steps' is now called
//   metrics.skip_first_steps; write metrics.skip_first_steps (<its doc>)";
// - another tool's spelling of an ftbench setting (foreignSpellings()) whose key is in
//   `schema` or `also_keys`: "'training.steps' is torchtitan's spelling; ftbench calls it
//   training.max_steps"; ftbench has no such setting: "... ftbench has no such setting";
// - else "did you mean 'x.y'?" (Schema::closest);
// - else the valid keys of the nearest enclosing table ("valid keys in [data]: ...").
// `also_keys` are valid beside the schema's (a sweep's nodes and nproc_per_node).
std::string unknownKeyHint(const Schema& schema, const std::string& key,
                           const std::vector<std::string>& also_keys = {});

// | key | type | default | meaning | table of every key (trainer --help-config, README).
std::string schemaMarkdown(const Schema& schema);

}  // namespace ftb
