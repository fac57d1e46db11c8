// A pipeline stage's executor: runs this stage's schedule (common/pipeline.h) over the
// micro-batches of a step, exchanging activations and their gradients with the neighbour
// stages through P2PLinks (comm/p2p.h).
//
// Contracts:
// - The stage holds its model chunks (chunk c = model chunk c·p + stage, a ModelPart of
//   the Transformer: the first model chunk also the embedding, the last the final norm,
//   output and loss) and runs each compute action of its list in order; gradients of
//   every micro-batch accumulate into the chunks' parameters, so after run() the stage's
//   GradSync (its dp/tp group) synchronises them as in any other layout.
// - Every stage loads the step's batches itself (the data is a function of the step):
//   the first model chunk reads the tokens, the last the targets and mask, and every
//   stage knows each transfer's shape [B, T, dim] in the compute dtype.
// - All receives of a step are posted when it starts and all sends are asynchronous, so
//   transfers overlap compute; a receive is waited on just before the compute that needs
//   it (that wait is the bubble time), the sends before run() returns. Waits are bounded
//   by parallel.timeout_seconds and name the peer (comm/p2p.h).
// - Messages are tagged (kind, micro-batch, receiving model chunk), unique within a step.
// - zb_h1: each (micro-batch, chunk) has a WeightGradStore (model/linear.h), active during
//   its forward and backward, so its blocks' projections leave their weight gradients there;
//   its kWeight action applies them (GradSync::beforeWeightPass first). The head's output
//   projection, the norms and the embedding get their gradients in the backward.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "common/pipeline.h"
#include "trainer/comm/p2p.h"
#include "trainer/parallel/step_runner.h"

namespace ftb {

// REQUIRES: chunks[c] is model chunk plan.modelChunk(stage, c); links holds a link to every
// neighbour stage the plan sends to or receives from (by stage index); all outlive the
// runner.
std::unique_ptr<StepRunner> makePipelineRunner(const PipePlan& plan, int64_t stage,
                                               std::vector<Transformer> chunks, GradSync& sync,
                                               std::map<int64_t, P2PLink*> links, int64_t tp,
                                               int64_t dim, torch::ScalarType compute_dtype);

}  // namespace ftb
