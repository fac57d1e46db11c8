#include "sweep_tagger/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/median.h"
#include "sweep_tagger/axes.h"

namespace ftb {
namespace {

std::string fmt(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string configText(const RunRow& r, const std::string& key) {
  auto it = r.config.find(key);
  return it == r.config.end() ? "" : cellText(it->second);
}

// Groups of runs by groupKey, in table order of their first run.
std::vector<std::vector<const RunRow*>> groupsOf(const AggregateTable& t) {
  std::vector<std::vector<const RunRow*>> groups;
  std::map<std::string, size_t> at;
  for (const RunRow& r : t.runs) {
    auto [it, fresh] = at.emplace(groupKey(r), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(&r);
  }
  return groups;
}

// One configuration's figure for a ranking: over its runs in the ranking.
struct Figure {
  std::string label;              // its name in the ranking (groupLabel until nameFigures)
  const RunRow* first = nullptr;  // its first run in the figure
  size_t n = 0, noisy = 0;        // runs, and how many of them the trainer marked noisy
  double median = 0, min = 0, max = 0;
  std::optional<double> step_lo, step_hi;  // the step band, in the metric's unit
};

struct MetricSpec {
  const char* title;  // what is ranked
  const char* unit;
  int prec;
  bool higher_better;
  const char* missing;  // why a run that counts has no figure
  std::function<std::optional<double>(const RunRow&)> value;
  // The step band in the metric's unit from a run's tokens/s band, if the metric has one.
  std::function<std::optional<double>(const RunRow&, double tokens_per_s)> from_tokens;
};

MetricSpec metricSpec(BestMetric m) {
  switch (m) {
    case BestMetric::kCost:
      return {
          "cost ($ per million dataset tokens, metrics.price_per_hour x world size / M tokens/h)",
          "$/M tokens",
          4,
          false,
          "no price: neither metrics.price_per_hour in the run nor --price-per-hour",
          [](const RunRow& r) { return r.usd_per_mt; },
          [](const RunRow& r, double tps) -> std::optional<double> {
            if (!r.price_per_hour || !r.world_size || !(tps > 0)) return std::nullopt;
            return *r.price_per_hour * double(*r.world_size) / (tps * 3600 / 1e6);
          }};
    case BestMetric::kMemory:
      return {"peak memory (RSS MiB, max over ranks)",
              "MiB",
              1,
              false,
              "no peak memory recorded",
              [](const RunRow& r) { return r.peak_mem_mib; },
              nullptr};
    case BestMetric::kTokensPerCpuS:
      return {"padded tokens per CPU-second (global: each rank's tokens over its own CPU time "
              "per compute thread, which other processes on its CPUs do not stretch)",
              "tokens/CPU-s",
              1,
              true,
              "no CPU-time figure (recorded before tokens_per_cpu_s, or /proc unreadable)",
              [](const RunRow& r) { return r.tokens_per_cpu_s; },
              nullptr};
    case BestMetric::kTokensPerS:
      break;
  }
  return {"dataset tokens/s (global)",
          "tokens/s",
          1,
          true,
          "no measured step (tokens/s empty)",
          [](const RunRow& r) { return r.tokens_per_s_dataset; },
          [](const RunRow&, double tps) -> std::optional<double> { return tps; }};
}

// Why a run is not in a ranking by `m` ("" when it is); drop_noisy: --exclude-noisy.
std::string unrankedReason(const RunRow& r, const MetricSpec& m, bool drop_noisy) {
  if (std::string why = exclusionReason(r); !why.empty()) return why;
  if (drop_noisy && !r.noisy.empty()) return "noisy, left out by --exclude-noisy: " + r.noisy;
  if (!m.value(r)) return m.missing;
  return "";
}

// The group's figure over its runs in the ranking (unrankedReason ""); none when it has none.
std::optional<Figure> figureOf(const std::vector<const RunRow*>& group, const MetricSpec& m,
                               bool drop_noisy) {
  Figure f;
  std::vector<double> values;
  for (const RunRow* r : group) {
    if (!unrankedReason(*r, m, drop_noisy).empty()) continue;
    values.push_back(*m.value(*r));
    f.noisy += !r->noisy.empty();
    if (!f.first) f.first = r;
    if (!m.from_tokens || !r->step_tokens_p50 || !(*r->step_tokens_p50 > 0)) continue;
    // The run's figure scaled by its step spread: p10/p50 and p90/p50 of the step rate.
    const double tps = *r->tokens_per_s_dataset, p50 = *r->step_tokens_p50;
    for (double q : {*r->step_tokens_p10 / p50, *r->step_tokens_p90 / p50})
      if (std::optional<double> x = m.from_tokens(*r, tps * q)) {
        f.step_lo = std::min(f.step_lo.value_or(*x), *x);
        f.step_hi = std::max(f.step_hi.value_or(*x), *x);
      }
  }
  if (values.empty()) return std::nullopt;
  f.label = groupLabel(*f.first);
  f.n = values.size();
  f.median = medianOf(values);
  f.min = *std::min_element(values.begin(), values.end());
  f.max = *std::max_element(values.begin(), values.end());
  return f;
}

std::string describeFigure(const Figure& f, const MetricSpec& m) {
  std::string s =
      f.label + ": " + fmt(f.median, m.prec) + " " + m.unit + " (" + std::to_string(f.n) +
      (f.n == 1 ? " run" : " runs, min-max " + fmt(f.min, m.prec) + "-" + fmt(f.max, m.prec));
  if (f.step_lo) s += "; steps p10-p90 " + fmt(*f.step_lo, m.prec) + "-" + fmt(*f.step_hi, m.prec);
  s += ")";
  if (f.noisy > 0)
    s += " [noisy: " + std::to_string(f.noisy) + " of " + std::to_string(f.n) +
         (f.n == 1 ? " run]" : " runs]");
  return s;
}

// One test of the noise rule (compare.h (a), (b)) of `a` over `b`.
struct NoiseTest {
  std::string what;    // "the repeats' ranges"
  std::string detail;  // what with both figures
  bool held = false;
};

std::vector<NoiseTest> noiseTests(const Figure& a, const Figure& b, const MetricSpec& m) {
  auto beats = [&](double x, double y) { return m.higher_better ? x > y : x < y; };
  auto range = [&](const Figure& f, double lo, double hi) {
    return f.label + " " + fmt(lo, m.prec) + "-" + fmt(hi, m.prec);
  };
  std::vector<NoiseTest> tests;
  if (a.n >= 2 && b.n >= 2) {
    const double a_worst = m.higher_better ? a.min : a.max;
    const double b_best = m.higher_better ? b.max : b.min;
    tests.push_back(
        {"the repeats' ranges",
         "the repeats' ranges (" + range(a, a.min, a.max) + ", " + range(b, b.min, b.max) + ")",
         beats(a_worst, b_best)});
  }
  if (a.step_lo && b.step_lo) {
    const double a_step = m.higher_better ? *a.step_lo : *a.step_hi;
    const double b_step = m.higher_better ? *b.step_hi : *b.step_lo;
    tests.push_back({"the step bands p10-p90",
                     "the step bands p10-p90 (" + range(a, *a.step_lo, *a.step_hi) + ", " +
                         range(b, *b.step_lo, *b.step_hi) + ")",
                     beats(a_step, b_step)});
  }
  return tests;
}

// The noise verdict of `a` over `b`: in full (every figure), or brief (the tests by name).
std::string verdict(const Figure& a, const Figure& b, const MetricSpec& m, bool brief) {
  std::string held;
  for (const NoiseTest& t : noiseTests(a, b, m)) {
    if (!t.held)
      return brief ? "within noise (" + t.what + " overlap)"
                   : "within noise: " + t.detail + " overlap";
    held += (held.empty() ? "" : brief ? " and " : "; ") + (brief ? t.what : t.detail);
  }
  if (held.empty())
    return brief ? std::string("noise not measured (one run each, no per-step figure)")
                 : "noise not measured: one run each and no per-step figure; run the sweep "
                   "with repeats >= 2";
  return brief ? "beyond noise (no overlap of " + held + ")"
               : "beyond noise: no overlap of " + held;
}

// How much better `a` is than `b`, in %: a / b - 1, or 1 - a / b for lower-better metrics.
double marginPercent(const Figure& a, const Figure& b, const MetricSpec& m) {
  return 100 * (m.higher_better ? a.median / b.median - 1 : 1 - a.median / b.median);
}

}  // namespace

std::string exclusionReason(const RunRow& r) {
  if (r.status != RunState::Completed)
    return toString(r.status) + (r.message.empty() ? "" : ": " + r.message);
  if (!r.is_valid) return "validity unknown: the run's config is of an older or foreign schema";
  if (!*r.is_valid) return "invalid: the trainer refuses this config on this world size";
  if (!r.tokens_per_s_dataset) return "no measured step (tokens/s empty)";
  return "";
}

std::string groupKey(const RunRow& r) { return r.config_hash.empty() ? r.tag : r.config_hash; }

std::string groupLabel(const RunRow& r) {
  const std::string repeat = configText(r, "sweep.repeat");
  if (repeat.empty() || repeat == "0") return r.tag;
  const std::string suffix = ".r" + repeat;
  const bool has = r.tag.size() > suffix.size() &&
                   r.tag.compare(r.tag.size() - suffix.size(), suffix.size(), suffix) == 0;
  return has ? r.tag.substr(0, r.tag.size() - suffix.size()) : r.tag;
}

void groupRepeats(AggregateTable& t) {
  std::map<std::string, std::vector<double>> values;
  for (const RunRow& r : t.runs)
    if (exclusionReason(r).empty()) values[groupKey(r)].push_back(*r.tokens_per_s_dataset);
  for (RunRow& r : t.runs) {
    auto it = values.find(groupKey(r));
    if (it == values.end()) continue;
    r.repeats = static_cast<int64_t>(it->second.size());
    r.tokens_median = medianOf(it->second);
    r.tokens_min = *std::min_element(it->second.begin(), it->second.end());
    r.tokens_max = *std::max_element(it->second.begin(), it->second.end());
  }
}

std::string workNote(const AggregateTable& t) {
  std::set<int64_t> seqs;
  std::set<std::string> modes;
  for (const RunRow& r : t.runs)
    if (r.global_batch_seqs) {
      seqs.insert(*r.global_batch_seqs);
      modes.insert(r.batch_mode);
    }
  if (seqs.empty()) return "";
  std::string mode = modes.size() == 1 ? *modes.begin() : "mixed";
  if (mode == "fixed global batch") mode += " (training.global_batch_size; grad_accum follows)";
  if (mode == "fixed grad_accum") mode += " (training.grad_accum_steps as configured)";
  std::string out =
      "Work per optimizer step (global batch = micro_batch x grad_accum x "
      "data-parallel size, sequences): ";
  if (seqs.size() == 1)
    return out + std::to_string(*seqs.begin()) + " in every run: equal work. Mode: " + mode +
           ".\n\n";
  return out + "varies from " + std::to_string(*seqs.begin()) + " to " +
         std::to_string(*seqs.rbegin()) +
         ": the rows do NOT do equal work per step. Mode: " + mode +
         ". Set global_batch_size in the sweep file to compare at equal work.\n\n";
}

std::string repeatsTable(const AggregateTable& t) {
  const std::vector<std::vector<const RunRow*>> groups = groupsOf(t);
  if (std::none_of(groups.begin(), groups.end(), [](const auto& g) { return g.size() > 1; }))
    return "";
  std::string out =
      "\nRepeats (runs of one configuration: the same config hash; median and min-max of the "
      "runs that count; step tokens/s (padded) = lowest p10 / median p50 / highest p90 of "
      "their steps):\n\n| configuration | layout | runs counted / listed | tokens/s global "
      "(dataset) median | min-max | spread % of median | step tokens/s p10/p50/p90 (padded) |\n"
      "|---|---|--:|--:|--:|--:|--:|\n";
  const MetricSpec m = metricSpec(BestMetric::kTokensPerS);
  for (const auto& g : groups) {
    std::optional<Figure> f = figureOf(g, m, false);
    std::vector<double> p10, p50, p90;  // of the counted runs' padded step rates
    for (const RunRow* r : g)
      if (exclusionReason(*r).empty() && r->step_tokens_p50) {
        p10.push_back(*r->step_tokens_p10);
        p50.push_back(*r->step_tokens_p50);
        p90.push_back(*r->step_tokens_p90);
      }
    std::string row = "| " + groupLabel(*g[0]) + " | " + configText(*g[0], "sweep.layout") + " | " +
                      std::to_string(f ? f->n : 0) + " / " + std::to_string(g.size());
    if (f)
      row += " | " + fmt(f->median, 1) + " | " + fmt(f->min, 1) + "-" + fmt(f->max, 1) + " | " +
             fmt(f->median > 0 ? 100 * (f->max - f->min) / f->median : 0, 1) + " | " +
             (p50.empty()
                  ? ""
                  : fmt(*std::min_element(p10.begin(), p10.end()), 1) + "/" + fmt(medianOf(p50), 1) +
                        "/" + fmt(*std::max_element(p90.begin(), p90.end()), 1)) +
             " |";
    else
      row += " | | | | |";
    out += row + "\n";
  }
  return out;
}

BestMetric parseBestMetric(const std::string& name) {
  if (name == "tokens_per_s") return BestMetric::kTokensPerS;
  if (name == "cost") return BestMetric::kCost;
  if (name == "memory") return BestMetric::kMemory;
  if (name == "tokens_per_cpu_s") return BestMetric::kTokensPerCpuS;
  throw ConfigError("--best", "command line",
                    "expected tokens_per_s, cost, memory or tokens_per_cpu_s, got '" + name + "'",
                    "--best tokens_per_s ranks by dataset tokens/s (higher is better)");
}

namespace {

// Every configuration that has the metric, best first (equal medians: table order).
std::vector<Figure> rankedFigures(const AggregateTable& t, const MetricSpec& m, bool drop_noisy) {
  std::vector<Figure> ranked;
  for (const auto& g : groupsOf(t))
    if (std::optional<Figure> f = figureOf(g, m, drop_noisy)) ranked.push_back(*f);
  std::stable_sort(ranked.begin(), ranked.end(), [&](const Figure& a, const Figure& b) {
    return m.higher_better ? a.median > b.median : a.median < b.median;
  });
  return ranked;
}

// Names each configuration by the axes that differ between the ranked ones (axes.h); keeps
// the tag when no axis differs, and adds it in parentheses when two would share a name.
void nameFigures(std::vector<Figure>& ranked, const AggregateTable& t) {
  std::vector<const RunRow*> firsts;
  for (const Figure& f : ranked) firsts.push_back(f.first);
  const std::vector<Axis> axes = varyingAxes(t, firsts);
  std::vector<std::string> names;
  std::map<std::string, int> uses;
  for (const Figure& f : ranked) ++uses[names.emplace_back(axesName(axes, *f.first, "", " "))];
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (names[i].empty()) continue;
    ranked[i].label = uses[names[i]] > 1 ? names[i] + " (" + ranked[i].label + ")" : names[i];
  }
}

// A comparison's caveat when either side has noisy runs ("" when neither has).
std::string noisyCaveat(const Figure& a, const Figure& b) {
  return a.noisy + b.noisy > 0 ? "; noisy runs on either side: the machine may have made it" : "";
}

// The ranked lines: each configuration, and below it how it compares with the next one.
std::string rankingLines(const std::vector<Figure>& ranked, const MetricSpec& m) {
  std::string out;
  for (size_t i = 0; i < ranked.size(); ++i) {
    out += "  " + std::to_string(i + 1) + ". " + describeFigure(ranked[i], m) + "\n";
    if (i + 1 == ranked.size()) break;
    out += "     vs " + std::to_string(i + 2) +
           ".: " + fmt(marginPercent(ranked[i], ranked[i + 1], m), 1) + " % " +
           (m.higher_better ? "higher, " : "lower, ") + verdict(ranked[i], ranked[i + 1], m, true) +
           noisyCaveat(ranked[i], ranked[i + 1]) + "\n";
  }
  return out;
}

// What the ranking says about noisy runs ("" when none was ranked nor asked about).
std::string noisyNote(const std::vector<Figure>& ranked, bool asked, bool dropped,
                      BestMetric metric) {
  size_t noisy = 0;
  for (const Figure& f : ranked) noisy += f.noisy;
  if (asked && !dropped)
    return "--exclude-noisy: every run that counts is noisy, so excluding them would leave "
           "nothing: ranked anyway, marked [noisy]. Their times are not the configurations' "
           "alone: quiet the machine and run again for a ranking to trust.\n";
  if (noisy == 0) return "";
  return "The ranking includes " + std::to_string(noisy) +
         " noisy run(s), marked [noisy]: the trainer found their interference above "
         "metrics.max_interference, so their times are not the configurations' alone "
         "(--exclude-noisy ranks without them" +
         (metric == BestMetric::kTokensPerCpuS
              ? "; tokens per CPU-second leave out the CPU time other processes took, not "
                "the caches and memory bandwidth they shared).\n"
              : "; --best tokens_per_cpu_s ranks by each run's own CPU time, which other "
                "processes on its CPUs do not stretch).\n");
}

// Which price the cost ranking used ("" for other metrics or without --price-per-hour).
std::string priceNote(const AggregateTable& t, const std::vector<Figure>& ranked,
                      BestMetric metric) {
  if (metric != BestMetric::kCost) return "";
  size_t flag = 0, recorded = 0;
  std::optional<double> usd;
  for (const RunRow& r : t.runs) {
    if (!r.usd_per_mt || !exclusionReason(r).empty()) continue;
    r.price_from_flag ? ++flag : ++recorded;
    if (r.price_from_flag) usd = *r.price_per_hour;
  }
  if (flag == 0 || ranked.empty()) return "";
  return "Price: --price-per-hour " + formatDouble(*usd) + " $ per device-hour for " +
         std::to_string(flag) + " run(s) recorded without metrics.price_per_hour; " +
         std::to_string(recorded) + " run(s) keep their recorded price.\n";
}

std::string excludedList(const AggregateTable& t, const MetricSpec& m, bool drop_noisy) {
  std::string excluded;
  size_t n = 0;
  for (const RunRow& r : t.runs)
    if (std::string why = unrankedReason(r, m, drop_noisy); !why.empty()) {
      excluded += "  - " + r.tag + ": " + why + "\n";
      ++n;
    }
  return n ? "Excluded from the ranking (" + std::to_string(n) + "):\n" + excluded : "";
}

}  // namespace

BestReport bestReport(const AggregateTable& t, BestMetric metric, const BestOptions& opts) {
  const MetricSpec m = metricSpec(metric);
  auto counts = [](const RunRow& r) { return exclusionReason(r).empty(); };
  if (std::none_of(t.runs.begin(), t.runs.end(), counts))
    return {"Nothing to rank: no run completed with a valid config and a measured step.\n" +
                excludedList(t, m, false),
            1};
  const bool drop_noisy =
      opts.exclude_noisy && std::any_of(t.runs.begin(), t.runs.end(), [&](const RunRow& r) {
        return counts(r) && r.noisy.empty();
      });
  std::vector<Figure> ranked = rankedFigures(t, m, drop_noisy);
  if (ranked.empty() && metric == BestMetric::kCost)
    throw ConfigError("--best", "command line",
                      "no run that counts has a price: cost cannot be ranked",
                      "set metrics.price_per_hour ($ per device-hour) in the runs' config, or "
                      "pass --price-per-hour USD to aggregate");
  if (ranked.empty())
    return {std::string("Nothing to rank by ") + m.title + ": no run that counts has it.\n" +
                excludedList(t, m, drop_noisy),
            1};
  nameFigures(ranked, t);
  BestReport report;
  for (const Figure& f : ranked) report.ranked.push_back(groupKey(*f.first));
  if (ranked.size() >= 2) {
    const std::vector<NoiseTest> tests = noiseTests(ranked[0], ranked[1], m);
    report.winner_beyond_noise =
        !tests.empty() &&
        std::all_of(tests.begin(), tests.end(), [](const NoiseTest& n) { return n.held; });
  }
  std::string out = std::string("Ranking by ") + m.title + ", " +
                    (m.higher_better ? "higher" : "lower") +
                    " is better: each configuration's median over its runs, its spread (min-max "
                    "of its runs) and runs; below it, whether it beats the next one beyond the "
                    "noise:\n" +
                    rankingLines(ranked, m);
  if (ranked.size() >= 2)
    out += ranked[0].label + " beats " + ranked[1].label + " by " +
           fmt(marginPercent(ranked[0], ranked[1], m), 1) + " %, " +
           verdict(ranked[0], ranked[1], m, false) + noisyCaveat(ranked[0], ranked[1]) + ".\n";
  else
    out += "Only one configuration counts: nothing to compare.\n";
  out += noisyNote(ranked, opts.exclude_noisy, drop_noisy, metric) + priceNote(t, ranked, metric) +
         excludedList(t, m, drop_noisy);
  report.text = out;
  return report;
}

size_t applyPrice(AggregateTable& t, double usd_per_hour) {
  size_t priced = 0;
  for (RunRow& r : t.runs) {
    if (r.price_per_hour) continue;
    r.price_per_hour = usd_per_hour;
    r.price_from_flag = true;
    if (r.mt_per_hour && *r.mt_per_hour > 0 && r.world_size)
      r.usd_per_mt = usd_per_hour * double(*r.world_size) / *r.mt_per_hour;
    ++priced;
  }
  return priced;
}

namespace {

// ---- aggregate --compare REF.csv (compare.h compareReport) ----

// One configuration of one side of a comparison: its runs (a group) and its figure.
struct CmpConfig {
  std::vector<const RunRow*> runs;
  std::optional<Figure> fig;
  std::string name;  // the ranking's naming (nameFigures)
  bool matched = false;
};

std::vector<CmpConfig> cmpConfigs(const AggregateTable& t, const MetricSpec& m) {
  std::vector<CmpConfig> out;
  std::vector<Figure> names;
  for (auto& g : groupsOf(t)) {
    out.push_back({g, figureOf(g, m, false), "", false});
    Figure f;
    f.label = groupLabel(*g[0]);
    f.first = g[0];
    names.push_back(f);
  }
  nameFigures(names, t);
  for (size_t i = 0; i < out.size(); ++i) out[i].name = names[i].label;
  return out;
}

// A key's value in a run: its text, "" when not set, none when unknown (a reference run
// whose constants were not read).
std::optional<std::string> cmpValue(const RunRow& r, const std::string& key, bool all_known) {
  auto it = r.config.find(key);
  if (it != r.config.end()) return cellText(it->second);
  if (all_known) return std::string();
  return std::nullopt;
}

// "key: ref -> new" for every experiment key known on both sides that differs, then host
// and cpu_model when both are recorded and differ.
std::vector<std::string> cmpDiffs(const RunRow& ref, bool ref_known, const RunRow& now) {
  std::set<std::string> keys;
  for (const RunRow* r : {&ref, &now})
    for (const auto& [k, v] : r->config)
      if (experimentKey(k)) keys.insert(k);
  std::vector<std::string> out;
  auto shown = [](const std::string& v) { return v.empty() ? std::string("-") : v; };
  for (const std::string& k : keys) {
    const std::optional<std::string> a = cmpValue(ref, k, ref_known);
    const std::string b = cmpValue(now, k, true).value_or("");
    if (a && *a != b) out.push_back(k + ": " + shown(*a) + " -> " + shown(b));
  }
  if (!ref.host.empty() && !now.host.empty() && ref.host != now.host)
    out.push_back("host: " + ref.host + " -> " + now.host);
  if (!ref.cpu_model.empty() && !now.cpu_model.empty() && ref.cpu_model != now.cpu_model)
    out.push_back("cpu_model: " + ref.cpu_model + " -> " + now.cpu_model);
  return out;
}

// The sweep point of a run: world size, nodes, layout and the values of `keys`; none when
// a value is unknown.
std::optional<std::string> cmpPoint(const RunRow& r, const std::vector<std::string>& keys,
                                    bool all_known) {
  std::string p = cellText(r.world_size ? Cell(*r.world_size) : Cell()) + "\n" +
                  cellText(r.nodes ? Cell(*r.nodes) : Cell()) + "\n" +
                  cmpValue(r, "sweep.layout", true).value_or("");
  for (const std::string& k : keys) {
    const std::optional<std::string> v = cmpValue(r, k, all_known);
    if (!v) return std::nullopt;
    p += "\n" + *v;
  }
  return p;
}

// A matched pair: the reference configuration (index) of each new one, or none.
std::vector<std::optional<size_t>> cmpMatch(std::vector<CmpConfig>& ref, bool ref_known,
                                            std::vector<CmpConfig>& now,
                                            const std::vector<std::string>& now_varying) {
  std::vector<std::optional<size_t>> match(now.size());
  std::map<std::string, size_t> by_hash;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!ref[i].runs[0]->config_hash.empty()) by_hash.emplace(ref[i].runs[0]->config_hash, i);
  for (size_t j = 0; j < now.size(); ++j) {
    auto it = by_hash.find(now[j].runs[0]->config_hash);
    if (now[j].runs[0]->config_hash.empty() || it == by_hash.end() || ref[it->second].matched)
      continue;
    match[j] = it->second;
    ref[it->second].matched = now[j].matched = true;
  }
  for (size_t j = 0; j < now.size(); ++j) {
    if (now[j].matched) continue;
    const std::optional<std::string> point = cmpPoint(*now[j].runs[0], now_varying, true);
    size_t fewest = SIZE_MAX;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (ref[i].matched || cmpPoint(*ref[i].runs[0], now_varying, ref_known) != point) continue;
      const size_t n = cmpDiffs(*ref[i].runs[0], ref_known, *now[j].runs[0]).size();
      if (n < fewest) fewest = n, match[j] = i;
    }
    if (match[j]) ref[*match[j]].matched = now[j].matched = true;
  }
  return match;
}

// One row of the comparison.
struct CmpRow {
  std::string name, ref, now, change, verdict, rule, diffs;
  double change_pct = 0;
  bool regression = false;
};

std::string cmpFigureText(const std::optional<Figure>& f, const MetricSpec& m) {
  if (!f) return "no run counts";
  return fmt(f->median, m.prec) + " (" + std::to_string(f->n) + (f->n == 1 ? " run)" : " runs)");
}

// The verdict of `now` against `ref` by the noise rule (compare.h), with the rule applied.
void cmpVerdict(const Figure& ref, const Figure& now, const MetricSpec& m, CmpRow& row) {
  row.change_pct = 100 * (now.median / ref.median - 1);
  row.change = (row.change_pct >= 0 ? "+" : "") + fmt(row.change_pct, 1);
  const bool better = m.higher_better ? now.median >= ref.median : now.median <= ref.median;
  const Figure& a = better ? now : ref;
  const Figure& b = better ? ref : now;
  const std::vector<NoiseTest> tests = noiseTests(a, b, m);
  const bool beyond = !tests.empty() && std::all_of(tests.begin(), tests.end(),
                                                    [](const NoiseTest& t) { return t.held; });
  row.rule = verdict(a, b, m, true);
  row.regression = beyond && !better;
  row.verdict = !beyond ? row.rule.substr(0, row.rule.find(" (")) : better ? "improvement"
                                                                           : "regression";
  std::string single;
  if (ref.n < 2) single = "ref";
  if (now.n < 2) single += single.empty() ? "new" : " and new";
  if (!single.empty())
    row.rule += "; no repeats in " + single + ": spread unknown, the ranges not tested";
  row.rule += noisyCaveat(ref, now);
}

CmpRow cmpRow(const CmpConfig* ref, bool ref_known, const CmpConfig* now, const MetricSpec& m) {
  CmpRow row;
  row.name = now ? now->name : ref->name;
  row.ref = ref ? cmpFigureText(ref->fig, m) : "";
  row.now = now ? cmpFigureText(now->fig, m) : "";
  if (!ref || !now) {
    row.verdict = ref ? "only in ref" : "only in new";
    return row;
  }
  std::string diffs;
  for (const std::string& d : cmpDiffs(*ref->runs[0], ref_known, *now->runs[0]))
    diffs += (diffs.empty() ? "" : "; ") + d;
  row.diffs = diffs;
  if (ref->fig && now->fig && ref->fig->median > 0)
    cmpVerdict(*ref->fig, *now->fig, m, row);
  else if (ref->fig && now->fig)
    row.verdict = "not compared: the reference median is 0";
  else
    row.verdict = std::string("not compared: no run counts in ") + (ref->fig ? "new" : "ref");
  return row;
}

std::string cmpTable(const std::vector<CmpRow>& rows, const MetricSpec& m) {
  std::string out = std::string("| configuration | ref median ") + m.unit + " (runs) | new median " +
                    m.unit + " (runs) | change % | verdict | noise rule applied | differing keys "
                    "(ref -> new) |\n|---|--:|--:|--:|---|---|---|\n";
  for (const CmpRow& r : rows)
    out += "| " + markdownCell(r.name) + " | " + r.ref + " | " + r.now + " | " + r.change + " | " +
           r.verdict + " | " + r.rule + " | " + markdownCell(r.diffs) + " |\n";
  return out;
}

// The closing lines: regressions, --fail-on-regression, and what could not be compared.
std::string cmpSummary(const std::vector<CmpRow>& rows, const ReferenceTable& ref,
                       const CompareOptions& opts, int& exit_code) {
  std::string regressed, failed, out;
  size_t both = 0;
  for (const CmpRow& r : rows) {
    both += !r.ref.empty() && !r.now.empty();
    if (!r.regression) continue;
    const std::string item = r.name + " (" + fmt(-r.change_pct, 1) + " % lower)";
    regressed += (regressed.empty() ? "" : ", ") + item;
    if (opts.fail_pct && -r.change_pct > *opts.fail_pct)
      failed += (failed.empty() ? "" : ", ") + item;
  }
  if (both == 0)
    out += "No configuration is in both tables: nothing compared (the names above show each "
           "side's configurations).\n";
  out += regressed.empty() ? "No regression beyond noise.\n"
                           : "Regressions beyond noise: " + regressed + ".\n";
  if (!ref.constants_known)
    out += ref.constants_path + " not found: the keys equal in every reference run are "
           "unknown, so only the keys that varied there (its columns) are compared; "
           "`aggregate --out REF.csv` writes both files.\n";
  if (!opts.fail_pct) return out;
  const std::string flag = "--fail-on-regression " + formatDouble(*opts.fail_pct) + ": ";
  if (failed.empty()) return out + flag + "no configuration regressed beyond noise by more " +
                             "than " + formatDouble(*opts.fail_pct) + " %.\n";
  exit_code = 1;
  return out + flag + "regressed beyond noise by more than " + formatDouble(*opts.fail_pct) +
         " %: " + failed + ": exit 1.\n";
}

}  // namespace

CompareReport compareReport(const ReferenceTable& ref, const AggregateTable& now,
                            const CompareOptions& opts) {
  const MetricSpec m = metricSpec(BestMetric::kTokensPerS);
  std::vector<CmpConfig> ref_cfgs = cmpConfigs(ref.table, m), now_cfgs = cmpConfigs(now, m);
  const std::vector<std::optional<size_t>> match =
      cmpMatch(ref_cfgs, ref.constants_known, now_cfgs, now.varying);
  std::vector<CmpRow> rows;
  for (size_t j = 0; j < now_cfgs.size(); ++j)
    rows.push_back(cmpRow(match[j] ? &ref_cfgs[*match[j]] : nullptr, ref.constants_known,
                          &now_cfgs[j], m));
  for (const CmpConfig& c : ref_cfgs)
    if (!c.matched) rows.push_back(cmpRow(&c, ref.constants_known, nullptr, m));
  CompareReport report;
  report.text = std::string("Comparison with ") + ref.path + " by " + m.title + ", " +
                (m.higher_better ? "higher" : "lower") +
                " is better: each configuration's median over its runs that count, in the "
                "reference and here; a regression or improvement is a change beyond the noise "
                "of both (the ranking's rule: the repeats' min-max ranges and the step bands "
                "p10-p90 do not overlap):\n\n" +
                cmpTable(rows, m) + "\n";
  report.text += cmpSummary(rows, ref, opts, report.exit_code);
  return report;
}

}  // namespace ftb
