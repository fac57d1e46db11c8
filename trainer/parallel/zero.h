// ZeRO stages 1-3 (Rajbhandari et al. 2020) over flat per-unit shards, FSDP style.
//
// A unit is one transformer block, or the root (embedding, final norm, output).
// Each unit's parameters are flattened (fp32, padded to a multiple of the shard
// group size N) and split into N contiguous shards; this rank owns shard
// `shard_rank`: the fp32 master copy and its gradient. The optimizer only ever
// sees these shards.
//   stage 1: full parameters stay materialised; gradients are all-reduced, each
//            rank keeps its slice, steps it, and all-gathers the updated shards.
//   stage 2: as 1, but gradients are reduce-scattered (each rank receives only its
//            slice) and the full gradients are freed right after.
//   stage 3: parameters are materialised only while used: a block is all-gathered
//            (in the compute dtype) just before its forward and freed after, then
//            all-gathered again for its recompute in backward, where its gradients
//            are reduce-scattered (fp32) into the shard. The root unit is gathered
//            (fp32) for the whole step. Implies recompute of every block in backward.
// With dp_replicate > 1 (HSDP), shard gradients are then all-reduced across replicas.
// Invariant: after afterStep(), every rank's materialised parameters (stages 1-2) are
// identical across the shard group.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "trainer/model/checkpoint.h"
#include "trainer/model/llama.h"
#include "trainer/parallel/comm.h"

namespace ftb {

class FlatUnit;

// Where each parameter of a unit lies in its flat buffer, and which part of that
// buffer this rank's shard is (for checkpoints: flat ranges -> tensor slices).
struct UnitLayout {
  int64_t layer = -1;                       // -1 = root
  std::vector<std::string> names;           // named_parameters() keys within the unit
  std::vector<std::vector<int64_t>> shapes; // this tp rank's parameter shapes
  std::vector<int64_t> offsets;             // flat offset of each parameter
  int64_t shard_begin = 0, shard_numel = 0; // this rank's shard of the flat buffer
};

class ZeroEngine : public BlockExecutor {
 public:
  ZeroEngine(int stage, Comm& shard, Comm& replicate, torch::ScalarType compute_dtype);
  ~ZeroEngine() override;

  // TransformerImpl::UnitBuilt callback: shards `unit`'s parameters (layer -1 = root).
  void addUnit(int64_t layer, torch::nn::Module& unit);

  void beginStep();                  // stage 3: gather the root unit
  void reduceGradients();            // after the last micro-batch's backward
  std::vector<torch::Tensor> masterShards() const;  // optimizer parameters
  std::vector<torch::Tensor> gradShards() const;    // their gradients (same order)
  // 1/tp on positions of tensor-parallel-replicated parameters, else 1 (for the
  // global grad norm); undefined when tp == 1.
  std::vector<torch::Tensor> normWeights(int64_t tp) const;
  void afterStep();                  // stages 1-2: all-gather shards; all: zero grads
  // Layouts of the units in masterShards() order.
  std::vector<UnitLayout> unitLayouts() const;
  // After the master shards were overwritten (checkpoint load): stages 1-2 refresh
  // the materialised parameters from them. Collective over the shard group.
  void afterLoad();

  torch::Tensor run(int64_t layer, TransformerBlockImpl& block, const torch::Tensor& x,
                    const RopeTables& rope) override;

  int stage() const { return stage_; }

 private:
  int stage_;
  Comm& shard_;
  Comm& replicate_;
  torch::ScalarType compute_dtype_;
  std::vector<std::unique_ptr<FlatUnit>> blocks_;
  std::unique_ptr<FlatUnit> root_;
};

}  // namespace ftb
