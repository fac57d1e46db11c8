#include "trainer/max_micro_batch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/h5_metrics.h"
#include "common/memory_estimate.h"
#include "trainer/loop/train.h"

namespace ftb {
namespace fs = std::filesystem;
namespace {


double estimateAt(TrainConfig tc, int64_t mb) {
  tc.training.micro_batch_size = mb;
  return estimateMemory(tc).total();
}

// One measured try of a micro-batch size.
struct Try {
  int64_t mb = 0;
  double estimate = 0, peak = 0;  // bytes; peak: max over ranks (0 = not measured)
  bool fits = false;
  std::string verdict;  // "fits", "exceeds", "oom", "killed by signal 9"
};

// A TCP port nobody listens on now (the kernel's choice), for the try's rendezvous.
int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  if (port == 0) throw IoError("--max-micro-batch: could not reserve a local port for a try");
  return port;
}

// Starts one rank of a try: stdout and stderr to `log`, in its own process group.
pid_t spawnRank(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                const std::string& log) {
  const pid_t pid = fork();
  if (pid < 0) throw IoError("--max-micro-batch: fork failed");
  if (pid > 0) return pid;
  setpgid(0, 0);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  _exit(127);
}

// Waits for every rank until `deadline_s` from now; kills all on timeout. Exit statuses.
std::vector<int> waitRanks(const std::vector<pid_t>& pids, double deadline_s) {
  std::vector<int> status(pids.size(), -1);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
  size_t left = pids.size();
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i)
      if (status[i] == -1 && waitpid(pids[i], &status[i], WNOHANG) == 0) status[i] = -1;
    left = size_t(std::count(status.begin(), status.end(), -1));
    if (left == 0) break;
    const int sig = g_stop_signal.load();
    if (sig != 0 || std::chrono::steady_clock::now() > end) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (status[i] == -1) kill(-pids[i], SIGKILL);
      for (size_t i = 0; i < pids.size(); ++i)
        if (status[i] == -1) waitpid(pids[i], nullptr, 0);
      throw IoError(sig != 0 ? std::string("--max-micro-batch: stopped by signal ") +
                                   strsignal(sig) + "; the running try's ranks were killed"
                             : "--max-micro-batch: a try did not finish within " +
                                   formatFixed(deadline_s, 0) + " s; its ranks were killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return status;
}

// The trainer's own arguments for a try of `mb` into `dir`.
std::vector<std::string> tryArgs(const MaxMicroBatchOptions& o, int64_t mb,
                                 const std::string& dir) {
  std::vector<std::string> a = {"trainer", "--config", o.config_path};
  a.insert(a.end(), o.overrides.begin(), o.overrides.end());
  for (const std::string& kv :
       {"training.micro_batch_size=" + std::to_string(mb),
        "training.max_steps=" + std::to_string(o.try_steps),
        std::string("training.stop_after_seconds=0"), std::string("parallel.memory_limit_gb=0"),
        std::string("checkpoint.save_final=false"), std::string("checkpoint.interval=0"),
        std::string("checkpoint.resume=never"), "metrics.log_every=" + std::to_string(o.try_steps),
        std::string("metrics.link_probe=false"), "output.dir=" + dir,
        std::string("output.no_sweep_dir=true")})
    a.push_back(kv);
  return a;
}

// Runs `mb` as world_size local ranks and reads their peak RSS. Throws IoError when a
// rank fails for a reason other than memory.
Try runTry(const MaxMicroBatchOptions& o, const TrainConfig& tc, int64_t mb, double limit,
           const std::string& scratch) {
  Try t;
  t.mb = mb;
  t.estimate = estimateAt(tc, mb);
  const std::string dir = scratch + "/mb" + std::to_string(mb);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int port = freePort(), world = static_cast<int>(tc.layout.world_size);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r)
    pids.push_back(spawnRank(tryArgs(o, mb, dir),
                             {{"RANK", std::to_string(r)},
                              {"LOCAL_RANK", std::to_string(r)},
                              {"WORLD_SIZE", std::to_string(world)},
                              {"LOCAL_WORLD_SIZE", std::to_string(world)},
                              {"MASTER_ADDR", "127.0.0.1"},
                              {"MASTER_PORT", std::to_string(port)}},
                             dir + "/rank_" + std::to_string(r) + ".log"));
  const std::vector<int> st = waitRanks(pids, o.try_timeout_s);
  for (int r = 0; r < world; ++r) {
    const int s = st[size_t(r)];
    if (WIFSIGNALED(s))
      t.verdict = "rank " + std::to_string(r) + " killed by signal " + std::to_string(WTERMSIG(s)) +
                  " (the kernel's OOM killer?)";
    else if (WEXITSTATUS(s) == 5)
      t.verdict = "oom (rank " + std::to_string(r) + ")";
    else if (WEXITSTATUS(s) != 0)
      throw IoError("--max-micro-batch: the try of micro-batch " + std::to_string(mb) +
                    " failed on rank " + std::to_string(r) + " (exit " +
                    std::to_string(WEXITSTATUS(s)) + "): see " + dir + "/rank_" +
                    std::to_string(r) + ".log");
    if (!t.verdict.empty()) return t;
  }
  for (int r = 0; r < world; ++r) {
    const MetricsData d = readMetricsFile(metricsFilePath(dir, r));
    for (double v : d.steps.at("peak_rss_bytes")) t.peak = std::max(t.peak, v);
  }
  t.fits = t.peak <= limit;
  t.verdict = t.fits ? "fits" : "exceeds";
  fs::remove_all(dir);  // kept only when a try failed
  return t;
}

void printTry(const Try& t, double limit) {
  std::cout << "  try micro-batch " << t.mb << ": estimate " << formatMib(t.estimate)
            << ", measured peak RSS "
            << (t.peak > 0 ? formatMib(t.peak) + " (max over ranks)" : std::string("n/a")) << " -> "
            << t.verdict << (t.peak > 0 ? (t.fits ? " <= " : " > ") + formatMib(limit) : "") << "\n"
            << std::flush;
}

// The answer: the size that fits with its figures, and the next size up that does not.
void printAnswer(std::map<int64_t, Try>& tried, int64_t lo, int64_t hi, double limit,
                 double budget) {
  const Try& a = tried[lo];
  std::cout << "max micro-batch = " << lo << ": measured peak RSS " << formatMib(a.peak) << " = "
            << formatFixed(100 * a.peak / budget, 1) << " % of the budget " << formatMib(budget)
            << " (estimate " << formatMib(a.estimate) << ")";
  if (hi > 0) {
    const Try& b = tried[hi];
    std::cout << "; micro-batch " << hi << " "
              << (b.peak > 0 ? "measured " + formatMib(b.peak) + " > " + formatMib(limit) : b.verdict);
  } else {
    std::cout << "; the search stopped at its cap " << kMaxSearch;
  }
  std::cout << "\n";
}

}  // namespace

int64_t largestEstimatedFit(const TrainConfig& tc, double limit_bytes) {
  if (estimateAt(tc, 1) > limit_bytes) return 0;
  int64_t lo = 1, hi = 2;  // lo fits; hi unknown, then over
  while (hi <= kMaxSearch && estimateAt(tc, hi) <= limit_bytes) lo = hi, hi *= 2;
  if (hi > kMaxSearch) return estimateAt(tc, kMaxSearch) <= limit_bytes ? kMaxSearch : lo;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (estimateAt(tc, mid) <= limit_bytes ? lo : hi) = mid;
  }
  return lo;
}

int runMaxMicroBatch(const MaxMicroBatchOptions& o, const TrainConfig& tc, int local_ranks) {
  const MemoryBudget budget = memoryBudget(tc, local_ranks);
  const double limit = (1 - o.safety_margin) * budget.bytes;
  std::cout << "max micro-batch of " << tc.model.name << ", world " << tc.layout.world_size
            << " (dp " << tc.layout.dpSize() << " x tp " << tc.layout.tp << ", ZeRO stage "
            << tc.layout.effectiveZeroStage() << "), seq " << tc.data.seq_len << ": budget "
            << formatMib(budget.bytes) << " per rank (" << budget.source << "), safety margin "
            << formatFixed(100 * o.safety_margin, 0)
            << " %: a size fits when every rank's measured peak RSS is <= " << formatMib(limit) << "\n";
  const int64_t guess = largestEstimatedFit(tc, limit);
  std::cout << "estimator: largest micro-batch with estimate <= " << formatMib(limit) << ": "
            << (guess > 0 ? std::to_string(guess) + " (estimate " + formatMib(estimateAt(tc, guess)) + ")"
                          : std::string("none"))
            << "\n";
  const std::string scratch =
      tc.output.output_dir + "/.max_micro_batch." + std::to_string(getpid());
  std::map<int64_t, Try> tried;
  auto measure = [&](int64_t mb) -> const Try& {
    if (!tried.count(mb)) printTry(tried[mb] = runTry(o, tc, mb, limit, scratch), limit);
    return tried[mb];
  };
  // Bracket [lo fits, hi does not] (0 = not found yet): the estimator's size, then the
  // estimator corrected by that try's measured offset, then gallop and bisect.
  int64_t lo = 0, hi = 0;
  auto note = [&](int64_t mb) { (measure(mb).fits ? lo : hi) = mb; };
  const int64_t first = std::max<int64_t>(guess, 1);
  note(first);
  if (const Try& t = tried[first]; t.peak > 0) {
    const int64_t c = largestEstimatedFit(tc, limit - (t.peak - t.estimate));
    if (c > lo && (hi == 0 || c < hi) && c >= 1) note(c);
  }
  for (int64_t step = 1; lo > 0 && hi == 0 && lo < kMaxSearch; step *= 2)
    note(std::min(lo + step, kMaxSearch));
  for (int64_t step = 1; lo == 0 && hi > 1; step *= 2) note(std::max<int64_t>(hi - step, 1));
  // Peak RSS grows about linearly with the size: interpolate between the bracket's
  // measured peaks and try the guess's neighbour at once; every other round bisects, so
  // a curve that is not linear still converges in O(log) tries.
  for (bool interpolate = true; lo > 0 && hi > lo + 1; interpolate = !interpolate) {
    const Try &a = tried[lo], &b = tried[hi];
    int64_t g = lo + (hi - lo) / 2;
    if (interpolate && b.peak > a.peak)
      g = lo + int64_t((limit - a.peak) / (b.peak - a.peak) * double(hi - lo));
    g = std::clamp(g, lo + 1, hi - 1);
    note(g);
    if (lo == g && g + 1 < hi)
      note(g + 1);
    else if (hi == g && g - 1 > lo)
      note(g - 1);
  }
  std::error_code ec;
  fs::remove(scratch, ec);
  if (lo == 0) {
    std::cout << "no micro-batch fits: micro-batch 1 " << tried[1].verdict << "\n";
    return 1;
  }
  printAnswer(tried, lo, hi, limit, budget.bytes);
  return 0;
}

}  // namespace ftb
