// Gradient synchronisation across data-parallel ranks, one strategy per layout, so the
// training loop never asks which ZeRO stage it runs.
//
// Per step the loop calls, in this order:
//   beginStep()                      once, before the first micro-batch
//   beforeBackward(last)             before each micro-batch's backward; last = the
//                                    step's final micro-batch
//   beforeWeightPass(final)          zb_h1 only: before each weight pass (the projection
//                                    weights' gradients of an earlier backward,
//                                    linear.h WeightGradStore); final = the pass of the
//                                    step's final micro-batch, which comes after the other
//                                    passes and after its own backward
//   finishGradients()                after the final backward: when it returns, every
//                                    reduction has completed and gradients() holds
//                                    the global gradient (sum over data-parallel ranks
//                                    of the local ones) of optimizerParams()
//   localSquaredNorm()               this rank's share of ||g||²: the sum over all
//                                    ranks of it is the squared global norm
//   (clip gradients(), optimizer step on optimizerParams(); with
//    optimizerZeroesGrads() the step also zeroes gradients(): Optimizer::step's
//    zero_grads)
//   afterOptimizer()                 refresh the materialised parameters from the
//                                    optimizer's (ZeRO-1/2 all-gather); zero gradients
//                                    unless the optimizer did
// With the optimizer step inside backward (training.optimizer_in_backward), after
// applyInBackward(apply) the strategy hands each optimizer parameter's final gradient to
// `apply` as soon as it is final (after its bucket's all-reduce, its shard's
// reduce-scatter), during the backward of the step's last micro-batch or at the latest in
// finishGradients(), and frees it at once; localSquaredNorm() then counts the gradients
// handed over this step, gradients() is empty, and the loop calls no optimizer step.
// Tensor parallelism composes with every strategy: parameters the model marks
// tp-replicated (ModelParam::tpReplicated) count 1/tp in localSquaredNorm(), because
// every rank of a tp group holds the same copy.
//
// REQUIRES: every rank of a data-parallel group makes the same calls in the same
// order (collectives are matched by order).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "trainer/model/llama.h"

namespace ftb {

// Where an optimizer parameter lies in the model's tensors (checkpoints map it to
// global tensor slices): the concatenation of `params` (flattened, each at its flat
// offset) of which this rank holds the flat range [begin, begin + numel).
struct FlatLayout {
  std::vector<ModelParam> params;            // name and shard_dim (tensor may be released: ZeRO-3)
  std::vector<std::vector<int64_t>> shapes;  // this tp rank's shape of each
  std::vector<int64_t> offsets;
  int64_t begin = 0, numel = 0;
};

class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual void beginStep() {}
  virtual void beforeBackward(bool last) { (void)last; }
  // The gradients a non-final weight pass produces are not final even after
  // beforeBackward(true): a strategy that reacts to final gradients holds back until the
  // final pass or the next beforeBackward. Only strategies whose gradients are final when
  // every micro-batch's contributions are in may be used with weight passes (the run's
  // config refuses zb_h1 with ZeRO-2/3: common/pipeline_config.cpp).
  virtual void beforeWeightPass(bool final) { (void)final; }
  virtual void finishGradients() = 0;
  // The tensors the optimizer updates, fixed for the run (ZeRO: this rank's fp32
  // master shards; else the model parameters), and their gradients (same order).
  virtual std::vector<torch::Tensor> optimizerParams() const = 0;
  virtual std::vector<torch::Tensor> gradients() const = 0;
  virtual double localSquaredNorm() const = 0;
  // True when gradients() are exactly the buffers the next step accumulates into, so
  // the optimizer's step may zero them in its own pass (and afterOptimizer does not).
  virtual bool optimizerZeroesGrads() const { return false; }
  virtual void afterOptimizer() = 0;
  // After optimizerParams() were overwritten outside a step (checkpoint restore):
  // make the model's materialised parameters equal them again. Collective.
  virtual void paramsLoaded() {}
  // apply(i, g): optimizer parameter i's final gradient g (valid during the call only).
  using ApplyGrad = std::function<void(size_t i, const torch::Tensor& g)>;
  // Arms the optimizer step inside backward (see above) for every later step. Returns
  // false, changing nothing, where this strategy cannot (the run's config checks refuse
  // those layouts first: common/run_config.cpp). REQUIRES: before the first step; the
  // strategy was built for it where it asks (DdpSync's in_backward).
  virtual bool applyInBackward(ApplyGrad apply) {
    (void)apply;
    return false;
  }
  // One FlatLayout per optimizerParams() entry, same order.
  virtual std::vector<FlatLayout> optimizerLayout() const = 0;

  // The frozen parameters (LoRA's base) as this rank holds them, and one FlatLayout per
  // entry: no gradient, no optimizer state, not in checkpoints; HF import fills them.
  // Default: the parameters given to setFrozen, held whole (DDP, ZeRO-1/2).
  virtual std::vector<torch::Tensor> frozenParams() const;
  virtual std::vector<FlatLayout> frozenLayout() const;
  void setFrozen(std::vector<ModelParam> params) { frozen_ = std::move(params); }

 protected:
  std::vector<ModelParam> frozen_;
};

// One FlatLayout per parameter, each held whole.
std::vector<FlatLayout> wholeLayouts(const std::vector<ModelParam>& params);

// Per optimizer parameter, the weight of its entries in the squared gradient norm: an
// undefined tensor (weight 1) or a tensor of 1 / 1/tp weights of its shape. Empty
// when tp == 1. (Built from ModelParam::tpReplicated.)
std::vector<torch::Tensor> tpNormWeights(const std::vector<ModelParam>& params, int64_t tp);

// Optimizer parameter i's weighted ||g||² with `weights` from tpNormWeights (empty: weight 1):
// one term of localSquaredNorm, for a gradient handed over on its own (applyInBackward).
double paramSquaredNorm(const torch::Tensor& g, const std::vector<torch::Tensor>& weights,
                        size_t i);

}  // namespace ftb
