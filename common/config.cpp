// Config loading: TOML file -> overrides -> model preset -> schema defaults.
//
// Precedence (highest first): override > run file > preset [model] > schema default.
// Every value is checked against the Schema where it enters (file, override, preset,
// set()), so an Entry's value always has exactly its key's declared type.
#include "common/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/files.h"
#include "common/hf_config.h"
#include "common/toml.h"

namespace ftb {
namespace fs = std::filesystem;
namespace {

// A leaf read from TOML or an override, before it is checked against the schema.
struct Raw {
  std::optional<Value> value;  // nullopt: a TOML type with no Value (date, float array...)
  std::string type_name;       // for "got <type>" in messages
  std::string text;            // TOML spelling, for messages
};

Raw rawOf(const Value& v) {
  return Raw{v, valueTypeName(static_cast<ValueType>(v.index())), valueToString(v)};
}

// The Value of `n` with its type name and text for messages (nullopt: a TOML type with
// no Value, e.g. a date or a mixed array).
Raw rawFromNode(const toml::node& n) {
  if (std::optional<Value> v = tomlValue(n)) return rawOf(*v);
  std::string type;
  switch (n.type()) {
    case toml::node_type::array:
      type = "mixed or non-int/string array";
      break;
    case toml::node_type::date:
      type = "date";
      break;
    case toml::node_type::time:
      type = "time";
      break;
    case toml::node_type::date_time:
      type = "date-time";
      break;
    default:
      type = "table";
  }
  return Raw{std::nullopt, type, tomlText(n)};
}

// Children of `table` ("" = root) in the schema: first components after the prefix.
std::set<std::string> childrenOf(const Schema& schema, const std::string& table) {
  std::set<std::string> names;
  const std::string prefix = table.empty() ? "" : table + ".";
  for (const KeySpec& s : schema.keys()) {
    if (s.key.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = s.key.substr(prefix.size());
    names.insert(rest.substr(0, rest.find('.')));
  }
  return names;
}

std::string join(const std::set<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// "'training.steps' is torchtitan's spelling; ftbench calls it training.max_steps" when `key`
// (or, for a dotless spelling, its last part) is one of foreignSpellings() whose ftbench key
// is in `schema` or `also_keys` (or which has none); "" otherwise.
std::string foreignSpellingHint(const Schema& schema, const std::string& key,
                                const std::vector<std::string>& also_keys) {
  const std::string leaf = key.substr(key.rfind('.') + 1);  // npos + 1 == 0: the whole key
  for (const ForeignSpelling& f : foreignSpellings()) {
    const bool dotted = std::string(f.spelling).find('.') != std::string::npos;
    if (key != f.spelling && (dotted || leaf != f.spelling)) continue;
    const std::string ours = f.key;
    const bool known = ours.empty() || schema.find(ours) != nullptr ||
                       std::find(also_keys.begin(), also_keys.end(), ours) != also_keys.end();
    if (!known) continue;
    const std::string whose = "'" + std::string(f.spelling) + "' is " + f.tool + "'s spelling; ";
    return whose + (ours.empty() ? "ftbench has no such setting" : "ftbench calls it " + ours);
  }
  return "";
}

}  // namespace

// See config.h: another tool's spelling, "did you mean 'x.y'?" or the valid keys of the
// nearest enclosing known table.
std::string unknownKeyHint(const Schema& schema, const std::string& key,
                           const std::vector<std::string>& also_keys) {
  if (const RenamedKey* r = renamedFrom(key); r != nullptr && schema.find(r->key) != nullptr)
    return "'" + key + "' is now called " + r->key + "; write " + r->key + " (" +
           schema.find(r->key)->doc + ")";
  if (std::string foreign = foreignSpellingHint(schema, key, also_keys); !foreign.empty())
    return foreign;
  std::string near = schema.closest(key);
  if (!near.empty()) return "did you mean '" + near + "'?";
  std::string table = key;
  while (true) {
    size_t dot = table.rfind('.');
    table = dot == std::string::npos ? "" : table.substr(0, dot);
    std::set<std::string> names = childrenOf(schema, table);
    if (!names.empty())
      return table.empty() ? "valid tables: " + join(names)
                           : "valid keys in [" + table + "]: " + join(names);
    if (table.empty()) return "";
  }
}

namespace {

// The hint of an error about a declared key that has none of its own: what the key is
// its choices and its default ("training.lr: peak learning rate (default 3e-4)").
std::string keyHint(const KeySpec& spec) {
  std::string hint = spec.key + ": " + spec.doc;
  if (!spec.choices.empty()) hint += "; one of " + choiceList(spec.choices);
  if (spec.default_value) hint += " (default " + valueToString(*spec.default_value) + ")";
  return hint;
}

// Checks `key` is declared and converts `raw` to its type (int -> float widening,
// empty list -> either list type). Throws ConfigError naming `where` otherwise.
Value checkValue(const Schema& schema, const std::string& key, const Raw& raw,
                 const std::string& where) {
  const KeySpec* spec = schema.find(key);
  if (spec == nullptr) throw ConfigError(key, where, "unknown key", unknownKeyHint(schema, key));
  if (raw.value) {
    const Value& v = *raw.value;
    if (static_cast<ValueType>(v.index()) == spec->type) return v;
    if (spec->type == ValueType::kFloat && std::holds_alternative<int64_t>(v))
      return static_cast<double>(std::get<int64_t>(v));
    if (spec->type == ValueType::kString && spec->comma_list &&
        std::holds_alternative<std::vector<std::string>>(v)) {
      std::string joined;
      for (const std::string& item : std::get<std::vector<std::string>>(v))
        joined += (joined.empty() ? "" : ",") + item;
      return joined;
    }
    if (spec->type == ValueType::kStringList && std::holds_alternative<std::vector<int64_t>>(v) &&
        std::get<std::vector<int64_t>>(v).empty())
      return std::vector<std::string>{};
  }
  std::string hint;
  if (spec->type == ValueType::kInt && raw.value && std::holds_alternative<double>(*raw.value)) {
    double d = std::get<double>(*raw.value);
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
      hint = "write it as an integer: " + std::to_string(static_cast<int64_t>(d));
  }
  throw ConfigError(key, where,
                    std::string("expected ") + valueTypeName(spec->type) + ", got " +
                        raw.type_name + " (" + raw.text + ")",
                    hint.empty() ? keyHint(*spec) : hint);
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// `text` as the TOML document "v = <text>" holding exactly the key v; nullopt when it
// is not one TOML value (a bare string, trailing text).
std::optional<toml::table> parseOneValue(const std::string& text) {
  try {
    toml::table t = toml::parse("v = " + text);
    if (t.size() == 1 && t.get("v") != nullptr) return t;
  } catch (const toml::parse_error&) {
  }
  return std::nullopt;
}

// "key=VALUE": VALUE as a TOML value, else (string keys only) as a bare string.
// For a string key, a VALUE that parses as a non-string TOML value (e.g. 7, true)
// is taken verbatim as text.
void applyOverride(Config& cfg, const std::string& arg) {
  const std::string where = "override '" + arg + "'";
  size_t eq = arg.find('=');
  if (eq == std::string::npos)
    throw ConfigError("", where, "expected key=value", "e.g. training.lr=1e-3");
  std::string key = trim(arg.substr(0, eq));
  std::string text = trim(arg.substr(eq + 1));
  if (key.empty()) throw ConfigError("", where, "empty key before '='", "e.g. training.lr=1e-3");
  const KeySpec* spec = cfg.schema().find(key);
  if (spec == nullptr)
    throw ConfigError(key, where, "unknown key", unknownKeyHint(cfg.schema(), key));
  std::optional<Raw> parsed;
  if (std::optional<toml::table> t = parseOneValue(text)) parsed = rawFromNode(*t->get("v"));
  Raw raw;
  if (spec->type == ValueType::kString) {
    bool is_string =
        parsed && parsed->value &&
        (std::holds_alternative<std::string>(*parsed->value) ||
         (spec->comma_list && std::holds_alternative<std::vector<std::string>>(*parsed->value)));
    raw = is_string ? *parsed : rawOf(Value(text));
  } else {
    raw = parsed ? *parsed : rawOf(Value(text));
  }
  cfg.set(key, checkValue(cfg.schema(), key, raw, where), where);
}

std::set<std::string> availablePresets(const std::vector<std::string>& dirs) {
  std::set<std::string> names;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".toml") names.insert(e.path().stem().string());
  }
  return names;
}

// Fills model.* keys not yet set from the preset named by model.name (set or default).
// Throws when the preset is missing and the model shape is not given explicitly
// (neither model.dim nor model.from_pretrained is set).
void applyPreset(Config& cfg, const std::string& config_path) {
  const Schema& schema = cfg.schema();
  const KeySpec* name_spec = schema.find("model.name");
  if (name_spec == nullptr) return;
  std::string name;
  if (cfg.has("model.name")) {
    name = cfg.getString("model.name");
  } else if (name_spec->default_value) {
    name = std::get<std::string>(*name_spec->default_value);
  }
  if (name.empty()) return;

  const std::vector<std::string> dirs = presetDirs(config_path);
  const std::string path = presetPathOf(name, config_path);
  if (path.empty()) {
    bool explicit_shape = cfg.has("model.dim") || cfg.has("model.from_pretrained");
    if (explicit_shape || schema.find("model.dim") == nullptr) return;
    std::string dir_list;
    for (const std::string& d : dirs) dir_list += (dir_list.empty() ? "" : ", ") + d;
    std::set<std::string> names = availablePresets(dirs);
    bool is_default = !cfg.has("model.name");
    throw ConfigError(
        "model.name", is_default ? config_path : cfg.where("model.name"),
        "no preset '" + name + "'" + (is_default ? " (the default)" : "") + " in " + dir_list,
        "available presets: " + (names.empty() ? "(none)" : join(names)) +
            "; or set model.dim, model.n_layers, ... explicitly");
  }

  toml::table preset = parseToml(readInputFile(path, "model preset"), path);
  if (!preset["model"].is_table())
    throw ConfigError("model.name", path, "preset has no [model] table",
                      "a preset file holds only a [model] table (see configs/models/tiny.toml)");
  std::vector<std::pair<std::string, Entry>> found;
  for (const auto& [key, node_ptr] : tomlLeaves(preset)) {
    const toml::node& node = *node_ptr;
    std::string where = tomlLineOf(path, node);
    if (key.compare(0, 6, "model.") != 0)
      throw ConfigError(key, where, "a preset may only set [model] keys",
                        "move " + key + " into the run config (configs/runs/), or drop it");
    Value v = checkValue(schema, key, rawFromNode(node), where);
    found.push_back({key, Entry{std::move(v), "preset " + where}});
  }
  for (auto& [key, entry] : found)
    if (!cfg.has(key)) cfg.set(key, std::move(entry.value), entry.origin);
}

// A dotted key with each component bare when TOML allows it, else quoted.
std::string tomlKey(const std::string& dotted) {
  std::string out;
  size_t start = 0;
  while (true) {
    size_t dot = dotted.find('.', start);
    std::string part = dotted.substr(start, dot == std::string::npos ? dot : dot - start);
    bool bare = !part.empty() && part.find_first_not_of(
                                     "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                     "0123456789_-") == std::string::npos;
    out += bare ? part : valueToString(Value(part));
    if (dot == std::string::npos) return out;
    out += '.';
    start = dot + 1;
  }
}

// REQUIRES: cfg has a schema; key declared with type `t`.
template <typename T>
const T& typedGet(const Config& cfg, const std::string& key, ValueType t) {
  const KeySpec* spec = cfg.schema().find(key);
  if (spec == nullptr) throw ConfigError(key, "", "internal: key not declared in the schema");
  if (spec->type != t)
    throw ConfigError(key, "",
                      std::string("internal: key declared ") + valueTypeName(spec->type) +
                          ", read as " + valueTypeName(t));
  auto it = cfg.entries().find(key);
  if (it == cfg.entries().end())
    throw ConfigError(key, "", "missing required key",
                      "set it in the config file or with " + key + "=VALUE");
  return std::get<T>(it->second.value);
}

}  // namespace

std::vector<std::string> presetDirs(const std::string& config_path) {
  std::vector<std::string> dirs;
  auto add = [&dirs](const fs::path& p) {
    std::string s = p.lexically_normal().string();
    if (!s.empty() && std::find(dirs.begin(), dirs.end(), s) == dirs.end()) dirs.push_back(s);
  };
  if (const char* env = std::getenv("FTB_MODELS_DIR"); env != nullptr && *env != '\0') add(env);
  fs::path parent = fs::path(config_path).parent_path();
  add((parent.empty() ? fs::path(".") : parent) / ".." / "models");
#ifdef FTB_SOURCE_DIR
  add(fs::path(FTB_SOURCE_DIR) / "configs" / "models");
#endif
  return dirs;
}

std::string presetPathOf(const std::string& name, const std::string& config_path) {
  for (const std::string& dir : presetDirs(config_path)) {
    fs::path p = fs::path(dir) / (name + ".toml");
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

Config Config::load(const std::string& path, const std::vector<std::string>& overrides,
                    const Schema& schema) {
  return fromString(readInputFile(path, "config file"), path, overrides, schema);
}

Config Config::fromString(const std::string& toml_text, const std::string& source_name,
                          const std::vector<std::string>& overrides, const Schema& schema) {
  Config cfg;
  cfg.schema_ = &schema;
  cfg.source_path_ = source_name;
  toml::table root = parseToml(toml_text, source_name);
  // A run.toml the trainer wrote before a key was renamed still reads, under the new name.
  const bool recorded = toml_text.rfind(kRecordedConfigMark, 0) == 0;
  for (const auto& [leaf, node] : tomlLeaves(root)) {
    const RenamedKey* r = recorded ? renamedFrom(leaf) : nullptr;
    const std::string key = r != nullptr ? r->key : leaf;
    std::string where = tomlLineOf(source_name, *node);
    cfg.entries_[key] = Entry{checkValue(schema, key, rawFromNode(*node), where), where};
  }
  for (const std::string& arg : overrides) applyOverride(cfg, arg);
  if (cfg.has("model.from_pretrained")) {  // a HF model directory gives the shape and the label
    if (cfg.has("model.name") && !presetPathOf(cfg.getString("model.name"), source_name).empty())
      cfg.entries_.erase("model.name");  // a preset's name; applyPretrained names the directory
    applyPretrained(cfg);
  } else {
    applyPreset(cfg, source_name);
  }
  std::vector<const KeySpec*> derived;
  for (const KeySpec& spec : schema.keys()) {
    if (spec.derive && !cfg.has(spec.key)) derived.push_back(&spec);
    if (spec.default_value && !cfg.has(spec.key))
      cfg.entries_[spec.key] = Entry{*spec.default_value, "default"};
  }
  for (const KeySpec* spec : derived)
    if (std::optional<Value> v = spec->derive(cfg)) cfg.entries_[spec->key] = Entry{*v, "default"};
  return cfg;
}

bool Config::has(const std::string& key) const { return entries_.count(key) != 0; }

int64_t Config::getInt(const std::string& key) const {
  if (schema_ == nullptr) throw ConfigError(key, "", "internal: Config not loaded");
  return typedGet<int64_t>(*this, key, ValueType::kInt);
}
double Config::getFloat(const std::string& key) const {
  if (schema_ == nullptr) throw ConfigError(key, "", "internal: Config not loaded");
  return typedGet<double>(*this, key, ValueType::kFloat);
}
bool Config::getBool(const std::string& key) const {
  if (schema_ == nullptr) throw ConfigError(key, "", "internal: Config not loaded");
  return typedGet<bool>(*this, key, ValueType::kBool);
}
const std::string& Config::getString(const std::string& key) const {
  if (schema_ == nullptr) throw ConfigError(key, "", "internal: Config not loaded");
  return typedGet<std::string>(*this, key, ValueType::kString);
}
const std::vector<int64_t>& Config::getIntList(const std::string& key) const {
  if (schema_ == nullptr) throw ConfigError(key, "", "internal: Config not loaded");
  return typedGet<std::vector<int64_t>>(*this, key, ValueType::kIntList);
}

// "" for a key with no value (so fail() on it prints no location).
std::string Config::where(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? "" : it->second.origin;
}

void Config::fail(const std::string& key, const std::string& what, const std::string& hint) const {
  const KeySpec* spec = hint.empty() && schema_ != nullptr ? schema_->find(key) : nullptr;
  throw ConfigError(key, where(key), what, spec != nullptr ? keyHint(*spec) : hint);
}

namespace {

// How directly the user set `key`: override 3, run file 2, model preset 1, default 0.
int originRank(const Config& cfg, const std::string& key) {
  const std::string w = cfg.where(key);
  if (w.rfind("override", 0) == 0) return 3;
  if (w.empty() || w == "default") return 0;
  if (w.rfind("preset ", 0) == 0) return 1;
  return 2;
}

}  // namespace

void Config::failEither(const std::string& a, const std::string& b, const std::string& what,
                        const std::string& hint) const {
  bool blame_b = originRank(*this, b) > originRank(*this, a);
  const std::string& key = blame_b ? b : a;
  const std::string& other = blame_b ? a : b;
  std::string text = what;
  if (originRank(*this, other) < 2) {
    const std::string from = where(other);
    text += "; " + other + " = " + valueToString(entries_.at(other).value) +
            (from == "default" ? " is the default" : " comes from " + from);
  }
  fail(key, text, hint);
}

void Config::checkDomains() const {
  if (schema_ == nullptr) throw ConfigError("", "", "internal: Config not loaded");
  for (const KeySpec& spec : schema_->keys()) {
    auto it = entries_.find(spec.key);
    if (it == entries_.end()) continue;
    const Value& v = it->second.value;
    if (const std::string* sv = std::get_if<std::string>(&v); sv && !spec.choices.empty()) {
      if (std::find(spec.choices.begin(), spec.choices.end(), *sv) == spec.choices.end())
        fail(spec.key, "expected one of " + choiceList(spec.choices) + ", got \"" + *sv + "\"");
      continue;
    }
    double d;
    if (const int64_t* iv = std::get_if<int64_t>(&v)) {
      if (!spec.domain.declared) continue;
      d = static_cast<double>(*iv);
    } else if (const double* fv = std::get_if<double>(&v)) {
      d = *fv;
    } else {
      continue;
    }
    if (!spec.domain.contains(d))
      throw ConfigError(spec.key, it->second.origin,
                        valueToString(v) + " is out of range: expected " +
                            spec.domain.describe(spec.type == ValueType::kInt),
                        spec.key + ": " + spec.doc);
  }
}

std::optional<Value> valueFromString(const std::string& text) {
  if (std::optional<toml::table> t = parseOneValue(text)) return tomlValue(*t->get("v"));
  return std::nullopt;
}

bool sameValue(const Value& a, const Value& b) {
  const auto* ai = std::get_if<int64_t>(&a);
  const auto* bi = std::get_if<int64_t>(&b);
  const auto* ad = std::get_if<double>(&a);
  const auto* bd = std::get_if<double>(&b);
  if ((ai || ad) && (bi || bd) && !(ai && bi))
    return (ai ? static_cast<double>(*ai) : *ad) == (bi ? static_cast<double>(*bi) : *bd);
  return a == b;
}

// A default-constructed Config adopts trainerSchema().
void Config::set(const std::string& key, Value v, const std::string& origin) {
  if (schema_ == nullptr) schema_ = &trainerSchema();
  entries_[key] = Entry{checkValue(*schema_, key, rawOf(v), origin), origin};
}

std::string Config::toToml(bool set_only) const {
  std::string root, tables, current_table;
  for (const auto& [key, entry] : entries_) {
    if (set_only && entry.origin == "default") continue;
    size_t dot = key.find('.');
    std::string line_value = " = " + valueToString(entry.value) + "\n";
    if (dot == std::string::npos) {
      root += tomlKey(key) + line_value;
      continue;
    }
    std::string table = key.substr(0, dot);
    if (table != current_table) {
      tables += (tables.empty() ? "" : "\n") + std::string("[") + tomlKey(table) + "]\n";
      current_table = table;
    }
    tables += tomlKey(key.substr(dot + 1)) + line_value;
  }
  if (!root.empty() && !tables.empty()) root += "\n";
  return root + tables;
}

}  // namespace ftb
