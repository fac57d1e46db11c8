#include "trainer/model/linear.h"

#include <algorithm>
#include <atomic>

#include "common/config.h"
#include "common/error.h"
#include "trainer/kernels/openblas.h"
#include "trainer/metrics/deadline.h"
#include "trainer/metrics/perf.h"

namespace ftb {
namespace {

std::atomic<Fp32Gemm> g_route{Fp32Gemm::kAten};

// gy [M, N] · w [N, K] -> [M, K]; on OpenBLAS as BlasLinear's backward, else as ATen's mm
// backward computes it.
torch::Tensor inputGrad(const torch::Tensor& gy, const torch::Tensor& w) {
  if (!fp32OnOpenBlas(gy, w)) return gy.mm(w);
  const int64_t M = gy.size(0), N = gy.size(1), K = w.size(1);
  torch::Tensor wc = w.contiguous(), gx = torch::empty({M, K}, gy.options());
  kernels::openblas()->sgemm(false, false, M, K, N, 1.f, gy.data_ptr<float>(), N,
                             wc.data_ptr<float>(), K, 0.f, gx.data_ptr<float>(), K);
  return gx;
}

// gyᵀ [N, M] · x [M, K] -> [N, K], as BlasLinear's backward or ATen's mm backward (xᵀ·gy,
// transposed) computes it.
torch::Tensor weightGrad(const torch::Tensor& gy, const torch::Tensor& x) {
  if (!fp32OnOpenBlas(gy, x)) return x.t().mm(gy).t();
  const int64_t M = x.size(0), K = x.size(1), N = gy.size(1);
  torch::Tensor gw = torch::empty({N, K}, gy.options());
  kernels::openblas()->sgemm(true, false, N, K, M, 1.f, gy.data_ptr<float>(), N,
                             x.data_ptr<float>(), K, 0.f, gw.data_ptr<float>(), K);
  return gw;
}

// y[M,N] = x[M,K] · W[N,K]ᵀ on OpenBLAS; backward gx = gy · W, gW = gyᵀ · x.
class BlasLinear : public torch::autograd::Function<BlasLinear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight) {
    const int64_t K = weight.size(1), N = weight.size(0);
    torch::Tensor x2 = x.reshape({-1, K}).contiguous(), w = weight.contiguous();
    const int64_t M = x2.size(0);
    torch::Tensor y = torch::empty({M, N}, x.options());
    kernels::openblas()->sgemm(false, true, M, N, K, 1.f, x2.data_ptr<float>(), K,
                               w.data_ptr<float>(), K, 0.f, y.data_ptr<float>(), N);
    ctx->save_for_backward({x2, w});
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = N;
    return y.view(shape);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x2 = saved[0], &w = saved[1];
    const int64_t M = x2.size(0), K = x2.size(1), N = w.size(0);
    torch::Tensor gy = grads[0].reshape({M, N}).contiguous();
    torch::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) gx = inputGrad(gy, w);
    if (ctx->needs_input_grad(1)) gw = weightGrad(gy, x2);
    std::vector<int64_t> shape = grads[0].sizes().vec();
    shape.back() = K;
    return {gx.defined() ? gx.view(shape) : gx, gw};
  }
};

// y = x · deq(W)ᵀ for a frozen NF4 W; backward gx = gy · deq(W), dequantized again.
class Nf4Linear : public torch::autograd::Function<Nf4Linear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& codes, const torch::Tensor& absmax,
                               const std::vector<int64_t>& shape) {
    ctx->save_for_backward({codes, absmax});
    ctx->saved_data["shape"] = shape;
    return projection(x, nf4Dequantize({codes, absmax, shape}, x.scalar_type()));
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const Nf4Tensor w{saved[0], saved[1], ctx->saved_data["shape"].toIntVector()};
    torch::Tensor gx = torch::matmul(grads[0], nf4Dequantize(w, grads[0].scalar_type()));
    return {gx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

std::atomic<WeightGradStore*> g_store{nullptr};

// The weight a deferred projection hands its gradient to, passed to DeferredLinear::apply
// as a non-tensor so that autograd makes no edge to its graph.
struct DeferredWeight {
  torch::Tensor weight;
};

// y = x · wᵀ whose backward computes grad_x only and leaves the weight's part in a store.
// `w` is the weight detached (no edge to its graph). `anchor`: an empty tensor that requires
// grad, so the backward runs even when x needs no gradient (LoRA's block 0).
class DeferredLinear : public torch::autograd::Function<DeferredLinear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, const torch::Tensor& anchor,
                               const DeferredWeight& weight, WeightGradStore* store) {
    (void)anchor;
    const int64_t K = w.size(1);
    torch::Tensor x2 = x.reshape({-1, K}).contiguous();
    ctx->save_for_backward({x2, w});
    ctx->saved_data["weight"] = weight.weight;
    ctx->saved_data["store"] = reinterpret_cast<int64_t>(store);
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    return projection(x2, w).view(shape);  // no graph: autograd is off inside forward
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x2 = saved[0], &w = saved[1];
    torch::Tensor gy = grads[0].reshape({-1, w.size(0)}).contiguous(), gx;
    if (ctx->needs_input_grad(0)) {
      std::vector<int64_t> shape = grads[0].sizes().vec();
      shape.back() = w.size(1);
      gx = inputGrad(gy, w).view(shape);
    }
    auto* store = reinterpret_cast<WeightGradStore*>(ctx->saved_data["store"].toInt());
    store->push({x2, gy, ctx->saved_data["weight"].toTensor()});
    return {gx, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void WeightGradStore::apply() {
  for (Entry& e : entries_) {
    torch::Tensor gw;
    {
      torch::NoGradGuard no_grad;
      gw = weightGrad(e.grad_y, e.x);
    }
    e.x.reset();
    e.grad_y.reset();
    torch::autograd::backward({e.weight}, {gw});
    e.weight.reset();
  }
  entries_.clear();
}

ActiveWeightGradStore::ActiveWeightGradStore(WeightGradStore* store) { g_store.store(store); }
ActiveWeightGradStore::~ActiveWeightGradStore() { g_store.store(nullptr); }
bool weightGradsDeferred() { return g_store.load() != nullptr; }

const torch::Tensor& weightGradAnchor() {
  static const torch::Tensor anchor = torch::empty({0}).requires_grad_(true);
  return anchor;
}

torch::Tensor blockProjection(const torch::Tensor& x, const torch::Tensor& weight) {
  WeightGradStore* store = g_store.load();
  if (!store || !weight.requires_grad() || !torch::GradMode::is_enabled() || weight.dim() != 2)
    return projection(x, weight);
  return DeferredLinear::apply(x, weight.detach(), weightGradAnchor(), DeferredWeight{weight},
                               store);
}

torch::Tensor nf4Projection(const torch::Tensor& x, const Nf4Tensor& w) {
  return Nf4Linear::apply(x, w.codes, w.absmax, w.shape);
}

void setFp32Gemm(Fp32Gemm route) {
  TORCH_CHECK(route == Fp32Gemm::kAten || kernels::openblas(), "OpenBLAS is not loadable");
  g_route.store(route);
}

Fp32Gemm fp32Gemm() { return g_route.load(); }

std::string fp32GemmName(Fp32Gemm route) {
  if (route == Fp32Gemm::kAten) return at::hasMKL() ? "ATen (MKL)" : "ATen";
  const kernels::OpenBlas* blas = kernels::openblas();
  return blas ? blas->describe() : "OpenBLAS (not loadable)";
}

bool fp32OnOpenBlas(const torch::Tensor& a, const torch::Tensor& b) {
  return g_route.load(std::memory_order_relaxed) == Fp32Gemm::kOpenBlas &&
         a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32 &&
         a.device().is_cpu() && b.device().is_cpu() && a.numel() > 0 && b.numel() > 0;
}

torch::Tensor projection(const torch::Tensor& x, const torch::Tensor& weight) {
  if (fp32OnOpenBlas(x, weight) && weight.dim() == 2) return BlasLinear::apply(x, weight);
  return torch::matmul(x, weight.t());
}

Fp32GemmChoice chooseFp32Gemm(const std::string& key, int64_t n, int reps, bool time_fixed) {
  std::string why;
  const bool have_openblas = kernels::openblas(&why) != nullptr;
  if (key == "openblas" && !have_openblas)
    throw ConfigError("training.fp32_gemm", "config",
                      "\"openblas\" but libopenblas.so.0 does not load: " + why,
                      "install libopenblas0 or use \"auto\" or \"aten\"");
  Fp32GemmChoice c;
  c.why = "training.fp32_gemm = \"" + key + "\"";
  if (key != "auto" && !time_fixed) {
    c.route = key == "openblas" ? Fp32Gemm::kOpenBlas : Fp32Gemm::kAten;
    return c;
  }
  if (key != "openblas") c.aten_flops = measureFp32Gemm(Fp32Gemm::kAten, n, reps);
  if (key != "aten" && have_openblas)
    c.openblas_flops = measureFp32Gemm(Fp32Gemm::kOpenBlas, n, reps);
  c.route = c.openblas_flops > c.aten_flops ? Fp32Gemm::kOpenBlas : Fp32Gemm::kAten;
  const auto gflops = [](double f) { return formatFixed(f / 1e9, 1) + " GFLOP/s"; };
  if (key == "auto")
    c.why += have_openblas ? ": the faster of ATen " + gflops(c.aten_flops) + " and OpenBLAS " +
                                 gflops(c.openblas_flops)
                           : ": OpenBLAS does not load (" + why + ")";
  return c;
}

namespace {

// The best of `reps` timed n^3 OpenBLAS sgemms after a warm-up.
double timeOpenBlasSgemm(int64_t n, int reps) {
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n}), c = torch::empty({n, n});
  auto once = [&] {
    kernels::openblas()->sgemm(false, false, n, n, n, 1.f, a.data_ptr<float>(), n,
                               b.data_ptr<float>(), n, 0.f, c.data_ptr<float>(), n);
  };
  once();  // warm-up: thread pools, packing buffers
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = nowSeconds();
    once();
    best = std::min(best, nowSeconds() - t0);
  }
  return 2.0 * double(n) * double(n) * double(n) / best;
}

}  // namespace

double measureFp32Gemm(Fp32Gemm route, int64_t n, int reps) {
  if (route == Fp32Gemm::kAten) return measureGemmPeak(torch::kFloat32, n, reps);
  // The first sgemm maps OpenBLAS's work buffer, and OpenBLAS 0.3 retries a failing mmap
  // forever: the bytes are checked first, and the products run under a deadline.
  return measureWithDeadline("the start-up GEMM (" + std::to_string(n) + "^3 fp32 on OpenBLAS)",
                             gemmMeasureBytes(torch::kFloat32, n, false), kMeasureDeadlineS,
                             [n, reps] { return timeOpenBlasSgemm(n, reps); });
}

}  // namespace ftb
