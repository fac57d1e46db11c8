#include "trainer/optim/optimizer.h"

#include <cmath>

namespace ftb {
namespace {

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<torch::Tensor> params, const OptimizerOptions& o) : params_(std::move(params)), o_(o) {
    for (auto& p : params_) {
      m_.push_back(torch::zeros_like(p));
      v_.push_back(torch::zeros_like(p));
    }
  }
  void step(const std::vector<torch::Tensor>& grads, double lr) override {
    torch::NoGradGuard no_grad;
    ++t_;
    double bc1 = 1.0 - std::pow(o_.beta1, double(t_));
    double bc2 = 1.0 - std::pow(o_.beta2, double(t_));
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& p = params_[i];
      if (!grads[i].defined()) continue;
      const torch::Tensor& g = grads[i];
      if (o_.weight_decay != 0) p.mul_(1.0 - lr * o_.weight_decay);
      m_[i].mul_(o_.beta1).add_(g, 1.0 - o_.beta1);
      v_[i].mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
      torch::Tensor denom = (v_[i] / bc2).sqrt_().add_(o_.eps);
      p.addcdiv_(m_[i], denom, -lr / bc1);
    }
  }
  int64_t stateBytes() const override {
    int64_t b = 0;
    for (auto& t : m_) b += 2 * t.numel() * t.element_size();
    return b;
  }
  std::vector<std::pair<std::string, torch::Tensor>> state(size_t i) const override {
    return {{"exp_avg", m_[i]}, {"exp_avg_sq", v_[i]}};
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t t) override { t_ = t; }

 private:
  std::vector<torch::Tensor> params_, m_, v_;
  OptimizerOptions o_;
  int64_t t_ = 0;
};

class Adafactor final : public Optimizer {
 public:
  Adafactor(std::vector<torch::Tensor> params, const OptimizerOptions& o)
      : params_(std::move(params)), o_(o) {
    for (auto& p : params_) {
      if (p.dim() == 2) {
        row_.push_back(torch::zeros({p.size(0)}, p.options()));
        col_.push_back(torch::zeros({p.size(1)}, p.options()));
        full_.emplace_back();
      } else {
        row_.emplace_back();
        col_.emplace_back();
        full_.push_back(torch::zeros_like(p));
      }
    }
  }
  void step(const std::vector<torch::Tensor>& grads, double lr) override {
    torch::NoGradGuard no_grad;
    ++t_;
    double rho = 1.0 - std::pow(double(t_), -0.8);
    constexpr double kEps1 = 1e-30, kClip = 1.0;
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& p = params_[i];
      if (!grads[i].defined()) continue;
      torch::Tensor g2 = grads[i].pow(2).add_(kEps1);
      torch::Tensor vhat;
      if (p.dim() == 2) {
        row_[i].mul_(rho).add_(g2.mean(1), 1.0 - rho);
        col_[i].mul_(rho).add_(g2.mean(0), 1.0 - rho);
        // V ~ outer(R, C) / mean(R): the rank-1 estimate of the second moment.
        vhat = torch::outer(row_[i], col_[i]) / row_[i].mean();
      } else {
        full_[i].mul_(rho).add_(g2, 1.0 - rho);
        vhat = full_[i];
      }
      torch::Tensor u = grads[i] * vhat.rsqrt();
      double rms = u.pow(2).mean().sqrt().item<double>();
      u.div_(std::max(1.0, rms / kClip));
      if (o_.weight_decay != 0) p.mul_(1.0 - lr * o_.weight_decay);
      p.add_(u, -lr);
    }
  }
  int64_t stateBytes() const override {
    int64_t b = 0;
    for (size_t i = 0; i < params_.size(); ++i)
      for (const torch::Tensor* t : {&row_[i], &col_[i], &full_[i]})
        if (t->defined()) b += t->numel() * t->element_size();
    return b;
  }
  std::vector<std::pair<std::string, torch::Tensor>> state(size_t i) const override {
    if (full_[i].defined()) return {{"sq", full_[i]}};
    return {{"row", row_[i]}, {"col", col_[i]}};
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t t) override { t_ = t; }

 private:
  std::vector<torch::Tensor> params_, row_, col_, full_;
  OptimizerOptions o_;
  int64_t t_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> makeOptimizer(std::vector<torch::Tensor> params,
                                         const OptimizerOptions& opts) {
  if (opts.kind == "adafactor") return std::make_unique<Adafactor>(std::move(params), opts);
  return std::make_unique<AdamW>(std::move(params), opts);
}

double gradSquaredNorm(const std::vector<torch::Tensor>& grads,
                       const std::vector<torch::Tensor>& weights) {
  torch::NoGradGuard no_grad;
  double s = 0;  // per-tensor fp32 reductions (pairwise summed), accumulated in fp64
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    if (!weights.empty() && weights[i].defined()) {
      s += (grads[i].pow(2) * weights[i]).sum().item<double>();
    } else {
      double n = grads[i].norm().item<double>();
      s += n * n;
    }
  }
  return s;
}

void scaleGrads(const std::vector<torch::Tensor>& grads, double factor) {
  torch::NoGradGuard no_grad;
  for (const auto& g : grads)
    if (g.defined()) g.mul_(factor);
}

}  // namespace ftb
