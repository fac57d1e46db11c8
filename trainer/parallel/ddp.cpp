#include "trainer/parallel/ddp.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "trainer/kernels/tensor_runs.h"
#include "trainer/parallel/local_comm.h"

namespace ftb {

DdpSync::DdpSync(const std::vector<ModelParam>& params, Comm& comm, int64_t tp,
                 int64_t bucket_bytes)
    : model_params_(params), norm_weights_(tpNormWeights(params, tp)), comm_(comm) {
  for (const auto& p : params) params_.push_back(p.tensor);
  bucket_of_.resize(params_.size());
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    int64_t b = params_[k].numel() * 4;
    if (buckets_.empty() || bytes + b > bucket_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += b;
  }
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    int64_t n = 0;
    for (size_t k : bucket.params) n += params_[k].numel();
    const torch::Device dev = params_[bucket.params[0]].device();
    // On the CPU peers on this host read the gradients in place (local_comm.h).
    bucket.flat =
        dev.is_cpu() ? zerosForPeers(n) : torch::zeros({n}, torch::TensorOptions().device(dev));
    torch::Tensor values = torch::empty(
        {n}, torch::TensorOptions().device(dev));  // the parameters move into one buffer too
    int64_t off = 0;
    for (size_t k : bucket.params) {
      torch::Tensor& p = params_[k];
      p.mutable_grad() = bucket.flat.narrow(0, off, p.numel()).view(p.sizes());
      torch::Tensor view = values.narrow(0, off, p.numel()).view(p.sizes());
      view.copy_(p);
      p.set_data(view);
      off += p.numel();
    }
  }
  if (comm_.size() == 1) return;  // nothing to overlap
  for (size_t k = 0; k < params_.size(); ++k) {
    std::shared_ptr<torch::autograd::Node> acc =
        torch::autograd::impl::grad_accumulator(params_[k]);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs,
                  const torch::autograd::variable_list&) {
          if (armed_) markReady(k);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));
  }
}

DdpSync::~DdpSync() = default;

void DdpSync::beforeBackward(bool last) {
  armed_ = last && comm_.size() > 1;
  if (!armed_) return;
  next_launch_ = 0;
  for (auto& b : buckets_) b.pending = b.params.size();
}

void DdpSync::markReady(size_t param) {
  Bucket& b = buckets_[bucket_of_[param]];
  if (b.pending > 0 && --b.pending == 0) launchReady();
}

void DdpSync::launchReady() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = comm_.allReduceSumAsync(b.flat);
  }
}

void DdpSync::finishGradients() {
  if (!armed_) return;  // world of one, or no backward this step
  armed_ = false;
  for (auto& b : buckets_) b.pending = 0;  // a parameter without gradient keeps its zeros
  launchReady();
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
  }
}

std::vector<torch::Tensor> DdpSync::gradients() const {
  std::vector<torch::Tensor> g;
  for (const auto& p : params_) g.push_back(p.grad());
  return g;
}

// Replicas hold equal copies of the reduced gradient: each contributes 1/dp.
double DdpSync::localSquaredNorm() const {
  return gradSquaredNorm(gradients(), norm_weights_) / double(comm_.size());
}

std::vector<FlatLayout> DdpSync::optimizerLayout() const { return wholeLayouts(model_params_); }

}  // namespace ftb
