// The fused kernels on a CUDA device (fused_cuda.h): autograd Functions, mirroring those of
// fused_ops.cpp (what each saves, what its backward returns, the dtype of each gradient),
// around the launchers of kernels/cuda/fused_kernels.cuh. Outputs are allocated with ATen;
// the kernels run on the current stream of the input's device.
//
// Cross-entropy targets: targets on the host are range-checked here (no device sync: a
// target outside [0, V) is an error naming its row); targets on the device are not (a check
// would need a sync): the kernel makes that row's nll NaN (and its gradient row NaN), so the
// loss is NaN and the training loop's non-finite-loss check stops the run (loop/train.h).
#include "trainer/kernels/fused_cuda.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <string>

#include "trainer/kernels/cuda/fused_kernels.cuh"

namespace ftb::cuda_fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
namespace ck = ftb::cuda_kernels;

ck::Dtype kernelDtype(torch::ScalarType t, const char* what) {
  TORCH_CHECK(t == torch::kFloat32 || t == torch::kBFloat16, "cuda_fused::", what,
              ": fp32 or bf16 expected, got ", t);
  return t == torch::kFloat32 ? ck::Dtype::kFloat32 : ck::Dtype::kBFloat16;
}

cudaStream_t streamOf(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// A launcher's status as an error naming the kernel and the sizes it was given.
void checkLaunch(cudaError_t err, const char* kernel, const std::string& sizes) {
  TORCH_CHECK(err == cudaSuccess, "fused CUDA kernel ", kernel, " (", sizes,
              ") failed: ", cudaGetErrorString(err));
}

void checkOnDevice(const torch::Tensor& t, const torch::Tensor& x, const char* what) {
  TORCH_CHECK(x.is_cuda() && t.device() == x.device(), "cuda_fused::", what,
              ": tensors on one CUDA device expected, got ", t.device(), " and ", x.device());
}

torch::Tensor emptyContiguous(at::IntArrayRef sizes, const torch::Tensor& like,
                              torch::ScalarType dtype) {
  return torch::empty(sizes,
                      like.options().dtype(dtype).memory_format(at::MemoryFormat::Contiguous));
}

// ---- RMSNorm ---------------------------------------------------------------------

struct CudaRmsNormFn : public torch::autograd::Function<CudaRmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight,
                               double eps, int64_t out_dtype) {
    const int64_t d = x.size(-1);
    torch::Tensor x2 = x.reshape({-1, d}).contiguous();
    torch::Tensor w = weight.to(torch::kFloat32).contiguous();
    const auto dt = static_cast<torch::ScalarType>(out_dtype);
    const int64_t rows = x2.size(0);
    torch::Tensor y = emptyContiguous(x2.sizes(), x2, dt);
    torch::Tensor rstd = emptyContiguous({rows}, x2, torch::kFloat32);
    checkLaunch(
        ck::rmsNormForward(x2.data_ptr(), kernelDtype(x2.scalar_type(), "rmsNorm"),
                           w.data_ptr<float>(), y.data_ptr(), kernelDtype(dt, "rmsNorm"),
                           rstd.data_ptr<float>(), rows, d, static_cast<float>(eps), streamOf(x2)),
        "rmsNormForward", c10::str("rows ", rows, ", d ", d));
    ctx->save_for_backward({x2, w, rstd});
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["out_dtype"] = out_dtype;
    return y.view(x.sizes());
  }

  // gx in x's dtype; gw from per-chunk partial sums added in a fixed order, in w's dtype.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    c10::cuda::CUDAGuard guard(x.device());
    const auto out_dt = static_cast<torch::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    torch::Tensor gy = grad_out[0].to(out_dt).reshape(x.sizes()).contiguous();
    const int64_t rows = x.size(0), d = x.size(1);
    torch::Tensor gx = emptyContiguous(x.sizes(), x, x.scalar_type());
    torch::Tensor parts = emptyContiguous({ck::rmsNormChunks(rows), d}, w, torch::kFloat32);
    torch::Tensor gw = emptyContiguous({d}, w, torch::kFloat32);
    checkLaunch(ck::rmsNormBackward(gy.data_ptr(), kernelDtype(out_dt, "rmsNorm"), x.data_ptr(),
                                    kernelDtype(x.scalar_type(), "rmsNorm"), w.data_ptr<float>(),
                                    rstd.data_ptr<float>(), gx.data_ptr(), parts.data_ptr<float>(),
                                    gw.data_ptr<float>(), rows, d, streamOf(x)),
                "rmsNormBackward", c10::str("rows ", rows, ", d ", d));
    auto w_dtype = static_cast<torch::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    return {gx.view(grad_out[0].sizes()), gw.to(w_dtype), torch::Tensor(), torch::Tensor()};
  }
};

// ---- RoPE ------------------------------------------------------------------------

// out (contiguous, x's dtype) = rope(x) * scale with sin times sin_sign; x through its strides.
void launchRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                float sin_sign, double scale, torch::Tensor& out) {
  const ck::RopeInput in{x.data_ptr(), x.size(0),   x.size(1),   x.size(2),  x.size(3),
                         x.stride(0),  x.stride(1), x.stride(2), x.stride(3)};
  checkLaunch(ck::ropeApply(in, kernelDtype(x.scalar_type(), "rope"), cos.data_ptr<float>(),
                            sin.data_ptr<float>(), sin_sign, static_cast<float>(scale),
                            out.data_ptr(), streamOf(x)),
              "ropeApply", c10::str("x ", x.sizes(), " strides ", x.strides()));
}

struct CudaRopeFn : public torch::autograd::Function<CudaRopeFn> {
  // REQUIRES: cos, sin fp32 contiguous [T, hd/2] on x's device.
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor cos,
                               torch::Tensor sin, double scale) {
    torch::Tensor out = emptyContiguous(x.sizes(), x, x.scalar_type());
    launchRope(x, cos, sin, 1.0f, scale, out);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    return out;
  }

  // The rotation's transpose: the same kernel with sin negated, on the gradient's strides.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    c10::cuda::CUDAGuard guard(saved[0].device());
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    torch::Tensor g = grad_out[0].to(x_dtype);
    torch::Tensor gx = emptyContiguous(g.sizes(), g, x_dtype);
    launchRope(g, saved[0], saved[1], -1.0f, ctx->saved_data["scale"].toDouble(), gx);
    return {gx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// ---- SwiGLU gate -----------------------------------------------------------------

struct CudaSwiGluFn : public torch::autograd::Function<CudaSwiGluFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor a, torch::Tensor b) {
    torch::Tensor ac = a.contiguous(), bc = b.contiguous();
    torch::Tensor out = emptyContiguous(ac.sizes(), ac, ac.scalar_type());
    checkLaunch(
        ck::swiGluForward(ac.data_ptr(), bc.data_ptr(), out.data_ptr(),
                          kernelDtype(ac.scalar_type(), "swiGlu"), ac.numel(), streamOf(ac)),
        "swiGluForward", c10::str("n ", ac.numel()));
    ctx->save_for_backward({ac, bc});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &a = saved[0], &b = saved[1];
    c10::cuda::CUDAGuard guard(a.device());
    torch::Tensor g = grad_out[0].to(a.scalar_type()).contiguous();
    torch::Tensor ga = emptyContiguous(a.sizes(), a, a.scalar_type());
    torch::Tensor gb = emptyContiguous(b.sizes(), b, b.scalar_type());
    checkLaunch(
        ck::swiGluBackward(a.data_ptr(), b.data_ptr(), g.data_ptr(), ga.data_ptr(), gb.data_ptr(),
                           kernelDtype(a.scalar_type(), "swiGlu"), a.numel(), streamOf(a)),
        "swiGluBackward", c10::str("n ", a.numel()));
    return {ga, gb};
  }
};

// ---- cross-entropy ---------------------------------------------------------------

struct CudaCrossEntropyFn : public torch::autograd::Function<CudaCrossEntropyFn> {
  // REQUIRES: targets int64 contiguous [N] on the logits' device.
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor targets) {
    torch::Tensor lc = logits.contiguous();
    const int64_t n = lc.size(0), V = lc.size(1);
    torch::Tensor lse = emptyContiguous({n}, lc, torch::kFloat32);
    torch::Tensor nll = emptyContiguous({n}, lc, torch::kFloat32);
    checkLaunch(
        ck::crossEntropyForward(lc.data_ptr(), kernelDtype(lc.scalar_type(), "crossEntropy"),
                                targets.data_ptr<int64_t>(), nll.data_ptr<float>(),
                                lse.data_ptr<float>(), n, V, streamOf(lc)),
        "crossEntropyForward", c10::str("rows ", n, ", V ", V));
    ctx->save_for_backward({lc, targets, lse});
    return nll;
  }

  // grad = g * softmax - g at the target, one pass, in the logits' dtype.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    c10::cuda::CUDAGuard guard(logits.device());
    torch::Tensor g = grad_out[0].to(torch::kFloat32).contiguous();
    torch::Tensor grad = emptyContiguous(logits.sizes(), logits, logits.scalar_type());
    const int64_t n = logits.size(0), V = logits.size(1);
    checkLaunch(ck::crossEntropyBackward(
                    logits.data_ptr(), kernelDtype(logits.scalar_type(), "crossEntropy"),
                    targets.data_ptr<int64_t>(), lse.data_ptr<float>(), g.data_ptr<float>(),
                    grad.data_ptr(), n, V, streamOf(logits)),
                "crossEntropyBackward", c10::str("rows ", n, ", V ", V));
    return {grad, torch::Tensor()};
  }
};

// Targets on the host: each in [0, V) (no device sync needed to look).
void checkHostTargets(const torch::Tensor& targets, int64_t V) {
  const torch::Tensor t = targets.to(torch::kInt64).contiguous();
  const int64_t* p = t.data_ptr<int64_t>();
  for (int64_t r = 0; r < t.numel(); ++r)
    TORCH_CHECK(p[r] >= 0 && p[r] < V, "cross-entropy: target ", p[r], " of row ", r,
                " is outside the vocabulary [0, ", V, ")");
}

}  // namespace

bool available() { return true; }

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      torch::ScalarType out_dtype) {
  checkOnDevice(weight, x, "rmsNorm");
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "cuda_fused::rmsNorm: x [..., D] and weight [D] expected, got ", x.sizes(), " and ",
              weight.sizes());
  kernelDtype(x.scalar_type(), "rmsNorm (x)");
  kernelDtype(weight.scalar_type(), "rmsNorm (weight)");
  kernelDtype(out_dtype, "rmsNorm (out_dtype)");
  c10::cuda::CUDAGuard guard(x.device());
  return CudaRmsNormFn::apply(x, weight, eps, static_cast<int64_t>(out_dtype));
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                   double scale) {
  checkOnDevice(cos, x, "rope");
  checkOnDevice(sin, x, "rope");
  TORCH_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && cos.dim() == 2 && cos.sizes() == sin.sizes() &&
                  cos.size(0) >= x.size(2) && cos.size(1) == x.size(3) / 2,
              "cuda_fused::rope: x [B,H,T,hd] with even hd and tables [>=T, hd/2] expected, got x ",
              x.sizes(), ", cos ", cos.sizes(), ", sin ", sin.sizes());
  kernelDtype(x.scalar_type(), "rope");
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t T = x.size(2);
  torch::Tensor c = cos.narrow(0, 0, T).to(torch::kFloat32).contiguous();
  torch::Tensor s = sin.narrow(0, 0, T).to(torch::kFloat32).contiguous();
  return CudaRopeFn::apply(x, c, s, scale);
}

torch::Tensor swiGlu(const torch::Tensor& a, const torch::Tensor& b) {
  checkOnDevice(b, a, "swiGlu");
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(),
              "cuda_fused::swiGlu: a and b of one shape and dtype expected, got ", a.sizes(), " ",
              a.scalar_type(), " and ", b.sizes(), " ", b.scalar_type());
  kernelDtype(a.scalar_type(), "swiGlu");
  c10::cuda::CUDAGuard guard(a.device());
  return CudaSwiGluFn::apply(a, b);
}

torch::Tensor crossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "cuda_fused::crossEntropy: logits [N, V] and targets [N] expected, got ",
              logits.sizes(), " and ", targets.sizes());
  TORCH_CHECK(at::isIntegralType(targets.scalar_type(), /*includeBool=*/false),
              "cuda_fused::crossEntropy: integer targets expected, got ", targets.scalar_type());
  TORCH_CHECK(logits.is_cuda(), "cuda_fused::crossEntropy: logits on a CUDA device expected, got ",
              logits.device());
  if (targets.is_cpu()) {
    checkHostTargets(targets, logits.size(1));
  } else {
    checkOnDevice(targets, logits, "crossEntropy");
  }
  kernelDtype(logits.scalar_type(), "crossEntropy");
  c10::cuda::CUDAGuard guard(logits.device());
  torch::Tensor tc = targets.to(logits.device(), torch::kInt64).contiguous();
  return CudaCrossEntropyFn::apply(logits, tc);
}

}  // namespace ftb::cuda_fused
