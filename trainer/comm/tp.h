// Tensor-parallel building blocks (Megatron-LM, Shoeybi et al. 2019).
//
// Contracts:
// - TpContext{rank, size, comm}: size 1 (comm may be null) makes every op here the
//   identity / the plain single-device computation, so the model runs unchanged.
// - copyToTp  (Megatron's f): identity forward, all-reduce(sum) of the gradient in
//   backward. Put before a column-parallel matmul.
// - reduceFromTp (Megatron's g): all-reduce(sum) forward, identity backward. Put
//   after a row-parallel matmul. Collectives run in fp32 (Comm upcasts bf16).
// - shardRange(full, tp, rank): the contiguous slice [begin, begin+len) of a
//   dimension of size `full` owned by `rank`. REQUIRES: tp divides full.
// - vocabParallelEmbedding / vocabParallelCrossEntropySum: the embedding table and
//   the logits are split over the vocabulary; full logits are never gathered.
#pragma once

#include <torch/torch.h>

#include "trainer/comm/comm.h"

namespace ftb {

struct TpContext {
  int rank = 0;
  int size = 1;
  Comm* comm = nullptr;
  bool active() const { return size > 1; }
};

torch::Tensor copyToTp(const torch::Tensor& x, const TpContext& tp);
torch::Tensor reduceFromTp(const torch::Tensor& x, const TpContext& tp);

// tokens [B,T] (global ids), weight_local [V/tp, D] holding ids [vocab_start, +V/tp).
torch::Tensor vocabParallelEmbedding(const torch::Tensor& tokens, const torch::Tensor& weight_local,
                                     int64_t vocab_start, const TpContext& tp);

// Σ over mask of -log softmax(logits)[target], where logits_local [B,T,V/tp] holds
// the columns [vocab_start, +V/tp). Returns an fp32 scalar, the same on every tp rank.
torch::Tensor vocabParallelCrossEntropySum(const torch::Tensor& logits_local,
                                           const torch::Tensor& targets, const torch::Tensor& mask,
                                           int64_t vocab_start, const TpContext& tp);

}  // namespace ftb
