// The report of `sweep_tagger tune` and the winner's files (tune.h step 4).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "common/config.h"
#include "common/files.h"
#include "sweep_tagger/aggregate.h"
#include "sweep_tagger/tune_state.h"

namespace ftb {
namespace fs = std::filesystem;
namespace {

std::string f2(double v) { return std::isfinite(v) ? formatFixed(v, 2) : "-"; }
// Seconds with three significant digits (a tiny model's steps are milliseconds).
std::string secs(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}
std::string f1(double v) { return std::isfinite(v) ? formatFixed(v, 1) : "-"; }

// compute_scale that makes c's prediction equal its measured step (NaN when unmeasured or
// communication alone exceeds the measurement).
double scaleOf(const TuneCandidate& c) {
  const std::optional<double> m = c.measuredStepS();
  const double busy = c.pred.compute_s + c.pred.bubble_s;
  if (!m || !(busy > 0) || !(*m > c.pred.comm_s)) return NAN;
  return (*m - c.pred.comm_s) / busy;
}

struct ModelError {
  std::map<const TuneCandidate*, double> loo, raw;  // predicted / measured - 1
  double scale = NAN;                               // median over every measured point
};

// Leave-one-out errors (tune.h "Model error").
ModelError modelError(const TuneState& s) {
  ModelError e;
  std::vector<const TuneCandidate*> measured;
  std::vector<double> scales;
  for (const TuneCandidate& c : s.cands)
    if (const double k = scaleOf(c); std::isfinite(k)) measured.push_back(&c), scales.push_back(k);
  e.scale = medianOf(scales);
  for (size_t i = 0; i < measured.size(); ++i) {
    const TuneCandidate& c = *measured[i];
    e.raw[&c] = c.pred.total(1) / *c.measuredStepS() - 1;
    if (measured.size() < 2) continue;
    std::vector<double> others = scales;
    others.erase(others.begin() + long(i));
    e.loo[&c] = c.pred.total(medianOf(others)) / *c.measuredStepS() - 1;
  }
  return e;
}

std::string absMedianPct(const std::map<const TuneCandidate*, double>& m) {
  std::vector<double> v;
  for (const auto& [c, err] : m) v.push_back(std::fabs(err));
  return v.empty() ? "not measured" : f1(100 * medianOf(v)) + " %";
}

std::string figuresSection(const TuneState& s) {
  std::map<std::string, const TuneCandidate*> worlds;
  for (const TuneCandidate& c : s.cands)
    if (c.tc) worlds.emplace(std::to_string(c.point.nodes) + " node(s) x " +
                                 std::to_string(c.point.nproc_per_node) + " rank(s)", &c);
  std::string out = "## Machines\n\n";
  for (const auto& [w, c] : worlds)
    out += "- " + w + ": GEMM " + f1(c->fig.gemm_flops / 1e9) + " GFLOP/s per rank (" +
           c->fig.gemm_source + "); all-reduce bus bandwidth " +
           (c->fig.busbw_Bps >= 1e9   ? f2(c->fig.busbw_Bps / 1e9) + " GB/s"
            : c->fig.busbw_Bps > 0 ? f1(c->fig.busbw_Bps / 1e6) + " MB/s"
                                   : std::string("-")) +
           " (" + c->fig.link_source + ")\n";
  const TuneSettings& st = s.space.settings;
  out += "- rounds: first " + std::to_string(st.first_steps) + " steps (" +
         std::to_string(st.skip_steps) + " unmeasured), eta " + std::to_string(st.eta) +
         ", final " + std::to_string(st.final_steps) + " steps, up to " +
         std::to_string(st.max_repeats) + " runs of each finalist; points predicted over " +
         formatDouble(st.model_keep) + "x slower than the best prediction set aside\n";
  if (s.space.sweep.memory_budget)
    out += "- memory: " + describeBudget(*s.space.sweep.memory_budget) + "\n";
  return out + "\n";
}

std::string fateList(const TuneState& s, const std::string& prefix, const std::string& title) {
  std::string out;
  for (const TuneCandidate& c : s.cands)
    if (c.fate.rfind(prefix, 0) == 0) out += "- " + c.name + ": " + c.fate.substr(prefix.size()) + "\n";
  return out.empty() ? "" : "## " + title + "\n\n" + out + "\n";
}

std::string pointsTable(const TuneState& s, const ModelError& e) {
  std::string out =
      "## Every point: the model's prediction before any run, and what was measured\n\n"
      "Predicted step = compute (FLOPs / GEMM rate) + communication (bytes / bus bandwidth) + "
      "pipeline bubble (common/step_time_model.h); *calibrated*: with the compute scale fitted "
      "on the other measured points. Measured: step time p50 of the point's last round.\n\n"
      "| # | point | predicted step s | compute / comm / bubble s | largest term | calibrated s "
      "| measured s | error | tokens/s measured | rounds | outcome |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  int i = 0;
  for (const TuneCandidate& c : s.cands) {
    if (!c.tc) continue;
    const std::optional<double> m = c.measuredStepS();
    const auto loo = e.loo.find(&c);
    int rounds = 0;
    for (const TuneRun& r : c.runs) rounds = std::max(rounds, r.round + 1);
    const std::string outcome = !c.fate.empty()                      ? c.fate
                                : s.winner >= 0 && &s.cands[s.winner] == &c ? "**winner**"
                                : m                 ? "finalist"
                                : s.opts.dry_run    ? "dry run: not measured"
                                                    : "not measured: budget spent";
    out += "| " + std::to_string(++i) + " | " + markdownCell(c.name) + " | " +
           secs(c.pred.total(1)) + " | " + secs(c.pred.compute_s) + " / " + secs(c.pred.comm_s) +
           " / " + secs(c.pred.bubble_s) + " | " + markdownCell(c.pred.largestTerm()) + " | " +
           (loo != e.loo.end() ? secs(*m * (1 + loo->second)) : "-") + " | " +
           (m ? secs(*m) : "-") + " | " +
           (loo != e.loo.end() ? f1(100 * loo->second) + " %" : "-") + " | " +
           (m ? f1(*c.measuredTokensPerS()) : "-") + " | " + std::to_string(rounds) + " | " +
           markdownCell(outcome) + " |\n";
  }
  return out + "\n";
}

std::string winnerArgs(const TuneCandidate& w, std::vector<std::string>& kept) {
  for (const std::string& a : w.point.args)
    if (a.rfind("sweep.", 0) != 0 && a.rfind("output.sweep_fmt=", 0) != 0) kept.push_back(a);
  std::string s;
  for (const std::string& a : kept) s += (s.empty() ? "" : " ") + a;
  return s;
}

// winner.toml and winner.sh; the report's winner section.
std::string writeWinner(const TuneState& s) {
  const TuneCandidate& w = s.cands[s.winner];
  std::vector<std::string> args;
  const std::string keys = winnerArgs(w, args);
  const std::string out = fs::absolute(s.opts.out_dir).lexically_normal().string();
  writeFileDurably(out + "/winner.toml",
                   "# The winner of sweep_tagger tune " + s.opts.space + ": " + w.name + "\n" +
                       Config::load(s.space.sweep.base, args).toToml(true));
  const std::string n = std::to_string(w.point.nproc_per_node), k = std::to_string(w.point.nodes);
  const std::string node = s.opts.build_dir + "/launcher/launcher --nproc-per-node " + n + " -- " +
                           s.opts.build_dir + "/trainer/trainer --config " + out + "/winner.toml";
  std::string launch;
  for (const std::string& word : s.space.launch) launch += (launch.empty() ? "" : " ") + (word == "{node}" ? node : word);
  const std::string sh = "#!/usr/bin/env bash\n# The winner of sweep_tagger tune " + s.opts.space +
                         ": " + w.name + " (" + k + " node(s) x " + n + " rank(s)).\n" +
                         "# On these machines, as the tune ran it:\n" + launch + "\n" +
                         "# Under SLURM (slurm/README.md):\n# sbatch -N " + k +
                         " slurm/train.sbatch CONFIG=" + out + "/winner.toml NPROC=" + n + "\n";
  writeFileDurably(out + "/winner.sh", sh);
  return "## Winner\n\n" + w.name + " (" + keys + "): " + f1(*w.measuredTokensPerS()) +
         " dataset tokens/s, step p50 " + secs(*w.measuredStepS()) + " s.\nRun config: " + out +
         "/winner.toml; launch: " + out + "/winner.sh\n\n```\n" + sh + "```\n\n";
}

}  // namespace

std::string writeTuneReport(const TuneState& s) {
  fs::create_directories(s.opts.out_dir);
  const ModelError e = modelError(s);
  std::string r = "# sweep_tagger tune " + s.opts.space + "\n\n";
  r += figuresSection(s);
  r += fateList(s, "pruned: ", "Pruned before any run");
  r += fateList(s, "set aside by the model: ", "Set aside by the model (not run)");
  r += pointsTable(s, e);
  r += "## The model's error\n\nMedian |predicted / measured - 1| over " +
       std::to_string(e.raw.size()) + " measured point(s): " + absMedianPct(e.loo) +
       " with the compute scale fitted on the other points (leave one out); " +
       absMedianPct(e.raw) + " with compute at the GEMM rate (scale 1). Fitted compute scale " +
       "over every point: " + f2(e.scale) + " (what a step's compute costs against the GEMM rate).\n\n";
  if (!s.opts.dry_run)
    r += "## Ranking of the last round\n\n" + (s.ranking.empty() ? "Nothing measured.\n" : s.ranking) + "\n";
  if (s.winner >= 0 && !s.opts.dry_run) r += writeWinner(s);
  r += "## Machine time\n\n" + std::to_string(s.runs_started) + " run(s) started, " +
       std::to_string(s.runs_reused) + " reused from an earlier tune; " + f1(s.machine_s / 60) +
       " machine-minutes (each run's wall time x its nodes, the probes included)" +
       (s.budget_spent ? "; the budget (--budget-minutes " + formatDouble(s.opts.budget_minutes) +
                             ") was spent: the search stopped there"
                       : "") +
       ".\n";
  writeFileDurably(s.opts.out_dir + "/report.md", r);
  return r;
}

}  // namespace ftb
