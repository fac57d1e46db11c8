// Interference: how much of a process's time it was runnable but not running, because
// something else held its CPUs. No libtorch.
//
// What is sampled (InterferenceSampler::sample(), Linux /proc; a few dozen small reads):
// - per compute thread of this process (setComputeTids: the main thread and the intra-op
//   pool; by default every thread), /proc/self/task/<tid>/schedstat: field 1 = ns on a
//   CPU, field 2 = ns waiting on a run queue (runnable, not running), field 3 = timeslices;
// - /proc/stat, the "cpuN" lines of the CPUs this process is bound to (sched_getaffinity):
//   busy ticks (user + nice + system + irq + softirq), steal ticks, all ticks;
// - getrusage(RUSAGE_SELF).ru_nivcsw: involuntary context switches of all threads;
// - the steady clock.
//
// Figures between two samples a -> b (interferenceBetween), wall = b.wall - a.wall:
// - wait_frac   = Σ over the sampled threads of Δ run-queue wait / (wall × compute_threads),
//                 where compute_threads is the rank's compute thread count. Helper threads
//                 (a data prefetcher, a communication worker, a watchdog) are not sampled
//                 once setComputeTids names the compute threads: a helper that waits for
//                 a CPU while the compute threads run does not slow the step. A thread
//                 started after `a` counts from 0; one that ended before `b` is left out.
// - steal_frac  = Δ steal ticks / Δ all ticks on the bound CPUs (a hypervisor ran
//                 another guest while this one wanted the CPU).
// - other_load  = (Δ busy ticks on the bound CPUs × tick length - Δ this process's CPU
//                 time) / wall, clamped at 0: how many of the bound CPUs other processes
//                 kept busy (cores, 0..bound CPUs; tick resolution 1/CLK_TCK, so coarse
//                 for one short step, exact over a run).
// - nivcsw      = Δ involuntary context switches (count).
// - cpu_thread_s = Δ CPU time of the process, all its threads (thread-seconds,
//                 CLOCK_PROCESS_CPUTIME_ID: exact, where schedstat's field 1 advances in
//                 whole scheduler ticks on some kernels, and under contention charges
//                 whichever task a tick finds running); without that clock, Σ over threads of
//                 Δ schedstat run time. The rank's own CPU time, which other processes on its
//                 CPUs do not stretch (they stretch the wall time); NaN when neither reads.
// - interference = min(1, wait_frac + steal_frac): the fraction of the interval the
//                 rank's compute threads were runnable but not running, as seen by this
//                 kernel's scheduler (wait) and by the hypervisor's (steal).
// A figure whose source could not be read is NaN (and interference then NaN when
// wait_frac is).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ftb {

struct ThreadSched {
  int64_t run_ns = 0, wait_ns = 0, slices = 0;
};
// One schedstat line "<run_ns> <wait_ns> <slices>". False when it is not three integers.
bool parseSchedstat(const std::string& text, ThreadSched& out);

struct CpuTicks {
  int64_t busy = 0, steal = 0, total = 0;
};
// Sums the "cpuN" lines of /proc/stat text for every N in `cpus`. False when a listed
// CPU has no line or a line has fewer than 8 fields.
bool parseProcStat(const std::string& text, const std::vector<int>& cpus, CpuTicks& out);

struct SchedSample {
  double wall_s = 0;
  std::map<int, ThreadSched> threads;  // by tid; empty: schedstat unreadable
  bool ticks_ok = false;
  CpuTicks ticks;       // bound CPUs
  int64_t nivcsw = -1;  // -1: unknown
  int64_t cpu_ns = -1;  // the process's CPU time (CLOCK_PROCESS_CPUTIME_ID); -1: unknown
};

struct InterferenceFigures {
  double wait_frac = 0, steal_frac = 0, other_load = 0, nivcsw = 0, interference = 0;
  double wall_s = 0;         // the interval
  double wait_thread_s = 0;  // Σ run-queue wait (thread-seconds)
  double cpu_thread_s = 0;   // Σ time on a CPU (thread-seconds)
};

// REQUIRES: b taken after a; compute_threads >= 1; tick_hz > 0.
InterferenceFigures interferenceBetween(const SchedSample& a, const SchedSample& b,
                                        int compute_threads, double tick_hz);

// Sums interval figures into run figures: wait and steal weighted by wall time, other
// load time-weighted, nivcsw summed. Invariant: add(x) then figures() over one interval
// returns x.
class InterferenceTotal {
 public:
  void add(const InterferenceFigures& f);
  InterferenceFigures figures() const;
  bool empty() const { return wall_s_ <= 0; }

 private:
  double wall_s_ = 0, wait_w_ = 0, steal_w_ = 0, load_w_ = 0, nivcsw_ = 0, wait_thread_s_ = 0,
         cpu_thread_s_ = 0;
};

class InterferenceSampler {
 public:
  // compute_threads: the rank's intra-op threads; bound CPUs from sched_getaffinity.
  explicit InterferenceSampler(int compute_threads);
  // From now on samples hold only these threads of this process (the rank's compute
  // threads), and compute_threads is their count; the interval of next() restarts.
  // REQUIRES: tids non-empty, each a thread of this process (gettid()).
  void setComputeTids(std::vector<int> tids);
  SchedSample sample() const;
  // Figures since the previous call (the first call: since construction).
  InterferenceFigures next();
  const std::vector<int>& boundCpus() const { return cpus_; }
  int computeThreads() const { return threads_; }

 private:
  int threads_;
  std::vector<int> tids_;  // empty: every thread of the process
  std::vector<int> cpus_;
  double tick_hz_;
  SchedSample last_;
};

// "interference 0.6 % (run-queue wait 0.5 %, steal 0.1 %; other processes' load 0.02 of 2
// bound CPUs; 3 involuntary switches)": the one-line explanation used in logs and reasons.
std::string describeInterference(const InterferenceFigures& f, size_t bound_cpus);

}  // namespace ftb
