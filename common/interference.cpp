#include "common/interference.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "common/config.h"

namespace ftb {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double steadyNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The "cpu" lines at the head of /proc/stat (the rest, "intr" above all, is long).
std::string procStatCpuLines() {
  std::ifstream in("/proc/stat");
  std::string line, out;
  while (std::getline(in, line) && line.rfind("cpu", 0) == 0) out += line + "\n";
  return out;
}

std::vector<int> affinityCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// One small /proc file relative to `dir_fd` with open/read (no stream set-up per file).
std::string readSmall(int dir_fd, const std::string& rel) {
  const int fd = openat(dir_fd, rel.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  return n > 0 ? std::string(buf, size_t(n)) : "";
}

// schedstat of the threads `only` names (those still alive), or of every thread when empty.
std::map<int, ThreadSched> readThreads(const std::vector<int>& only) {
  std::map<int, ThreadSched> out;
  DIR* d = opendir("/proc/self/task");
  if (!d) return out;
  const int dfd = dirfd(d);
  auto read = [&](const std::string& tid) {
    ThreadSched t;
    if (parseSchedstat(readSmall(dfd, tid + "/schedstat"), t)) out[std::atoi(tid.c_str())] = t;
  };
  if (only.empty()) {
    while (dirent* e = readdir(d))
      if (std::atoi(e->d_name) > 0) read(e->d_name);
  } else {
    for (int tid : only) read(std::to_string(tid));
  }
  closedir(d);
  return out;
}

}  // namespace

bool parseSchedstat(const std::string& text, ThreadSched& out) {
  std::istringstream is(text);
  ThreadSched t;
  if (!(is >> t.run_ns >> t.wait_ns >> t.slices) || t.run_ns < 0 || t.wait_ns < 0) return false;
  out = t;
  return true;
}

bool parseProcStat(const std::string& text, const std::vector<int>& cpus, CpuTicks& out) {
  std::set<int> want(cpus.begin(), cpus.end()), seen;
  CpuTicks sum;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit((unsigned char)line[3]))
      continue;
    std::istringstream ls(line.substr(3));
    int cpu = -1;
    ls >> cpu;
    if (!want.count(cpu)) continue;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    int64_t v[8];
    for (int64_t& x : v)
      if (!(ls >> x)) return false;
    sum.busy += v[0] + v[1] + v[2] + v[5] + v[6];
    sum.steal += v[7];
    for (int64_t x : v) sum.total += x;
    seen.insert(cpu);
  }
  if (seen.size() != want.size()) return false;
  out = sum;
  return true;
}

InterferenceFigures interferenceBetween(const SchedSample& a, const SchedSample& b,
                                        int compute_threads, double tick_hz) {
  InterferenceFigures f;
  f.wall_s = b.wall_s - a.wall_s;
  if (!(f.wall_s > 0) || b.threads.empty()) {
    f.wait_frac = f.steal_frac = f.other_load = f.interference = f.cpu_thread_s = kNaN;
    f.nivcsw = a.nivcsw >= 0 && b.nivcsw >= 0 ? double(b.nivcsw - a.nivcsw) : kNaN;
    return f;
  }
  int64_t wait_ns = 0, run_ns = 0;
  for (const auto& [tid, t] : b.threads) {
    auto it = a.threads.find(tid);
    const ThreadSched base = it == a.threads.end() ? ThreadSched{} : it->second;
    wait_ns += std::max<int64_t>(0, t.wait_ns - base.wait_ns);
    run_ns += std::max<int64_t>(0, t.run_ns - base.run_ns);
  }
  f.wait_thread_s = double(wait_ns) * 1e-9;
  f.cpu_thread_s = a.cpu_ns >= 0 && b.cpu_ns >= a.cpu_ns ? double(b.cpu_ns - a.cpu_ns) * 1e-9
                                                        : double(run_ns) * 1e-9;
  f.wait_frac = f.wait_thread_s / (f.wall_s * std::max(compute_threads, 1));
  if (a.ticks_ok && b.ticks_ok && b.ticks.total >= a.ticks.total) {
    const double dtotal = double(b.ticks.total - a.ticks.total);
    f.steal_frac = dtotal > 0 ? double(b.ticks.steal - a.ticks.steal) / dtotal : 0;
    const double busy_s = double(b.ticks.busy - a.ticks.busy) / tick_hz;
    f.other_load = std::max(0.0, busy_s - double(run_ns) * 1e-9) / f.wall_s;
  } else {
    f.steal_frac = f.other_load = kNaN;
  }
  f.nivcsw = a.nivcsw >= 0 && b.nivcsw >= 0 ? double(b.nivcsw - a.nivcsw) : kNaN;
  f.interference = std::min(1.0, f.wait_frac + (std::isnan(f.steal_frac) ? 0 : f.steal_frac));
  return f;
}

void InterferenceTotal::add(const InterferenceFigures& f) {
  if (!(f.wall_s > 0) || std::isnan(f.wait_frac)) return;
  wall_s_ += f.wall_s;
  wait_w_ += f.wait_frac * f.wall_s;
  steal_w_ += (std::isnan(f.steal_frac) ? 0 : f.steal_frac) * f.wall_s;
  load_w_ += (std::isnan(f.other_load) ? 0 : f.other_load) * f.wall_s;
  nivcsw_ += std::isnan(f.nivcsw) ? 0 : f.nivcsw;
  wait_thread_s_ += f.wait_thread_s;
  cpu_thread_s_ += f.cpu_thread_s;
}

InterferenceFigures InterferenceTotal::figures() const {
  InterferenceFigures f;
  if (wall_s_ <= 0) {
    f.wait_frac = f.steal_frac = f.other_load = f.nivcsw = f.interference = f.cpu_thread_s = kNaN;
    return f;
  }
  f.wall_s = wall_s_;
  f.cpu_thread_s = cpu_thread_s_;
  f.wait_frac = wait_w_ / wall_s_;
  f.steal_frac = steal_w_ / wall_s_;
  f.other_load = load_w_ / wall_s_;
  f.nivcsw = nivcsw_;
  f.wait_thread_s = wait_thread_s_;
  f.interference = std::min(1.0, f.wait_frac + f.steal_frac);
  return f;
}

InterferenceSampler::InterferenceSampler(int compute_threads)
    : threads_(std::max(compute_threads, 1)), cpus_(affinityCpus()) {
  const long hz = sysconf(_SC_CLK_TCK);
  tick_hz_ = hz > 0 ? double(hz) : 100.0;
  last_ = sample();
}

SchedSample InterferenceSampler::sample() const {
  SchedSample s;
  s.threads = readThreads(tids_);
  s.ticks_ok = !cpus_.empty() && parseProcStat(procStatCpuLines(), cpus_, s.ticks);
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) s.nivcsw = ru.ru_nivcsw;
  timespec cpu{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0)
    s.cpu_ns = int64_t(cpu.tv_sec) * 1'000'000'000 + cpu.tv_nsec;
  s.wall_s = steadyNow();
  return s;
}

void InterferenceSampler::setComputeTids(std::vector<int> tids) {
  tids_ = std::move(tids);
  threads_ = std::max(static_cast<int>(tids_.size()), 1);
  last_ = sample();
}

InterferenceFigures InterferenceSampler::next() {
  SchedSample now = sample();
  InterferenceFigures f = interferenceBetween(last_, now, threads_, tick_hz_);
  last_ = std::move(now);
  return f;
}

std::string describeInterference(const InterferenceFigures& f, size_t bound_cpus) {
  if (std::isnan(f.interference))
    return "interference not measured (/proc/self/task/*/schedstat unreadable)";
  auto pct = [](double v) {
    return std::isnan(v) ? std::string("n/a") : formatFixed(100 * v, 1) + " %";
  };
  return "interference " + pct(f.interference) + " (run-queue wait " + pct(f.wait_frac) +
         ", steal " + pct(f.steal_frac) + "; other processes' load " +
         (std::isnan(f.other_load) ? std::string("n/a") : formatFixed(f.other_load, 2)) + " of " +
         std::to_string(bound_cpus) + " bound CPU(s); " +
         (std::isnan(f.nivcsw) ? std::string("n/a") : formatFixed(f.nivcsw, 0)) +
         " involuntary context switches)";
}

}  // namespace ftb
