// Per-rank HDF5 metrics file (docs/architecture.md § HDF5 metrics schema) and its reader.
//
// Layout of <run_dir>/metrics/rank_%05d.h5 (schema_version 1):
//   / attrs    schema_version (int64 = 1), tag, config_hash, hostname, start_utc,
//              ftbench_version, torch_version, device, peak_source, cpu_model (UTF-8 strings;
//              cpu_model only in files that have it),
//              world_size, rank, local_rank, node_rank (int64), peak_flops (float64, FLOP/s),
//              then RunInfo::extra_attrs (the trainer's peak_* / gemm_* / env_* attributes,
//              trainer/README.md "HDF5 metrics files")
//   /config    scalar UTF-8 string: the resolved config (TOML)
//   /steps/<metric>  1-D float64 or int64, chunked (Fletcher-32 per chunk), unlimited;
//                    row i = i-th appended step; attrs `units` and `description` (strings
//                    from common/step_columns.h; empty for a name outside that table)
//   / attrs    resume_count, resume_steps (int64 array): only in a run resumed from a
//              checkpoint (MetricsFile::resume)
//   /status    group with attrs state (running|completed|failed|oom|preempted|invalid:
//              common/run_state.h's recorded states, spelled by its string table),
//              exit_code (int64), message (string), steps_done (int64 = rows flushed)
//
// Full disk: every call that writes first reserves its space (h5::reserveSpace) and, when
// that fails, throws IoError naming the file before writing anything, so the file keeps
// every row and the status of the last good write. Rows are written whole: readMetricsFile
// returns no row whose data never reached the disk.
// Crash safety: rows are buffered in memory and only flush()/setStatus()/close() call
// HDF5; each ends with H5Fflush(H5F_SCOPE_GLOBAL). So a process killed (even SIGKILL)
// outside those calls leaves a file that h5py and h5dump open, holding every flushed
// row and the status of the last flush ("running" unless setStatus said otherwise).
// Invariant: the first /status steps_done rows of every /steps column are whole rows;
// steps_done is written after the rows it counts. A process killed inside flush() may
// leave columns holding that flush's rows beyond steps_done (readMetricsFile drops them;
// an h5py reader slices [:steps_done]). HDF5 promises nothing of a file whose H5Fflush
// was itself cut short: that window is one flush's own writes.
// The data reaches the OS page cache, not the disk: a node crash may lose it.
// The file is not flock(2)ed, so other processes (h5py, h5dump, readMetricsFile) can
// read a live run; a reader racing a flush may see a torn state (readMetricsFile: IoError).
// Threads: appendStep, flush, setStatus, setFinalStatus and close serialize on an
// internal mutex (HDF5 is built thread-safe), so another thread (the trainer's stop
// watchdog) may record a status while the owner is inside one of them; everything else
// is for the owning thread only. No libtorch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/hdf5.h"
#include "common/run_state.h"
#include "common/step_columns.h"

namespace ftb {

inline constexpr int64_t kMetricsSchemaVersion = 1;

using AttrValue = std::variant<int64_t, double, std::string>;

struct RunInfo {
  std::string tag, config_hash, hostname, start_utc, ftbench_version, torch_version, device,
      peak_source, config_toml;
  std::string cpu_model;  // /proc/cpuinfo model name; root attr `cpu_model` when non-empty
  int world_size = 1, rank = 0, local_rank = 0, node_rank = 0;
  double peak_flops = 0;  // FLOP/s
  // More root attributes (the trainer's peak details and environment check), written
  // by create() and rewritten by resume() (the resumed process's environment).
  std::vector<std::pair<std::string, AttrValue>> extra_attrs;
};

// "<run_dir>/metrics/rank_%05d.h5"
std::string metricsFilePath(const std::string& run_dir, int rank);

class MetricsFile {
 public:
  // Creates parent directories and the file (an existing file is truncated), writes
  // the root attributes, /config, empty /steps, /status = running; flushes.
  // Throws IoError.
  static MetricsFile create(const std::string& path, const RunInfo& info);

  // Continues an existing file after a resume from the checkpoint of `resume_step`
  // (steps done): rows whose `step` is >= resume_step (written after that checkpoint
  // by the attempt that died) are cut, the root attributes resume_count (+1) and
  // resume_steps (int64 array, + resume_step) record the resume, /status is running.
  // A missing file is created as by create(); the attributes say the same.
  // resumedTimeS() is then the last kept row's time_s (0 without one), where the
  // resumed run's clock continues. Throws IoError.
  static MetricsFile resume(const std::string& path, const RunInfo& info, int64_t resume_step);

  MetricsFile(MetricsFile&& other) noexcept = default;
  MetricsFile& operator=(MetricsFile&& other) noexcept;  // closes *this first (no throw)
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  ~MetricsFile();  // close(), errors swallowed: never throws

  // REQUIRES: no step appended yet (else std::logic_error). Re-declaring a name with
  // the same type is a no-op, with another type std::logic_error. No HDF5 call: the
  // dataset is created by the next flush().
  void declareMetric(const std::string& name, bool is_int);
  // Buffers one row in memory (no HDF5 call). A declared metric missing from `values`
  // is stored as NaN (int: -1); int metrics store llround(value), NaN -> -1.
  // An undeclared name throws std::invalid_argument and buffers nothing.
  void appendStep(const std::map<std::string, double>& values);
  // Declares every column of stepColumns() (common/step_columns.h), in table order, with
  // its type; the same rules as declareMetric.
  void declareStepColumns();
  // Buffers one row of every step column. REQUIRES: declareStepColumns() was called (else
  // std::logic_error) and `row` sets every column (else std::logic_error naming the first
  // one it leaves out); nothing is buffered then.
  void appendStep(const StepRow& row);
  // Writes the buffered rows, rewrites /status steps_done, H5Fflush. No-op on a closed
  // file. Throws IoError naming the file (ENOSPC, ...); the rows flushed before stay
  // readable, and from then on no row is written (only /status), so no later row lands at
  // a wrong offset. readMetricsFile returns whole rows only.
  void flush();
  // Writes (or rewrites) one root attribute now, for facts known only after create():
  // e.g. the transport each process group chose. Throws IoError.
  void setRootAttr(const std::string& name, const AttrValue& value);
  // REQUIRES: isRecorded(state) (running|completed|failed|oom|preempted|invalid; else
  // std::invalid_argument). Flushes buffered rows and rewrites all of /status.
  void setStatus(RunState state, int exit_code, const std::string& message);
  // The same with the state's name (parseRunState spelling), for callers holding a
  // name (the synth_runs bench, tests); an unknown or unrecorded name: invalid_argument.
  void setStatus(const std::string& state, int exit_code, const std::string& message);
  // setStatus, then every later appendStep/flush/setStatus/close writes nothing: for a
  // process about to _Exit from another thread, whose owner must not tear the file
  // by a write the exit interrupts. No-op on a closed or already final file.
  void setFinalStatus(RunState state, int exit_code, const std::string& message);
  // After resume(): the run continues from the checkpoint of `resume_step` instead (one
  // older than the one it was opened at, when that one could not be loaded), or from step
  // 0 (nullopt). Cuts the rows from that step on, replaces the resume this attempt
  // recorded in resume_steps / resume_count (without one left, both are removed, as in a
  // file create() wrote) and resumedTimeS(). REQUIRES: no row appended yet (else
  // std::logic_error). Throws IoError.
  void moveResumePoint(std::optional<int64_t> resume_step);
  // flush() then closes every handle. Idempotent. Throws IoError.
  void close();

  bool isOpen() const { return file_.valid(); }
  const std::string& path() const { return path_; }
  int64_t stepsFlushed() const { return steps_flushed_; }
  int64_t stepsBuffered() const { return steps_buffered_; }
  double resumedTimeS() const { return resumed_time_s_; }

 private:
  // Cuts every row whose step is >= `step`; sets steps_flushed_ and resumed_time_s_.
  void cutRowsFrom(int64_t step);
  struct Column {
    std::string name;
    bool is_int = false;
    std::vector<double> doubles;  // buffered rows (float64 metric)
    std::vector<int64_t> ints;    // buffered rows (int64 metric)
    h5::H5Handle dset;            // invalid until the first flush
  };
  MetricsFile() = default;
  void appendColumn(Column& c);  // creates the dataset on first use, appends the buffer
  // Bytes reserved past the file's end (h5::reserveSpace) before each write: a new chunk
  // for every column, the buffered rows twice over, and 128 KiB for metadata.
  uint64_t headroom() const;
  void writeStatus(bool all);
  std::unique_lock<std::recursive_mutex> guard();

  std::string path_;
  h5::H5Handle file_, steps_group_, status_group_;
  std::vector<Column> columns_;  // declaration order
  std::map<std::string, size_t> column_index_;
  int64_t steps_flushed_ = 0, steps_buffered_ = 0;
  bool appended_ = false;  // appendStep called on this object
  RunState state_ = RunState::Running;
  std::string message_;
  int64_t exit_code_ = 0;
  double resumed_time_s_ = 0;  // see resume()
  bool final_ = false;         // setFinalStatus() was called: no more writes
  std::string broken_;         // why a flush failed: no more rows after it
  std::unique_ptr<std::recursive_mutex> mu_ = std::make_unique<std::recursive_mutex>();
};

struct MetricsStatus {
  RunState state = RunState::Running;  // always isRecorded()
  std::string message;
  int64_t exit_code = 0, steps_done = 0;
};

struct MetricsData {
  std::map<std::string, AttrValue> attrs;  // root attributes
  std::string config;                      // /config
  MetricsStatus status;
  // Every /steps dataset as float64 (int metrics converted), all cut to the shortest
  // one (equal lengths unless a process died or a write failed inside flush()), and
  // before trailing rows whose `step` holds the fill value (never written: see flush()).
  std::map<std::string, std::vector<double>> steps;
  std::set<std::string> int_metrics;  // names of /steps datasets stored as int64
};

// Throws IoError naming `path` when the file is missing, corrupt or truncated, has
// no /status or /steps, a /status state that is not a recorded RunState name, or a schema_version
// other than kMetricsSchemaVersion.
MetricsData readMetricsFile(const std::string& path);

// Sanity of a file's numbers, "" if sane, else the first problem ("/steps/loss row 3
// is -1.6e+19: expected a finite value >= 0"). Checks: every /steps value finite and
// >= 0 (mfu, gemm_efficiency and the interference columns may also be NaN: not
// reported); /steps/step strictly increasing integers; /steps/time_s non-decreasing;
// /status steps_done equal to the number of rows. A `completed` file that fails is
// corrupt; a failed run may legitimately hold a non-finite loss, so callers apply
// this to completed files.
std::string metricsProblem(const MetricsData& d);

}  // namespace ftb
