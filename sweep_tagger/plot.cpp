#include "sweep_tagger/plot.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "common/tag.h"

extern char** environ;

namespace ftb {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxLegendSeries = 12;

struct Axis {
  std::string name;
  std::function<Cell(const RunRow&)> get;
};

// Axis/legend label of a cell: "-" when missing.
std::string text(const Cell& c) {
  std::string t = cellText(c);
  return t.empty() ? "-" : t;
}

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

// One chart: series name -> (x, y) points; categorical x uses `xtics`.
struct Chart {
  std::string file, title, xlabel, ylabel;
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  std::vector<std::string> xtics;  // non-empty: categorical axis, x = index
};

// Reaps `pid`, waiting at most `timeout_s`; past it kills it (SIGKILL) and reaps it.
// Returns false on the timeout.
bool waitWithDeadline(pid_t pid, int& status, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return true;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
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
  error = "gnuplot failed on " + script + " (see " + script + ".log)";
  return false;
}

// The .dat file: one gnuplot data block per series (sorted by x). Returns the series names.
std::string datText(const Chart& c, std::vector<std::string>& names) {
  std::string dat;
  for (const auto& [name, pts] : c.series) {
    std::vector<std::pair<double, double>> sorted = pts;
    std::sort(sorted.begin(), sorted.end());
    dat += "# " + name + "\n";
    for (auto [x, y] : sorted) dat += formatDouble(x) + " " + formatDouble(y) + "\n";
    dat += "\n\n";
    names.push_back(name);
  }
  return dat;
}

// The .gp script. It writes <out>.png and <out>.svg, `out` defaulting to `base` (run it
// again by hand: `gnuplot base.gp`); writePlots passes a temporary `out` with -e.
std::string gpText(const Chart& c, const std::string& base, const std::vector<std::string>& names) {
  std::ostringstream gp;
  gp << "if (!exists(\"out\")) out = " << gpQuote(base) << "\n";
  gp << "set title " << gpQuote(c.title) << "\nset xlabel " << gpQuote(c.xlabel) << "\nset ylabel "
     << gpQuote(c.ylabel) << "\nset grid\nset key below\n"
     << "set yrange [0:*]\nset offsets graph 0.03, graph 0.03, 0, 0\n";
  std::set<double> xs;
  for (const auto& [name, pts] : c.series)
    for (auto [x, y] : pts) xs.insert(x);
  if (c.xtics.empty() && !xs.empty() && *xs.begin() > 0 && *xs.rbegin() / *xs.begin() >= 8)
    gp << "set logscale x 2\n";  // powers of two (seq_len, batch, ranks) evenly spaced
  if (c.xtics.empty() && xs.size() <= kMaxLegendSeries) {
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
  const bool legend = names.size() <= kMaxLegendSeries;
  std::string plot = "plot ";
  for (size_t i = 0; i < names.size(); ++i) {
    plot += (i ? ", " : "") + gpQuote(base + ".dat") + " index " + std::to_string(i) +
            (legend ? " with linespoints title " + gpQuote(names[i])
                    : " with points pt 7 ps 0.5 lc rgb \"#3060a0\" notitle");
  }
  gp << "set terminal pngcairo size 900,600 noenhanced\nset output out.\".png\"\n"
     << plot << "\nset terminal svg size 900,600 noenhanced\nset output out.\".svg\"\n"
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

bool draw(const Chart& c, const std::string& dir, double timeout_s,
          std::vector<std::string>& written, std::vector<std::string>& warnings) {
  const std::string base = (fs::path(dir) / c.file).string();
  std::vector<std::string> names;
  writeFileDurably(base + ".dat", datText(c, names));
  writeFileDurably(base + ".gp", gpText(c, base, names));
  const std::string error = drawImages(base, timeout_s);
  if (!error.empty()) {
    warnings.push_back(error);
    return false;
  }
  written.push_back(base + ".png");
  written.push_back(base + ".svg");
  return true;
}

// The axes that vary across `runs`: the sweep's varying config keys, world_size, nodes.
std::vector<Axis> varyingAxes(const AggregateTable& t, const std::vector<const RunRow*>& runs) {
  std::vector<Axis> axes;
  for (const std::string& k : t.varying)
    axes.push_back({k, [k](const RunRow& r) {
                      auto it = r.config.find(k);
                      return it == r.config.end() ? Cell() : it->second;
                    }});
  axes.push_back(
      {"world_size", [](const RunRow& r) { return r.world_size ? Cell(*r.world_size) : Cell(); }});
  axes.push_back({"nodes", [](const RunRow& r) { return r.nodes ? Cell(*r.nodes) : Cell(); }});
  std::vector<Axis> varying;
  for (const Axis& a : axes) {
    std::set<std::string> values;
    for (const RunRow* r : runs) values.insert(text(a.get(*r)));
    if (values.size() > 1) varying.push_back(a);
  }
  return varying;
}

// A run's series name: every varying axis but `skip`, "all runs" when none.
std::string seriesName(const std::vector<Axis>& varying, const RunRow& r, const std::string& skip) {
  std::string s;
  for (const Axis& a : varying)
    if (a.name != skip) s += (s.empty() ? "" : ", ") + a.name + "=" + text(a.get(r));
  return s.empty() ? std::string("all runs") : s;
}

// Dataset tokens/s against axis `a` (categorical when a value is not a number).
Chart throughputChart(const Axis& a, const std::vector<Axis>& varying,
                      const std::vector<const RunRow*>& runs) {
  Chart c;
  c.file = "tokens_per_s_vs_" + pathSafe(a.name);
  c.title = "dataset tokens/s vs " + a.name;
  c.xlabel = a.name;
  c.ylabel = "tokens/s (dataset, global)";
  bool numeric = true;
  std::set<std::string> labels;
  for (const RunRow* r : runs) {
    numeric &= num(a.get(*r)).has_value();
    labels.insert(text(a.get(*r)));
  }
  if (!numeric) c.xtics.assign(labels.begin(), labels.end());
  for (const RunRow* r : runs) {
    double x =
        numeric ? *num(a.get(*r))
                : double(std::distance(c.xtics.begin(), std::find(c.xtics.begin(), c.xtics.end(),
                                                                  text(a.get(*r)))));
    c.series[seriesName(varying, *r, a.name)].emplace_back(x, *r->tokens_per_s_dataset);
  }
  return c;
}

// Per-device tokens/s relative to the smallest world size of each series.
Chart scalingChart(const std::vector<Axis>& varying, const std::vector<const RunRow*>& runs) {
  Chart c;
  c.file = "scaling_efficiency";
  c.title = "scaling efficiency (per-device tokens/s relative to the smallest world size)";
  c.xlabel = "world_size";
  c.ylabel = "efficiency";
  std::map<std::string, std::vector<const RunRow*>> groups;
  for (const RunRow* r : runs)
    if (r->world_size) groups[seriesName(varying, *r, "world_size")].push_back(r);
  for (auto& [name, rs] : groups) {
    auto base = *std::min_element(
        rs.begin(), rs.end(), [](auto* a, auto* b) { return *a->world_size < *b->world_size; });
    double per_dev = *base->tokens_per_s_dataset / double(*base->world_size);
    if (per_dev <= 0) continue;
    for (const RunRow* r : rs)
      c.series[name].emplace_back(double(*r->world_size),
                                  *r->tokens_per_s_dataset / double(*r->world_size) / per_dev);
  }
  return c;
}

}  // namespace

std::vector<std::string> writePlots(const AggregateTable& t, const std::string& dir,
                                    std::vector<std::string>& warnings, double gnuplot_timeout_s) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create plot dir " + dir + ": " + ec.message());
  std::vector<const RunRow*> runs;
  for (const RunRow& r : t.runs)
    if (r.status == RunState::Completed && r.tokens_per_s_dataset) runs.push_back(&r);
  std::vector<std::string> written;
  if (runs.empty()) {
    warnings.push_back("no completed run with a tokens/s value: nothing to plot");
    return written;
  }
  const std::vector<Axis> varying = varyingAxes(t, runs);
  bool ws_varies = false;
  for (const Axis& a : varying) {
    ws_varies |= a.name == "world_size";
    draw(throughputChart(a, varying, runs), dir, gnuplot_timeout_s, written, warnings);
  }
  if (ws_varies) draw(scalingChart(varying, runs), dir, gnuplot_timeout_s, written, warnings);
  if (varying.empty()) warnings.push_back("no axis varies across the runs: nothing to plot");
  return written;
}

}  // namespace ftb
