#include "sweep_tagger/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "common/checked_math.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hw_peak.h"
#include "common/run_config.h"
#include "common/run_status.h"
#include "common/tag.h"
#include "common/toml.h"

namespace ftb {
namespace fs = std::filesystem;
namespace {

bool isLaunchKey(const std::string& k) { return k == "nodes" || k == "nproc_per_node"; }

Value toValue(const toml::node& n, const std::string& path, const std::string& key) {
  // An empty array is no sweep value (a grid axis must list values).
  if (std::optional<Value> v = tomlValue(n); v && !(n.is_array() && n.as_array()->empty()))
    return *v;
  throw ConfigError(key, tomlLineOf(path, n), "unsupported value type in a sweep",
                    "use an int, float, bool, string or a list of ints or strings");
}

void checkKey(const std::string& path, const std::string& section, const std::string& key,
              const toml::node& n, bool allow_world_size) {
  if (key == "layout" && section.rfind("[layout.", 0) != 0) {  // a variant of [layout.NAME]
    if (!n.is_string() && !(n.is_array() && section == "[grid]"))
      throw ConfigError(key, tomlLineOf(path, n), "must name a [layout.NAME] variant",
                        "layout = \"ddp\" (in [grid]: layout = [\"ddp\", \"zero3\"])");
    return;
  }
  if (isLaunchKey(key) || (allow_world_size && key == "world_size")) {
    if (!n.is_integer() && !n.is_array())
      throw ConfigError(key, tomlLineOf(path, n), "must be an integer");
    return;
  }
  const Schema& schema = trainerSchema();
  if (schema.find(key)) return;
  // Another tool's spelling or a did-you-mean; a list of the schema's keys would leave out
  // the sweep's own nodes and nproc_per_node: say what sweep keys are instead.
  const std::string hint = unknownKeyHint(schema, key, {"nodes", "nproc_per_node"});
  throw ConfigError(key, tomlLineOf(path, n), "unknown key in " + section,
                    hint.rfind("valid ", 0) == 0 || hint.empty()
                        ? "sweep keys are trainer config keys, nodes, nproc_per_node or layout"
                        : hint);
}

KeyValues readRule(const std::string& path, const std::string& section, const toml::table& t) {
  KeyValues kv;
  for (const auto& [key, node] : tomlLeaves(t)) {
    checkKey(path, section, key, *node, section == "[[exclude]]");
    kv.emplace_back(key, toValue(*node, path, key));
  }
  return kv;
}

int64_t launchValue(const Value& v, const std::string& key) {
  const auto* i = std::get_if<int64_t>(&v);
  if (!i || *i < 1) throw ConfigError(key, "sweep", "must be an integer >= 1");
  return *i;
}

// The value a rule key has at a point: launch keys, world_size or a resolved key.
std::optional<Value> pointValue(const SweepPoint& p, const Config& cfg, const std::string& key) {
  if (key == "nodes") return Value(p.nodes);
  if (key == "nproc_per_node") return Value(p.nproc_per_node);
  if (key == "world_size") return Value(int64_t{p.world_size});
  if (key == "layout") return Value(p.layout);
  auto it = cfg.entries().find(key);
  if (it == cfg.entries().end()) return std::nullopt;
  return it->second.value;
}

// Refuses a sweep listing more than kMaxSweepPoints points (see sweep.h), from the axis
// lengths alone: nothing is expanded first. `at` is where [grid] is.
void checkPointCount(const SweepSpec& spec, const std::string& at) {
  std::optional<int64_t> grid = spec.grid.empty() && !spec.include.empty() ? 0 : 1;
  std::string axes;
  for (const auto& [axis, values] : spec.grid) {
    const auto n = static_cast<int64_t>(values.size());
    axes += (axes.empty() ? "" : " x ") + axis + "(" + std::to_string(n) + ")";
    if (grid) grid = checkedProduct({*grid, n});
  }
  const auto include = static_cast<int64_t>(spec.include.size());
  std::optional<int64_t> total = grid ? checkedSum({*grid, include}) : std::nullopt;
  if (total && spec.repeats > 1) total = checkedProduct({*total, spec.repeats});
  if (total && *total <= kMaxSweepPoints) return;
  std::string detail = axes.empty() ? "no grid" : axes;
  if (total && include > 0)
    detail += " = " + std::to_string(*grid) + ", + " + std::to_string(include) + " [[include]]";
  if (spec.repeats > 1) detail += ", x repeats(" + std::to_string(spec.repeats) + ")";
  throw ConfigError("grid", at,
                    "the sweep has " + (total ? std::to_string(*total) : "more than 2^63") +
                        " points (" + detail + "), more than the limit of " +
                        std::to_string(kMaxSweepPoints) + " points per sweep",
                    "split it into several sweep files (e.g. one per value of the first axis), "
                    "or list the points you need under [[include]]");
}

const KeyValues* findLayout(const SweepSpec& spec, const std::string& name) {
  for (const auto& [n, kv] : spec.layouts)
    if (n == name) return &kv;
  return nullptr;
}

// [layout.NAME] tables: each a variant's keys (config keys, nodes, nproc_per_node), in
// file order.
void readLayouts(const std::string& path, const toml::node& node, SweepSpec& spec) {
  const std::string at = tomlLineOf(path, node);
  if (!node.is_table() || node.as_table()->empty())
    throw ConfigError("layout", at, "must be a table of variants",
                      "[layout.ddp]\n\"parallel.dp_shard\" = 1\n[layout.zero3]\n...");
  std::vector<std::pair<int, std::string>> order;  // (line, name): toml++ sorts by name
  for (const auto& [k, n] : *node.as_table()) {
    const std::string name(k.str());
    if (!n.is_table())
      throw ConfigError("layout." + name, tomlLineOf(path, n), "must be a table of keys",
                        "[layout." + name + "] with the variant's keys below it");
    order.emplace_back(static_cast<int>(n.source().begin.line), name);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [line, name] : order)
    spec.layouts.emplace_back(
        name, readRule(path, "[layout." + name + "]", *node.as_table()->get(name)->as_table()));
}

// Every layout a point names is defined (refs: name, where).
void checkLayoutRefs(const SweepSpec& spec,
                     const std::vector<std::pair<std::string, std::string>>& refs) {
  std::string defined;
  for (const auto& [name, kv] : spec.layouts) defined += (defined.empty() ? "" : ", ") + name;
  for (const auto& [name, at] : refs)
    if (!findLayout(spec, name))
      throw ConfigError("layout", at, "unknown layout variant '" + name + "'",
                        defined.empty() ? "define it: [layout." + name + "] with its keys"
                                        : "defined variants: " + defined);
  if (!spec.layouts.empty() && refs.empty())
    throw ConfigError("layout", spec.path, "variants are defined but no point uses them",
                      "add layout = [\"" + spec.layouts[0].first + "\", ...] to [grid]");
}

int64_t positiveInt(const toml::node& node, const std::string& key, const std::string& at) {
  if (!node.is_integer() || node.as_integer()->get() < 1)
    throw ConfigError(key, at, "must be an integer >= 1");
  return node.as_integer()->get();
}

std::string describe(const KeyValues& kv) {
  std::string s;
  for (const auto& [k, v] : kv) s += (s.empty() ? "" : " ") + overrideArg(k, v);
  return s;
}

// "" when the point fits spec.memory_budget (or there is none), else why not.
std::string overBudget(const SweepSpec& spec, const TrainConfig& tc) {
  if (!spec.memory_budget) return "";
  const MemoryBudget& b = *spec.memory_budget;
  const std::string problem =
      memoryFitProblem(tc, b.device ? estimateDeviceMemory(tc) : estimateMemory(tc), b);
  return problem.empty() ? "" : "over the memory budget: " + problem;
}

}  // namespace

MemoryBudget parseMemoryBudget(const std::string& text) {
  if (const GpuMemoryEntry* e = findGpuMemory(text))
    return {e->gib * double(1 << 30),
            std::string("--memory-budget ") + e->type + ": " + e->label + ", GPU estimate", true};
  static const std::vector<std::pair<std::string, double>> kUnits = {{"TiB", 1024.0 * (1 << 30)},
                                                                     {"GiB", double(1 << 30)},
                                                                     {"MiB", double(1 << 20)},
                                                                     {"TB", 1e12},
                                                                     {"GB", 1e9},
                                                                     {"MB", 1e6},
                                                                     {"", 1}};
  for (const auto& [unit, scale] : kUnits) {
    if (text.size() <= unit.size() || text.compare(text.size() - unit.size(), unit.size(), unit))
      continue;
    const std::string number = text.substr(0, text.size() - unit.size());
    char* end = nullptr;
    const double v = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size() || !(v > 0) || !std::isfinite(v)) break;
    return {v * scale, "--memory-budget " + text};
  }
  std::string types;
  for (const GpuMemoryEntry& e : gpuMemoryTable())
    types += (types.empty() ? "" : ", ") + std::string(e.type);
  throw ConfigError("--memory-budget", "command line",
                    "expected a size per rank (80GiB, 80GB, 512MiB, bytes) or a device type, "
                    "got '" +
                        text + "'",
                    "device types: " + types);
}

SweepPoint repeatOf(const SweepPoint& p, int repeat) {
  SweepPoint r = p;
  r.repeat = repeat;
  r.tag = p.tag + ".r" + std::to_string(repeat);
  if (!p.legacy_tag.empty()) r.legacy_tag = p.legacy_tag + ".r" + std::to_string(repeat);
  r.args.push_back("sweep.repeat=" + std::to_string(repeat));
  return r;
}

RunState pointState(const std::string& results_dir, const SweepPoint& p) {
  const std::string dir = (fs::path(results_dir) / p.tag).string();
  const RunState state = runState(dir);
  if (state != RunState::Missing) {
    std::optional<int> nodes = runNodes(dir);
    return nodes && *nodes != p.nodes ? RunState::Missing : state;
  }
  if (p.legacy_tag.empty()) return state;
  const std::string legacy = (fs::path(results_dir) / p.legacy_tag).string();
  std::optional<int> nodes = runNodes(legacy);
  return nodes && *nodes == p.nodes ? runState(legacy) : state;
}

std::string overrideArg(const std::string& key, const Value& v) {
  if (const auto* d = std::get_if<double>(&v)) return key + "=" + formatDouble(*d);
  return key + "=" + valueToString(v);
}

SweepSpec loadSweep(const std::string& path) {
  SweepSpec spec;
  spec.path = path;
  toml::table root = parseToml(readInputFile(path, "sweep file"), path);
  std::string base_at = path;  // where `base` was set, for the error when its file is missing
  std::string grid_at = path;
  std::vector<std::pair<std::string, std::string>> layout_refs;  // (variant, where named)
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    const std::string at = tomlLineOf(path, node);
    if (key == "base") base_at = at;
    if (key == "base" || key == "fmt") {
      if (!node.is_string()) throw ConfigError(key, at, "must be a string");
      (key == "base" ? spec.base : spec.fmt) = node.as_string()->get();
    } else if (isLaunchKey(key)) {
      if (!node.is_integer()) throw ConfigError(key, at, "must be an integer");
      (key == "nodes" ? spec.nodes : spec.nproc_per_node) =
          launchValue(node.as_integer()->get(), key);
    } else if (key == "grid") {
      if (!node.is_table()) throw ConfigError(key, at, "must be a table");
      grid_at = at;
      for (const auto& [axis, n] : tomlLeaves(*node.as_table())) {
        checkKey(path, "[grid]", axis, *n, false);
        if (!n->is_array() || n->as_array()->empty())
          throw ConfigError(axis, tomlLineOf(path, *n), "a grid axis must be a non-empty array",
                            "\"" + axis + "\" = [1, 2]");
        std::vector<Value> values;
        for (const toml::node& e : *n->as_array()) {
          values.push_back(toValue(e, path, axis));
          if (axis != "layout") continue;
          if (!e.is_string())
            throw ConfigError(axis, tomlLineOf(path, e), "must list variant names (strings)");
          layout_refs.emplace_back(e.as_string()->get(), tomlLineOf(path, e));
        }
        spec.grid.emplace_back(axis, std::move(values));
      }
    } else if (key == "exclude" || key == "include") {
      if (!node.is_array_of_tables())
        throw ConfigError(key, at, "must be an array of tables", "write [[" + key + "]]");
      for (const toml::node& t : *node.as_array()) {
        KeyValues kv = readRule(path, "[[" + key + "]]", *t.as_table());
        for (const auto& [k, v] : kv)
          if (k == "layout")
            layout_refs.emplace_back(std::get<std::string>(v), tomlLineOf(path, t));
        (key == "exclude" ? spec.exclude : spec.include).push_back(std::move(kv));
      }
    } else if (key == "repeats") {
      spec.repeats = positiveInt(node, key, at);
    } else if (key == "global_batch_size") {
      spec.global_batch_size = positiveInt(node, key, at);
    } else if (key == "layout") {
      readLayouts(path, node, spec);
    } else if (key == "machines" || key == "tune") {
      if (!node.is_table()) throw ConfigError(key, at, "must be a table", "write [" + key + "]");
      // read by `sweep_tagger tune` (tune_space.h); a sweep runs the grid without them
    } else {
      throw ConfigError(key, at, "unknown sweep key",
                        "a sweep has base, fmt, nodes, nproc_per_node, repeats, "
                        "global_batch_size, [grid], [layout.NAME], [[exclude]], [[include]], and "
                        "for tune [machines] and [tune]");
    }
  }
  checkLayoutRefs(spec, layout_refs);
  checkPointCount(spec, grid_at);
  if (spec.base.empty()) throw ConfigError("base", path, "missing", "base = \"../runs/x.toml\"");
  fs::path base(spec.base);
  if (base.is_relative()) base = fs::path(path).parent_path() / base;
  spec.base = fs::absolute(base).lexically_normal().string();
  if (!fs::is_regular_file(spec.base))
    throw ConfigError("base", base_at, "base config '" + spec.base + "' does not exist",
                      "base is relative to the sweep file's directory, e.g. base = "
                      "\"../runs/tiny.toml\" in configs/sweeps/");
  return spec;
}

namespace {

// The sweep's global_batch_size does not divide this point: exit 2 naming it (a fixed
// global batch is the sweep's promise of equal work; a point that breaks it is an error).
void checkGlobalBatch(const SweepSpec& spec, const KeyValues& kv, const std::string& reason) {
  if (spec.global_batch_size == 0 || reason.empty()) return;
  if (reason.find("key 'training.global_batch_size'") == std::string::npos &&
      reason.find("key 'training.grad_accum_steps'") == std::string::npos)
    return;
  std::string why = reason.substr(0, reason.find('\n'));
  if (why.rfind("config error: ", 0) == 0) why = why.substr(14);
  throw ConfigError("global_batch_size", spec.path,
                    "global_batch_size = " + std::to_string(spec.global_batch_size) +
                        " does not fit point " + (kv.empty() ? "(base)" : describe(kv)) + ": " +
                        why,
                    "choose a global batch every point's micro_batch_size * data-parallel size "
                    "divides, or drop the point with [[exclude]]");
}

// Splits a point's keys into launch keys, config overrides and its layout variant (whose
// keys come in the variant's place).
void applyKeys(const SweepSpec& spec, const KeyValues& kv, SweepPoint& p,
               std::vector<std::string>& overrides) {
  for (const auto& [k, v] : kv) {
    if (k == "layout") {
      p.layout = std::get<std::string>(v);
      applyKeys(spec, *findLayout(spec, p.layout), p, overrides);
    } else if (k == "nodes") {
      p.nodes = launchValue(v, k);
    } else if (k == "nproc_per_node") {
      p.nproc_per_node = launchValue(v, k);
    } else {
      p.overrides.emplace_back(k, v);
      overrides.push_back(overrideArg(k, v));
    }
  }
}

// One point of the sweep, repeat `repeat`; nullopt when an [[exclude]] rule drops it.
std::optional<SweepPoint> buildPoint(const SweepSpec& spec, const KeyValues& kv, bool included,
                                     int repeat) {
  SweepPoint p;
  p.nodes = spec.nodes;
  p.nproc_per_node = spec.nproc_per_node;
  p.included = included;
  p.repeat = repeat;
  std::vector<std::string> overrides;
  if (spec.global_batch_size > 0)  // before the point's own keys: a point may set its own
    overrides.push_back("training.global_batch_size=" + std::to_string(spec.global_batch_size));
  applyKeys(spec, kv, p, overrides);
  if (!p.layout.empty()) overrides.push_back(overrideArg("sweep.layout", Value(p.layout)));
  if (repeat > 0) overrides.push_back("sweep.repeat=" + std::to_string(repeat));
  p.world_size = static_cast<int>(p.nodes * p.nproc_per_node);
  overrides.insert(overrides.end(), spec.overrides.begin(), spec.overrides.end());
  Config cfg;
  try {
    cfg = Config::load(spec.base, overrides);
  } catch (const ConfigError& e) {
    throw ConfigError(
        std::string(e.what()) + "\n  in sweep " + spec.path + ", point " +
        (kv.empty() ? std::string("(the base config alone: no grid)") : describe(kv)));
  }
  if (!included) {
    for (const KeyValues& rule : spec.exclude) {
      bool match = std::all_of(rule.begin(), rule.end(), [&](const auto& kv_rule) {
        auto v = pointValue(p, cfg, kv_rule.first);
        return v && sameValue(*v, kv_rule.second);
      });
      if (match) return std::nullopt;
    }
  }
  std::string fmt = spec.fmt;
  if (fmt.empty()) fmt = cfg.has("output.sweep_fmt") ? cfg.getString("output.sweep_fmt") : "";
  if (fmt.empty()) fmt = kDefaultTagFmt;
  const int nodes = static_cast<int>(p.nodes);
  p.hash = configHash(cfg, p.world_size, nodes);
  p.tag = formatTag(cfg, p.world_size, fmt, nodes);
  if (nodes > 1) p.legacy_tag = formatTag(cfg, p.world_size, fmt, 1);
  p.reason = refusalOf(cfg, p.world_size);
  checkGlobalBatch(spec, kv, p.reason);
  if (p.reason.empty()) {  // valid: its work per step, and whether it fits the budget
    TrainConfig tc = TrainConfig::fromConfig(cfg, p.world_size);
    tc.layout.nodes = nodes;
    p.global_batch = tc.globalBatch();
    p.reason = overBudget(spec, tc);
  }
  p.valid = p.reason.empty();
  p.args = overrides;
  if (!spec.fmt.empty()) p.args.push_back(overrideArg("output.sweep_fmt", spec.fmt));
  return p;
}

}  // namespace

std::vector<SweepPoint> expandSweep(const SweepSpec& spec, std::optional<int> last) {
  std::vector<SweepPoint> points;
  std::vector<std::pair<KeyValues, bool>> listed;  // each listed point's keys, included
  std::set<std::string> seen;                      // config hashes listed
  auto enough = [&] { return last && static_cast<int64_t>(points.size()) > *last; };
  auto add = [&](const KeyValues& kv, bool included) {
    std::optional<SweepPoint> p = buildPoint(spec, kv, included, 0);
    if (!p || !seen.insert(p->hash).second) return;  // excluded, or the same run: listed once
    p->index = static_cast<int>(points.size());
    points.push_back(std::move(*p));
    listed.emplace_back(kv, included);
  };
  std::vector<size_t> at(spec.grid.size(), 0);
  // No grid: the base config is the one grid point, unless include lists the points.
  for (bool done = spec.grid.empty() && !spec.include.empty(); !done && !enough();) {
    KeyValues kv;
    for (size_t a = 0; a < spec.grid.size(); ++a)
      kv.emplace_back(spec.grid[a].first, spec.grid[a].second[at[a]]);
    add(kv, false);
    done = true;  // odometer: last axis fastest
    for (size_t a = spec.grid.size(); a-- > 0;) {
      if (++at[a] < spec.grid[a].second.size()) {
        done = false;
        break;
      }
      at[a] = 0;
    }
  }
  for (size_t i = 0; i < spec.include.size() && !enough(); ++i) add(spec.include[i], true);
  // Repeats round-robin: every point once, then every point again (drift hits all alike).
  const size_t once = listed.size();
  for (int64_t r = 1; r < spec.repeats && !enough(); ++r)
    for (size_t i = 0; i < once && !enough(); ++i) {
      SweepPoint p = *buildPoint(spec, listed[i].first, listed[i].second, static_cast<int>(r));
      p.index = static_cast<int>(points.size());
      points.push_back(std::move(p));
    }
  return points;
}

}  // namespace ftb
