// Tied embeddings in a pipeline, as Megatron ties them: the first stage holds the embedding,
// the last stage an equal copy of it as its output projection (model/llama.h: same name,
// same initial value), and one gradient all-reduce between the two stages per step keeps
// the copies equal.
//
// Contract (GradSync, wrapping the stage's own synchronisation, DdpSync):
// - finishGradients() first finishes the inner synchronisation (each copy's gradient summed
//   over its stage's data-parallel group), then all-reduces the copy's gradient over `pair`
//   (this rank and the rank of the same inner index on the other end of the pipeline), so
//   both copies hold the embedding's gradient plus the output projection's: the gradient of
//   the one tied weight. The optimizer then applies the same update to equal values, and
//   the copies stay bit-identical.
// - localSquaredNorm() counts the tied weight once, on the first stage.
// - Every other call goes to the inner GradSync unchanged.
// REQUIRES: `inner` holds `tied` (a trainable parameter) whole, with its gradient summed
// over `dp_size` data-parallel ranks, as DdpSync does (ZeRO shards it: refused by config
// validation); both ranks of `pair` call finishGradients() at the same point of each step.
#pragma once

#include <memory>

#include "trainer/comm/comm.h"
#include "trainer/parallel/grad_sync.h"

namespace ftb {

std::unique_ptr<GradSync> tieEmbeddingGradients(std::unique_ptr<GradSync> inner, torch::Tensor tied,
                                                Comm& pair, bool first_stage, int64_t dp_size);

}  // namespace ftb
