// Optimizer-state offload (training.optimizer_offload = "host", ZeRO-Offload's split): the
// optimizer's state and a host copy of the parameters it updates (the rank's shard under
// ZeRO) live in host memory, the step runs on the host's CPU kernels, and per parameter only
// the gradient goes down to the host and the updated parameter comes back up. The device
// keeps the parameters and gradients in their training dtype; it holds no optimizer state.
//
// Contracts:
// - offloadOptimizer(params, opts) is an Optimizer (optimizer.h) whose step and update give
//   each params[i] the value that the inner optimizer's update(i) computes on a host copy of
//   it (optimizer.h's step in pieces: the same element-wise math as its step). For CPU
//   parameters that do not lie back to back that is bit for bit makeOptimizer(params, opts)'s
//   step (the unit tests); where the plain AdamW fuses adjacent parameters into one flat pass,
//   or takes ATen's path for a non-contiguous tensor, the rounding may differ. On a GPU it is
//   the host kernels' rounding rather than the device's fused AdamW.
// - step(grads, lr, zero_grads): queues every defined gradient's copy to pinned host buffers on
//   the device's side stream (kernels/host_copy.h), then, in parameter order, waits for one
//   gradient, updates its parameter on the host and queues the copy back, so the copies of
//   one parameter overlap the host's update of the next. The current stream waits for the last
//   copy on the device before its next work; the host does not wait for the copies up.
//   zero_grads zeroes the device gradients after their copies.
// - update(i, g, lr) (the step inside backward): the same for one parameter; the host waits
//   for that gradient's copy, so the device has no backward work queued while the host
//   updates it: with training.optimizer_in_backward the GPU and the host step take turns.
//   startStep() also makes the current stream wait for every copy queued before it.
// - state(i) is the host state; stateBytes() the host bytes (state, the copies of the
//   parameters and the gradient buffers). setStepCount(t), the last call of a checkpoint
//   restore (loop/checkpoint_hook.cpp), also re-reads the host copies from the parameters the
//   restore wrote.
// - Host memory: each parameter's copy and gradient buffer is its own pinned allocation, which
//   the pinned host allocator may round up (stateBytes() counts the tensors' bytes).
// REQUIRES: params outlive the optimizer, and nothing but this optimizer writes them after its
//   construction, except a checkpoint restore, which ends with setStepCount.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "trainer/optim/optimizer.h"

namespace ftb {

std::unique_ptr<Optimizer> offloadOptimizer(std::vector<torch::Tensor> params,
                                            const OptimizerOptions& opts);

}  // namespace ftb
