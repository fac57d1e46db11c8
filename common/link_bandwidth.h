// The link figure of a run: an all-reduce's bus bandwidth as nccl-tests reports it, the
// sizes it is timed at, the root attributes that record it and the line `trainer --probe`
// prints. No libtorch: the timing itself is trainer/parallel/link_probe.h's.
//
// Definitions (nccl-tests' PERFORMANCE.md): an all-reduce of S bytes that takes t seconds
// over n ranks has algbw = S / t and busbw = algbw x 2(n-1)/n, the rate each rank's link
// carries in a ring all-reduce: comparable across world sizes, and with the hardware's
// own bandwidth. One rank moves nothing: its busbw is 0 (the probe reports none).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/h5_metrics.h"
#include "common/median.h"

namespace ftb {

// The sizes the probe times: 1 MiB and 16 MiB, each capped by the model's gradient bytes
// (never below kLinkProbeMinBytes). Per size: one warm-up, then up to kLinkProbeMaxReps
// timed all-reduces, fewer where the warm-up says they would take more than
// kLinkProbeBudgetS (at least one).
inline constexpr int64_t kLinkProbeSmallBytes = int64_t{1} << 20;
inline constexpr int64_t kLinkProbeLargeBytes = int64_t{16} << 20;
inline constexpr int64_t kLinkProbeMinBytes = int64_t{64} << 10;
inline constexpr int kLinkProbeMaxReps = 5;
inline constexpr double kLinkProbeBudgetS = 0.5;
// link_source of a run with one rank.
inline constexpr const char* kNoLinkSource = "world 1: no link";

// bytes / seconds; NaN unless seconds > 0 and bytes >= 0.
double allReduceAlgbw(int64_t bytes, double seconds);
// algbw x 2(ranks-1)/ranks. REQUIRES: ranks >= 1 (else std::invalid_argument); 0 for one
// rank; NaN stays NaN.
double allReduceBusbw(double algbw, int ranks);
// Ascending, distinct, multiples of 4 bytes (fp32 elements): min(s, max(grad_bytes,
// kLinkProbeMinBytes)) for s in {kLinkProbeSmallBytes, kLinkProbeLargeBytes}. grad_bytes <= 0:
// not capped.
std::vector<int64_t> linkProbeSizes(int64_t grad_bytes);
// Timed repetitions after a warm-up of `warmup_s`: floor(kLinkProbeBudgetS / warmup_s) within
// [1, kLinkProbeMaxReps]; kLinkProbeMaxReps for warmup_s <= 0, 1 for NaN.
int linkProbeReps(double warmup_s);

struct LinkFigure {
  bool measured = false;
  int64_t bytes = 0;  // the largest size timed (link_probe_bytes)
  // One all-reduce of `bytes`: the median over the reps of the slowest rank's time.
  double seconds = std::numeric_limits<double>::quiet_NaN();
  double algbw = std::numeric_limits<double>::quiet_NaN();  // bytes/s
  double busbw = std::numeric_limits<double>::quiet_NaN();  // bytes/s
  double cost_s = 0;   // the whole probe's wall time on this rank, warm-ups included
  std::string source;  // linkSource(), or why nothing was measured
};

// "<transport>, <ranks> rank(s), <nodes> node(s)": "local memory (process_vm_readv), 2 ranks,
// 1 node".
std::string linkSource(const std::string& transport, int ranks, int nodes);
// NaN figures, 0 bytes, `why` as the source (kNoLinkSource for world 1).
LinkFigure unmeasuredLink(const std::string& why);
// Root attributes of the metrics file: link_busbw_Bps, link_algbw_Bps, link_probe_s (float64:
// NaN when not measured), link_probe_bytes (int64), link_probe_cost_s (float64), link_source.
std::vector<std::pair<std::string, AttrValue>> linkAttrs(const LinkFigure& f);

// What `trainer --probe` reports (trainer/docs/run.md § Probe).
struct ProbeReport {
  int world = 1, nodes = 1, threads = 1;
  std::string dtype;          // "fp32" | "bf16"
  double gemm_flops = 0;      // rank 0's GEMM FLOP/s
  double gemm_flops_min = 0;  // the lowest rank's
  int64_t gemm_n = 0;         // the GEMM's size (n^3)
  LinkFigure link;
};
// One JSON object on one line, no newline, fields in this order: probe (1), world, nodes,
// dtype, threads, gemm_flops, gemm_flops_min, gemm_n, link_busbw_Bps, link_algbw_Bps,
// link_probe_bytes, link_source. The four link fields are null unless link.measured.
std::string probeJsonLine(const ProbeReport& r);

}  // namespace ftb
