// Optimizers over explicit parameter lists (so ZeRO can hand them local shards).
//
// Contracts:
// - step(grads, lr, zero_grads) updates params[i] in place from grads[i] (same order as
//   the constructor's params; an undefined gradient skips that parameter), in fp32.
//   With zero_grads every defined grads[i] is zero on return (AdamW zeroes each element
//   in the update's own pass: no second pass over the gradients).
// - AdamW: decoupled weight decay, bias-corrected moments (Loshchilov & Hutter).
//   Parameters that lie back to back in one buffer (DDP buckets), with gradients that
//   do too, are updated as one flat tensor: same element-wise math, a handful of ops
//   per buffer instead of per parameter; state(i) stays a view per parameter.
// - Adafactor: factored second moment for 2-D parameters (row and column running
//   means), unfactored for others, no first moment, update clipped to RMS <= 1,
//   decay rate 1 - t^-0.8 (Shazeer & Stern 2018), eps1 = 1e-30.
// - stateBytes() is the optimizer state actually allocated (for memory reports).
// - Bf16 weights (a bf16 parameter: training.master_weights = "none"): the update is computed
//   in fp32 on a copy of the parameter (moments and factored state are fp32) and stored back
//   to bf16 by OptimizerOptions::bf16_update: "nearest" rounding; "stochastic" rounding, up
//   with probability equal to the dropped fraction, from noise that is a hash of (seed, step,
//   parameter, element), so a resume draws the same; or "kahan": a bf16 compensation buffer
//   per parameter keeps what rounding lost and adds it to the next update (state "kahan_comp").
// - The step in pieces (training.optimizer_in_backward, grad_sync.h applyInBackward):
//   startStep() once, then update(i, g, lr) once per parameter i that has a gradient, in any
//   order, equals step(grads, lr) with the same gradients (the same element-wise math, per
//   parameter instead of per flat run). update leaves g unchanged.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace ftb {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(const std::vector<torch::Tensor>& grads, double lr,
                    bool zero_grads = false) = 0;
  virtual void startStep() = 0;
  virtual void update(size_t i, const torch::Tensor& g, double lr) = 0;
  virtual int64_t stateBytes() const = 0;
  // Checkpointing: the state tensors of parameter i by name ("exp_avg", "exp_avg_sq";
  // Adafactor "row", "col", "sq"), aliasing the live state (writes restore it), and the
  // number of steps taken (bias correction / decay schedule).
  virtual std::vector<std::pair<std::string, torch::Tensor>> state(size_t i) const = 0;
  virtual int64_t stepCount() const = 0;
  virtual void setStepCount(int64_t t) = 0;
};

struct OptimizerOptions {
  std::string kind = "adamw";
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  // bf16 parameters (training.master_weights = "none"): how the update reaches them,
  // "stochastic" | "kahan" | "nearest" (Bf16 weights above); seed keys the rounding noise.
  std::string bf16_update = "stochastic";
  uint64_t seed = 0;
};

// One AdamW step of every ps[i] from gs[i] through ATen's fused multi-tensor kernel
// (torch.optim.AdamW(fused=True): on a GPU a few launches over all the tensors instead of nine
// ATen passes per tensor): the same update as the contract above, rounded differently
// (sqrt(v)/sqrt(1-b2^t) + eps; m by lerp). AdamW uses it for the tensors off the CPU, one
// call per device and dtype for a whole step. REQUIRES: ps[i], gs[i], ms[i], vs[i] of one
// shape, every tensor of one dtype and device; step >= 1.
void atenFusedAdamW(const std::vector<torch::Tensor>& ps, const std::vector<torch::Tensor>& gs,
                    const std::vector<torch::Tensor>& ms, const std::vector<torch::Tensor>& vs,
                    int64_t step, double lr, const OptimizerOptions& o);

std::unique_ptr<Optimizer> makeOptimizer(std::vector<torch::Tensor> params,
                                         const OptimizerOptions& opts);

}  // namespace ftb
