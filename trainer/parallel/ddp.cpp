#include "trainer/parallel/ddp.h"

#include <algorithm>

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "trainer/kernels/tensor_runs.h"
#include "trainer/parallel/local_comm.h"

namespace ftb {

DdpSync::DdpSync(const std::vector<ModelParam>& params, Comm& comm, int64_t tp,
                 int64_t bucket_bytes, bool in_backward)
    : model_params_(params),
      norm_weights_(tpNormWeights(params, tp)),
      comm_(comm),
      in_backward_(in_backward) {
  for (const auto& p : params) params_.push_back(p.tensor);
  bucket_of_.resize(params_.size());
  handed_.assign(params_.size(), 0);
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t b = params_[k].numel() * int64_t(params_[k].element_size());
    const bool other_dtype = !buckets_.empty() &&
                             params_[buckets_.back().params[0]].scalar_type() != params_[k].scalar_type();
    if (buckets_.empty() || bytes + b > bucket_bytes || other_dtype) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += b;
  }
  torch::NoGradGuard no_grad;
  int64_t largest = 0;  // bytes
  for (auto& bucket : buckets_) {
    for (size_t k : bucket.params) bucket.numel += params_[k].numel();
    largest = std::max(largest, bucket.numel * int64_t(params_[bucket.params[0]].element_size()));
    placeBucket(bucket);
  }
  if (in_backward_ && comm_.size() > 1)  // byte buffers: a bucket views its dtype in them
    for (int i = 0; i < 2; ++i)
      staging_.push_back(gradBuffer(largest, params_[0].device(), torch::kUInt8));
  if (comm_.size() > 1 || in_backward_) hookAccumulators();  // else nothing to overlap
}

DdpSync::~DdpSync() = default;

// A flat gradient buffer of n elements; on the CPU one that peers on this host read in place
// (local_comm.h).
torch::Tensor DdpSync::gradBuffer(int64_t n, torch::Device dev, torch::ScalarType dtype) {
  return dev.is_cpu() ? zerosForPeers(n, dtype)
                      : torch::zeros({n}, torch::TensorOptions().device(dev).dtype(dtype));
}

// The bucket's parameters move into one flat buffer of values, and (without in_backward)
// their .grad become views of one flat gradient buffer, in the same order.
void DdpSync::placeBucket(Bucket& bucket) {
  const torch::Device dev = params_[bucket.params[0]].device();
  const torch::ScalarType dtype = params_[bucket.params[0]].scalar_type();
  if (!in_backward_) bucket.flat = gradBuffer(bucket.numel, dev, dtype);
  torch::Tensor values =
      torch::empty({bucket.numel}, torch::TensorOptions().device(dev).dtype(dtype));
  int64_t off = 0;
  for (size_t k : bucket.params) {
    torch::Tensor& p = params_[k];
    if (bucket.flat.defined())
      p.mutable_grad() = bucket.flat.narrow(0, off, p.numel()).view(p.sizes());
    torch::Tensor view = values.narrow(0, off, p.numel()).view(p.sizes());
    view.copy_(p);
    p.set_data(view);
    off += p.numel();
  }
}

void DdpSync::hookAccumulators() {
  for (size_t k = 0; k < params_.size(); ++k) {
    std::shared_ptr<torch::autograd::Node> acc =
        torch::autograd::impl::grad_accumulator(params_[k]);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs,
                  const torch::autograd::variable_list&) {
          if (armed_ && !held_) markReady(k);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));
  }
}

bool DdpSync::applyInBackward(ApplyGrad apply) {
  if (!in_backward_) return false;
  apply_ = std::move(apply);
  return true;
}

void DdpSync::beforeBackward(bool last) {
  held_ = false;
  armed_ = last && (comm_.size() > 1 || in_backward_);
  if (!armed_) return;
  next_launch_ = 0;
  handed_sq_ = 0;
  std::fill(handed_.begin(), handed_.end(), 0);
  for (auto& b : buckets_) b.pending = b.params.size();
}

void DdpSync::markReady(size_t param) {
  if (in_backward_ && comm_.size() == 1) {  // final already: hand it over, free it
    torch::Tensor& g = params_[param].mutable_grad();
    handOver(param, g);
    g.reset();
    handed_[param] = 1;
    return;
  }
  Bucket& b = buckets_[bucket_of_[param]];
  if (b.pending > 0 && --b.pending == 0) launchReady();
}

void DdpSync::handOver(size_t param, const torch::Tensor& g) {
  handed_sq_ += paramSquaredNorm(g, norm_weights_, param);
  apply_(param, g);
}

void DdpSync::launchReady() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    const size_t b = next_launch_++;
    if (in_backward_) {
      launchStaged(b);
      continue;
    }
    buckets_[b].work = comm_.allReduceSumAsync(buckets_[b].flat);
  }
}

void DdpSync::launchStaged(size_t bucket) {
  torch::NoGradGuard no_grad;
  Bucket& b = buckets_[bucket];
  const torch::ScalarType dtype = params_[b.params[0]].scalar_type();
  b.flat = staging_[bucket % 2]  // free: bucket - 2 was handed over
               .narrow(0, 0, b.numel * int64_t(c10::elementSize(dtype)))
               .view(dtype);
  int64_t off = 0;
  for (size_t k : b.params) {
    torch::Tensor& g = params_[k].mutable_grad();
    torch::Tensor dst = b.flat.narrow(0, off, params_[k].numel());
    if (g.defined())
      dst.copy_(g.reshape({-1}));
    else
      dst.zero_();  // no gradient this step: reduced as zeros, as the buffers hold them
    g.reset();
    off += params_[k].numel();
  }
  b.work = comm_.allReduceSumAsync(b.flat);
  if (bucket > 0) completeStaged(bucket - 1);
}

void DdpSync::completeStaged(size_t bucket) {
  Bucket& b = buckets_[bucket];
  if (!b.work) return;
  b.work->wait();
  b.work.reset();
  int64_t off = 0;
  for (size_t k : b.params) {
    handOver(k, b.flat.narrow(0, off, params_[k].numel()).view(params_[k].sizes()));
    off += params_[k].numel();
  }
  b.flat = torch::Tensor();
}

void DdpSync::finishGradients() {
  if (!armed_) return;  // world of one, or no backward this step
  armed_ = false;
  if (in_backward_ && comm_.size() == 1) {  // parameters without a gradient: zeros
    for (size_t k = 0; k < params_.size(); ++k)
      if (!handed_[k]) handOver(k, torch::zeros_like(params_[k]));
    return;
  }
  for (auto& b : buckets_) b.pending = 0;  // a parameter without gradient keeps its zeros
  launchReady();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (in_backward_) {
      completeStaged(b);
      continue;
    }
    buckets_[b].work->wait();
    buckets_[b].work.reset();
  }
}

std::vector<torch::Tensor> DdpSync::gradients() const {
  std::vector<torch::Tensor> g;
  if (in_backward_) return g;  // handed to the optimizer during backward, and freed
  for (const auto& p : params_) g.push_back(p.grad());
  return g;
}

// Replicas hold equal copies of the reduced gradient: each contributes 1/dp.
double DdpSync::localSquaredNorm() const {
  const double sq = in_backward_ ? handed_sq_ : gradSquaredNorm(gradients(), norm_weights_);
  return sq / double(comm_.size());
}

std::vector<FlatLayout> DdpSync::optimizerLayout() const { return wholeLayouts(model_params_); }

}  // namespace ftb
