// Tensors that lie back to back in one storage (DDP buckets, ZeRO shards): the runs they
// form, one flat view per run, and the gradient norm and scaling done one run at a time.
// Used by the optimizer (optim/) and by gradient sync (parallel/) below it.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <vector>

namespace ftb {

// Indices of the defined tensors of `ts` grouped into runs that lie back to back in one
// storage (each contiguous, one dtype), in storage order; any other tensor is a run of
// its own. E.g. DDP's parameters and gradients (views of flat buckets: parallel/ddp.h).
std::vector<std::vector<size_t>> adjacentRuns(const std::vector<torch::Tensor>& ts);
// One flat 1-D view of ts[run[0]], ts[run[1]], ... when they lie back to back in that
// order in one storage (each contiguous, one dtype); else an undefined tensor.
torch::Tensor flatSpan(const std::vector<torch::Tensor>& ts, const std::vector<size_t>& run);

// Σ weights[i]·grads[i]²; `weights` empty = all ones, else one tensor (or undefined = ones)
// per gradient. Without weights, CPU gradients are reduced in fp64 per run of back-to-back
// gradients (e.g. a DDP bucket), those off the CPU by one foreachSquaredNorm; with weights,
// one fp64 term per gradient. One device read at most.
double gradSquaredNorm(const std::vector<torch::Tensor>& grads,
                       const std::vector<torch::Tensor>& weights = {});
// Σ ||ts[i]||² by one _foreach_norm (each tensor's norm reduced in fp32, as ATen's
// multi-tensor kernels do: ~1e-6 relative for 10^5 elements), squared and summed in fp64
// on the tensors' device, read once. gradSquaredNorm's path for gradients off the CPU (it
// runs on the CPU too). REQUIRES: every tensor defined, all on one device.
double foreachSquaredNorm(const std::vector<torch::Tensor>& ts);
// Scales every defined gradient by `factor` in place (off the CPU by one _foreach_mul_).
void scaleGrads(const std::vector<torch::Tensor>& grads, double factor);

}  // namespace ftb
