#include "sweep_tagger/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <vector>

#include "common/error.h"

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

double median(std::vector<double> v) {  // REQUIRES: !v.empty()
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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

// One configuration's figure for a ranking: over its counted runs.
struct Figure {
  std::string label;
  size_t n = 0;
  double median = 0, min = 0, max = 0;
  std::optional<double> step_lo, step_hi;  // the step band, in the metric's unit
};

struct MetricSpec {
  const char* title;  // what is ranked
  const char* unit;
  int prec;
  bool higher_better;
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
          [](const RunRow& r) { return r.usd_per_mt; },
          [](const RunRow& r, double tps) -> std::optional<double> {
            if (!r.price_per_hour || !r.world_size || !(tps > 0)) return std::nullopt;
            return *r.price_per_hour * double(*r.world_size) / (tps * 3600 / 1e6);
          }};
    case BestMetric::kMemory:
      return {"peak memory (RSS MiB, max over ranks)",        "MiB",  1, false,
              [](const RunRow& r) { return r.peak_mem_mib; }, nullptr};
    case BestMetric::kTokensPerS:
      break;
  }
  return {"dataset tokens/s (global)",
          "tokens/s",
          1,
          true,
          [](const RunRow& r) { return r.tokens_per_s_dataset; },
          [](const RunRow&, double tps) -> std::optional<double> { return tps; }};
}

std::optional<Figure> figureOf(const std::vector<const RunRow*>& group, const MetricSpec& m) {
  Figure f;
  std::vector<double> values;
  for (const RunRow* r : group) {
    if (!exclusionReason(*r).empty()) continue;
    std::optional<double> v = m.value(*r);
    if (!v) continue;
    values.push_back(*v);
    if (f.label.empty()) f.label = groupLabel(*r);
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
  f.n = values.size();
  f.median = median(values);
  f.min = *std::min_element(values.begin(), values.end());
  f.max = *std::max_element(values.begin(), values.end());
  return f;
}

std::string describeFigure(const Figure& f, const MetricSpec& m) {
  std::string s =
      f.label + ": " + fmt(f.median, m.prec) + " " + m.unit + " (" + std::to_string(f.n) +
      (f.n == 1 ? " run" : " runs, min-max " + fmt(f.min, m.prec) + "-" + fmt(f.max, m.prec));
  if (f.step_lo) s += "; steps p10-p90 " + fmt(*f.step_lo, m.prec) + "-" + fmt(*f.step_hi, m.prec);
  return s + ")";
}

// The noise verdict of `a` (the winner) over `b`; see compare.h (a) and (b).
std::string verdict(const Figure& a, const Figure& b, const MetricSpec& m) {
  auto beats = [&](double x, double y) { return m.higher_better ? x > y : x < y; };
  const double a_worst = m.higher_better ? a.min : a.max, b_best = m.higher_better ? b.max : b.min;
  std::vector<std::string> held, failed;
  if (a.n >= 2 && b.n >= 2) {
    const std::string what = "the repeats' ranges (" + a.label + " " + fmt(a.min, m.prec) + "-" +
                             fmt(a.max, m.prec) + ", " + b.label + " " + fmt(b.min, m.prec) + "-" +
                             fmt(b.max, m.prec) + ")";
    (beats(a_worst, b_best) ? held : failed).push_back(what);
  }
  if (a.step_lo && b.step_lo) {
    const double a_step = m.higher_better ? *a.step_lo : *a.step_hi;
    const double b_step = m.higher_better ? *b.step_hi : *b.step_lo;
    const std::string what = "the step bands p10-p90 (" + a.label + " " + fmt(*a.step_lo, m.prec) +
                             "-" + fmt(*a.step_hi, m.prec) + ", " + b.label + " " +
                             fmt(*b.step_lo, m.prec) + "-" + fmt(*b.step_hi, m.prec) + ")";
    (beats(a_step, b_step) ? held : failed).push_back(what);
  }
  if (!failed.empty()) return "within noise: " + failed[0] + " overlap";
  if (held.empty())
    return "noise not measured: one run each and no per-step figure; run the sweep with "
           "repeats >= 2";
  std::string why;
  for (const std::string& h : held) why += (why.empty() ? "" : "; ") + h;
  return "beyond noise: no overlap of " + why;
}

}  // namespace

std::string exclusionReason(const RunRow& r) {
  if (r.status != RunState::Completed)
    return toString(r.status) + (r.message.empty() ? "" : ": " + r.message);
  if (!r.is_valid) return "validity unknown: the run's config is of an older or foreign schema";
  if (!*r.is_valid) return "invalid: the trainer refuses this config on this world size";
  if (!r.tokens_per_s_dataset) return "no measured step (tokens/s empty)";
  if (!r.noisy.empty()) return "noisy: " + r.noisy;
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
    r.tokens_median = median(it->second);
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
    std::optional<Figure> f = figureOf(g, m);
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
                  : fmt(*std::min_element(p10.begin(), p10.end()), 1) + "/" + fmt(median(p50), 1) +
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
  throw ConfigError("--best", "command line",
                    "expected tokens_per_s, cost or memory, got '" + name + "'",
                    "--best tokens_per_s ranks by dataset tokens/s (higher is better)");
}

std::string bestReport(const AggregateTable& t, BestMetric metric) {
  const MetricSpec m = metricSpec(metric);
  std::vector<Figure> ranked;
  for (const auto& g : groupsOf(t))
    if (std::optional<Figure> f = figureOf(g, m)) ranked.push_back(*f);
  if (ranked.empty() && metric == BestMetric::kCost)
    throw ConfigError("--best", "command line", "no counted run has a price: cost cannot be ranked",
                      "set metrics.price_per_hour ($ per device-hour) in the runs' config");
  std::stable_sort(ranked.begin(), ranked.end(), [&](const Figure& a, const Figure& b) {
    return m.higher_better ? a.median > b.median : a.median < b.median;
  });
  std::string out = std::string("Ranking by ") + m.title + ", " +
                    (m.higher_better ? "higher" : "lower") +
                    " is better; each configuration's median over its runs:\n";
  for (size_t i = 0; i < ranked.size(); ++i)
    out += "  " + std::to_string(i + 1) + ". " + describeFigure(ranked[i], m) + "\n";
  if (ranked.size() >= 2) {
    const Figure &a = ranked[0], &b = ranked[1];
    const double margin = m.higher_better ? a.median / b.median - 1 : 1 - a.median / b.median;
    out += a.label + " beats " + b.label + " by " + fmt(100 * margin, 1) + " %, " +
           verdict(a, b, m) + ".\n";
  } else {
    out += ranked.empty() ? "No run counts: nothing to rank.\n"
                          : "Only one configuration counts: nothing to compare.\n";
  }
  std::string excluded;
  size_t n = 0;
  for (const RunRow& r : t.runs)
    if (std::string why = exclusionReason(r); !why.empty()) {
      excluded += "  - " + r.tag + ": " + why + "\n";
      ++n;
    }
  if (n > 0) out += "Excluded from the ranking (" + std::to_string(n) + "):\n" + excluded;
  return out;
}

}  // namespace ftb
