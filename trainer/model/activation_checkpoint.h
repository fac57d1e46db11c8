// Activation checkpointing for one transformer block (libtorch 1.13 has no C++
// checkpoint utility), optionally with parameter gathering for ZeRO-3.
//
// Contract: checkpointedBlock(block, x, rope, hooks) returns block.forward(x, rope)
// but keeps only x alive between forward and backward: forward runs under
// NoGradGuard, backward re-runs the block with grad enabled and differentiates it.
// The compute dtype active at forward time is restored for the recompute.
// - hooks == nullptr: gradients reach x and the block's parameters (.grad) exactly
//   as without checkpointing.
// - hooks != nullptr (ZeRO-3): hooks->materialize() runs before the forward and
//   before the recompute, hooks->release() after each; the parameter gradients go to
//   hooks->consumeGrads() (in block->trainableTensors() order) instead of .grad.
// Frozen parameters (LoRA's base) get no gradient either way.
// REQUIRES: block, rope and hooks outlive the backward pass.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace ftb {

class TransformerBlockImpl;
struct RopeTables;

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void materialize() = 0;
  virtual void release() = 0;
  virtual void consumeGrads(const std::vector<torch::Tensor>& grads) = 0;
};

torch::Tensor checkpointedBlock(TransformerBlockImpl& block, const torch::Tensor& x,
                                const RopeTables& rope, UnitHooks* hooks);

}  // namespace ftb
