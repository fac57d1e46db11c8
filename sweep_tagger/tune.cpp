#include "sweep_tagger/tune.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include <unistd.h>

#include "common/error.h"
#include "common/files.h"
#include "sweep_tagger/compare.h"
#include "sweep_tagger/child_process.h"
#include "sweep_tagger/tune_state.h"

namespace ftb {
namespace fs = std::filesystem;
namespace {

std::string tuneDir(const TuneState& s) { return s.opts.results_dir + "/.tune"; }

// The point's axes: its layout, then the keys it sets that its layout does not.
std::string candidateName(const SweepSpec& spec, const SweepPoint& p) {
  std::vector<std::string> words;
  const KeyValues* variant = nullptr;
  for (const auto& [name, kv] : spec.layouts)
    if (name == p.layout) variant = &kv;
  if (!p.layout.empty()) words.push_back("layout=" + p.layout);
  for (const auto& [k, v] : p.overrides) {
    const bool constant = std::any_of(spec.grid.begin(), spec.grid.end(), [&](const auto& a) {
      return a.first == k && a.second.size() == 1;
    });
    if (constant) continue;  // a one-value axis names no point
    const bool from_variant = variant && std::any_of(variant->begin(), variant->end(),
                                                     [&](const auto& e) { return e.first == k; });
    if (!from_variant) words.push_back(overrideArg(k, v));
  }
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
  return s.empty() ? p.tag : s;
}

// The sweep's points with the round's keys: training.max_steps = steps; the last round
// (final_steps) skips the base's metrics.skip_first_steps, as the exhaustive sweep's runs
// do, the rounds before it [tune] skip_steps.
std::vector<SweepPoint> roundPoints(const TuneState& s, int64_t steps) {
  const TuneSettings& st = s.space.settings;
  SweepSpec spec = s.space.sweep;
  spec.repeats = 1;
  const int64_t skip = steps == st.final_steps ? st.final_skip_steps : st.skip_steps;
  for (const std::string& kv :
       {"training.max_steps=" + std::to_string(steps),
        "metrics.skip_first_steps=" + std::to_string(skip),
        std::string("checkpoint.save_final=false")})
    spec.overrides.push_back(kv);
  return expandSweep(spec);
}

int launchNodes(const TuneState& s) {
  return int(std::count(s.space.launch.begin(), s.space.launch.end(), "{node}"));
}

void buildCandidates(TuneState& s) {
  SweepSpec spec = s.space.sweep;
  spec.repeats = 1;
  for (SweepPoint& p : expandSweep(spec)) {
    TuneCandidate c;
    c.name = candidateName(spec, p);
    c.point = std::move(p);
    const SweepPoint& q = c.point;
    if (!q.valid) {
      c.fate = "pruned: " + q.reason;
    } else if (q.nodes > 1 && launchNodes(s) != q.nodes) {
      c.fate = "pruned: needs " + std::to_string(q.nodes) + " nodes; [machines] launch starts " +
               std::to_string(launchNodes(s));
    } else {
      Config cfg = Config::load(spec.base, q.args);
      c.tc = TrainConfig::fromConfig(cfg, q.world_size);
      c.tc->layout.nodes = int(q.nodes);
      c.tokens_per_step = double(c.tc->globalBatch() * c.tc->data.seq_len);
    }
    s.cands.push_back(std::move(c));
  }
}

// The launch argv for one run: `launch` with each "{node}" replaced by `node`.
std::vector<std::string> launchArgv(const TuneState& s, const std::vector<std::string>& node) {
  std::vector<std::string> argv;
  for (const std::string& w : s.space.launch) {
    if (w == "{node}") argv.insert(argv.end(), node.begin(), node.end());
    else argv.push_back(w);
  }
  return argv;
}

std::string safeId(const std::string& tag) {
  std::string id;
  for (char ch : tag) id += std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' ? ch : '_';
  return id.substr(0, 160) + "." + std::to_string(::time(nullptr)) + "." +
         std::to_string(::getpid());
}

// One node's command: the launcher starting the point's trainers with `extra` arguments.
std::vector<std::string> nodeCommand(const TuneState& s, const SweepPoint& p,
                                     const std::string& run_id,
                                     const std::vector<std::string>& extra) {
  const std::string& b = s.opts.build_dir;
  std::vector<std::string> argv = {b + "/launcher/launcher", "--nproc-per-node",
                                   std::to_string(p.nproc_per_node), "--run-id", run_id,
                                   "--log-dir", s.opts.results_dir + "/.logs", "--",
                                   b + "/trainer/trainer", "--config", s.space.sweep.base};
  argv.insert(argv.end(), p.args.begin(), p.args.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

MachineFigures figuresFromProbe(const nlohmann::json& j) {
  MachineFigures f;
  f.gemm_flops = j.value("gemm_flops_min", j.value("gemm_flops", 0.0));
  if (j.contains("link_busbw_Bps") && j["link_busbw_Bps"].is_number())
    f.busbw_Bps = j["link_busbw_Bps"].get<double>();
  f.gemm_source = "trainer --probe: " + j.value("dtype", std::string("?")) + " GEMM n=" +
                  std::to_string(j.value("gemm_n", 0)) + ", " +
                  std::to_string(j.value("threads", 0)) + " thread(s), slowest of " +
                  std::to_string(j.value("world", 0)) + " rank(s)";
  f.link_source = j.contains("link_source") && j["link_source"].is_string()
                      ? "trainer --probe all-reduce: " + j["link_source"].get<std::string>()
                      : "world 1: no link";
  return f;
}

// The probe's JSON line (cached per nodes × ranks per node), run through `launch`.
nlohmann::json probe(TuneState& s, const SweepPoint& p) {
  const std::string key = std::to_string(p.nodes) + "x" + std::to_string(p.nproc_per_node);
  const std::string cache = tuneDir(s) + "/probe." + key + ".json";
  if (fs::exists(cache)) return nlohmann::json::parse(readInputFile(cache, "tune probe cache"));
  const std::string id = "tune-probe." + key + "." + std::to_string(::getpid());
  const std::string log = tuneDir(s) + "/probe." + key + ".log";
  std::cerr << "tune: probing " << key << " (GEMM rate and all-reduce bandwidth), log " << log
            << "\n";
  const CommandResult r = runCommand(launchArgv(s, nodeCommand(s, p, id, {"--probe"})), log,
                                     s.space.settings.run_timeout_s);
  s.machine_s += r.wall_s * double(p.nodes);
  const std::string out = s.opts.results_dir + "/.logs/" + id + "/attempt_0/rank_0.out";
  std::istringstream lines(fs::exists(out) ? readInputFile(out, "probe output") : "");
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("{\"probe\"", 0) == 0) {
      fs::create_directories(tuneDir(s));
      writeFileDurably(cache, line + "\n");
      return nlohmann::json::parse(line);
    }
  throw ConfigError("--probe", log,
                    "the probe of " + key + " printed no figures (exit " +
                        std::to_string(r.exit_code) + (r.spawn_error.empty() ? "" : ", " + r.spawn_error) +
                        "): see " + log + " and " + out,
                    "check that the runs can start on these machines, or give the figures with "
                    "--gemm-tflops and --link-GBps");
}

void predict(TuneState& s) {
  std::map<std::string, MachineFigures> by_world;
  for (TuneCandidate& c : s.cands) {
    if (!c.fate.empty()) continue;
    const std::string key = std::to_string(c.point.nodes) + "x" + std::to_string(c.point.nproc_per_node);
    if (!by_world.count(key)) {
      MachineFigures f;
      if (!s.opts.gemm_flops || (!s.opts.busbw_Bps && c.point.world_size > 1))
        f = figuresFromProbe(probe(s, c.point));
      if (s.opts.gemm_flops) f.gemm_flops = *s.opts.gemm_flops, f.gemm_source = "--gemm-tflops";
      if (s.opts.busbw_Bps) f.busbw_Bps = *s.opts.busbw_Bps, f.link_source = "--link-GBps";
      by_world[key] = f;
    }
    c.fig = by_world[key];
    c.pred = predictStep(*c.tc, c.fig);
  }
  std::stable_sort(s.cands.begin(), s.cands.end(), [](const TuneCandidate& a, const TuneCandidate& b) {
    const bool am = a.fate.empty(), bm = b.fate.empty();
    if (am != bm) return am;
    return am && a.predictedTokensPerS() > b.predictedTokensPerS();
  });
  if (s.cands.empty() || !s.cands[0].fate.empty()) return;
  const double best = s.cands[0].predictedTokensPerS();
  for (TuneCandidate& c : s.cands)
    if (c.fate.empty() && c.predictedTokensPerS() * s.space.settings.model_keep < best)
      c.fate = "set aside by the model: predicted " +
               formatFixed(best / c.predictedTokensPerS(), 2) +
               "x slower than the best (largest term: " + c.pred.largestTerm() + ")";
}

// Wall seconds of earlier tunes' runs, by tag (RESULTS_DIR/.tune/walls.tsv); read once per tune.
std::map<std::string, double> recordedWalls(const TuneState& s) {
  std::map<std::string, double> walls;
  std::ifstream in(tuneDir(s) + "/walls.tsv");
  std::string tag;
  double w = 0;
  while (in >> std::quoted(tag) >> w) walls[tag] = w;
  return walls;
}

void recordWall(const TuneState& s, const std::string& tag, double wall_s) {
  fs::create_directories(tuneDir(s));
  std::ofstream(tuneDir(s) + "/walls.tsv", std::ios::app) << std::quoted(tag) << " " << wall_s << "\n";
}

bool overBudget(TuneState& s) {
  if (s.opts.budget_minutes > 0 && s.machine_s >= s.opts.budget_minutes * 60)
    s.budget_spent = true;
  return s.budget_spent;
}

// Runs (or reuses) `p`, a round's point of candidate c; false when the budget stopped it.
bool runPoint(TuneState& s, TuneCandidate& c, const SweepPoint& p, int round, int64_t steps) {
  TuneRun run{round, steps, p, {}, 0, false};
  const std::string dir = s.opts.results_dir + "/" + p.tag;
  if (pointState(s.opts.results_dir, p) == RunState::Completed) {
    run.reused = true;
    const auto w = s.walls.find(p.tag);
    run.wall_s = w == s.walls.end() ? 0 : w->second;
    ++s.runs_reused;
  } else {
    if (overBudget(s)) return false;
    const std::string id = safeId(p.tag);
    std::cerr << "tune: round " << round << ", " << steps << " steps: " << c.name << " ("
              << p.tag << ")\n";
    const std::string log = s.opts.results_dir + "/.logs/" + id + ".launch.log";
    const CommandResult r = runCommand(
        launchArgv(s, nodeCommand(s, p, id, {"output.dir=" + s.opts.results_dir})), log,
        s.space.settings.run_timeout_s);
    run.wall_s = r.wall_s;
    recordWall(s, p.tag, r.wall_s);
    ++s.runs_started;
    if (!r.spawn_error.empty())
      throw ConfigError("[machines] launch", s.opts.space, r.spawn_error, "fix launch or the build");
  }
  s.machine_s += run.wall_s * double(p.nodes);
  run.row = summarizeRun(s.opts.results_dir, dir, {});
  if (run.reused && !run.row.config_hash.empty() && run.row.config_hash != p.hash)
    throw ConfigError("fmt", s.opts.space,
                      "run directory " + dir + " holds another configuration (config hash " +
                          run.row.config_hash + ", this round's point " + p.hash +
                          "): the sweep's fmt does not tell tune's rounds apart",
                      "put {hash} (or {training.max_steps}) in fmt");
  if (run.row.status != RunState::Completed || !run.row.tokens_per_s_dataset)
    c.fate = "failed in round " + std::to_string(round) + ": " + toString(run.row.status) +
             (run.row.message.empty() ? "" : " (" + run.row.message + ")") + ", run " + p.tag;
  c.runs.push_back(std::move(run));
  return true;
}

std::vector<TuneCandidate*> alive(TuneState& s) {
  std::vector<TuneCandidate*> a;
  for (TuneCandidate& c : s.cands)
    if (c.fate.empty()) a.push_back(&c);
  return a;
}

// Successive halving up to final_steps (tune.h step 3).
void rounds(TuneState& s) {
  const TuneSettings& st = s.space.settings;
  int64_t steps = st.first_steps;
  for (int round = 0;; ++round) {
    const std::vector<SweepPoint> points = roundPoints(s, steps);
    for (TuneCandidate* c : alive(s))
      if (!runPoint(s, *c, points.at(c->point.index), round, steps)) {
        if (round == 0) s.last_round = 0;  // rank what round 0 measured
        return;
      }
    s.last_round = round;
    if (steps >= st.final_steps) return;
    std::vector<TuneCandidate*> a = alive(s);
    std::stable_sort(a.begin(), a.end(), [](TuneCandidate* x, TuneCandidate* y) {
      return *x->screenTokensPerS() > *y->screenTokensPerS();
    });
    const size_t keep = std::max<size_t>(std::min<size_t>(2, a.size()),
                                         (a.size() + st.eta - 1) / st.eta);
    for (size_t i = keep; i < a.size(); ++i)
      a[i]->fate = "dropped after round " + std::to_string(round) + ": " +
                   formatFixed(*a[i]->screenTokensPerS(), 1) + " tokens/s at its fastest steps, " +
                   formatFixed(100 * (1 - *a[i]->screenTokensPerS() / *a[0]->screenTokensPerS()), 1) +
                   " % below the round's best";
    steps = std::min(st.final_steps, steps * st.eta);
  }
}

// The ranking of the alive candidates' runs of the last round reached.
BestReport finalRanking(TuneState& s) {
  std::vector<RunRow> rows;
  for (TuneCandidate* c : alive(s))
    for (const TuneRun& r : c->runs)
      if (r.round == s.last_round) rows.push_back(r.row);
  return bestReport(tableOf(s.opts.results_dir, std::move(rows)), BestMetric::kTokensPerS);
}

TuneCandidate* byHash(TuneState& s, const std::string& key) {
  for (TuneCandidate* c : alive(s))
    for (const TuneRun& r : c->runs)
      if (r.point.hash == key || r.row.tag == key) return c;
  return nullptr;
}

// Repeats of the top two finalists until the winner is beyond noise (tune.h step 3).
void finals(TuneState& s) {
  const TuneSettings& st = s.space.settings;
  const std::vector<SweepPoint> points = roundPoints(s, st.final_steps);
  for (;;) {
    BestReport b = finalRanking(s);
    s.ranking = b.text;
    if (b.ranked.empty()) return;
    s.winner = int(byHash(s, b.ranked[0]) - s.cands.data());
    if (b.ranked.size() < 2 || b.winner_beyond_noise || s.budget_spent) return;
    bool added = false;
    for (int i = 0; i < 2; ++i) {
      TuneCandidate* c = byHash(s, b.ranked[i]);
      const int n = int(c->lastRound().size());
      if (c->runs.back().steps != st.final_steps || n >= st.max_repeats) continue;
      if (!runPoint(s, *c, repeatOf(points.at(c->point.index), n), s.last_round, st.final_steps))
        break;
      added = true;
    }
    if (!added) return;
  }
}

}  // namespace

std::vector<const TuneRun*> TuneCandidate::lastRound() const {
  std::vector<const TuneRun*> out;
  int top = -1;
  for (const TuneRun& r : runs) top = std::max(top, r.round);
  for (const TuneRun& r : runs)
    if (r.round == top && r.row.status == RunState::Completed && r.row.step_time_p50_s &&
        r.row.tokens_per_s_dataset)
      out.push_back(&r);
  return out;
}

std::optional<double> TuneCandidate::measuredStepS() const {
  std::vector<double> v;
  for (const TuneRun* r : lastRound()) v.push_back(*r->row.step_time_p50_s);
  return v.empty() ? std::nullopt : std::optional<double>(medianOf(v));
}

std::optional<double> TuneCandidate::measuredTokensPerS() const {
  std::vector<double> v;
  for (const TuneRun* r : lastRound()) v.push_back(*r->row.tokens_per_s_dataset);
  return v.empty() ? std::nullopt : std::optional<double>(medianOf(v));
}

std::optional<double> TuneCandidate::screenTokensPerS() const {
  std::vector<double> v;
  for (const TuneRun* r : lastRound()) {
    const RunRow& w = r->row;
    const bool steps = w.step_tokens_p50 && w.step_tokens_p90 && *w.step_tokens_p50 > 0;
    v.push_back(*w.tokens_per_s_dataset * (steps ? *w.step_tokens_p90 / *w.step_tokens_p50 : 1.0));
  }
  return v.empty() ? std::nullopt : std::optional<double>(medianOf(v));
}

TuneResult runTune(const TuneOptions& o) {
  TuneState s;
  s.opts = o;
  if (s.opts.out_dir.empty()) s.opts.out_dir = o.results_dir + "/tune";
  s.space = loadTuneSpace(o.space, o.overrides);
  s.walls = recordedWalls(s);
  buildCandidates(s);
  predict(s);
  if (!o.dry_run) {
    rounds(s);
    finals(s);
  }
  TuneResult r;
  r.report = writeTuneReport(s);
  r.exit_code = o.dry_run || s.winner >= 0 ? 0 : 1;
  return r;
}

}  // namespace ftb
