// Checkpoint directory layout, manifest and verification (no libtorch: the trainer
// writes checkpoints, sweep_tagger only asks whether a run has a complete one).
//
// Layout of one checkpoint (trainer/README.md "Checkpoints"):
//   <checkpoint.dir>/step_00000008/shard_00000.h5  one HDF5 file per rank: the slices of
//                                                   the global tensors this rank owns
//                                                   (checkpointShardName; checkpoints saved
//                                                   before were named rank_00000.h5, as
//                                                   metrics files are: a load follows the
//                                                   manifest's names, so those load too)
//   <checkpoint.dir>/step_00000008/manifest.json   written last by rank 0
// A save writes into step_N.tmp/, rank 0 writes the manifest there after every rank
// has fsynced its file, then renames the directory to step_N and fsyncs the parent.
// Invariant: a directory named step_N (no suffix) was complete when it was renamed;
// it is *usable* only if verifyCheckpoint() finds nothing wrong (files can be damaged
// later). Partial saves stay behind as step_N.tmp and are never loaded.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/files.h"  // fsyncPath, writeFileDurably, ...: the durable writes of a save

namespace ftb {

inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";

// A part of a global tensor held by one dataset of one file: the box
// [offset[d], offset[d] + size[d]) in every dimension d.
struct CkptSlice {
  std::string file;     // file name inside the step directory
  std::string dataset;  // HDF5 path inside that file
  std::vector<int64_t> offset, size;
};

struct CkptTensor {
  std::vector<int64_t> shape;  // global shape
  // "float32", "float64", "bfloat16" (stored widened to float32), "int64", "uint8"
  std::string dtype;
  std::vector<CkptSlice> slices;
};

struct CkptFile {
  std::string name;  // "shard_00000.h5" (older checkpoints: "rank_00000.h5")
  int64_t rank = 0, bytes = 0;
  std::string crc32;  // zlib crc32 of the whole file, 8 lower-case hex digits
};

struct CkptLayout {
  int64_t world = 1, dp_replicate = 1, dp_shard = 1, tp = 1, zero_stage = 0, nodes = 1;
  int64_t pp = 1;  // pipeline stages; in the manifest only when > 1 (absent reads as 1)
};

struct Manifest {
  int64_t format_version = kCheckpointFormatVersion;
  std::string ftbench_version, config_hash, tag, created_utc;
  CkptLayout layout;
  // Keys that must not change across a resume (model shape, optimizer): key -> TOML value.
  std::map<std::string, std::string> compat;
  // Loop state: step (steps done), next_sample, optimizer_step, global_batch, ...
  std::map<std::string, int64_t> state;
  std::vector<CkptFile> files;
  std::map<std::string, CkptTensor> tensors;  // by global name ("model.norm.weight")
};

// The keys of `now` whose value is not the one in `saved` (a Manifest::compat), as
// "k = <saved> in the checkpoint, <now> now" joined by "; ", "" when every key agrees;
// a key missing from `saved` reads "(absent)". Values are TOML spellings compared as
// parsed values (sameValue in common/config.h): a record holding another spelling of
// the same number ("0.0001", written before formatDouble became the one spelling, and
// "1e-4" now) agrees; text that is not a TOML value compares as text.
std::string compatDiff(const std::map<std::string, std::string>& saved,
                       const std::map<std::string, std::string>& now);

std::string manifestToJson(const Manifest& m);
// Throws CheckpointError naming `path` and what is missing or malformed.
Manifest parseManifest(const std::string& json_text, const std::string& path);

// A checkpoint that must not be loaded: names the file and what is wrong.
class CheckpointError : public std::runtime_error {
 public:
  CheckpointError(std::string file, const std::string& what)
      : std::runtime_error(file + ": " + what), file_(std::move(file)) {}
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// "step_%08d".
std::string checkpointDirName(int64_t step);
// "shard_00000.h5": the file rank `rank` writes in a checkpoint directory. Not rank_NNNNN.h5,
// the metrics files' name, so a glob for metrics (**/rank_*.h5) finds no checkpoint shard.
std::string checkpointShardName(int64_t rank);
// Step of a directory name "step_N" (no suffix), else nullopt.
std::optional<int64_t> checkpointStepOf(const std::string& dir_name);
// Paths of every step_N directory under `ckpt_dir`, newest (largest N) first. Does
// not verify them. A missing ckpt_dir gives {}.
std::vector<std::string> listCheckpointDirs(const std::string& ckpt_dir);

// Checks what a manifest says against itself and its directory `dir`, before any file is
// read: layout sizes (world = pp x dp_replicate x dp_shard x tp) and one file per rank
// (distinct ranks 0..world-1); every files[].name a plain file name (no '/', '.', '..'),
// never a symlink or other non-regular file inside `dir`; state.step >= 0 and equal to
// the step in dir's name "step_N" (when it has one), no negative state; each tensor a
// known dtype (float32, float64, bfloat16, int64, uint8), no negative dimension, its slices naming
// its own datasets ("/<name>/<k>", as writeShardFile does) once each.
// Throws CheckpointError naming the manifest (or the offending file) and what is wrong.
void checkManifestStructure(const Manifest& m, const std::string& dir, const std::string& mpath);

// Reads and parses <dir>/manifest.json (a regular file, not a symlink or FIFO: never
// blocks; duplicate keys refused), checks its structure (checkManifestStructure), then
// checks each file the manifest lists
// whose rank is in `ranks` (all files when `ranks` is empty): present, its size, its
// crc32; and that every tensor slice names a listed file. Throws CheckpointError
// naming the first bad file and what is wrong.
Manifest loadVerifiedManifest(const std::string& dir, const std::vector<int64_t>& ranks = {});

// crc32 (zlib, as Python's zlib.crc32) of a whole file and its size. Throws
// CheckpointError when it cannot be read.
std::string fileCrc32(const std::string& path, int64_t* bytes);

}  // namespace ftb
