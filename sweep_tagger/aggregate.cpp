#include "sweep_tagger/aggregate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/h5_metrics.h"
#include "common/run_config.h"
#include "common/toml.h"
#include "sweep_tagger/compare.h"
#include "sweep_tagger/process_pool.h"

namespace ftb {
namespace fs = std::filesystem;
namespace {

struct RankFile {
  int rank = 0;
  MetricsData data;
  double age_seconds = 0;  // since the file's last modification
};

// Flattened config from TOML text; empty (and a note in `message`) if unparsable. Arrays
// and dates are kept as their TOML text.
std::map<std::string, Cell> flattenConfig(const std::string& text, const std::string& what,
                                          std::string& message) {
  std::map<std::string, Cell> out;
  try {
    const toml::table table = parseToml(text, what);  // outlives the leaves' node pointers
    for (const auto& [key, node] : tomlLeaves(table)) {
      std::optional<Value> v = tomlValue(*node);
      if (v && !node->is_array()) {
        std::visit(
            [&, k = key](const auto& x) {
              if constexpr (std::is_constructible_v<Cell, decltype(x)>) out[k] = x;
            },
            *v);
      } else {
        out[key] = tomlText(*node);
      }
    }
  } catch (const ConfigError& e) {  // "config error: run.toml:3: TOML syntax error: ..."
    std::string what = e.what();
    if (what.rfind("config error: ", 0) == 0) what = what.substr(14);
    message += (message.empty() ? "" : "; ") + what;
  }
  return out;
}

std::optional<double> numberOf(const std::map<std::string, Cell>& cfg, const std::string& key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (auto* i = std::get_if<int64_t>(&it->second)) return double(*i);
  if (auto* d = std::get_if<double>(&it->second)) return *d;
  return std::nullopt;
}

const std::vector<double>* column(const MetricsData& d, const char* name) {
  auto it = d.steps.find(name);
  return it == d.steps.end() ? nullptr : &it->second;
}

// trainer/loop/step_log.cpp's percentile: nearest rank of q*(n-1).
// REQUIRES: !v.empty().
double percentile(std::vector<double>& v, double q) {
  size_t i = std::min(static_cast<size_t>(q * double(v.size() - 1) + 0.5), v.size() - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

// ---- Comparisons: step-level spread and work per step ----

// row.step_tokens_p10/p50/p90: percentiles of the measured steps' padded tokens/s.
void stepSpread(RunRow& row, const MetricsData& d, const std::vector<size_t>& measured) {
  const auto* tokens = column(d, "tokens_padded");
  const auto* time = column(d, "step_time_s");
  if (!tokens || !time) return;
  std::vector<double> rate;
  for (size_t i : measured)
    if ((*time)[i] > 0) rate.push_back((*tokens)[i] / (*time)[i]);
  if (rate.empty()) return;
  row.step_tokens_p10 = percentile(rate, 0.1);
  row.step_tokens_p50 = percentile(rate, 0.5);
  row.step_tokens_p90 = percentile(rate, 0.9);
}

// A run's recorded config as the trainer resolved it. run.toml records every key, so a
// training.grad_accum_steps derived from training.global_batch_size reads as set there (and
// "contradicts" it): with a global batch the recorded grad_accum_steps counts as a default.
Config recordedConfig(const std::string& run_toml, const std::string& run_dir) {
  Config cfg = Config::fromString(run_toml, run_dir + "/run.toml", {});
  if (cfg.has("training.global_batch_size") && cfg.getInt("training.global_batch_size") > 0)
    cfg.set("training.grad_accum_steps", Value(int64_t{1}), "default");
  return cfg;
}

// The run's config hash (run.toml header) and, for a config the trainer accepts, its
// global batch as the trainer computes it.
void workPerStep(RunRow& row, const std::string& run_toml, const std::string& run_dir) {
  static const std::regex kHash("^# config_hash = ([0-9a-f]+)$", std::regex::multiline);
  std::smatch m;
  if (std::regex_search(run_toml, m, kHash)) row.config_hash = m[1];
  if (run_toml.empty() || !row.world_size || row.is_valid != true) return;
  try {
    Config cfg = recordedConfig(run_toml, run_dir);
    const TrainConfig tc =
        TrainConfig::fromConfig(cfg, static_cast<int>(*row.world_size), Checks::kConfigOnly);
    row.global_batch_seqs = tc.globalBatch();
    row.global_batch_tokens = tc.globalBatch() * tc.data.seq_len;
    row.batch_mode =
        cfg.getInt("training.global_batch_size") > 0 ? "fixed global batch" : "fixed grad_accum";
  } catch (const std::exception&) {  // older or foreign schema: unknown
  }
}

// The step-time-weighted means of the per-step utilizations over the measured steps (total:
// their seconds), each empty when a measured step did not report it (NaN) or the file has
// no such column; the MFU figures only where the run had a hardware peak.
void utilizations(RunRow& row, const MetricsData& d, const std::vector<size_t>& measured,
                  double total) {
  const auto* step_time = column(d, "step_time_s");
  auto weighted = [&](const char* name) -> std::optional<double> {
    const auto* c = column(d, name);
    if (!c) return std::nullopt;
    double w = 0;
    for (size_t i : measured) w += (*c)[i] * (*step_time)[i];
    return std::isfinite(w) ? std::optional<double>(w / total) : std::nullopt;
  };
  const auto peak = d.attrs.find("peak_flops");
  if (peak != d.attrs.end() && std::holds_alternative<double>(peak->second) &&
      std::get<double>(peak->second) > 0) {
    row.mfu = weighted("mfu");
    row.mfu_causal = weighted("mfu_causal");
    row.hfu = weighted("hfu");
  }
  row.gemm_efficiency = weighted("gemm_efficiency");
}

void computeNumbers(RunRow& row, const RankFile& ref, const std::vector<RankFile>& ranks) {
  const MetricsData& d = ref.data;
  const auto* step = column(d, "step");
  const auto* step_time = column(d, "step_time_s");
  if (!step || !step_time) return;
  const size_t n = step->size();
  row.steps_done = static_cast<int64_t>(n);
  if (n == 0) return;
  if (const auto* t = column(d, "time_s")) row.train_runtime_s = t->back();
  if (const auto* loss = column(d, "loss")) {
    row.first_loss = loss->front();
    row.last_loss = loss->back();
  }
  for (const RankFile& r : ranks)
    if (const auto* peak = column(r.data, "peak_rss_bytes"); peak && !peak->empty()) {
      double mib = *std::max_element(peak->begin(), peak->end()) / (1 << 20);
      row.peak_mem_mib = std::max(row.peak_mem_mib.value_or(0), mib);
    }

  // Runs written before the key was renamed record it as training.warmup_steps.
  const double skip = numberOf(row.config, "metrics.skip_first_steps")
                          .value_or(numberOf(row.config, "training.warmup_steps").value_or(0));
  std::vector<size_t> measured;
  for (size_t i = 0; i < n; ++i)
    if ((*step)[i] >= skip) measured.push_back(i);
  row.measured_steps = static_cast<int64_t>(measured.size());
  if (measured.empty()) return;
  auto sum = [&](const char* name) -> std::optional<double> {
    const auto* c = column(d, name);
    if (!c) return std::nullopt;
    double s = 0;
    for (size_t i : measured) s += (*c)[i];
    return s;
  };
  const double total = *sum("step_time_s");
  if (total <= 0) return;
  std::vector<double> times;
  for (size_t i : measured) times.push_back((*step_time)[i]);
  row.step_time_p50_s = percentile(times, 0.5);
  row.step_time_p90_s = percentile(times, 0.9);
  auto share = [&](const char* name) -> std::optional<double> {
    auto s = sum(name);
    return s ? std::optional<double>(*s / total) : std::nullopt;
  };
  row.data_frac = share("data_s");
  row.forward_frac = share("forward_s");
  row.backward_frac = share("backward_s");
  row.optimizer_frac = share("optimizer_s");
  row.comm_frac = share("comm_s");
  row.tokens_per_s_padded = share("tokens_padded");
  row.tokens_per_s_dataset = share("tokens_dataset");
  utilizations(row, d, measured, total);
  stepSpread(row, d, measured);
  if (row.world_size && *row.world_size > 0) {
    if (row.tokens_per_s_padded)
      row.tokens_per_s_padded_per_device = *row.tokens_per_s_padded / double(*row.world_size);
    if (row.tokens_per_s_dataset)
      row.tokens_per_s_dataset_per_device = *row.tokens_per_s_dataset / double(*row.world_size);
  }
  if (row.tokens_per_s_dataset && *row.tokens_per_s_dataset > 0) {
    row.mt_per_hour = *row.tokens_per_s_dataset * 3600 / 1e6;
    double price = numberOf(row.config, "metrics.price_per_hour").value_or(0);
    if (price > 0) row.price_per_hour = price;
    if (price > 0 && row.world_size)
      row.usd_per_mt = price * double(*row.world_size) / *row.mt_per_hour;
  }
}

RunState statusOf(const RunRow& row, const std::vector<RankFile>& ranks,
                  const std::vector<std::pair<int, std::string>>& corrupt, double stale,
                  std::string& message) {
  auto firstWith = [&](RunState state) -> const RankFile* {
    for (const RankFile& r : ranks)
      if (r.data.status.state == state) return &r;
    return nullptr;
  };
  for (RunState state : {RunState::Oom, RunState::Failed, RunState::Invalid, RunState::Preempted})
    if (const RankFile* r = firstWith(state)) {
      message = "rank " + std::to_string(r->rank) + ": " + r->data.status.message;
      return state;
    }
  if (!corrupt.empty()) {
    message = "rank " + std::to_string(corrupt[0].first) + ": " + corrupt[0].second;
    return RunState::Corrupt;
  }
  if (const RankFile* r = firstWith(RunState::Running)) {
    double youngest = 1e300;
    for (const RankFile& x : ranks) youngest = std::min(youngest, x.age_seconds);
    message = "rank " + std::to_string(r->rank) + " has no final status after " +
              std::to_string(r->data.status.steps_done) + " steps";
    if (youngest <= stale) return RunState::Running;
    message += "; no update for " + std::to_string(static_cast<int64_t>(youngest)) + " s";
    return RunState::Killed;
  }
  if (ranks.empty()) {
    message = "no metrics files";
    return RunState::Missing;
  }
  if (row.world_size && static_cast<int64_t>(ranks.size()) < *row.world_size) {
    message =
        std::to_string(ranks.size()) + " of " + std::to_string(*row.world_size) + " rank files";
    return RunState::Partial;
  }
  return RunState::Completed;
}

}  // namespace

bool naturalLess(const std::string& a, const std::string& b) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      size_t iz = i, jz = j;  // skip leading zeros, then longer = larger
      while (iz + 1 < ie && a[iz] == '0') ++iz;
      while (jz + 1 < je && b[jz] == '0') ++jz;
      if (ie - iz != je - jz) return ie - iz < je - jz;
      int c = a.compare(iz, ie - iz, b, jz, je - jz);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  if ((i < a.size()) != (j < b.size())) return i >= a.size();
  return a < b;  // equal up to leading zeros
}

std::vector<std::string> findRunDirs(const std::string& results_dir) {
  std::vector<std::string> dirs;
  std::error_code ec;
  fs::recursive_directory_iterator it(results_dir, fs::directory_options::skip_permission_denied,
                                      ec),
      end;
  for (; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const fs::path& p = it->path();
    if (p.filename().string().rfind('.', 0) == 0) {
      it.disable_recursion_pending();
      continue;
    }
    if (fs::exists(p / "run.toml", ec) || fs::is_directory(p / "metrics", ec)) {
      dirs.push_back(p.string());
      it.disable_recursion_pending();
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

namespace {

// <run_dir>/run.toml into row.config (and its "# world_size" header); "" without one.
std::string readRunToml(const std::string& run_dir, RunRow& row) {
  std::error_code ec;
  if (!fs::exists(fs::path(run_dir) / "run.toml", ec)) return "";
  std::string run_toml = readInputFile((fs::path(run_dir) / "run.toml").string(), "run.toml");
  row.config = flattenConfig(run_toml, "run.toml", row.message);
  static const std::regex kWs("^# world_size = ([0-9]+)$", std::regex::multiline);
  std::smatch m;
  if (std::regex_search(run_toml, m, kWs)) row.world_size = std::stoll(m[1]);
  return run_toml;
}

// Regular files <run_dir>/traces/rank_*.json (no traces/ directory: none).
int64_t countTraces(const std::string& run_dir) {
  static const std::regex kTraceFile("rank_[0-9]+\\.json");
  int64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "traces", ec))
    if (std::regex_match(e.path().filename().string(), kTraceFile) &&
        notRegularFileReason(e.path().string()).empty())
      ++n;
  return n;
}

// Reads every <run_dir>/metrics/rank_N.h5 into `ranks` (sorted by rank), or into
// `corrupt` (rank, why) when it is not a regular file, cannot be read, or is a completed
// file whose numbers fail metricsProblem().
void readRankFiles(const std::string& run_dir, std::vector<RankFile>& ranks,
                   std::vector<std::pair<int, std::string>>& corrupt) {
  static const std::regex kRankFile("rank_([0-9]+)\\.h5");
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "metrics", ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, kRankFile)) continue;
    int rank = std::stoi(m[1]);
    // HDF5 opens by path: a FIFO or device here would block or read without end.
    if (std::string kind = notRegularFileReason(e.path().string()); !kind.empty()) {
      corrupt.emplace_back(rank, name + " is " + kind + ", expected a regular file");
      continue;
    }
    try {
      RankFile r{rank, readMetricsFile(e.path().string()), 0};
      if (r.data.status.state == RunState::Completed) {
        if (std::string problem = metricsProblem(r.data); !problem.empty()) {
          corrupt.emplace_back(rank, e.path().string() + ": " + problem);
          continue;
        }
      }
      r.age_seconds = std::chrono::duration<double>(now - fs::last_write_time(e.path())).count();
      ranks.push_back(std::move(r));
    } catch (const std::exception& ex) {
      corrupt.emplace_back(rank, ex.what());
    }
  }
  std::sort(ranks.begin(), ranks.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  std::sort(corrupt.begin(), corrupt.end());
}

// What the lowest readable rank's attributes say about the run: its /config when there
// is no run.toml (returned in run_toml), world_size, nodes (highest node_rank + 1 over
// all ranks), resumes, host, CPU, peak and GEMM sources and FLOP/s.
// REQUIRES: !ranks.empty().
void readRankAttributes(const std::vector<RankFile>& ranks, RunRow& row, std::string& run_toml) {
  const MetricsData& d0 = ranks[0].data;
  if (row.config.empty()) {
    run_toml = d0.config;
    row.config = flattenConfig(d0.config, "/config", row.message);
  }
  auto ws = d0.attrs.find("world_size");
  if (!row.world_size && ws != d0.attrs.end() && std::holds_alternative<int64_t>(ws->second))
    row.world_size = std::get<int64_t>(ws->second);
  int64_t max_node = -1;
  for (const RankFile& r : ranks) {
    auto nr = r.data.attrs.find("node_rank");
    if (nr != r.data.attrs.end() && std::holds_alternative<int64_t>(nr->second))
      max_node = std::max(max_node, std::get<int64_t>(nr->second));
  }
  if (max_node >= 0) row.nodes = max_node + 1;
  if (auto rc = d0.attrs.find("resume_count");
      rc != d0.attrs.end() && std::holds_alternative<int64_t>(rc->second))
    row.resumes = std::get<int64_t>(rc->second);
  auto text = [&d0](const char* k) {
    auto it = d0.attrs.find(k);
    return it != d0.attrs.end() && std::holds_alternative<std::string>(it->second)
               ? std::get<std::string>(it->second)
               : std::string();
  };
  row.host = text("hostname");
  row.cpu_model = text("cpu_model");
  row.peak_source = text("peak_source");
  row.gemm_source = text("gemm_source");
  row.flops_formula = text("flops_formula");
  if (auto tp = d0.attrs.find("trainable_params");
      tp != d0.attrs.end() && std::holds_alternative<int64_t>(tp->second))
    row.trainable_params = std::get<int64_t>(tp->second);
  auto positive = [&d0](const char* k) -> std::optional<double> {
    auto it = d0.attrs.find(k);
    if (it == d0.attrs.end() || !std::holds_alternative<double>(it->second) ||
        !(std::get<double>(it->second) > 0))
      return std::nullopt;
    return std::get<double>(it->second);
  };
  row.peak_flops = positive("peak_flops");
  row.gemm_flops = positive("gemm_flops");
  if (std::optional<double> busbw = positive("link_busbw_Bps")) row.link_busbw_gbps = *busbw / 1e9;
  if (auto it = d0.attrs.find("interference"); it != d0.attrs.end() &&
                                               std::holds_alternative<double>(it->second) &&
                                               std::isfinite(std::get<double>(it->second)))
    row.interference = std::get<double>(it->second);
  row.tokens_per_cpu_s = positive("tokens_per_cpu_s");
  row.noisy = text("noisy");
  row.env_warnings = text("env_warnings");
}

// Whether the trainer would accept the run's config on its world size (config and layout
// only: the run may come from another machine); invalid runs are not; unknown for an
// older or foreign schema.
std::optional<bool> validityOf(const RunRow& row, const std::string& run_toml,
                               const std::string& run_dir) {
  if (row.status == RunState::Invalid) return false;
  if (run_toml.empty() || !row.world_size) return std::nullopt;
  try {
    Config cfg = recordedConfig(run_toml, run_dir);
    return refusalOf(cfg, static_cast<int>(*row.world_size), Checks::kConfigOnly).empty();
  } catch (const std::exception&) {
    return std::nullopt;  // older or foreign schema: validity unknown
  }
}

}  // namespace

RunRow summarizeRun(const std::string& results_dir, const std::string& run_dir,
                    const AggregateOptions& opts) {
  RunRow row;
  row.tag = fs::path(run_dir).lexically_relative(results_dir).generic_string();
  try {
    std::string run_toml = readRunToml(run_dir, row);
    row.traces = countTraces(run_dir);
    std::vector<RankFile> ranks;
    std::vector<std::pair<int, std::string>> corrupt;
    readRankFiles(run_dir, ranks, corrupt);
    row.ranks_found = static_cast<int64_t>(ranks.size() + corrupt.size());
    if (!ranks.empty()) readRankAttributes(ranks, row, run_toml);
    std::string status_msg;
    row.status = statusOf(row, ranks, corrupt, opts.stale_seconds, status_msg);
    if (!status_msg.empty())
      row.message = status_msg + (row.message.empty() ? "" : "; ") + row.message;
    if (!ranks.empty()) computeNumbers(row, ranks[0], ranks);
    row.is_valid = validityOf(row, run_toml, run_dir);
    workPerStep(row, run_toml, run_dir);
  } catch (const std::exception& e) {
    row.status = RunState::Corrupt;
    row.message = e.what();
  }
  return row;
}

bool experimentKey(const std::string& key) {
  const KeySpec* spec = trainerSchema().find(key);
  return !spec || spec->affects_experiment;
}

AggregateTable aggregateRuns(const std::string& results_dir, const AggregateOptions& opts) {
  AggregateTable t;
  t.results_dir = results_dir;
  const std::vector<std::string> dirs = findRunDirs(results_dir);
  std::vector<std::optional<std::string>> rows = mapInProcesses(
      dirs.size(), opts.jobs,
      [&](size_t i) { return rowToJsonLine(summarizeRun(results_dir, dirs[i], opts)); },
      opts.reader_timeout_s);
  for (size_t i = 0; i < dirs.size(); ++i) {
    if (rows[i]) {
      t.runs.push_back(rowFromJsonLine(*rows[i]));
      continue;
    }
    RunRow r;  // its reader crashed or hung twice
    r.tag = fs::path(dirs[i]).lexically_relative(results_dir).generic_string();
    r.status = RunState::Corrupt;
    r.message = "the HDF5 reader crashed on this run, or gave no answer within " +
                std::to_string(static_cast<int>(opts.reader_timeout_s)) +
                " s (--reader-timeout): a damaged file";
    t.runs.push_back(std::move(r));
  }
  return tableOf(results_dir, std::move(t.runs));
}

AggregateTable tableOf(const std::string& results_dir, std::vector<RunRow> rows) {
  AggregateTable t;
  t.results_dir = results_dir;
  t.runs = std::move(rows);
  std::sort(t.runs.begin(), t.runs.end(),
            [](const RunRow& a, const RunRow& b) { return naturalLess(a.tag, b.tag); });

  // Experiment keys: varying if any two runs with a config disagree (or one lacks it).
  std::set<std::string> keys;
  size_t with_config = 0;
  for (const RunRow& r : t.runs) {
    with_config += !r.config.empty();
    for (const auto& [k, v] : r.config) keys.insert(k);
  }
  for (const std::string& k : keys) {
    if (!experimentKey(k)) continue;
    std::optional<Cell> first;
    bool varies = false;
    for (const RunRow& r : t.runs) {
      if (r.config.empty()) continue;
      auto it = r.config.find(k);
      if (it == r.config.end()) {
        varies = true;
        break;
      }
      if (!first)
        first = it->second;
      else if (!(*first == it->second)) {
        varies = true;
        break;
      }
    }
    if (varies && with_config > 1)
      t.varying.push_back(k);
    else if (first)
      t.constant[k] = *first;
  }
  groupRepeats(t);
  return t;
}

}  // namespace ftb
