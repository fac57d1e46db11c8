#include "sweep_tagger/plot.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/files.h"
#include "common/tag.h"
#include "sweep_tagger/axes.h"
#include "sweep_tagger/child_process.h"
#include "sweep_tagger/compare.h"

extern char** environ;

namespace ftb {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxTics = 12;  // more x values: gnuplot's own tics

std::optional<double> num(const Cell& c) {
  if (auto* i = std::get_if<int64_t>(&c)) return double(*i);
  if (auto* d = std::get_if<double>(&c)) return *d;
  return std::nullopt;
}

// A gnuplot double-quoted string (terminals are noenhanced: '_' stays literal).
std::string gpQuote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

// A chart point: y (a configuration's median over its repeats) with its min-max; noisy
// when a run of the configuration was marked noisy by the trainer.
struct Pt {
  double x, y, lo, hi;
  bool noisy = false;
  bool operator<(const Pt& o) const { return x < o.x; }
};

struct NaturalOrder {  // series "seq_len=512" before "seq_len=1024"
  bool operator()(const std::string& a, const std::string& b) const { return naturalLess(a, b); }
};

// One chart: series name -> points; categorical x uses `xtics`.
struct Chart {
  std::string file, title, xlabel, ylabel;
  std::map<std::string, std::vector<Pt>, NaturalOrder> series;
  std::vector<std::string> xtics;  // non-empty: categorical axis, x = index
};

// Line colours dark enough on white (Okabe-Ito without its yellow, then darker tones),
// each with its own point symbol, so one-point series and grey-scale prints stay readable.
constexpr const char* kColours[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#000000",
                                    "#e69f00", "#56b4e9", "#8c564b", "#7f3c8d", "#3b6e22"};
constexpr int kPointTypes[] = {7, 5, 9, 11, 13, 6, 4, 8, 10, 12};

// Reaps `pid`, waiting at most `timeout_s` (reapWithin); past it kills it (SIGKILL) and
// reaps it. Returns false on the timeout.
bool waitWithDeadline(pid_t pid, int& status, double timeout_s) {
  if (reapWithin(pid, timeout_s, status)) return true;
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return false;
}

// Runs `gnuplot -e 'out="<out>"' script`: the script writes <out>.png and <out>.svg.
bool runGnuplot(const std::string& script, const std::string& out, double timeout_s,
                std::string& error) {
  pid_t pid;
  const std::string out_var = "out=" + gpQuote(out);
  const char* argv[] = {"gnuplot", "-e", out_var.c_str(), script.c_str(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, (script + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  int rc = posix_spawnp(&pid, "gnuplot", &fa, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    error = "gnuplot not found (install gnuplot-nox)";
    return false;
  }
  int status = 0;
  if (!waitWithDeadline(pid, status, timeout_s)) {
    error =
        "gnuplot did not finish " + script + " within " + formatDouble(timeout_s) + " s: killed";
    return false;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::error_code ec;
    if (fs::file_size(script + ".log", ec) == 0) fs::remove(script + ".log", ec);
    return true;
  }
  // A gnuplot error exits non-zero; a warning ("difficulty fitting plot titles into key":
  // a legend left out) only says so on stderr: the caller reads the kept .gp.log.
  error = "gnuplot failed on " + script + " (see " + script + ".log)";
  return false;
}

// Where series i of n sits beside its category (categorical x): side by side within
// +-0.25 of the tic, so the points of one category do not hide each other.
double categoryOffset(size_t i, size_t n) {
  if (n < 2) return 0;
  return (double(i) - double(n - 1) / 2) * std::min(0.3, 0.5 / double(n - 1));
}

// The .dat file: one gnuplot data block per series (sorted by x; a categorical x is the
// category's index plus the series' offset). Returns the series names.
std::string datText(const Chart& c, std::vector<std::string>& names) {
  std::string dat;
  for (const auto& [name, pts] : c.series) {
    std::vector<Pt> sorted = pts;
    std::sort(sorted.begin(), sorted.end());
    const double offset = c.xtics.empty() ? 0 : categoryOffset(names.size(), c.series.size());
    dat += "# " + name + "  (x, median, min, max, noisy)\n";
    for (const Pt& p : sorted)
      dat += formatDouble(p.x + offset) + " " + formatDouble(p.y) + " " + formatDouble(p.lo) + " " +
             formatDouble(p.hi) + " " + (p.noisy ? "1" : "0") + "\n";
    dat += "\n\n";
    names.push_back(name);
  }
  return dat;
}

// The canvas and key layout that fit every series title below the plot: one column up to
// 8 titles, else two; ~9 px per character, 20 px per key row (gnuplot warns, and the run
// fails, when the key does not fit).
std::string terminalSize(const std::vector<std::string>& names, int& rows) {
  size_t longest = 8;
  for (const std::string& n : names) longest = std::max(longest, n.size());
  const int col_w = static_cast<int>(longest) * 9 + 90;
  const int cols = names.size() > 8 && 2 * col_w + 40 <= 2000 ? 2 : 1;
  rows = std::max<int>(1, (static_cast<int>(names.size()) + cols - 1) / cols);
  const int w = std::max(900, cols * col_w + 40), h = std::max(600, 440 + rows * 20);
  return std::to_string(w) + "," + std::to_string(h);
}

// The x axis: log2 when the values span 8x, their values as tics (or the categories).
std::string xAxis(const Chart& c) {
  std::ostringstream gp;
  std::set<double> xs;
  for (const auto& [name, pts] : c.series)
    for (const Pt& p : pts) xs.insert(p.x);
  if (c.xtics.empty() && !xs.empty() && *xs.begin() > 0 && *xs.rbegin() / *xs.begin() >= 8)
    gp << "set logscale x 2\n";  // powers of two (seq_len, batch, ranks) evenly spaced
  if (c.xtics.empty() && xs.size() <= kMaxTics) {
    gp << "set xtics (";
    for (auto it = xs.begin(); it != xs.end(); ++it)
      gp << (it == xs.begin() ? "" : ", ") << formatDouble(*it);
    gp << ")\n";
  }
  if (!c.xtics.empty()) {
    gp << "set xrange [-0.5:" << c.xtics.size() - 0.5 << "]\nset xtics (";
    for (size_t i = 0; i < c.xtics.size(); ++i)
      gp << (i ? ", " : "") << gpQuote(c.xtics[i]) << " " << i;
    gp << ")\n";
  }
  return gp.str();
}

constexpr const char* kNoisyTitle =
    "noisy run (interference above metrics.max_interference): not the configuration's alone";

bool anyNoisy(const Chart& c) {
  for (const auto& [name, pts] : c.series)
    for (const Pt& p : pts)
      if (p.noisy) return true;
  return false;
}

// The .gp script. It writes <out>.png and <out>.svg, `out` defaulting to `base` (run it
// again by hand: `gnuplot base.gp`); writePlots passes a temporary `out` with -e. Every
// series has its title in the key, its colour and point symbol, and min-max error bars.
std::string gpText(const Chart& c, const std::string& base, const std::vector<std::string>& names) {
  std::ostringstream gp;
  int rows = 1;
  const std::string size = terminalSize(names, rows);
  gp << "if (!exists(\"out\")) out = " << gpQuote(base) << "\n";
  gp << "set title " << gpQuote(c.title) << "\nset xlabel " << gpQuote(c.xlabel) << "\nset ylabel "
     << gpQuote(c.ylabel) << "\nset grid\nset key below vertical maxrows " << rows
     << " reverse Left\nset yrange [0:*]\nset offsets graph 0.03, graph 0.03, 0, 0\n";
  const size_t n_styles = sizeof(kColours) / sizeof(kColours[0]);
  for (size_t i = 0; i < n_styles; ++i)
    gp << "set linetype " << i + 1 << " lc rgb \"" << kColours[i] << "\" lw 2 pt " << kPointTypes[i]
       << " ps 1.3\n";
  gp << "set linetype cycle " << n_styles << "\n" << xAxis(c);
  // Categories (layout names) have no order between them: points, no joining lines.
  const std::string style = c.xtics.empty() ? " with yerrorlines lt " : " with yerrorbars lt ";
  std::string plot = "plot ";
  for (size_t i = 0; i < names.size(); ++i)
    plot += (i ? ", " : "") + gpQuote(base + ".dat") + " index " + std::to_string(i) +
            " using 1:2:3:4" + style + std::to_string(i % n_styles + 1) + " title " +
            gpQuote(names[i]);
  if (anyNoisy(c))  // a ring around each noisy point: one key entry for all series
    plot += ", " + gpQuote(base + ".dat") + " index 0:" + std::to_string(names.size() - 1) +
            " using 1:($5 > 0 ? $2 : 1/0) with points pt 6 ps 3 lw 2 lc rgb \"#000000\" title " +
            gpQuote(kNoisyTitle);
  gp << "set terminal pngcairo size " << size << " noenhanced\nset output out.\".png\"\n"
     << plot << "\nset terminal svg size " << size << " noenhanced\nset output out.\".svg\"\n"
     << plot << "\nunset output\n";
  return gp.str();
}

// Whether an image gnuplot wrote is whole: a PNG ends with its IEND chunk, an SVG with
// </svg> (gnuplot exits 0 even when the disk filled up under it).
bool imageComplete(const std::string& path, const std::string& ext) {
  const std::string tail = ext == ".png" ? std::string("IEND\xae\x42\x60\x82", 8) : "</svg>";
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : -1;
  if (size < static_cast<std::streamoff>(tail.size())) return false;
  const std::streamoff from = std::max<std::streamoff>(0, size - 64);
  std::string end(static_cast<size_t>(size - from), '\0');
  in.seekg(from);
  in.read(end.data(), static_cast<std::streamsize>(end.size()));
  return in && end.find(tail) != std::string::npos;
}

// What gnuplot said on stderr while drawing <base> ("" when nothing): its first line.
std::string gnuplotWarning(const std::string& base) {
  std::ifstream log(base + ".gp.log");
  std::string first;
  if (!log || !std::getline(log, first)) return "";
  return "gnuplot warned on " + base + ".gp: " + first + " (see " + base + ".gp.log)";
}

// Draws <base>.png and .svg: gnuplot writes them under temporary names, each renamed into
// place once whole. Returns "" or why not (the temporary images are removed).
std::string drawImages(const std::string& base, double timeout_s) {
  const std::string tmp = base + ".tmp." + std::to_string(getpid());
  std::string error;
  bool ok = runGnuplot(base + ".gp", tmp, timeout_s, error);
  for (const char* ext : {".png", ".svg"})
    if (ok && !imageComplete(tmp + ext, ext)) {
      ok = false;
      error = "gnuplot wrote an incomplete " + tmp + ext + " (disk full?)";
    }
  std::error_code ec;
  for (const char* ext : {".png", ".svg"}) {
    if (ok) renameDurably(tmp + ext, base + ext);  // IoError: exit 4
    fs::remove(tmp + ext, ec);
  }
  return error;
}

// Problems go to `warnings`, and those that leave a chart missing or unreadable (every
// gnuplot problem, warnings included) to `failures` too.
struct Sink {
  std::vector<std::string>& written;
  std::vector<std::string>& warnings;
  std::vector<std::string>* failures;
  void fail(const std::string& why) {
    warnings.push_back(why);
    if (failures) failures->push_back(why);
  }
};

bool draw(const Chart& c, const std::string& dir, double timeout_s, Sink& sink) {
  const std::string base = (fs::path(dir) / c.file).string();
  std::vector<std::string> names;
  writeFileDurably(base + ".dat", datText(c, names));
  writeFileDurably(base + ".gp", gpText(c, base, names));
  const std::string error = drawImages(base, timeout_s);
  if (!error.empty()) {
    sink.fail(error);
    return false;
  }
  if (const std::string warning = gnuplotWarning(base); !warning.empty()) sink.fail(warning);
  sink.written.push_back(base + ".png");
  sink.written.push_back(base + ".svg");
  return true;
}

// A run's series name: every varying axis but `skip`, "all runs" when none.
std::string seriesName(const std::vector<Axis>& varying, const RunRow& r, const std::string& skip) {
  const std::string s = axesName(varying, r, skip, ", ");
  return s.empty() ? std::string("all runs") : s;
}

// An axis label: the axis and, where it has one, its unit.
std::string axisLabel(const std::string& name) {
  static const std::map<std::string, std::string> units = {
      {"data.seq_len", "tokens per sequence"},
      {"training.micro_batch_size", "sequences per rank"},
      {"training.global_batch_size", "sequences per optimizer step"},
      {"world_size", "ranks"},
      {"nodes", "hosts"},
      {"layout", "sweep layout variant"}};
  auto it = units.find(name);
  return it == units.end() ? name : name + " (" + it->second + ")";
}

// Dataset tokens/s against axis `a` (categorical when a value is not a number); a point is
// noisy when its configuration (groupKey) is in `noisy`.
Chart throughputChart(const Axis& a, const std::vector<Axis>& varying,
                      const std::vector<const RunRow*>& runs, const std::set<std::string>& noisy) {
  Chart c;
  c.file = "tokens_per_s_vs_" + pathSafe(a.name);
  c.title = "dataset tokens/s vs " + a.name + " (median of repeats, bars min-max)";
  c.xlabel = axisLabel(a.name);
  c.ylabel = "tokens/s (dataset, global)";
  bool numeric = true;
  std::set<std::string> labels;
  for (const RunRow* r : runs) {
    numeric &= num(a.get(*r)).has_value();
    labels.insert(axisText(a.get(*r)));
  }
  if (!numeric) c.xtics.assign(labels.begin(), labels.end());
  for (const RunRow* r : runs) {
    double x = numeric
                   ? *num(a.get(*r))
                   : double(std::distance(c.xtics.begin(), std::find(c.xtics.begin(), c.xtics.end(),
                                                                     axisText(a.get(*r)))));
    c.series[seriesName(varying, *r, a.name)].push_back(
        {x, r->tokens_median.value_or(*r->tokens_per_s_dataset),
         r->tokens_min.value_or(*r->tokens_per_s_dataset),
         r->tokens_max.value_or(*r->tokens_per_s_dataset), noisy.count(groupKey(*r)) > 0});
  }
  return c;
}

// Per-device tokens/s relative to the smallest world size of each series.
Chart scalingChart(const std::vector<Axis>& varying, const std::vector<const RunRow*>& runs,
                   const std::set<std::string>& noisy) {
  Chart c;
  c.file = "scaling_efficiency";
  c.title = "scaling efficiency (per-device tokens/s relative to the smallest world size)";
  c.xlabel = axisLabel("world_size");
  c.ylabel = "efficiency (ratio; 1 = linear scaling)";
  std::map<std::string, std::vector<const RunRow*>> groups;
  for (const RunRow* r : runs)
    if (r->world_size) groups[seriesName(varying, *r, "world_size")].push_back(r);
  for (auto& [name, rs] : groups) {
    auto base = *std::min_element(rs.begin(), rs.end(),
                                  [](auto* a, auto* b) { return *a->world_size < *b->world_size; });
    auto tps = [](const RunRow* r) { return r->tokens_median.value_or(*r->tokens_per_s_dataset); };
    double per_dev = tps(base) / double(*base->world_size);
    if (per_dev <= 0) continue;
    for (const RunRow* r : rs) {
      const double e = tps(r) / double(*r->world_size) / per_dev;
      c.series[name].push_back({double(*r->world_size), e, e, e, noisy.count(groupKey(*r)) > 0});
    }
  }
  return c;
}

}  // namespace

std::vector<std::string> writePlots(const AggregateTable& t, const std::string& dir,
                                    std::vector<std::string>& warnings, double gnuplot_timeout_s,
                                    std::vector<std::string>* failures) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create plot dir " + dir + ": " + ec.message());
  std::vector<const RunRow*> runs;
  std::set<std::string> groups;  // one point per configuration: its repeats' median
  std::set<std::string> noisy;   // configurations with a plotted or counted noisy run
  for (const RunRow& r : t.runs) {
    if (r.status != RunState::Completed || !r.tokens_per_s_dataset) continue;
    if (!r.noisy.empty()) noisy.insert(groupKey(r));
    if (r.repeats == 0 || groups.insert(groupKey(r)).second) runs.push_back(&r);
  }
  std::vector<std::string> written;
  Sink sink{written, warnings, failures};
  if (runs.empty()) {
    warnings.push_back("no completed run with a tokens/s value: nothing to plot");
    return written;
  }
  const std::vector<Axis> varying = varyingAxes(t, runs);
  bool ws_varies = false;
  for (const Axis& a : varying) {
    ws_varies |= a.name == "world_size";
    draw(throughputChart(a, varying, runs, noisy), dir, gnuplot_timeout_s, sink);
  }
  if (ws_varies) draw(scalingChart(varying, runs, noisy), dir, gnuplot_timeout_s, sink);
  if (varying.empty()) warnings.push_back("no axis varies across the runs: nothing to plot");
  return written;
}

}  // namespace ftb
