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
// - Activation offload (setActivationOffload(true), training.activation_offload = "host"):
//   a CUDA input x is copied to pinned host memory on a side stream (ordered after the
//   stream that produced it) instead of being kept on the device, and copied back at the start
//   of its block's backward (after that side stream's copies are done), before the
//   recompute. Gradients are the same bits. A CPU input is kept as without offload.
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

// Process-wide, set once before the first forward (parallelize, from the config).
void setActivationOffload(bool on);

}  // namespace ftb
