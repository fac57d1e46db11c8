// Data parallel (DDP) gradient synchronisation overlapped with backward, as PyTorch
// DDP's Reducer does it.
//
// Contract (GradSync): after finishGradients(), every parameter's .grad() holds the sum
// over the data-parallel group of the local gradients (the trainer scales the loss by
// the global token count, so the sum is the global mean).
// - Buckets of ~bucket_bytes are formed in reverse forward order (about the order
//   backward produces gradients); a bucket holds parameters of one dtype (fp32, or bf16
//   weights without masters), and its gradients are of that dtype. Each bucket is one flat buffer and the parameters'
//   .grad are views into it (allocated once, zeroed after each optimizer step), so
//   autograd accumulates straight into the buffer that is reduced: no copies. The
//   parameters' values are likewise views of one flat buffer per bucket, in the same
//   order, so the optimizer updates a bucket as one tensor (optim/optimizer.h runs) and
//   the gradient norm and clipping are one op per bucket, and the optimizer zeroes the
//   buckets in its update pass (optimizerZeroesGrads).
// - A post-hook on each parameter's gradient accumulator marks it ready during the
//   backward of the step's last micro-batch (beforeBackward(true); with zb_h1 also in
//   that micro-batch's weight pass, not in the earlier ones: beforeWeightPass); when a bucket's
//   parameters are all ready and every earlier bucket has been launched, its all-reduce
//   starts (Comm::allReduceSumAsync): on Gloo asynchronously, while backward continues;
//   between ranks of one host (parallel/local_comm.h) it runs to completion right there,
//   a memory copy on the cores backward runs on. Earlier micro-batches only accumulate
//   (no communication: DDP's no_sync).
// - finishGradients() launches buckets whose parameters got no gradient (zeros) and
//   waits on every bucket in launch order. Buckets launch in index order on every
//   rank, so collectives match.
// - Optimizer step inside backward (in_backward, then applyInBackward): no gradient
//   buffers are kept. Autograd allocates each parameter's .grad; in a world of one it is
//   handed to the optimizer in the parameter's own hook and freed there. Across ranks a
//   complete bucket's gradients are copied into one of two staging buffers (largest
//   bucket's size) and freed, its all-reduce starts, and the bucket before it is waited on
//   and handed over: at most two buckets of gradients exist at once. The step's
//   micro-batches must be one (no accumulation across backwards: the config checks).
// Invariant: bucket layouts are identical on every rank of the group (same model
// slice: the dp group shares a tp rank).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "trainer/comm/comm.h"
#include "trainer/parallel/grad_sync.h"

namespace ftb {

class DdpSync final : public GradSync {
 public:
  // params: the model's parameters (forward order); comm: the data-parallel group.
  DdpSync(const std::vector<ModelParam>& params, Comm& comm, int64_t tp,
          int64_t bucket_bytes = 25 << 20, bool in_backward = false);
  ~DdpSync() override;
  void beforeBackward(bool last) override;
  void beforeWeightPass(bool final) override { held_ = !final; }
  void finishGradients() override;
  std::vector<torch::Tensor> optimizerParams() const override { return params_; }
  std::vector<torch::Tensor> gradients() const override;
  double localSquaredNorm() const override;
  bool optimizerZeroesGrads() const override { return true; }
  void afterOptimizer() override {}  // the optimizer zeroed the buckets
  bool applyInBackward(ApplyGrad apply) override;
  std::vector<FlatLayout> optimizerLayout() const override;

  int64_t numBuckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  std::vector<ModelParam> model_params_;
  struct Bucket {
    torch::Tensor flat;          // fp32; the parameters' .grad are views of it (else undefined)
    std::vector<size_t> params;  // indices into params_
    int64_t numel = 0;
    size_t pending = 0;  // parameters not yet ready this step
    std::unique_ptr<PendingWork> work;
  };
  void markReady(size_t param);
  void launchReady();  // launches consecutive complete buckets from next_launch_
  // Optimizer step inside backward: the bucket's gradients into its staging buffer
  // (zeros for a parameter without one), then freed; its all-reduce started.
  void launchStaged(size_t bucket);
  void completeStaged(size_t bucket);  // waits its all-reduce, hands its gradients over
  void handOver(size_t param, const torch::Tensor& g);
  void hookAccumulators();
  void placeBucket(Bucket& bucket);
  static torch::Tensor gradBuffer(int64_t n, torch::Device dev, torch::ScalarType dtype);

  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> norm_weights_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;                                     // param index -> bucket index
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep hooks alive
  Comm& comm_;
  bool armed_ = false;  // the current backward is the step's last micro-batch
  bool held_ = false;   // a non-final weight pass (zb_h1) runs: its gradients are not final
  size_t next_launch_ = 0;
  bool in_backward_ = false;
  ApplyGrad apply_;                     // set by applyInBackward
  std::vector<torch::Tensor> staging_;  // two buffers, world > 1 with in_backward_
  std::vector<char> handed_;            // world of one: parameter handed over this step
  double handed_sq_ = 0;                // Σ of the handed gradients' weighted squares
};

}  // namespace ftb
