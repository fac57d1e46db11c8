// The training state of one rank as slices of named global tensors (what a
// checkpoint saves and loads), for every parallel layout.
//
// Global names: "model.<torchtitan name>" ("model.layers.0.attention.wq.weight"),
// "optim.<state>.<torchtitan name>" (AdamW exp_avg / exp_avg_sq, Adafactor row / col /
// sq), "rng.torch_cpu.rank_<r>" (this rank's default CPU generator state).
// Contract: every StatePiece::view aliases live storage (a parameter, a ZeRO master
// shard, an optimizer state tensor): copying into it restores that state. Pieces held
// by several ranks (data-parallel replicas, tensor-parallel-replicated norms) carry the
// same name and box on each of them; the saver writes each once.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "trainer/checkpoint/slices.h"
#include "trainer/model/llama.h"
#include "trainer/optim/optimizer.h"
#include "trainer/parallel/grad_sync.h"

namespace ftb::ckpt {

struct StatePiece {
  std::string name;
  std::vector<int64_t> global_shape;
  Box box;                // this piece inside the global tensor
  torch::Tensor view;     // shape box.size, aliases the live state
  bool per_rank = false;  // rank-private (RNG): never deduplicated across ranks
  // A state that is no plain tensor (an NF4 base matrix): `view` is undefined and
  // store(src) writes src (shape box.size, any float dtype) into it, quantizing.
  std::function<void(const torch::Tensor&)> store;
};

// REQUIRES: opt was built over sync.optimizerParams(). `tp_rank` of `tp` places
// tensor-parallel slices in their global tensors.
std::vector<StatePiece> collectState(const GradSync& sync, Optimizer& opt, int64_t tp_rank,
                                     int64_t tp, int rank);

// The "model.*" pieces of collectState alone (no optimizer), plus the frozen weights
// (LoRA's base, which checkpoints leave out): the live weights as boxes of the global
// tensors, for filling them from another source (HF import, hf/). An NF4 base matrix is
// one whole piece with `store` (REQUIRES: tp == 1 for it; TrainConfig refuses NF4 with tp).
std::vector<StatePiece> collectModelState(const GradSync& sync, int64_t tp_rank, int64_t tp);

// Dtype names used in the manifest and the HDF5 files.
std::string dtypeName(torch::ScalarType t);

}  // namespace ftb::ckpt
