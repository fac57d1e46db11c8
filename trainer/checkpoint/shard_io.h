// Tensor slices in a checkpoint's per-rank HDF5 file.
//
// File layout (h5py: f["model.norm.weight/0"][...], .attrs["offset"]):
//   / attrs            format ("ftbench-checkpoint-shard"), rank, step
//   /<global name>/<k> one dataset per slice this rank writes (k = 0, 1, ... when a rank
//                      holds several boxes of one tensor, as ZeRO shards do), the box's
//                      shape, contiguous, with int64 attrs `offset` and `global_shape`;
//                      a bf16 tensor (bf16 weights without masters) is stored widened
//                      to float32, exactly, and narrowed back when read.
// Contract: writeShardFile creates `path` (truncating), writes every slice and closes it
// (not fsynced: the caller fsyncs it, overlapping the checksum); it returns the manifest
// entries (file name = basename of path).
// ShardReader reads boxes by hyperslab, keeping files open until destroyed. Every
// HDF5 failure is IoError naming the file and dataset.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "common/checkpoint_manifest.h"
#include "common/hdf5.h"
#include "trainer/checkpoint/slices.h"

namespace ftb::ckpt {

struct SliceToWrite {
  std::string name;
  std::vector<int64_t> global_shape;
  Box box;
  torch::Tensor data;  // shape box.size
};

std::vector<std::pair<std::string, CkptSlice>> writeShardFile(
    const std::string& path, const std::vector<SliceToWrite>& slices, int rank, int64_t step);

// Reads no tensor data: checks that every slice `m` places in `file` (inside `dir`) is a
// dataset of that file whose dimensions are the slice's size and whose offset attribute is
// the slice's offset. Throws CheckpointError naming the file and the first bad dataset.
void checkShardFile(const std::string& dir, const Manifest& m, const std::string& file);

class ShardReader {
 public:
  explicit ShardReader(std::string dir) : dir_(std::move(dir)) {}
  // Copies the part `part` (global coordinates, inside both) of the stored slice `s`
  // into `dst`, whose shape is part.size. dst must be contiguous. Throws IoError when the
  // stored dataset is not the slice `s` says (its dimensions, its offset attribute).
  void read(const CkptSlice& s, const Box& part, torch::Tensor& dst);

 private:
  std::string dir_;
  std::map<std::string, h5::H5Handle> files_;
};

}  // namespace ftb::ckpt
