#include "trainer/optim/optimizer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "common/splitmix64.h"
#include "trainer/kernels/cpu_kernels.h"
#include "trainer/kernels/tensor_runs.h"

namespace ftb {

void atenFusedAdamW(const std::vector<torch::Tensor>& ps, const std::vector<torch::Tensor>& gs,
                    const std::vector<torch::Tensor>& ms, const std::vector<torch::Tensor>& vs,
                    int64_t step, double lr, const OptimizerOptions& o) {
  if (ps.empty()) return;
  torch::NoGradGuard no_grad;
  // The kernel only reads state_steps[i] (the caller counts steps): one tensor serves all.
  const torch::Tensor t = torch::full({}, double(step), ps[0].options().dtype(torch::kFloat32));
  const std::vector<torch::Tensor> steps(ps.size(), t);
  at::_fused_adamw_(ps, gs, ms, vs, {}, steps, lr, o.beta1, o.beta2, o.weight_decay, o.eps,
                    /*amsgrad=*/false, /*maximize=*/false);
}

namespace {

// The fused CPU AdamW (kernels/cpu_kernels.h) over fixed chunks of kAdamWChunk elements on the
// intra-op threads: the kernel runs once per chunk whatever the thread count, so every
// element's arithmetic, and so the result, is the same with 1 thread or 64 (the chunks are
// elementwise work: no reduction crosses them). A host-side update of an offloaded optimizer
// (offload.h) and every CPU run use it.
constexpr int64_t kAdamWChunk = int64_t(1) << 16;

void adamwOnThreads(float* p, float* g, float* m, float* v, int64_t n,
                    const kernels::AdamWScalars& s, bool zero_grad) {
  const int64_t chunks = (n + kAdamWChunk - 1) / kAdamWChunk;
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t b = c * kAdamWChunk, k = std::min(n, b + kAdamWChunk) - b;
      if (zero_grad)
        kernels::adamwZeroGrad(p + b, g + b, m + b, v + b, k, s);
      else
        kernels::adamw(p + b, g + b, m + b, v + b, k, s);
    }
  });
}

// ---- Bf16 weights (optimizer.h): the fp32 result of an update stored into a bf16 weight ----

constexpr int64_t kRoundChunk = int64_t(1) << 16;  // elements per pass: temporaries stay small

// 16 pseudo-random bits for elements [begin, begin + n) of a tensor: xorshift32 rounds over
// (index + key), a function of `key` and the index only. Bitwise ops only: no overflow.
torch::Tensor roundingNoise(int64_t begin, int64_t n, uint64_t key, const torch::Tensor& like) {
  const int32_t k = int32_t(key & 0x7FFFFFFF) | 1;
  torch::Tensor h = torch::arange(begin, begin + n, like.options().dtype(torch::kInt32));
  h.bitwise_xor_(k);
  for (int round = 0; round < 2; ++round) {
    h.bitwise_xor_(h.bitwise_left_shift(13).bitwise_and_(int32_t(0x7FFFFFFF)));
    h.bitwise_xor_(h.bitwise_right_shift(17).bitwise_and_(int32_t(0x7FFF)));
    h.bitwise_xor_(h.bitwise_left_shift(5).bitwise_and_(int32_t(0x7FFFFFFF)));
    h.bitwise_xor_(int32_t((key >> 32) & 0x7FFFFFFF));
  }
  return h.bitwise_and_(0xFFFF);
}

// Stores fp32 `x` into bf16 `p` (flat, contiguous, one chunk): adds noise below bf16's last
// bit and truncates, so a value rounds up with probability equal to the fraction dropped
// (sign and magnitude are separate in IEEE bits, so this holds for negative values too).
void storeStochastic(const torch::Tensor& p, const torch::Tensor& x, int64_t begin, uint64_t key) {
  torch::Tensor bits = x.view(torch::kInt32).add(roundingNoise(begin, x.numel(), key, x));
  p.copy_(bits.bitwise_and_(int32_t(0xFFFF0000)).view(torch::kFloat32));  // exact: low bits 0
}

// Kahan: y = the update plus what rounding lost before; p += y in bf16; comp keeps the rest.
void storeKahan(const torch::Tensor& p, const torch::Tensor& x, const torch::Tensor& comp) {
  const torch::Tensor old = p.to(torch::kFloat32);
  const torch::Tensor y = (x - old).add_(comp.to(torch::kFloat32));
  const torch::Tensor t = (old + y).to(torch::kBFloat16);
  comp.copy_(y.sub_(t.to(torch::kFloat32).sub_(old)));
  p.copy_(t);
}

class Bf16Store {
 public:
  // One compensation buffer per bf16 parameter with "kahan" (allocated here, so a checkpoint
  // restores into it).
  Bf16Store(const std::vector<torch::Tensor>& params, const OptimizerOptions& o)
      : mode_(o.bf16_update), seed_(o.seed) {
    for (const torch::Tensor& p : params)
      comp_.push_back(mode_ == "kahan" && p.scalar_type() == torch::kBFloat16
                          ? torch::zeros_like(p)
                          : torch::Tensor());
  }
  // REQUIRES: p bf16, x fp32 of p's shape: the updated value of parameter i at step t.
  void store(size_t i, const torch::Tensor& p, const torch::Tensor& x, int64_t t) const {
    if (mode_ == "nearest") return void(p.copy_(x));
    const torch::Tensor pf = p.view(-1), xf = x.contiguous().view(-1);
    const uint64_t key = splitmix64(seed_ ^ splitmix64(uint64_t(t) * 0x100000001B3ULL + i));
    for (int64_t b = 0; b < pf.numel(); b += kRoundChunk) {
      const int64_t n = std::min(kRoundChunk, pf.numel() - b);
      if (mode_ == "kahan")
        storeKahan(pf.narrow(0, b, n), xf.narrow(0, b, n), comp_[i].view(-1).narrow(0, b, n));
      else
        storeStochastic(pf.narrow(0, b, n), xf.narrow(0, b, n), b, key);
    }
  }
  const torch::Tensor& comp(size_t i) const { return comp_[i]; }
  int64_t bytes() const {
    int64_t b = 0;
    for (const torch::Tensor& c : comp_)
      if (c.defined()) b += c.numel() * int64_t(c.element_size());
    return b;
  }

 private:
  std::string mode_;
  uint64_t seed_;
  std::vector<torch::Tensor> comp_;
};

// The tensors off the CPU that one AdamW step updates, gathered so that the step makes one
// atenFusedAdamW call per device and dtype (and one _foreach_zero_ of their gradients)
// instead of a few launches per tensor.
class DeviceBatch {
 public:
  void add(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m,
           const torch::Tensor& v) {
    Lists& l = lists_[{p.device().str(), static_cast<int>(p.scalar_type())}];
    l.p.push_back(p);
    l.g.push_back(g);
    l.m.push_back(m);
    l.v.push_back(v);
  }
  void run(int64_t step, double lr, const OptimizerOptions& o, bool zero_grads) {
    for (auto& [key, l] : lists_) {
      atenFusedAdamW(l.p, l.g, l.m, l.v, step, lr, o);
      if (zero_grads) at::_foreach_zero_(l.g);
    }
    lists_.clear();
  }

 private:
  struct Lists {
    std::vector<torch::Tensor> p, g, m, v;
  };
  std::map<std::pair<std::string, int>, Lists> lists_;
};

bool isBf16(const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16; }

bool fusable(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.device().is_cpu();
}

// What ATen's fused AdamW takes (its fast-path restrictions, checked there): one device
// and dtype, one shape and strides, dense; off the CPU (the CPU has adamwOnThreads).
bool deviceFusable(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m,
                   const torch::Tensor& v) {
  if (p.device().is_cpu() || !p.is_non_overlapping_and_dense()) return false;
  for (const torch::Tensor* t : {&g, &m, &v})
    if (t->device() != p.device() || t->scalar_type() != p.scalar_type() ||
        t->sizes() != p.sizes() || t->strides() != p.strides())
      return false;
  return true;
}

// AdamW over runs of parameters that lie back to back in memory (one run per DDP bucket,
// one per ZeRO shard): a run whose gradients also lie back to back is updated as one
// flat tensor, by one fused pass (adamwKernel) when everything is contiguous fp32.
class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<torch::Tensor> params, const OptimizerOptions& o)
      : params_(std::move(params)), o_(o), bf16_(params_, o) {
    torch::NoGradGuard no_grad;
    m_.resize(params_.size());
    v_.resize(params_.size());
    for (std::vector<size_t>& idx : adjacentRuns(params_)) {
      int64_t total = 0;
      for (size_t i : idx) total += params_[i].numel();
      const torch::TensorOptions fp32 = params_[idx[0]].options().dtype(torch::kFloat32);
      Run r{idx, torch::zeros({total}, fp32), torch::zeros({total}, fp32)};
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
    const torch::Tensor& p = params_[i];
    if (!isBf16(p)) return updateSpan(p, g, m_[i], v_[i], lr, bc1_, bc2_, false, nullptr);
    torch::Tensor x = p.to(torch::kFloat32);  // Bf16 weights (optimizer.h)
    updateSpan(x, g.to(torch::kFloat32).contiguous(), m_[i], v_[i], lr, bc1_, bc2_, false, nullptr);
    bf16_.store(i, p, x, t_);
  }
  void step(const std::vector<torch::Tensor>& grads, double lr, bool zero_grads) override {
    torch::NoGradGuard no_grad;
    startStep();
    const double bc1 = bc1_, bc2 = bc2_;
    DeviceBatch batch;  // the tensors off the CPU: one fused call for all (after the loop)
    for (const Run& r : runs_) {
      if (isBf16(params_[r.idx[0]])) {  // per parameter, through an fp32 copy
        for (size_t i : r.idx)
          if (grads[i].defined()) {
            update(i, grads[i], lr);
            if (zero_grads) grads[i].zero_();
          }
        continue;
      }
      torch::Tensor p = flatSpan(params_, r.idx), g = flatSpan(grads, r.idx);
      if (p.defined() && g.defined()) {
        updateSpan(p, g, r.m, r.v, lr, bc1, bc2, zero_grads, &batch);
        continue;
      }
      for (size_t i : r.idx)  // parameters moved, or gradients elsewhere / missing
        if (grads[i].defined())
          updateSpan(params_[i], grads[i], m_[i], v_[i], lr, bc1, bc2, zero_grads, &batch);
    }
    batch.run(t_, lr, o_, zero_grads);
  }
  int64_t stateBytes() const override {
    int64_t b = bf16_.bytes();
    for (auto& t : m_) b += 2 * t.numel() * t.element_size();
    return b;
  }
  std::vector<std::pair<std::string, torch::Tensor>> state(size_t i) const override {
    std::vector<std::pair<std::string, torch::Tensor>> s = {{"exp_avg", m_[i]},
                                                            {"exp_avg_sq", v_[i]}};
    if (bf16_.comp(i).defined()) s.emplace_back("kahan_comp", bf16_.comp(i));
    return s;
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t t) override { t_ = t; }

 private:
  struct Run {
    std::vector<size_t> idx;  // parameters in storage order
    torch::Tensor m, v;       // flat moments; m_[i], v_[i] are views of them
  };
  // zero_grad: g is zero on return (in the fused pass where it can be). A span off the CPU
  // joins `batch` (updated and zeroed when the batch runs), or is updated now without one.
  void updateSpan(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m,
                  const torch::Tensor& v, double lr, double bc1, double bc2, bool zero_grad,
                  DeviceBatch* batch) const {
    if (fusable(p) && fusable(g) && fusable(m) && fusable(v) && g.numel() == p.numel()) {
      kernels::AdamWScalars s{float(o_.beta1),  float(1.0 - o_.beta1),
                              float(o_.beta2),  float(1.0 - o_.beta2),
                              float(1.0 / bc2), float(o_.eps),
                              float(lr / bc1),  float(1.0 - lr * o_.weight_decay)};
      adamwOnThreads(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(),
                     v.data_ptr<float>(), p.numel(), s, zero_grad);
      return;
    }
    if (deviceFusable(p, g, m, v)) {
      DeviceBatch now;  // fused kernels instead of nine passes
      (batch ? *batch : now).add(p, g, m, v);
      if (!batch) now.run(t_, lr, o_, zero_grad);
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
  Bf16Store bf16_;
  int64_t t_ = 0;
  double bc1_ = 1, bc2_ = 1;  // bias corrections of step t_ (startStep)
};

class Adafactor final : public Optimizer {
 public:
  Adafactor(std::vector<torch::Tensor> params, const OptimizerOptions& o)
      : params_(std::move(params)), o_(o), bf16_(params_, o) {
    for (auto& p : params_) {
      const torch::TensorOptions fp32 = p.options().dtype(torch::kFloat32);
      if (p.dim() == 2) {
        row_.push_back(torch::zeros({p.size(0)}, fp32));
        col_.push_back(torch::zeros({p.size(1)}, fp32));
        full_.emplace_back();
      } else {
        row_.emplace_back();
        col_.emplace_back();
        full_.push_back(torch::zeros(p.sizes(), fp32));
      }
    }
  }
  void startStep() override {
    ++t_;
    rho_ = 1.0 - std::pow(double(t_), -0.8);
  }
  void update(size_t i, const torch::Tensor& g, double lr) override {
    torch::NoGradGuard no_grad;
    if (!isBf16(params_[i])) return updateTensor(i, params_[i], g, lr);
    torch::Tensor x = params_[i].to(torch::kFloat32);  // Bf16 weights (optimizer.h)
    updateTensor(i, x, g.to(torch::kFloat32), lr);
    bf16_.store(i, params_[i], x, t_);
  }
  // One step of parameter i held (or copied) in fp32 as p.
  void updateTensor(size_t i, const torch::Tensor& p, const torch::Tensor& g, double lr) {
    constexpr double kEps1 = 1e-30, kClip = 1.0;
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
    int64_t b = bf16_.bytes();
    for (size_t i = 0; i < params_.size(); ++i)
      for (const torch::Tensor* t : {&row_[i], &col_[i], &full_[i]})
        if (t->defined()) b += t->numel() * t->element_size();
    return b;
  }
  std::vector<std::pair<std::string, torch::Tensor>> state(size_t i) const override {
    std::vector<std::pair<std::string, torch::Tensor>> s;
    if (full_[i].defined())
      s = {{"sq", full_[i]}};
    else
      s = {{"row", row_[i]}, {"col", col_[i]}};
    if (bf16_.comp(i).defined()) s.emplace_back("kahan_comp", bf16_.comp(i));
    return s;
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t t) override { t_ = t; }

 private:
  std::vector<torch::Tensor> params_, row_, col_, full_;
  OptimizerOptions o_;
  Bf16Store bf16_;
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
