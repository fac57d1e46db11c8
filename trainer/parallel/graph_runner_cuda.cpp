#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "trainer/comm/phase_timer.h"
#include "trainer/metrics/device.h"
#include "trainer/parallel/graph_runner.h"

namespace ftb {
namespace {

// `waiter` waits, on the device, for the work queued on `done` so far.
void streamWaits(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& done) {
  at::cuda::CUDAEvent e;
  e.record(done);
  e.block(waiter);
}

class CudaGraphRunner final : public StepRunner {
 public:
  CudaGraphRunner(Transformer model, GradSync& sync, int64_t warmup_steps)
      : model_(std::move(model)),
        sync_(sync),
        warmup_steps_(warmup_steps),
        side_(c10::cuda::getStreamFromPool()) {}

  FwdBwdStats run(const StepBatches& mine, double positions) override {
    if (mine.micro.size() != 1)
      throw std::logic_error("training.cuda_graphs: " + std::to_string(mine.micro.size()) +
                             " micro-batches in a step (run_config.cpp allows one)");
    const Batch& b = mine.micro[0];
    FwdBwdStats st;
    PhaseTimer timer;
    stage(b, positions);
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
    streamWaits(side_, current);
    {
      c10::cuda::CUDAStreamGuard on_side(side_);
      if (steps_ < warmup_steps_) {
        fwdBwd();
      } else {
        if (!graph_) capture();
        graph_->replay();
      }
    }
    streamWaits(current, side_);
    ++steps_;
    timer.end(st.fwd_s);  // forward and backward: one phase (graph_runner.h)
    timer.settle();
    st.loss_sum = loss_.item<double>();
    st.padded = double(b.padded_tokens);
    st.dataset = double(b.dataset_tokens);
    return st;
  }
  int64_t sampleCopies() const override { return 1; }

 private:
  // The batch into the static buffers the graph reads (made at the first step, in its shape).
  void stage(const Batch& b, double positions) {
    const torch::Device dev = computeDevice();
    if (!inputs_.defined()) {
      inputs_ = torch::empty(b.inputs.sizes(), b.inputs.options().device(dev));
      targets_ = torch::empty(b.targets.sizes(), b.targets.options().device(dev));
      mask_ = torch::empty(b.mask.sizes(), b.mask.options().device(dev));
      // fp32, as the eager runner's double divisor is used with the fp32 loss sum.
      positions_ = torch::empty({}, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    }
    if (b.inputs.sizes() != inputs_.sizes())
      throw std::logic_error("training.cuda_graphs: the batch shape changed from " +
                             c10::str(inputs_.sizes()) + " to " + c10::str(b.inputs.sizes()) +
                             " (run_config.cpp refuses data.padding = \"longest\")");
    inputs_.copy_(b.inputs);
    targets_.copy_(b.targets);
    mask_.copy_(b.mask);
    positions_.fill_(positions);
  }

  // Forward, loss and backward of the static batch; loss_ = its Σ token CE, in fp64.
  void fwdBwd() {
    const torch::Tensor loss_sum = model_->lossSum(model_->forward(inputs_), targets_, mask_);
    sync_.beforeBackward(true);
    (loss_sum / positions_).backward();
    loss_ = loss_sum.detach().to(torch::kFloat64);
  }

  // REQUIRES: on side_ (not the default stream), after warm-up steps on it. The capture
  // allocates its own copy of the step's activations in the graph's pool: the blocks the
  // warm-up left cached go back to the device first (as torch.cuda.graph does).
  void capture() {
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    const at::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();
    graph_.emplace();
    try {
      graph_->capture_begin(pool);
      fwdBwd();
      graph_->capture_end();
    } catch (const std::exception& e) {
      abandonCapture(pool);
      graph_.reset();
      throw std::runtime_error(std::string("training.cuda_graphs: capturing the forward and "
                                           "backward into a CUDA graph failed (run without "
                                           "training.cuda_graphs): ") +
                               e.what());
    }
  }

  // After an error inside the capture: ends the side stream's capture (if it is still
  // capturing) and the allocator's routing into the graph's pool, so the error unwinds on a
  // stream that no longer captures. Best effort: the run ends with the capture's error.
  void abandonCapture(const at::cuda::MempoolId_t& pool) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(side_.stream(), &status) != cudaSuccess ||
        status == cudaStreamCaptureStatusNone)
      return;  // capture_end ended it, and the graph releases its pool itself
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(side_.stream(), &g) == cudaSuccess && g != nullptr)
      cudaGraphDestroy(g);
    (void)cudaGetLastError();
    try {
      c10::cuda::CUDACachingAllocator::endAllocateToPool(side_.device_index(), pool);
      c10::cuda::CUDACachingAllocator::releasePool(side_.device_index(), pool);
    } catch (const std::exception&) {  // nothing was routed there yet
    }
  }

  Transformer model_;
  GradSync& sync_;
  int64_t warmup_steps_;
  int64_t steps_ = 0;
  c10::cuda::CUDAStream side_;
  torch::Tensor inputs_, targets_, mask_, positions_, loss_;
  std::optional<at::cuda::CUDAGraph> graph_;
};

}  // namespace

std::unique_ptr<StepRunner> makeCudaGraphRunner(Transformer model, GradSync& sync,
                                                int64_t warmup_steps) {
  return std::make_unique<CudaGraphRunner>(std::move(model), sync, warmup_steps);
}

}  // namespace ftb
