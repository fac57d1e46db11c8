// Aggregation of many runs' per-rank HDF5 files into one table (one row per run).
//
// Contract:
// - findRunDirs(): every directory under results_dir (recursively, tags may contain
//   '/') holding run.toml or metrics/, not descending into run dirs; sorted.
// - summarizeRun() never throws: whatever is missing, unreadable or truncated shows
//   up as the row's status and message. Status, by priority:
//     oom > failed > invalid > preempted (any rank's /status state),
//     corrupt (a rank file that readMetricsFile rejects),
//     running (a rank still says running and a rank file changed within
//       stale_seconds) / killed (it says running but nothing changed for longer:
//       SIGKILL, node loss),
//     partial (every file says completed but fewer rank files than world_size),
//     missing (no metrics at all: not started),
//     completed.
// - Numbers follow the trainer's summary (trainer/loop/step_log.cpp) so that both agree:
//   measured steps are those with step >= metrics.skip_first_steps (training.warmup_steps
//   in runs recorded before the rename); tokens/s = sum of the (global) tokens over
//   measured steps / sum of step_time_s of the reference
//   rank (rank 0, else the lowest readable rank); per device = / world_size;
//   MFU (against the hardware peak, peak_flops) and GEMM efficiency (against the
//   GEMM measured at start, gemm_flops) = step-time-weighted means of the per-step
//   mfu / mfu_causal / hfu / gemm_efficiency (each empty when a measured step has NaN,
//   or in a file without the column); p50/p90 nearest rank of
//   measured step times; shares = sum of data/forward/backward/optimizer/comm
//   seconds / sum of step seconds; peak memory = max over readable ranks of
//   peak_rss_bytes; MT/hour = dataset tokens/s * 3600 / 1e6; $/MT =
//   price_per_hour * world_size / MT/hour (price per device-hour).
//   A number that cannot be computed (no measured step, no price) is empty.
// - aggregateRuns() reads the runs in `jobs` worker processes (mapInProcesses;
//   jobs <= 1: in-process). A run whose reader crashes is re-read alone and, if it
//   crashes again, reported as corrupt; the aggregator itself does not die.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/run_state.h"

namespace ftb {

using Cell = std::variant<std::monostate, int64_t, double, bool, std::string>;

// A cell as CSV/plain text: shortest round-trip numbers, "" when missing or not finite.
std::string cellText(const Cell& c);
// A cell of a markdown table: line breaks as spaces, '|' escaped.
std::string markdownCell(std::string s);

struct RunRow {
  std::string tag;  // run dir relative to results_dir
  RunState status = RunState::Missing;
  std::string message;
  std::map<std::string, Cell> config;  // flattened run.toml (or HDF5 /config)
  std::optional<int64_t> world_size, nodes;
  int64_t ranks_found = 0, steps_done = 0, measured_steps = 0;
  int64_t resumes = 0;  // rank 0's resume_count attribute (resumes from a checkpoint)
  int64_t traces = 0;   // profiler traces: regular files <run_dir>/traces/rank_*.json
  std::optional<double> train_runtime_s, tokens_per_s_dataset, tokens_per_s_padded,
      tokens_per_s_dataset_per_device, tokens_per_s_padded_per_device, mfu, mfu_causal, hfu,
      gemm_efficiency, step_time_p50_s, step_time_p90_s, data_frac, forward_frac, backward_frac,
      optimizer_frac, comm_frac, peak_mem_mib, first_loss, last_loss, mt_per_hour, usd_per_mt;
  std::optional<bool> is_valid;
  // Where and against what it ran (rank 0's HDF5 root attributes).
  std::string host, cpu_model, peak_source, gemm_source;
  // FLOP/s per device (hardware peak, measured GEMM); $ per device-hour
  std::optional<double> peak_flops, gemm_flops, price_per_hour;
  // The all-reduce bus bandwidth rank 0 measured at start (attribute link_busbw_Bps), in GB/s
  // (1e9 bytes/s); absent for world 1, runs without the probe and runs recorded before it.
  std::optional<double> link_busbw_gbps;
  // price_per_hour came from `aggregate --price-per-hour` (applyPrice, compare.h), not from
  // the run's metrics.price_per_hour. Set after the readers: not serialized.
  bool price_from_flag = false;
  // Interference (rank 0's root attributes, trainer/README.md "Interference"): the worst
  // rank's figure; the trainer's reason for marking the run noisy ("" = not noisy), which
  // makes the valid cell "noisy" unless the run is invalid; rank 0's environment
  // warnings (env_warnings, one per line: threads, BLAS, a busy machine at start-up).
  std::optional<double> interference;
  std::string noisy, env_warnings;
  // Global padded tokens per second of each rank's own CPU time per compute thread (rank 0's
  // tokens_per_cpu_s attribute: common/step_columns.cpp), the figure other processes on
  // the run's CPUs do not lower; absent in runs recorded before it or without schedstat.
  std::optional<double> tokens_per_cpu_s;
  // What trains (rank 0's trainable_params and flops_formula attributes; absent in runs
  // recorded before LoRA, which trained every parameter).
  std::optional<int64_t> trainable_params;
  std::string flops_formula;
  // ---- Comparisons (sweep_tagger/compare.h): equal work, repeats, spread ----
  std::string config_hash;  // run.toml's "# config_hash": a point's repeats share it
  // Work per optimizer step: micro_batch x grad_accum x data-parallel size sequences, and
  // x seq_len tokens (the trainer's TrainConfig::globalBatch(); empty when not valid).
  std::optional<int64_t> global_batch_seqs, global_batch_tokens;
  std::string batch_mode;  // "fixed global batch" (training.global_batch_size) | "fixed grad_accum"
  // Step-level spread: nearest-rank p10/p50/p90 of the measured steps' padded tokens/s
  // (tokens_padded / step_time_s of each step: the work of a step is fixed in padded
  // tokens, so this is the spread of the step times, not of the documents' lengths).
  std::optional<double> step_tokens_p10, step_tokens_p50, step_tokens_p90;
  // Over the runs of the same config_hash that count (groupRepeats): how many, and the
  // median, min and max of their tokens_per_s_dataset.
  int64_t repeats = 0;
  std::optional<double> tokens_median, tokens_min, tokens_max;
};

// Tag order for tables: digit runs compare as numbers ("sl512" < "sl1024"), the rest
// byte-wise; ties (leading zeros) fall back to byte order. A strict weak order.
bool naturalLess(const std::string& a, const std::string& b);

struct AggregateOptions {
  double stale_seconds = 600;
  int jobs = 1;
  double reader_timeout_s = 60;  // a run whose reader answers no sooner is `corrupt`
};

struct AggregateTable {
  std::string results_dir;
  std::vector<RunRow> runs;              // sorted by tag (naturalLess)
  std::vector<std::string> varying;      // experiment config keys that differ across runs
  std::map<std::string, Cell> constant;  // experiment config keys equal in every run
};

std::vector<std::string> findRunDirs(const std::string& results_dir);
RunRow summarizeRun(const std::string& results_dir, const std::string& run_dir,
                    const AggregateOptions& opts);
// A key of the experiment: not one the schema marks as outside it (output dirs, logging,
// sweep labels, price); a key the schema does not know (an older schema's) counts. The
// table's varying and constant keys are these.
bool experimentKey(const std::string& key);
AggregateTable aggregateRuns(const std::string& results_dir, const AggregateOptions& opts);
// The table of `rows` (summarizeRun's): sorted by tag, varying and constant keys found,
// repeats grouped (groupRepeats). aggregateRuns() ends with it.
AggregateTable tableOf(const std::string& results_dir, std::vector<RunRow> rows);

// ---- Output ------------------------------------------------------------------
// Column order: tag, status, <varying keys>, world_size, nodes, ranks, steps_done, resumes,
// measured_steps, train_runtime_s, tokens_per_s_dataset, tokens_per_s_padded,
// tokens_per_s_dataset_per_device, tokens_per_s_padded_per_device, mfu, mfu_causal, hfu,
// gemm_efficiency, step_time_p50_s, step_time_p90_s, data_frac, forward_frac, backward_frac,
// optimizer_frac, comm_frac, peak_mem_mib, first_loss, last_loss, mt_per_hour,
// usd_per_mt, price_per_hour, is_valid ("noisy" for a valid run the trainer marked noisy),
// interference, noisy, env_warnings, host, cpu_model, peak_flops, peak_source,
// gemm_flops, gemm_source, link_busbw_GBps, traces, message.
// usd_per_mt, price_per_hour, is_valid, host, cpu_model, peak_flops, peak_source,
// gemm_flops, gemm_source, link_busbw_GBps, traces, method ("full" | "lora rN", from lora.rank),
// trainable_params, flops_formula, layout, repeat, config_hash, global_batch_seqs,
// global_batch_tokens, batch_mode, step_tokens_per_s_padded_p10, step_tokens_per_s_padded_p50,
// step_tokens_per_s_padded_p90, repeats, tokens_per_s_median, tokens_per_s_min, tokens_per_s_max,
// message.
std::vector<std::pair<std::string, Cell>> rowCells(const RunRow& row,
                                                   const std::vector<std::string>& varying);
std::string toCsv(const AggregateTable& t);  // RFC 4180, empty cell = missing
// Constants one per line, then a table whose headers give unit and scope (global, per
// device, rank), then footnotes spelling out M tokens/h and $/M tokens with the price.
std::string toMarkdown(const AggregateTable& t);
std::string toJson(const AggregateTable& t);        // {"results_dir","constant","varying","runs"}
std::string constantsCsv(const AggregateTable& t);  // key,value side file

// Row (de)serialization for the worker processes.
std::string rowToJsonLine(const RunRow& row);
RunRow rowFromJsonLine(const std::string& line);

}  // namespace ftb
