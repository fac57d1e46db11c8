#include "trainer/optim/offload.h"

#include <utility>

#include "trainer/kernels/host_copy.h"

namespace ftb {
namespace {

std::vector<torch::Tensor> hostCopiesOf(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> host;
  host.reserve(params.size());
  for (const torch::Tensor& p : params) host.push_back(hostBufferLike(p).copy_(p.detach()));
  return host;
}

torch::Device deviceOf(const std::vector<torch::Tensor>& params) {
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}

// Invariant: host_[i] equals params_[i] after every step (once its copy up has run) and after
// a restore's setStepCount; inner_ updates host_ in place from the gradients in grads_.
class HostOffload final : public Optimizer {
 public:
  HostOffload(std::vector<torch::Tensor> params, const OptimizerOptions& o)
      : params_(std::move(params)),
        host_(hostCopiesOf(params_)),
        grads_(params_.size()),
        copies_(deviceOf(params_)),
        inner_(makeOptimizer(host_, o)) {}

  void step(const std::vector<torch::Tensor>& grads, double lr, bool zero_grads) override {
    torch::NoGradGuard no_grad;
    inner_->startStep();
    std::vector<size_t> arrived(params_.size());
    for (size_t i = 0; i < params_.size(); ++i)
      if (grads[i].defined()) {
        copies_.toHost(gradBuffer(i, grads[i]), grads[i]);
        arrived[i] = copies_.mark();
      }
    // A mark covers every earlier copy on the device's side stream (host_copy.h), the last
    // step's copies up from host_ included: host_[i] is free to update once it has passed.
    for (size_t i = 0; i < params_.size(); ++i)
      if (grads[i].defined()) {
        copies_.hostWait(arrived[i]);
        inner_->update(i, grads_[i], lr);
        copies_.toDevice(params_[i], host_[i]);
      }
    copies_.deviceWait();
    if (zero_grads)
      for (const torch::Tensor& g : grads)
        if (g.defined()) g.zero_();
  }
  void startStep() override {
    copies_.deviceWait();  // the last step's copies up, before the stream's next work
    inner_->startStep();
  }
  void update(size_t i, const torch::Tensor& g, double lr) override {
    torch::NoGradGuard no_grad;
    copies_.toHost(gradBuffer(i, g), g);
    copies_.hostWait(copies_.mark());
    inner_->update(i, grads_[i], lr);
    copies_.toDevice(params_[i], host_[i]);
    copies_.deviceWait();
  }
  int64_t stateBytes() const override {
    int64_t b = inner_->stateBytes();
    for (const torch::Tensor& t : host_) b += t.numel() * t.element_size();
    for (const torch::Tensor& t : grads_)
      if (t.defined()) b += t.numel() * t.element_size();
    return b;
  }
  std::vector<std::pair<std::string, torch::Tensor>> state(size_t i) const override {
    return inner_->state(i);
  }
  int64_t stepCount() const override { return inner_->stepCount(); }
  void setStepCount(int64_t t) override {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) host_[i].copy_(params_[i]);
    inner_->setStepCount(t);
  }

 private:
  // The pinned host buffer gradient i is copied into (made at its first use, in g's dtype).
  const torch::Tensor& gradBuffer(size_t i, const torch::Tensor& g) {
    if (!grads_[i].defined() || grads_[i].scalar_type() != g.scalar_type())
      grads_[i] = hostBufferLike(g);
    return grads_[i];
  }

  std::vector<torch::Tensor> params_, host_, grads_;
  SideCopies copies_;
  std::unique_ptr<Optimizer> inner_;
};

}  // namespace

std::unique_ptr<Optimizer> offloadOptimizer(std::vector<torch::Tensor> params,
                                            const OptimizerOptions& opts) {
  return std::make_unique<HostOffload>(std::move(params), opts);
}

}  // namespace ftb
