// Sweep files (configs/sweeps/*.toml) and their expansion into run points.
//
// File format (every key optional except base):
//   base = "../runs/tiny.toml"     # run config, relative to the sweep file
//   fmt = "{model.name}.sl{data.seq_len}.ws{world_size}.{hash}"  # tag fmt
//   nodes = 1                       # defaults for points that do not set them
//   nproc_per_node = 2
//   [grid]                          # axes: key = [values]; nested tables flatten
//   "data.seq_len" = [512, 1024]
//   nproc_per_node = [1, 2]
//   [[exclude]]                     # drop grid points matching every key=value
//   "data.seq_len" = 1024
//   [[include]]                     # extra explicit points (missing keys: base config)
//   "data.seq_len" = 2048
//   repeats = 3                     # every point 3 times, round-robin (see below)
//   global_batch_size = 32          # sequences per optimizer step in every point
//   [layout.ddp]                    # a named variant: keys set together
//   "parallel.dp_shard" = 1
//   [layout.zero3]
//   "parallel.dp_shard" = 2
//   "parallel.zero_stage" = 3
//   (and in [grid]: layout = ["ddp", "zero3"]: one axis over whole variants)
//   [machines], [tune]              read by `sweep_tagger tune` alone (tune_space.h)
// Keys are trainer config keys, `nodes`, `nproc_per_node` or `layout`; exclude rules may
// also test `world_size` and any resolved key not on an axis.
//
// Contract of expandSweep():
// - Grid points come in itertools.product order over the axes in file order (the
//   last axis varies fastest), then include points in file order. Excluded grid
//   points are dropped; a point whose experiment (config hash) and node count were
//   already listed is dropped too. The same hash with another node count (2x2 vs
//   1x4 ranks) would share a run directory: such a point is listed as invalid. Indices 0..N-1
//   number the listed points and are stable for a given file, so a SLURM array index maps to one
//   point.
// - Invalid points stay in the list with valid = false and reason = refusalOf() (the
//   trainer's own validation: the exact text it prints when it exits 2 on that point).
// - A bad sweep file or a value the trainer config rejects (unknown key, wrong type)
//   throws ConfigError naming the sweep file.
// - SweepSpec::overrides ("key=value", from the command line) apply to every point after
//   the point's own overrides (so they win), before the tag, the hash, exclude rules and
//   validity are computed: the tag a runner prints and checks is the directory it writes.
// - Size: loadSweep() refuses (ConfigError, exit 2) a sweep whose grid points (the product
//   of the axis lengths, before [[exclude]]) plus [[include]] points exceed
//   kMaxSweepPoints, naming each axis's length and the product, before anything is
//   expanded. Expanding a point costs about 0.1 ms and 1 KB (it resolves and validates the
//   point's config), so the largest accepted sweep expands in about a second.
// - layout = "NAME" (an axis value, an include or exclude key) stands for the keys of
//   [layout.NAME], in its place; the point's args add sweep.layout="NAME" (a label in
//   run.toml for aggregate, not part of the hash). Every name used must be defined and
//   every variant defined must be used (ConfigError naming the line).
// - global_batch_size = G adds training.global_batch_size=G before each point's own keys:
//   the trainer derives grad_accum_steps from it. A point it does not divide (or whose
//   grad_accum_steps contradicts it) throws ConfigError naming the point (exit 2).
// - repeats = N: the listed points 0..M-1 are repeat 0 (tags unchanged); then every
//   point again with sweep.repeat=r for r = 1..N-1 (indices r*M + i, tag + ".r<r>",
//   the same hash): round-robin, so drift hits every point alike, and a repeat's run
//   directory is its own (resume, --pending per repeat). kMaxSweepPoints counts repeats.
// - expandSweep(spec, last) stops once point `last` is listed: `expand --index I` costs
//   the points up to I, not the whole sweep.
// - args() is what a run of the point passes to the trainer after --config base:
//   the point's overrides, then SweepSpec::overrides, plus output.sweep_fmt when the sweep
//   sets fmt, so that the trainer names the run directory exactly `tag`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/memory_estimate.h"
#include "common/run_state.h"

namespace ftb {

using KeyValues = std::vector<std::pair<std::string, Value>>;

struct SweepSpec {
  std::string path;  // the sweep file
  std::string base;  // base run config, resolved against the sweep file's directory
  std::string fmt;   // "" = the base config's output.sweep_fmt
  int64_t nodes = 1, nproc_per_node = 1;
  std::vector<std::pair<std::string, std::vector<Value>>> grid;  // file order
  std::vector<KeyValues> exclude, include;
  int64_t repeats = 1;            // `repeats = N`: every point N times, round-robin
  int64_t global_batch_size = 0;  // `global_batch_size = G`: fixed; 0 = grad_accum as set
  std::vector<std::pair<std::string, KeyValues>> layouts;  // [layout.NAME], file order
  std::vector<std::string> overrides;  // "key=value" for every point (command line)
  // expand --memory-budget: a valid point whose estimateMemory() total exceeds it is
  // listed invalid, the reason memoryFitProblem()'s text (estimate, budget, largest term).
  std::optional<MemoryBudget> memory_budget;
};

struct SweepPoint {
  int index = 0;
  KeyValues overrides;  // config keys only, axis order
  int64_t nodes = 1, nproc_per_node = 1;
  int world_size = 1;
  std::string tag, hash;  // the node count is part of both when nodes > 1
  // nodes > 1: the tag this point had before the node count was part of the run
  // identity; a directory of that name whose run ran on `nodes` nodes is this point's
  // (pointState).
  std::string legacy_tag;
  bool valid = true;
  std::string reason;             // refusalOf(): the trainer's refusal text when invalid
  bool included = false;          // from [[include]]
  std::string layout;             // its [layout.NAME] variant ("" = none)
  int repeat = 0;                 // 0 .. repeats-1; > 0: tag + ".rN", the same hash
  int64_t global_batch = 0;       // sequences per optimizer step (valid points)
  std::vector<std::string> args;  // "key=VALUE" trainer overrides (see above)
};

// The most points a sweep may list (grid points before [[exclude]] + [[include]] points).
// A sweep over 10000 throughput runs is split into several files.
inline constexpr int64_t kMaxSweepPoints = 10000;

SweepSpec loadSweep(const std::string& path);
// All points, or those with index <= `last` (fewer when the sweep has fewer).
std::vector<SweepPoint> expandSweep(const SweepSpec& spec, std::optional<int> last = {});

// Repeat `repeat` (>= 1) of a repeat-0 point: the same hash, tag + ".r<repeat>", args +
// sweep.repeat=<repeat> (what expandSweep lists for `repeats`, for one point alone).
SweepPoint repeatOf(const SweepPoint& p, int repeat);

// runState() of the point's run directory under `results_dir`: <results_dir>/<tag>, or
// for a multi-node point with no such directory, the legacy_tag directory when its run
// ran on the point's node count. A directory under the point's tag that holds a run on
// another node count (a multi-node run written before nodes counted, under what is now a
// single-node tag) is not this point's: Missing.
RunState pointState(const std::string& results_dir, const SweepPoint& p);

// A per-rank memory budget from the command line: a size ("80GiB", "80GB", "512MiB",
// "1.5TiB", plain bytes) or a device type of gpuMemoryTable() ("h100", "a100-40gb").
// ConfigError (exit 2) naming the option and listing the device types otherwise.
MemoryBudget parseMemoryBudget(const std::string& text);

// "key=VALUE" with VALUE spelled as TOML (floats round-trip, strings quoted).
std::string overrideArg(const std::string& key, const Value& v);

}  // namespace ftb
