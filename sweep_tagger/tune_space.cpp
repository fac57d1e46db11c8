#include "sweep_tagger/tune_space.h"

#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "common/toml.h"

namespace ftb {
namespace {

int64_t intAtLeast(const toml::node& n, const std::string& key, const std::string& at,
                   int64_t lo) {
  if (!n.is_integer() || n.as_integer()->get() < lo)
    throw ConfigError(key, at, "must be an integer >= " + std::to_string(lo),
                      key + " = " + std::to_string(lo + 1));
  return n.as_integer()->get();
}

double numberAbove(const toml::node& n, const std::string& key, const std::string& at,
                   double lo) {
  const double v = n.is_integer()  ? double(n.as_integer()->get())
                   : n.is_floating_point() ? n.as_floating_point()->get()
                                           : std::nan("");
  if (!(v > lo) || !std::isfinite(v))
    throw ConfigError(key, at, "must be a number > " + formatDouble(lo),
                      key + " = " + formatDouble(lo + 1));
  return v;
}

void readMachines(const std::string& path, const toml::table& t, TuneSpace& s) {
  for (const auto& [k, node] : t) {
    const std::string key = "machines." + std::string(k.str()), at = tomlLineOf(path, node);
    if (k == "memory") {
      if (!node.is_string())
        throw ConfigError(key, at, "must be a string", "memory = \"24GiB\" or \"h100\"");
      try {
        s.sweep.memory_budget = parseMemoryBudget(node.as_string()->get());
      } catch (const ConfigError& e) {  // the same check, named by the file's key and line
        const std::string msg = e.what(), hint = msg.substr(msg.find("hint: ") + 6);
        throw ConfigError(key, at,
                          "expected a size per rank (24GiB, 80GB, 512MiB, bytes) or a device "
                          "type, got '" + node.as_string()->get() + "'",
                          msg.find("hint: ") == std::string::npos ? "" : hint);
      }
    } else if (k == "price_per_hour") {
      s.price_per_hour = numberAbove(node, key, at, 0);
    } else if (k == "launch") {
      const toml::array* a = node.as_array();
      bool node_word = false;
      for (size_t i = 0; a && i < a->size(); ++i) {
        if (!a->get(i)->is_string()) a = nullptr;
        else node_word |= a->get(i)->as_string()->get() == "{node}";
      }
      if (!a || !node_word)
        throw ConfigError(key, at, "must be an array of strings with at least one \"{node}\"",
                          "launch = [\"mpirun\", \"-np\", \"2\", \"{node}\"]");
      s.launch.clear();
      for (const toml::node& w : *a) s.launch.push_back(w.as_string()->get());
    } else {
      throw ConfigError(key, at, "unknown key in [machines]",
                        "[machines] has memory, price_per_hour, launch");
    }
  }
}

void readSettings(const std::string& path, const toml::table& t, TuneSettings& s) {
  for (const auto& [k, node] : t) {
    const std::string key = "tune." + std::string(k.str()), at = tomlLineOf(path, node);
    if (k == "first_steps") s.first_steps = intAtLeast(node, key, at, 1);
    else if (k == "skip_steps") s.skip_steps = intAtLeast(node, key, at, 0);
    else if (k == "eta") s.eta = intAtLeast(node, key, at, 2);
    else if (k == "final_steps") s.final_steps = intAtLeast(node, key, at, 2);
    else if (k == "max_repeats") s.max_repeats = intAtLeast(node, key, at, 1);
    else if (k == "model_keep") s.model_keep = numberAbove(node, key, at, 1);
    else if (k == "run_timeout_s") s.run_timeout_s = numberAbove(node, key, at, 0);
    else
      throw ConfigError(key, at, "unknown key in [tune]",
                        "[tune] has first_steps, skip_steps, eta, final_steps, model_keep, "
                        "max_repeats, run_timeout_s");
  }
}

}  // namespace

TuneSpace loadTuneSpace(const std::string& path, const std::vector<std::string>& overrides) {
  TuneSpace s;
  s.sweep = loadSweep(path);
  s.sweep.overrides = overrides;
  s.launch = {"{node}"};
  const toml::table root = parseToml(readInputFile(path, "tune space"), path);
  if (const toml::table* m = root["machines"].as_table()) readMachines(path, *m, s);
  if (const toml::table* t = root["tune"].as_table()) readSettings(path, *t, s.settings);
  TuneSettings& st = s.settings;
  const Config base = Config::load(s.sweep.base, s.sweep.overrides);
  if (st.final_steps == 0) st.final_steps = base.getInt("training.max_steps");
  st.final_skip_steps = base.getInt("metrics.skip_first_steps");
  const std::string at = path + " [tune]";
  if (st.skip_steps >= st.first_steps)
    throw ConfigError("tune.first_steps", at,
                      "first_steps = " + std::to_string(st.first_steps) +
                          " leaves no measured step after skip_steps = " +
                          std::to_string(st.skip_steps),
                      "first_steps >= skip_steps + 1");
  if (st.final_steps < st.first_steps)
    throw ConfigError("tune.final_steps", at,
                      "final_steps = " + std::to_string(st.final_steps) +
                          " is below first_steps = " + std::to_string(st.first_steps),
                      "raise final_steps (or the base config's training.max_steps)");
  if (st.final_skip_steps >= st.final_steps)
    throw ConfigError("tune.final_steps", at,
                      "final_steps = " + std::to_string(st.final_steps) +
                          " leaves no measured step after the base's metrics.skip_first_steps = " +
                          std::to_string(st.final_skip_steps) + " (" + s.sweep.base + ")",
                      "raise final_steps, or lower the base's metrics.skip_first_steps");
  return s;
}

}  // namespace ftb
