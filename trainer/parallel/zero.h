// ZeRO stages 1-3 (Rajbhandari et al. 2020) over flat per-unit shards, FSDP style.
//
// A unit is one transformer block, or the root (embedding, final norm, output).
// Each unit's parameters are flattened (fp32, padded to a multiple of the shard
// group size N) and split into N contiguous shards; this rank owns shard
// `shard_rank`: the fp32 master copy and its gradient. The optimizer only ever
// sees these shards.
//   stage 1: full parameters stay materialised; gradients are all-reduced, each
//            rank keeps its slice, steps it, and all-gathers the updated shards.
//   stage 2: as 1, but each unit's gradients are reduce-scattered (each rank
//            receives only its slice) during backward, as soon as the unit's last
//            gradient is produced, in every micro-batch, and freed right there: the
//            full gradients of the whole model never exist at once.
//   stage 3: parameters are materialised only while used: a block is all-gathered
//            (in the compute dtype) just before its forward and freed after, then
//            all-gathered again for its recompute in backward, where its gradients
//            are reduce-scattered (fp32) into the shard. The root unit is gathered
//            (fp32) for the whole step. Implies recompute of every block in backward.
// With dp_replicate > 1 (HSDP), shard gradients are then all-reduced across replicas.
// Each stage is a GradSync strategy (grad_sync.h); the gradients and optimizer
// parameters are this rank's flat fp32 shards, one per unit (blocks, then the root).
// Invariant: after afterOptimizer(), every rank's materialised parameters (stages 1-2)
// are identical across the shard group.
// With the optimizer step inside backward (stage 3 without replicas), a unit's shard
// gradient goes to the optimizer as soon as it is reduce-scattered and is never stored.
// Frozen parameters (LoRA's base) are in no trainable unit: no gradient, no master, no
// optimizer state. Stages 1-2 leave them whole in the model; stage 3 shards them in
// frozen units of their own dtype, gathered and released with their block (or the root).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "trainer/comm/comm.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/model/llama.h"
#include "trainer/parallel/grad_sync.h"

namespace ftb {

class FlatUnit;
class BlockGroup;

class ZeroSync : public GradSync {
 public:
  ~ZeroSync() override;

  // TransformerImpl::UnitBuilt callback: shards one unit's parameters (layer -1 = root,
  // built last). REQUIRES: called for every block, then the root, before the first step.
  void addUnit(int64_t layer, const std::vector<ModelParam>& params);
  // Stage 3 runs the blocks (gathers their parameters); null for stages 1-2.
  virtual BlockExecutor* blockExecutor() { return nullptr; }

  std::vector<torch::Tensor> optimizerParams() const override;
  std::vector<torch::Tensor> gradients() const override;
  double localSquaredNorm() const override;
  std::vector<FlatLayout> optimizerLayout() const override;
  std::vector<torch::Tensor> frozenParams() const override;
  std::vector<FlatLayout> frozenLayout() const override;

 protected:
  ZeroSync(Comm& shard, Comm& replicate, torch::ScalarType compute_dtype, int64_t tp,
           bool persistent);
  void finishReplicas();  // HSDP: all-reduce the shard gradients across replicas
  // Called by addUnit() once `unit` exists (stage 2 hooks its gradient accumulators).
  virtual void unitAdded(FlatUnit& unit) { (void)unit; }
  void zeroGrads();
  void addFrozen(int64_t layer, const std::vector<ModelParam>& frozen);
  // The units with trainable parameters: blocks, then the root (optimizer order).
  std::vector<FlatUnit*> trainableUnits() const;

  Comm& shard_;
  Comm& replicate_;
  torch::ScalarType compute_dtype_;
  int64_t tp_;
  bool persistent_;  // stages 1-2: full parameters stay materialised
  std::vector<std::unique_ptr<FlatUnit>> blocks_;
  std::unique_ptr<FlatUnit> root_;
  std::vector<torch::Tensor> norm_weights_;  // per trainable unit, when tp > 1
  ApplyGrad apply_;         // the optimizer step inside backward (stage 3: applyInBackward)
  double handed_sq_ = 0;    // Σ of the handed shard gradients' weighted squares this step
  // Stage 3 with frozen weights (LoRA): their flat shards, and which block or the root
  // gathers each (groups_ by layer; frozen_root_).
  std::vector<std::unique_ptr<FlatUnit>> frozen_units_;
  std::vector<std::unique_ptr<BlockGroup>> groups_;
  std::vector<FlatUnit*> frozen_root_;
};

// stage 1, 2 or 3 over the shard group `shard` (and `replicate` for HSDP).
std::unique_ptr<ZeroSync> makeZeroSync(int stage, Comm& shard, Comm& replicate,
                                       torch::ScalarType compute_dtype, int64_t tp);

}  // namespace ftb
