// Activation checkpointing for one transformer block (libtorch 1.13 has no C++
// checkpoint utility).
//
// Contract: checkpointedBlock(block, x, rope) returns the same value as
// block->forward(x, rope) and gives identical gradients to x and to every block
// parameter, but keeps only x alive between forward and backward: forward runs
// under NoGradGuard, backward re-runs the block with grad enabled and
// differentiates it. The compute dtype active at forward time is restored for the
// recompute. REQUIRES: block and rope outlive the backward pass.
#pragma once

#include <torch/torch.h>

#include "trainer/model/llama.h"

namespace ftb {

torch::Tensor checkpointedBlock(TransformerBlock& block, const torch::Tensor& x,
                                const RopeTables& rope);

}  // namespace ftb
