#include "trainer/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "trainer/kernels/cpu_kernels.h"
#include "trainer/kernels/tensor_runs.h"

namespace ftb {

void atenFusedAdamW(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m,
                    const torch::Tensor& v, int64_t step, double lr, const OptimizerOptions& o) {
  torch::NoGradGuard no_grad;
  const torch::Tensor steps = torch::full({}, double(step), p.options().dtype(torch::kFloat32));
  at::_fused_adamw_({p}, {g}, {m}, {v}, {}, {steps}, lr, o.beta1, o.beta2, o.weight_decay, o.eps,
                    /*amsgrad=*/false, /*maximize=*/false);
}

namespace {

bool fusable(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.device().is_cpu();
}

// AdamW over runs of parameters that lie back to back in memory (one run per DDP bucket,
// one per ZeRO shard): a run whose gradients also lie back to back is updated as one
// flat tensor, by one fused pass (adamwKernel) when everything is contiguous fp32.
class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<torch::Tensor> params, const OptimizerOptions& o)
      : params_(std::move(params)), o_(o) {
    torch::NoGradGuard no_grad;
    m_.resize(params_.size());
    v_.resize(params_.size());
    for (std::vector<size_t>& idx : adjacentRuns(params_)) {
      int64_t total = 0;
      for (size_t i : idx) total += params_[i].numel();
      Run r{idx, torch::zeros({total}, params_[idx[0]].options()),
            torch::zeros({total}, params_[idx[0]].options())};
      int64_t off = 0;
      for (size_t i : idx) {
        m_[i] = r.m.narrow(0, off, params_[i].numel()).view(params_[i].sizes());
        v_[i] = r.v.narrow(0, off, params_[i].numel()).view(params_[i].sizes());
        off += params_[i].numel();
      }
      runs_.push_back(std::move(r));
    }
  }
  void startStep() override {
    ++t_;
    bc1_ = 1.0 - std::pow(o_.beta1, double(t_));
    bc2_ = 1.0 - std::pow(o_.beta2, double(t_));
  }
  void update(size_t i, const torch::Tensor& g, double lr) override {
    torch::NoGradGuard no_grad;
    updateSpan(params_[i], g, m_[i], v_[i], lr, bc1_, bc2_, false);
  }
  void step(const std::vector<torch::Tensor>& grads, double lr, bool zero_grads) override {
    torch::NoGradGuard no_grad;
    startStep();
    const double bc1 = bc1_, bc2 = bc2_;
    for (const Run& r : runs_) {
      torch::Tensor p = flatSpan(params_, r.idx), g = flatSpan(grads, r.idx);
      if (p.defined() && g.defined()) {
        updateSpan(p, g, r.m, r.v, lr, bc1, bc2, zero_grads);
        continue;
      }
      for (size_t i : r.idx)  // parameters moved, or gradients elsewhere / missing
        if (grads[i].defined())
          updateSpan(params_[i], grads[i], m_[i], v_[i], lr, bc1, bc2, zero_grads);
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
  struct Run {
    std::vector<size_t> idx;  // parameters in storage order
    torch::Tensor m, v;       // flat moments; m_[i], v_[i] are views of them
  };
  // zero_grad: g is zero on return (in the fused pass where it can be).
  void updateSpan(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m,
                  const torch::Tensor& v, double lr, double bc1, double bc2, bool zero_grad) const {
    if (fusable(p) && fusable(g) && fusable(m) && fusable(v) && g.numel() == p.numel()) {
      kernels::AdamWScalars s{float(o_.beta1),  float(1.0 - o_.beta1),
                              float(o_.beta2),  float(1.0 - o_.beta2),
                              float(1.0 / bc2), float(o_.eps),
                              float(lr / bc1),  float(1.0 - lr * o_.weight_decay)};
      float *pp = p.data_ptr<float>(), *gp = g.data_ptr<float>();
      float *mp = m.data_ptr<float>(), *vp = v.data_ptr<float>();
      if (zero_grad)
        kernels::adamwZeroGrad(pp, gp, mp, vp, p.numel(), s);
      else
        kernels::adamw(pp, gp, mp, vp, p.numel(), s);
      return;
    }
    if (!p.device().is_cpu() && p.scalar_type() == g.scalar_type() && p.sizes() == g.sizes()) {
      atenFusedAdamW(p, g, m, v, t_, lr, o_);  // one kernel instead of nine passes
      if (zero_grad) g.zero_();
      return;
    }
    if (o_.weight_decay != 0) p.mul_(1.0 - lr * o_.weight_decay);
    m.mul_(o_.beta1).add_(g, 1.0 - o_.beta1);
    v.mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
    torch::Tensor denom = (v / bc2).sqrt_().add_(o_.eps);
    p.addcdiv_(m, denom, -lr / bc1);
    if (zero_grad) g.zero_();
  }

  std::vector<torch::Tensor> params_, m_, v_;
  std::vector<Run> runs_;
  OptimizerOptions o_;
  int64_t t_ = 0;
  double bc1_ = 1, bc2_ = 1;  // bias corrections of step t_ (startStep)
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
  void startStep() override {
    ++t_;
    rho_ = 1.0 - std::pow(double(t_), -0.8);
  }
  void update(size_t i, const torch::Tensor& g, double lr) override {
    torch::NoGradGuard no_grad;
    constexpr double kEps1 = 1e-30, kClip = 1.0;
    torch::Tensor& p = params_[i];
    torch::Tensor g2 = g.pow(2).add_(kEps1);
    torch::Tensor vhat;
    if (p.dim() == 2) {
      row_[i].mul_(rho_).add_(g2.mean(1), 1.0 - rho_);
      col_[i].mul_(rho_).add_(g2.mean(0), 1.0 - rho_);
      // V ~ outer(R, C) / mean(R): the rank-1 estimate of the second moment.
      vhat = torch::outer(row_[i], col_[i]) / row_[i].mean();
    } else {
      full_[i].mul_(rho_).add_(g2, 1.0 - rho_);
      vhat = full_[i];
    }
    torch::Tensor u = g * vhat.rsqrt();
    double rms = u.pow(2).mean().sqrt().item<double>();
    u.div_(std::max(1.0, rms / kClip));
    if (o_.weight_decay != 0) p.mul_(1.0 - lr * o_.weight_decay);
    p.add_(u, -lr);
  }
  void step(const std::vector<torch::Tensor>& grads, double lr, bool zero_grads) override {
    torch::NoGradGuard no_grad;
    startStep();
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!grads[i].defined()) continue;
      update(i, grads[i], lr);
      if (zero_grads) grads[i].zero_();
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
  double rho_ = 0;  // decay rate of step t_ (startStep)
};

}  // namespace

std::unique_ptr<Optimizer> makeOptimizer(std::vector<torch::Tensor> params,
                                         const OptimizerOptions& opts) {
  if (opts.kind == "adafactor") return std::make_unique<Adafactor>(std::move(params), opts);
  return std::make_unique<AdamW>(std::move(params), opts);
}

}  // namespace ftb
