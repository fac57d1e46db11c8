#include "sweep_tagger/cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/cli_args.h"
#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/run_status.h"
#include "common/tag.h"
#include "sweep_tagger/aggregate.h"
#include "sweep_tagger/compare.h"
#include "sweep_tagger/plot.h"
#include "sweep_tagger/sweep.h"
#include "sweep_tagger/tune.h"

namespace ftb {
namespace {

using Json = nlohmann::ordered_json;

// Parses `args` (without program name) with `opts`; cxxopts errors become ConfigError
// (cliError: the option named, what was expected, a hint).
cxxopts::ParseResult parse(cxxopts::Options& opts, const std::vector<std::string>& args) {
  std::vector<std::string> storage = {opts.program()};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  try {
    return opts.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw cliError(opts, e, args);
  }
}

Json toJson(const Value& v) {
  return std::visit([](const auto& x) { return Json(x); }, v);
}

Json pointJson(const SweepPoint& p, const SweepSpec& spec, std::optional<RunState> state) {
  Json j;
  j["index"] = p.index;
  j["tag"] = p.tag;
  j["hash"] = p.hash;
  j["world_size"] = p.world_size;
  j["nodes"] = p.nodes;
  j["nproc_per_node"] = p.nproc_per_node;
  j["valid"] = p.valid;
  j["reason"] = p.reason;
  j["included"] = p.included;
  j["layout"] = p.layout;
  j["repeat"] = p.repeat;
  j["global_batch"] = p.global_batch;
  j["overrides"] = Json::object();
  for (const auto& [k, v] : p.overrides) j["overrides"][k] = toJson(v);
  j["args"] = p.args;
  j["base"] = spec.base;
  if (state) j["state"] = toString(*state);
  if (spec.memory_budget) j["memory_estimate"] = spec.memory_budget->device ? "gpu" : "host";
  return j;
}

std::string overridesText(const SweepPoint& p) {
  std::string s;
  for (const auto& [k, v] : p.overrides) s += (s.empty() ? "" : " ") + overrideArg(k, v);
  return s;
}

// One field of a point for shell use: `overrides`/`args` as shell words, scalars plain.
std::string fieldText(const Json& j, const std::string& field) {
  if (field == "overrides" || field == "args") {
    std::string s;
    for (const auto& a : j["args"]) s += (s.empty() ? "" : " ") + shellQuote(a.get<std::string>());
    return s;
  }
  if (!j.contains(field))
    throw ConfigError("", "command line", "unknown --field '" + field + "'",
                      "one of: index tag hash world_size nodes nproc_per_node valid reason "
                      "included layout repeat global_batch overrides args base state");
  const Json& v = j[field];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// A multi-line message (a refusal with its hint) on one table line.
std::string oneLine(std::string s) {
  for (size_t at; (at = s.find("\n  ")) != std::string::npos;) s.replace(at, 3, " ");
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

// A point and, with --pending, its run directory's state.
using PointRow = std::pair<const SweepPoint*, std::optional<RunState>>;

void printTable(const std::vector<PointRow>& rows, bool with_state, std::ostream& out) {
  size_t tag_w = 3;
  for (const auto& r : rows) tag_w = std::max(tag_w, r.first->tag.size());
  auto line = [&](const std::string& idx, const std::string& tag, const std::string& ws,
                  const std::string& layout, const std::string& valid, const std::string& state,
                  const std::string& rest) {
    out << std::left << std::setw(6) << idx << std::setw(tag_w + 2) << tag << std::setw(4) << ws
        << std::setw(8) << layout << std::setw(7) << valid;
    if (with_state) out << std::setw(10) << state;
    out << rest << "\n";
  };
  line("index", "tag", "ws", "NxP", "valid", "state", "overrides");
  for (const auto& [p, state] : rows) {
    std::string rest = overridesText(*p);
    if (!p->valid) rest += (rest.empty() ? "" : "  ") + std::string("# ") + oneLine(p->reason);
    line(std::to_string(p->index), p->tag, std::to_string(p->world_size),
         std::to_string(p->nodes) + "x" + std::to_string(p->nproc_per_node),
         p->valid ? "yes" : "NO", state ? toString(*state) : "", rest);
  }
}

// --price-per-hour: a price > 0 ($ per device-hour); none when not given.
std::optional<double> pricePerHour(const cxxopts::ParseResult& r) {
  if (!r.count("price-per-hour")) return std::nullopt;
  const double usd = r["price-per-hour"].as<double>();
  if (!(usd > 0) || !std::isfinite(usd))
    throw ConfigError("--price-per-hour", "command line",
                      "expected a price > 0 in USD per device-hour, got " + formatDouble(usd),
                      "--price-per-hour 2.5 prices each device-hour at $2.50");
  return usd;
}

}  // namespace

namespace {

// The points as JSON lines, one field of each (`field` not ""), or the table, headed by the
// memory budget and which estimate it is compared with.
void writeListing(const std::vector<PointRow>& rows, const SweepSpec& spec, bool as_json,
                  const std::string& field, bool with_state, std::ostream& out) {
  for (const auto& [p, state] : rows) {
    Json j = pointJson(*p, spec, state);
    if (!field.empty())
      out << fieldText(j, field) << "\n";
    else if (as_json)
      out << j.dump() << "\n";
  }
  if (as_json || !field.empty()) return;
  if (spec.memory_budget) out << "# memory budget " << describeBudget(*spec.memory_budget) << "\n";
  printTable(rows, with_state, out);
}

}  // namespace

std::string shellQuote(const std::string& s) {
  bool safe = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string("_./:=@%+,-").find(c) != std::string::npos;
  });
  if (safe) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int tagCommand(const std::vector<std::string>& args, std::ostream& out) {
  cxxopts::Options opts("sweep_tagger tag", "Print the run-directory tag of a config.");
  opts.add_options()("config", "run config TOML", cxxopts::value<std::string>())(
      "world-size", "world size", cxxopts::value<int>()->default_value("1"))(
      "nodes", "nodes the ranks run on (part of the tag when > 1)",
      cxxopts::value<int>()->default_value("1"))(
      "fmt", "tag fmt (default: the config's output.sweep_fmt)", cxxopts::value<std::string>())(
      "hash", "print the config hash instead of the tag")("h,help", "this help")(
      "overrides", "key=value overrides", cxxopts::value<std::vector<std::string>>());
  opts.parse_positional({"overrides"});
  opts.positional_help("[key=value ...]  (or --key VALUE, --key=VALUE)");
  auto r = parse(opts, torchtitanOverrides(args));
  if (r.count("help")) {
    out << opts.help();
    return 0;
  }
  if (!r.count("config"))
    throw ConfigError("", "command line", "--config is required", "sweep_tagger tag --help");
  std::vector<std::string> overrides;
  if (r.count("overrides")) overrides = r["overrides"].as<std::vector<std::string>>();
  Config cfg = Config::load(r["config"].as<std::string>(), overrides);
  int ws = r["world-size"].as<int>();
  if (ws < 1) throw ConfigError("", "command line", "--world-size must be >= 1");
  int nodes = r["nodes"].as<int>();
  if (nodes < 1 || nodes > ws)
    throw ConfigError(
        "--nodes", "command line",
        "must be in [1, world size(" + std::to_string(ws) + ")], got " + std::to_string(nodes));
  if (r.count("hash")) {
    out << configHash(cfg, ws, nodes) << "\n";
    return 0;
  }
  std::string fmt = r.count("fmt") ? r["fmt"].as<std::string>() : "";
  if (fmt.empty() && cfg.has("output.sweep_fmt")) fmt = cfg.getString("output.sweep_fmt");
  if (fmt.empty()) fmt = kDefaultTagFmt;
  out << formatTag(cfg, ws, fmt, nodes) << "\n";
  return 0;
}

int expandCommand(const std::vector<std::string>& args, std::ostream& out) {
  cxxopts::Options opts("sweep_tagger expand", "List the points of a sweep file.");
  opts.add_options()("json", "one JSON object per line")(
      "index", "only point I (as JSON, or --field)", cxxopts::value<int>())(
      "field", "print only this field (overrides: shell words for the trainer)",
      cxxopts::value<std::string>())(
      "pending",
      "only points whose run in RESULTS_DIR has not completed and is not held by a running trainer",
      cxxopts::value<std::string>())(
      "memory-budget",
      "mark points whose estimated per-rank peak exceeds this invalid: a size (80GiB, 80GB) or "
      "a device type (h100, a100-40gb, ...)",
      cxxopts::value<std::string>())("h,help", "this help")("sweep", "sweep TOML",
                                                            cxxopts::value<std::string>())(
      "overrides", "key=value overrides for every point (after the point's own)",
      cxxopts::value<std::vector<std::string>>());
  opts.parse_positional({"sweep", "overrides"});
  opts.positional_help("SWEEP.toml [key=value ...]");
  auto r = parse(opts, args);
  if (r.count("help")) {
    out << opts.help();
    return 0;
  }
  if (!r.count("sweep"))
    throw ConfigError("", "command line", "missing SWEEP.toml", "sweep_tagger expand --help");
  SweepSpec spec = loadSweep(r["sweep"].as<std::string>());
  if (r.count("overrides")) spec.overrides = r["overrides"].as<std::vector<std::string>>();
  if (r.count("memory-budget"))
    spec.memory_budget = parseMemoryBudget(r["memory-budget"].as<std::string>());
  // --index I needs the points up to I only (indices count listed points: those before
  // I decide which grid point I is). A negative I expands all, for the count it reports.
  std::optional<int> last;
  if (r.count("index") && r["index"].as<int>() >= 0) last = r["index"].as<int>();
  std::vector<SweepPoint> points = expandSweep(spec, last);

  std::vector<PointRow> rows;
  const bool pending = r.count("pending") > 0;
  for (const SweepPoint& p : points) {
    if (r.count("index") && p.index != r["index"].as<int>()) continue;
    std::optional<RunState> state;
    if (pending) {
      state = pointState(r["pending"].as<std::string>(), p);
      // Held: another runner has it.
      if (state == RunState::Completed || state == RunState::Held) continue;
    }
    rows.emplace_back(&p, state);
  }
  if (r.count("index")) {
    int i = r["index"].as<int>();
    if (i < 0 || i >= static_cast<int>(points.size()))
      throw ConfigError("", "command line",
                        "--index " + std::to_string(i) + " is out of range (the sweep has " +
                            std::to_string(points.size()) + " points)");
  }
  const bool as_json = r.count("json") || (r.count("index") && !r.count("field"));
  writeListing(rows, spec, as_json, r.count("field") ? r["field"].as<std::string>() : "", pending,
               out);
  return 0;
}

namespace {

// The options of `aggregate` (README.md "Aggregation").
cxxopts::Options aggregateOptions() {
  cxxopts::Options opts("sweep_tagger aggregate",
                        "One row per run directory under RESULTS_DIR (see README.md).");
  opts.add_options()("format", "csv | md | json",
                     cxxopts::value<std::string>()->default_value("csv"))(
      "out", "write the table to F (csv: constants to F's stem + .constants.csv)",
      cxxopts::value<std::string>())("plot", "write gnuplot charts into DIR",
                                     cxxopts::value<std::string>())(
      "jobs", "reader processes (default: cores)", cxxopts::value<int>())(
      "stale-seconds", "a 'running' run not updated for longer is 'killed'",
      cxxopts::value<double>()->default_value("600"))(
      "reader-timeout", "seconds one run's files may take to read before it is 'corrupt'",
      cxxopts::value<double>()->default_value("60"))(
      "best",
      "rank the configurations by tokens_per_s | cost | memory: each with its median, "
      "spread and runs, and whether it beats the next one beyond the noise (stdout; the "
      "table only with --out); exit 1 when nothing can be ranked",
      cxxopts::value<std::string>())(
      "exclude-noisy",
      "--best without the runs the trainer marked noisy (unless every run is noisy: then "
      "ranked anyway, and it says so)")(
      "price-per-hour",
      "USD per device-hour for the runs recorded without metrics.price_per_hour (a run's "
      "recorded price wins): --best cost and the $/M tokens column",
      cxxopts::value<double>())(
      "compare",
      "each configuration against the same one in REF.csv (an earlier aggregate --format csv "
      "--out REF.csv): medians, change and whether it is beyond the noise of both, the keys "
      "that differ (stdout; the table only with --out)",
      cxxopts::value<std::string>())(
      "fail-on-regression",
      "with --compare: exit 1 when a configuration regressed beyond noise by more than PCT %",
      cxxopts::value<double>())("plot-best-effort", "a gnuplot problem is a warning, not exit 1")(
      "h,help", "this help")("results", "results dir", cxxopts::value<std::string>());
  opts.parse_positional({"results"});
  opts.positional_help("RESULTS_DIR");
  return opts;
}

// The reader settings of --jobs, --stale-seconds and --reader-timeout.
AggregateOptions readerOptions(const cxxopts::ParseResult& r) {
  AggregateOptions ao;
  ao.stale_seconds = r["stale-seconds"].as<double>();
  ao.reader_timeout_s = r["reader-timeout"].as<double>();
  if (!(ao.reader_timeout_s > 0))
    throw ConfigError("--reader-timeout", "command line", "must be > 0 seconds",
                      "the default, 60 s, suits any healthy file");
  ao.jobs = r.count("jobs") ? r["jobs"].as<int>()
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return ao;
}

// --out F: the table (and for csv its constants) written whole or not at all
// (writeFileDurably): a killed or failed aggregate never leaves a truncated table.
void writeTable(const AggregateTable& table, const std::string& format, const std::string& text,
                const std::filesystem::path& path) {
  writeFileDurably(path.string(), text);
  if (format == "csv")
    writeFileDurably((path.parent_path() / (path.stem().string() + ".constants.csv")).string(),
                     constantsCsv(table));
}

// --plot DIR: the charts, their problems on stderr; 1 when a chart is missing or unreadable
// (0 with best_effort), else 0.
int drawCharts(const AggregateTable& table, const std::string& dir, bool best_effort) {
  std::vector<std::string> warnings, failures;
  std::vector<std::string> files = writePlots(table, dir, warnings, 120, &failures);
  for (const std::string& w : warnings)
    std::cerr << "sweep_tagger aggregate: warning: " << w << "\n";
  std::cerr << "sweep_tagger aggregate: wrote " << files.size() << " chart files to " << dir
            << "\n";
  if (failures.empty() || best_effort) return 0;
  std::cerr << "sweep_tagger aggregate: " << failures.size()
            << " chart(s) missing or unreadable (gnuplot problems above); exit 1 "
               "(--plot-best-effort: exit 0)\n";
  return 1;
}

// --compare REF.csv read (none when not given), and --fail-on-regression PCT checked.
std::optional<ReferenceTable> referenceTable(const cxxopts::ParseResult& r, CompareOptions& co) {
  if (r.count("fail-on-regression")) {
    const double pct = r["fail-on-regression"].as<double>();
    if (!r.count("compare"))
      throw ConfigError("--fail-on-regression", "command line",
                        "it applies to a comparison: --compare REF.csv is missing",
                        "--compare REF.csv --fail-on-regression 10 exits 1 when a configuration "
                        "is more than 10 % slower than in REF.csv, beyond noise");
    if (!(pct >= 0) || !std::isfinite(pct))
      throw ConfigError("--fail-on-regression", "command line",
                        "expected a percentage >= 0, got " + formatDouble(pct),
                        "--fail-on-regression 10 fails on a regression beyond noise of more "
                        "than 10 %; 0 on any regression beyond noise");
    co.fail_pct = pct;
  }
  if (!r.count("compare")) return std::nullopt;
  return readReferenceCsv(r["compare"].as<std::string>());
}

// The reports of --best and --compare on stdout; their exit code (0 without either).
int printReports(const AggregateTable& table, const cxxopts::ParseResult& r,
                 const std::optional<BestMetric>& best,
                 const std::optional<ReferenceTable>& reference, const CompareOptions& co,
                 std::ostream& out) {
  int code = 0;
  if (best) {
    BestOptions bo;
    bo.exclude_noisy = r.count("exclude-noisy") > 0;
    const BestReport report = bestReport(table, *best, bo);
    out << report.text;
    code = report.exit_code;
  }
  if (reference) {
    const CompareReport report = compareReport(*reference, table, co);
    out << (best ? "\n" : "") << report.text;
    code = std::max(code, report.exit_code);
  }
  return code;
}

}  // namespace

int aggregateCommand(const std::vector<std::string>& args, std::ostream& out) {
  cxxopts::Options opts = aggregateOptions();
  auto r = parse(opts, args);
  if (r.count("help")) {
    out << opts.help();
    return 0;
  }
  if (!r.count("results"))
    throw ConfigError("", "command line", "missing RESULTS_DIR", "sweep_tagger aggregate --help");
  const std::string results = r["results"].as<std::string>();
  if (!std::filesystem::is_directory(results))
    throw ConfigError("RESULTS_DIR", "command line",
                      "results dir '" + results + "' does not exist or is not a directory",
                      "pass the directory the runs were written to (the trainer's output.dir, "
                      "scripts/sweep.sh's RESULTS)");
  const std::string format = r["format"].as<std::string>();
  if (format != "csv" && format != "md" && format != "json")
    throw ConfigError("--format", "command line", "expected csv, md or json, got '" + format + "'",
                      "--format md prints a readable table, csv (the default) a file for tools");
  const AggregateOptions ao = readerOptions(r);
  std::optional<BestMetric> best;
  if (r.count("best")) best = parseBestMetric(r["best"].as<std::string>());
  if (r.count("exclude-noisy") && !best)
    throw ConfigError("--exclude-noisy", "command line",
                      "it applies to a ranking: --best is missing",
                      "--best tokens_per_s --exclude-noisy ranks without the noisy runs");
  const std::optional<double> price = pricePerHour(r);
  CompareOptions co;
  const std::optional<ReferenceTable> reference = referenceTable(r, co);
  AggregateTable table = aggregateRuns(results, ao);
  if (price) applyPrice(table, *price);
  const std::string text =
      format == "csv" ? toCsv(table) : (format == "md" ? toMarkdown(table) : toJson(table));
  if (r.count("out"))
    writeTable(table, format, text, r["out"].as<std::string>());
  else if (!best && !reference)
    out << text;
  const int code = printReports(table, r, best, reference, co, out);
  if (!r.count("plot")) return code;
  return std::max(code,
                  drawCharts(table, r["plot"].as<std::string>(), r.count("plot-best-effort") > 0));
}

namespace {

// The build holding launcher/ and trainer/: $FTB_BUILD_DIR, else the one this binary is in.
std::string defaultBuildDir() {
  if (const char* d = std::getenv("FTB_BUILD_DIR"); d && *d)
    return std::filesystem::absolute(d).lexically_normal().string();
  const std::string dir = ownExecutableDir();
  return dir.empty() ? "build/release" : std::filesystem::path(dir).parent_path().string();
}

double positiveFlag(const cxxopts::ParseResult& r, const std::string& name, double scale) {
  const double v = r[name].as<double>();
  if (!(v > 0) || !std::isfinite(v))
    throw ConfigError("--" + name, "command line", "expected a number > 0", "--" + name + " 1.5");
  return v * scale;
}

}  // namespace

int tuneCommand(const std::vector<std::string>& args, std::ostream& out) {
  cxxopts::Options opts("sweep_tagger tune",
                        "The fastest configuration of a search space (a sweep file with "
                        "[machines] and [tune]) with a fraction of an exhaustive sweep's runs.");
  opts.add_options()("budget-minutes", "no run starts after this much machine time",
                     cxxopts::value<double>())(
      "dry-run", "prune and order the points by the model; run nothing but the probe")(
      "gemm-tflops", "GEMM rate per rank (TFLOP/s) instead of the probe's",
      cxxopts::value<double>())("link-GBps",
                                "all-reduce bus bandwidth (GB/s) instead of the probe's",
                                cxxopts::value<double>())(
      "out", "report, winner.toml, winner.sh (default RESULTS_DIR/tune)",
      cxxopts::value<std::string>())("build-dir",
                                     "build with launcher/ and trainer/ (default $FTB_BUILD_DIR, "
                                     "else this binary's)",
                                     cxxopts::value<std::string>())("h,help", "this help")(
      "space", "search space TOML", cxxopts::value<std::string>())(
      "results", "results dir", cxxopts::value<std::string>())(
      "overrides", "key=value for every point", cxxopts::value<std::vector<std::string>>());
  opts.parse_positional({"space", "results", "overrides"});
  opts.positional_help("SPACE.toml RESULTS_DIR [key=value ...]");
  auto r = parse(opts, args);
  if (r.count("help")) {
    out << opts.help();
    return 0;
  }
  if (!r.count("space") || !r.count("results"))
    throw ConfigError("", "command line", "missing SPACE.toml or RESULTS_DIR",
                      "sweep_tagger tune SPACE.toml RESULTS_DIR (sweep_tagger tune --help)");
  TuneOptions o;
  o.space = r["space"].as<std::string>();
  o.results_dir = std::filesystem::absolute(r["results"].as<std::string>()).lexically_normal().string();
  if (r.count("overrides")) o.overrides = r["overrides"].as<std::vector<std::string>>();
  if (r.count("budget-minutes")) o.budget_minutes = positiveFlag(r, "budget-minutes", 1);
  if (r.count("gemm-tflops")) o.gemm_flops = positiveFlag(r, "gemm-tflops", 1e12);
  if (r.count("link-GBps")) o.busbw_Bps = positiveFlag(r, "link-GBps", 1e9);
  if (r.count("out")) o.out_dir = r["out"].as<std::string>();
  o.dry_run = r.count("dry-run") > 0;
  o.build_dir = r.count("build-dir") ? std::filesystem::absolute(r["build-dir"].as<std::string>()).string()
                                     : defaultBuildDir();
  const TuneResult res = runTune(o);
  out << res.report;
  return res.exit_code;
}

int runSweepTagger(int argc, char** argv, std::ostream& out, std::ostream& err) {
  const std::string usage =
      "usage: sweep_tagger tag --config X.toml [key=value ...] [--world-size N] [--nodes N] "
      "[--fmt F] [--hash]\n"
      "       sweep_tagger expand SWEEP.toml [key=value ...] [--json] [--index I] [--field F] "
      "[--pending RESULTS_DIR]\n"
      "                           [--memory-budget SIZE|DEVICE]\n"
      "       sweep_tagger aggregate RESULTS_DIR [--format csv|md|json] [--out F] [--plot DIR] "
      "[--jobs N]\n"
      "                              [--stale-seconds S] [--reader-timeout S]\n"
      "                              [--best tokens_per_s|cost|memory|tokens_per_cpu_s] [--exclude-noisy]\n"
      "                              [--price-per-hour USD] [--plot-best-effort]\n"
      "                              [--compare REF.csv [--fail-on-regression PCT]]\n"
      "       sweep_tagger tune SPACE.toml RESULTS_DIR [key=value ...] [--budget-minutes M] "
      "[--dry-run]\n"
      "                         [--gemm-tflops X] [--link-GBps Y] [--out DIR]\n"
      "       sweep_tagger SUBCOMMAND --help: every option\n";
  if (argc < 2) {
    err << usage;
    return kExitBadInput;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  int code = 0;
  try {
    if (cmd == "tag") {
      code = tagCommand(args, out);
    } else if (cmd == "expand") {
      code = expandCommand(args, out);
    } else if (cmd == "aggregate") {
      code = aggregateCommand(args, out);
    } else if (cmd == "tune") {
      code = tuneCommand(args, out);
    } else if (cmd == "-h" || cmd == "--help") {
      out << usage;
    } else {
      err << "sweep_tagger: unknown subcommand '" << cmd << "'\n" << usage;
      return kExitBadInput;
    }
  } catch (const FtbError& e) {
    err << "sweep_tagger " << cmd << ": " << e.what() << "\n";
    return e.exitCode();
  }
  // Output that did not reach stdout (`> file` on a full disk) is no result: exit 4 (IoError).
  const bool failed = !out;  // a write already failed: errno is still its error
  int error = failed ? errno : 0;
  errno = 0;
  if (!out.flush() || failed) {
    if (error == 0) error = errno;
    err << "sweep_tagger " << cmd << ": cannot write the output to stdout"
        << (error != 0 ? std::string(": ") + std::strerror(error) : std::string())
        << "; what it printed is incomplete\n";
    return IoError("").exitCode();
  }
  return code;
}

}  // namespace ftb
