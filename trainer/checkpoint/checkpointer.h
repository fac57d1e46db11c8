// Sharded checkpoints: collective save and resharding load (trainer/README.md
// "Checkpoints"; on-disk layout in common/checkpoint_manifest.h).
//
// Contracts:
// - planResume() runs on every rank before the model is built and before anything is
//   written to the run directory. resume = "never": nullopt. "auto": the newest
//   checkpoint under `ckpt_dir` whose manifest parses and whose files all verify (size,
//   crc32); a bad one is skipped with a warning naming the file and what is wrong.
//   PATH: that step directory; a bad one throws ConfigError (exit 2) naming the file.
//   Verified means: the manifest's structure (checkManifestStructure), every file's size
//   and crc32, and every dataset the manifest names (its dimensions and offset,
//   ckpt::checkShardFile), all before any tensor is read.
//   A checkpoint saved with other model.* shape keys or another optimizer throws
//   ConfigError naming every differing key. With "auto" and a checkpoint.dir set (which
//   other runs may share), a checkpoint saved by another run (another tag: the run
//   directory's name, or another config hash) throws ConfigError naming both runs. Every rank
//   returns the same answer (the files are verified by different ranks and the verdicts gathered).
// - Checkpointer::loadProblem() checks a plan against the pieces of the built model
//   (every tensor present, its shape, the slices covering each piece) reading no tensor;
//   load() runs it first, so a checkpoint that does not fit changes no state.
//   fallBackFrom() (collective) is "auto"'s answer to a plan that does not fit.
// - Checkpointer::save() is collective over the world: every rank writes its own file
//   (each replicated slice is written by exactly one of its holders, balanced by
//   bytes), fsyncs it, then rank 0 writes the manifest, renames step_N.tmp -> step_N,
//   fsyncs the parent and prunes complete checkpoints beyond keep_last (never the one
//   just written). Returns only when the checkpoint is complete on every rank; a failure
//   on any rank throws IoError on every rank (no hang: store waits time out). A failure
//   to create step_N.tmp (rank 0) or to write a rank's file reaches every rank in the
//   next gather, so each throws at once with the failing rank's host, path and cause.
// - abandon() may run on another thread (the stop watchdog at checkpoint.preempt_grace_s,
//   trainer/session.cpp): it waits for a commit in progress (manifest, rename) to end,
//   forbids any later commit, and on rank 0 removes the step_N.tmp of a save in
//   progress. So a save cut short by the deadline leaves no partial checkpoint behind.
// - Checkpointer::load() fills every piece from the slices that intersect it (any
//   saved layout), sets the CPU generator state, and returns the manifest's loop state.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/checkpoint_manifest.h"
#include "common/config.h"
#include "common/run_config.h"
#include "trainer/checkpoint/shard_io.h"
#include "trainer/checkpoint/state.h"
#include "trainer/parallel/dist.h"

namespace ftb {

struct ResumePoint {
  std::string dir;  // the step_N directory
  Manifest manifest;
};

// Keys whose values a checkpoint must share with the run resuming it (key -> TOML). A LoRA
// run adds lora.rank, lora.targets, lora.alpha, lora.dropout and lora.base
// (loraBaseIdentity): its checkpoint holds only adapters, meaningful on the base they were
// trained on.
std::map<std::string, std::string> checkpointCompatKeys(const Config& cfg, const TrainConfig& tc);

// The frozen base of a LoRA run: "seed <training.seed>" for the seeded initial model, else
// "<model.from_pretrained> sha256 <hex>" over its config.json and weight files (sorted by
// name). Hashed once per process. Throws CheckpointError when a file cannot be read.
std::string loraBaseIdentity(const TrainConfig& tc);

std::optional<ResumePoint> planResume(const TrainConfig& tc, const Config& cfg,
                                      const std::string& ckpt_dir, Distributed& dist);

class Checkpointer {
 public:
  struct Identity {
    std::string tag, config_hash;
    std::map<std::string, std::string> compat;
    CkptLayout layout;
  };
  // Rank 0 removes the step_N.tmp directories an earlier attempt left in `dir` (killed
  // mid-save: never a checkpoint), warning with each one's name.
  Checkpointer(std::string dir, int64_t keep_last, Identity id, Distributed& dist);

  // Returns the checkpoint directory written. `state`: step, next_sample, ...
  std::string save(int64_t step, const std::vector<ckpt::StatePiece>& pieces,
                   const std::map<std::string, int64_t>& state);
  // Why `rp` cannot fill `pieces` (a tensor missing, another shape, slices that do not
  // cover a piece), "" when it can. Reads no file.
  static std::string loadProblem(const ResumePoint& rp,
                                 const std::vector<ckpt::StatePiece>& pieces);
  // Collective. The first non-empty `problem` of all ranks ("" = none).
  std::string agreedProblem(const std::string& key, const std::string& problem);
  // Collective, for resume = "auto" when the planned checkpoint `bad` does not fit
  // (loadProblem on some rank): the newest checkpoint under this object's directory older
  // than `bad` that verifies as planResume's do, agrees with this run's compat keys,
  // global batch and (checkpoint.dir set) run identity, and `fits` on every rank (fits: "" or why
  // not). Each one skipped is warned about on rank 0. nullopt when none is usable.
  using Fits = std::function<std::string(const ResumePoint&)>;
  std::optional<ResumePoint> fallBackFrom(const ResumePoint& bad, const TrainConfig& tc,
                                          const Fits& fits);
  // Static: reads files only (also used by `trainer export`, hf/export.h).
  // Throws CheckpointError before reading any tensor when loadProblem() finds one.
  // `bytes_read` (optional): tensor bytes this rank read from the files.
  static std::map<std::string, int64_t> load(const ResumePoint& rp,
                                             std::vector<ckpt::StatePiece>& pieces,
                                             int64_t* bytes_read = nullptr);

  double lastSaveSeconds() const { return last_save_s_; }  // the whole collective save
  // This rank's file alone: serialize, write, fsync and checksum (what `dd conv=fsync`
  // of the same bytes is compared with, scripts/bench.sh ckpt).
  double lastWriteSeconds() const { return last_write_s_; }
  int64_t lastSaveBytes() const { return last_save_bytes_; }  // this rank's file

  bool saving() const { return saving_.load(); }  // any thread
  // Whether this rank has learned of a stop signal (the loop's stop flags): read only by
  // the FTB_TEST_CKPT_SAVE_DELAY test hook ("stop:SECONDS"). Unset: never.
  void setStopSeen(std::function<bool()> stop_seen) { stop_seen_ = std::move(stop_seen); }
  // Any thread. Returns the newest checkpoint this object completed ("" when none).
  std::string abandon();

 private:
  // Collective. tmp_error: rank 0's failure to create step_N.tmp ("" on other ranks).
  std::vector<ckpt::SliceToWrite> mySlices(const std::string& key, int64_t step,
                                           const std::vector<ckpt::StatePiece>& pieces,
                                           const std::string& tmp_error);
  std::string writeMyFile(const std::string& tmp, int64_t step,
                          const std::vector<ckpt::SliceToWrite>& slices);
  std::string writeManifest(int64_t step, const std::string& tmp,
                            const std::vector<std::string>& file_records,
                            const std::map<std::string, int64_t>& state);
  void prune(int64_t newest_step);
  void prepareTmp(const std::string& tmp);  // rank 0; throws IoError naming tmp and the cause
  void commit(const std::string& tmp, const std::string& final_dir);

  std::string dir_;
  int64_t keep_last_;
  Identity id_;
  Distributed& dist_;
  int64_t seq_ = 0;
  double last_save_s_ = 0, last_write_s_ = 0;
  int64_t last_save_bytes_ = 0;
  std::atomic<bool> saving_{false};
  std::function<bool()> stop_seen_;
  std::mutex commit_mu_;  // guards the three below; held by commit() and abandon()
  bool abandoned_ = false;
  std::string tmp_in_progress_;  // rank 0: the step_N.tmp being written, else ""
  std::string last_complete_;
};

}  // namespace ftb
