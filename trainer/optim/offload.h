// Optimizer-state offload (training.optimizer_offload = "host", ZeRO-Offload's split): the
// optimizer's state and a host copy of the parameters it updates (the rank's shard under
// ZeRO) live in host memory, the step runs on the host's CPU kernels, and per parameter only
// the gradient goes down to the host and the updated parameter comes back up. The device
// keeps the parameters and gradients in their training dtype; it holds no optimizer state.
//
// Contracts:
// - offloadOptimizer(params, opts) is an Optimizer (optimizer.h) whose step and update give
//   each params[i] the value that makeOptimizer over host copies of the parameters computes:
//   for CPU parameters, bit for bit the value of makeOptimizer(params, opts) (the same
//   element-wise math per parameter; the unit tests), on a GPU the host kernels' rounding
//   rather than the GPU's.
// - step(grads, lr, zero_grads): queues every defined gradient's copy to pinned host buffers on
//   the device's side stream (kernels/host_copy.h), then, in parameter order, waits for one
//   gradient, updates its parameter on the host and queues the copy back, so the copies of
//   one parameter overlap the host's update of the next. The current stream waits for the last
//   copy on the device before its next work; the host does not wait for the copies up.
//   zero_grads zeroes the device gradients after their copies.
// - update(i, g, lr) (the step inside backward): the same for one parameter; the host waits
//   for that gradient's copy.
// - state(i) is the host state; stateBytes() the host bytes (state, the copies of the
//   parameters and the gradient buffers). setStepCount(t), the last call of a checkpoint
//   restore (loop/checkpoint_hook.cpp), also re-reads the host copies from the parameters the
//   restore wrote.
// REQUIRES: params outlive the optimizer, and nothing but this optimizer writes them between
//   its construction and a restore's setStepCount.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "trainer/optim/optimizer.h"

namespace ftb {

std::unique_ptr<Optimizer> offloadOptimizer(std::vector<torch::Tensor> params,
                                            const OptimizerOptions& opts);

}  // namespace ftb
