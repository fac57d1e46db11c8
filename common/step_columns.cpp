#include "common/step_columns.h"

#include <cmath>
#include <limits>

namespace ftb {
namespace {

using C = StepCol;
constexpr ColumnType kIntCol = ColumnType::kInt, kFloatCol = ColumnType::kFloat;
constexpr bool kNaN = true, kFinite = false;  // StepColumn::nan_allowed

// The table (common/step_columns.h). Interference columns (common/interference.h) cover
// the interval since the previous step end; pipeline columns (common/pipeline.h) are 0
// without a pipeline (parallel.pp = 1).
constexpr std::array<StepColumn, kStepColumnCount> kColumns = {{
    {C::kStep, "step", "1", kIntCol, kFinite,
     "step index, 0-based (the progress line shows step + 1)"},
    {C::kTimeS, "time_s", "s", kFloatCol, kFinite,
     "wall time from just before this process's first step to the end of this one (rank); a "
     "resumed run continues from the last kept row (time between attempts not counted)"},
    {C::kStepTimeS, "step_time_s", "s", kFloatCol, kFinite, "wall time of this step (rank)"},
    {C::kDataS, "data_s", "s", kFloatCol, kFinite, "time building batches in this step (rank)"},
    {C::kForwardS, "forward_s", "s", kFloatCol, kFinite,
     "time in forward passes in this step (rank), less the time blocked in collectives "
     "(comm_s)"},
    {C::kBackwardS, "backward_s", "s", kFloatCol, kFinite,
     "time in backward passes in this step (rank), less the time blocked in collectives "
     "(comm_s)"},
    {C::kOptimizerS, "optimizer_s", "s", kFloatCol, kFinite,
     "time in the optimizer step, with the local part of the gradient norm (rank)"},
    {C::kCommS, "comm_s", "s", kFloatCol, kFinite,
     "exposed communication time in this step (rank): time blocked in collectives wherever "
     "they run (tensor-parallel all-reduces and ZeRO gathers in forward, reduce-scatters and "
     "inline gradient buckets in backward, the waits after backward, pipeline receives); "
     "forward_s and backward_s exclude it"},
    {C::kAgreeS, "agree_s", "s", kFloatCol, kFinite,
     "time in this step's agreement all-reduce (loss, token counts, squared gradient norm, "
     "stop votes, memory limit, control request, pipeline stage spans; part of comm_s) (rank)"},
    {C::kLoss, "loss", "nats/token", kFloatCol, kFinite,
     "mean cross-entropy per non-padding token of the global batch"},
    {C::kGradNorm, "grad_norm", "1", kFloatCol, kFinite,
     "global L2 norm of the gradients before clipping"},
    {C::kLr, "lr", "1", kFloatCol, kFinite, "learning rate used in this step"},
    {C::kTokensPadded, "tokens_padded", "tokens", kIntCol, kFinite,
     "tokens of the step's global batch (every micro-batch of every data-parallel rank), "
     "padding included"},
    {C::kTokensDataset, "tokens_dataset", "tokens", kIntCol, kFinite,
     "non-padding tokens of the step's global batch"},
    {C::kTokensPerSPadded, "tokens_per_s_padded", "tokens/s", kFloatCol, kFinite,
     "tokens_padded / step_time_s: global throughput, padding included"},
    {C::kTokensPerSDataset, "tokens_per_s_dataset", "tokens/s", kFloatCol, kFinite,
     "tokens_dataset / step_time_s: global throughput of non-padding tokens"},
    {C::kTokensPerSPerDevice, "tokens_per_s_per_device", "tokens/s/device", kFloatCol, kFinite,
     "tokens_per_s_padded / world size: padded throughput per rank"},
    {C::kMfu, "mfu", "1", kFloatCol, kNaN,
     "model FLOPs utilization against the hardware peak: flops_per_token x "
     "tokens_per_s_per_device / peak_flops (root attrs peak_source, peak_check); NaN when "
     "that peak is unknown or below the measured GEMM"},
    {C::kMfuCausal, "mfu_causal", "1", kFloatCol, kNaN,
     "mfu with the causal attention count: flops_per_token less 6 L H hd T (root attr "
     "flops_per_token_causal) x tokens_per_s_per_device / peak_flops; NaN as mfu"},
    {C::kHfu, "hfu", "1", kFloatCol, kNaN,
     "hardware FLOPs utilization: mfu with the forward of every recomputed block counted "
     "(root attr flops_per_token_hardware: activation checkpointing, ZeRO-3); NaN as mfu"},
    {C::kGemmEfficiency, "gemm_efficiency", "1", kFloatCol, kNaN,
     "flops_per_token x tokens_per_s_per_device / gemm_flops, a GEMM measured at start "
     "with this run's threads and BLAS (root attr gemm_source), not the hardware; NaN when "
     "no GEMM was measured"},
    {C::kFlopsPerToken, "flops_per_token", "FLOP/token", kFloatCol, kFinite,
     "model FLOPs of training one token by the formula of root attr flops_formula: full-v1 "
     "= 6N + 12 L H hd T (torchtitan), lora-v1 = 4N + 6Na + 12 L H hd T less block 0's q, k, "
     "v input gradients (Na: adapter parameters)"},
    {C::kRssBytes, "rss_bytes", "bytes", kIntCol, kFinite,
     "resident set size of this rank at the end of the step (VmRSS)"},
    {C::kPeakRssBytes, "peak_rss_bytes", "bytes", kIntCol, kFinite,
     "peak resident set size of this rank so far (VmHWM)"},
    {C::kAllocatorKeptBytes, "allocator_kept_bytes", "bytes", kIntCol, kNaN,
     "freed pages the allocator (jemalloc) keeps for reuse at the end of the step, part of "
     "rss_bytes; rss_bytes less it is the memory in use that the leak watch follows; -1 "
     "where the process does not run on jemalloc (rank)"},
    {C::kPpBubbleS, "pp_bubble_s", "s", kFloatCol, kFinite,
     "time this rank's pipeline stage was blocked receiving activations or gradients from "
     "a neighbour stage in this step (part of comm_s); 0 without a pipeline (rank)"},
    {C::kPpBubbleFraction, "pp_bubble_fraction", "1", kFloatCol, kFinite,
     "fraction of the pipeline's makespan this rank's stage was idle: (pp_makespan_s - "
     "(span - pp_bubble_s)) / pp_makespan_s, span = this stage's forward-backward phase; "
     "0 without a pipeline (rank)"},
    {C::kPpMakespanS, "pp_makespan_s", "s", kFloatCol, kFinite,
     "the pipeline's makespan in this step: the longest forward-backward span of any stage "
     "(a stage's span: the mean over its ranks), agreed over the ranks, and at least this "
     "rank's own span; 0 without a pipeline"},
    {C::kPpP2pBytes, "pp_p2p_bytes", "bytes", kIntCol, kFinite,
     "bytes this rank sent to neighbour pipeline stages in this step (activations forward, "
     "gradients backward); 0 without a pipeline (rank)"},
    {C::kInterference, "interference", "1", kFloatCol, kNaN,
     "fraction of the interval this rank's compute threads were runnable but not running: "
     "runqueue_wait_frac + cpu_steal_frac, at most 1; NaN where /proc is unreadable (rank)"},
    {C::kRunqueueWaitFrac, "runqueue_wait_frac", "1", kFloatCol, kNaN,
     "run-queue wait of this rank's compute threads (the main thread and the intra-op pool; "
     "/proc/self/task/*/schedstat field 2) / (interval x those threads); NaN where /proc is "
     "unreadable (rank)"},
    {C::kCpuStealFrac, "cpu_steal_frac", "1", kFloatCol, kNaN,
     "steal ticks / all ticks of the CPUs this rank is bound to; NaN where /proc/stat is "
     "unreadable (rank)"},
    {C::kOtherLoadCpus, "other_load_cpus", "CPUs", kFloatCol, kNaN,
     "CPU time other processes used on this rank's bound CPUs / interval: their busy ticks "
     "less this process's CPU time; NaN where /proc/stat is unreadable (rank)"},
    {C::kInvoluntarySwitches, "involuntary_switches", "1", kFloatCol, kNaN,
     "involuntary context switches of this rank's process in the interval (getrusage); NaN "
     "when getrusage fails (rank)"},
    {C::kCpuThreadS, "cpu_thread_s", "s", kFloatCol, kNaN,
     "CPU time of this rank's process, all its threads, in the interval "
     "(CLOCK_PROCESS_CPUTIME_ID: thread-seconds); NaN where it cannot be read (rank)"},
    {C::kTokensPerCpuS, "tokens_per_cpu_s", "tokens/s", kFloatCol, kNaN,
     "tokens_padded / world size / (cpu_thread_s / intra-op threads): this rank's share of the "
     "step's tokens per second of its own CPU time per compute thread. Near "
     "tokens_per_s_per_device on an idle machine (above it by the time the rank sleeps in "
     "waits), and near that idle figure when other processes share its CPUs, which stretch "
     "the wall time but not the CPU time; NaN where cpu_thread_s is (rank)"},
}};

constexpr bool idsInTableOrder() {
  for (size_t i = 0; i < kColumns.size(); ++i)
    if (static_cast<size_t>(kColumns[i].id) != i) return false;
  return true;
}
static_assert(idsInTableOrder(), "kColumns[i].id must be StepCol(i): one row per StepCol");

}  // namespace

const std::array<StepColumn, kStepColumnCount>& stepColumns() { return kColumns; }

const StepColumn& stepColumn(StepCol c) { return kColumns.at(static_cast<size_t>(c)); }

const StepColumn* findStepColumn(std::string_view name) {
  for (const StepColumn& c : kColumns)
    if (name == c.name) return &c;
  return nullptr;
}

std::string stepColumnsMarkdown() {
  std::string out = "| column | units | type | meaning |\n|---|---|---|---|\n";
  for (const StepColumn& c : kColumns) {
    out += std::string("| `") + c.name + "` | " + c.units + " | " +
           (c.type == ColumnType::kInt ? "int64" : "float64") + " | " + c.description + " |\n";
  }
  return out;
}

StepRow::StepRow() { values_.fill(std::numeric_limits<double>::quiet_NaN()); }

StepRow& StepRow::set(StepCol c, double value) {
  values_.at(static_cast<size_t>(c)) = value;
  set_.set(static_cast<size_t>(c));
  return *this;
}

const StepColumn* StepRow::firstUnset() const {
  for (const StepColumn& c : kColumns)
    if (!isSet(c.id)) return &c;
  return nullptr;
}

}  // namespace ftb
