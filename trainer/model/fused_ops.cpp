#include "trainer/model/fused_ops.h"

#include "trainer/kernels/cpu_kernels.h"

namespace ftb {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool cpuFloat(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32;
}

struct RmsNormFn : public torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& w_in, double eps) {
    torch::Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const int64_t d = x.size(-1), rows = x.numel() / d;
    torch::Tensor y = torch::empty_like(x), rstd = torch::empty({rows}, x.options());
    kernels::rmsNormForward(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(),
                            rstd.data_ptr<float>(), rows, d, float(eps));
    ctx->save_for_backward({x, w, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    torch::Tensor gy = grads[0].contiguous();
    const int64_t d = x.size(-1), rows = x.numel() / d;
    torch::Tensor gx = torch::empty_like(x), gw = torch::zeros_like(w);
    kernels::rmsNormBackward(gy.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                             rstd.data_ptr<float>(), gx.data_ptr<float>(), gw.data_ptr<float>(),
                             rows, d);
    return {gx, gw, torch::Tensor()};
  }
};

}  // namespace

bool fusedRmsNormApplies(const torch::Tensor& x, const torch::Tensor& weight) {
  return cpuFloat(x) && cpuFloat(weight) && x.dim() >= 1 && weight.dim() == 1 &&
         x.size(-1) == weight.size(0) && x.numel() > 0;
}

torch::Tensor fusedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNormFn::apply(x, weight, eps);
}

}  // namespace ftb
