// Gradient synchronisation across data-parallel ranks, one strategy per layout, so the
// training loop never asks which ZeRO stage it runs.
//
// Per step the loop calls, in this order:
//   beginStep()                      once, before the first micro-batch
//   beforeBackward(last)             before each micro-batch's backward; last = the
//                                    step's final micro-batch
//   finishGradients()                after the final backward: when it returns, every
//                                    reduction has completed and gradients() holds
//                                    the global gradient (sum over data-parallel ranks
//                                    of the local ones) of optimizerParams()
//   localSquaredNorm()               this rank's share of ||g||²: the sum over all
//                                    ranks of it is the squared global norm
//   (clip gradients(), optimizer step on optimizerParams())
//   afterOptimizer()                 refresh the materialised parameters from the
//                                    optimizer's (ZeRO-1/2 all-gather); zero gradients
// Tensor parallelism composes with every strategy: parameters the model marks
// tp-replicated (ModelParam::tpReplicated) count 1/tp in localSquaredNorm(), because
// every rank of a tp group holds the same copy.
//
// REQUIRES: every rank of a data-parallel group makes the same calls in the same
// order (collectives are matched by order).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "trainer/model/llama.h"

namespace ftb {

class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual void beginStep() {}
  virtual void beforeBackward(bool last) { (void)last; }
  virtual void finishGradients() = 0;
  // The tensors the optimizer updates, fixed for the run (ZeRO: this rank's fp32
  // master shards; else the model parameters), and their gradients (same order).
  virtual std::vector<torch::Tensor> optimizerParams() const = 0;
  virtual std::vector<torch::Tensor> gradients() const = 0;
  virtual double localSquaredNorm() const = 0;
  virtual void afterOptimizer() = 0;
  // After optimizerParams() were overwritten outside a step (checkpoint restore):
  // make the model's materialised parameters equal them again. Collective.
  virtual void paramsLoaded() {}
};

// Per optimizer parameter, the weight of its entries in the squared gradient norm: an
// undefined tensor (weight 1) or a tensor of 1 / 1/tp weights of its shape. Empty
// when tp == 1. (Built from ModelParam::tpReplicated.)
std::vector<torch::Tensor> tpNormWeights(const std::vector<ModelParam>& params, int64_t tp);

}  // namespace ftb
