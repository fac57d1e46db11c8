#include "trainer/model/fused_ops.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace ftb {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The inner loops, on fp32 rows, built for each ISA and chosen at load time.
#define FTB_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// Sixteen independent partial sums, added in a fixed order.
FTB_CLONES float dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (int j = 0; j < 16; ++j) s += acc[j];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

FTB_CLONES void normRow(const float* x, const float* w, float r, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * r) * w[i];
}

// gx = r * (gy*w - xhat * c), xhat = x*r; gw += gy * xhat.
FTB_CLONES void normBackRow(const float* gy, const float* w, const float* x, float r, float c,
                            float* gx, float* gw, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float xh = x[i] * r;
    gx[i] = r * (gy[i] * w[i] - xh * c);
    gw[i] += gy[i] * xh;
  }
}

FTB_CLONES void addRow(const float* x, float* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

FTB_CLONES void ropeRow(const float* x, const float* c, const float* s, float scale, float* o,
                        int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    float x1 = x[i], x2 = x[i + half];
    o[i] = (x1 * c[i] - x2 * s[i]) * scale;
    o[i + half] = (x2 * c[i] + x1 * s[i]) * scale;
  }
}

// A row of T as fp32: the row itself for float, else converted into `buf`.
template <typename T>
const float* asFloat(const T* p, int64_t n, std::vector<float>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return p;
  } else {
    buf.resize(n);
    for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(p[i]);
    return buf.data();
  }
}

// Where a row of fp32 results goes: straight into `p` for float, else via `buf`.
template <typename T>
float* outFloat(T* p, int64_t n, std::vector<float>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return p;
  } else {
    buf.resize(n);
    return buf.data();
  }
}

template <typename T>
void storeRow(T* p, const float* f, int64_t n) {
  if constexpr (!std::is_same_v<T, float>)
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(f[i]);
}

#define FTB_DISPATCH_FLOAT_BF16(dtype, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, dtype, NAME, __VA_ARGS__)

constexpr int64_t kNormChunkRows = 32;  // rows per partial weight gradient

// ---- RMSNorm ---------------------------------------------------------------------

void rmsForward(const torch::Tensor& x, const torch::Tensor& w, double eps, torch::Tensor& y,
                torch::Tensor& rstd) {
  const int64_t n = x.size(0), d = x.size(1);
  float* rs = rstd.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  FTB_DISPATCH_FLOAT_BF16(x.scalar_type(), "rms_fwd_in", [&] {
    using TIn = scalar_t;
    const TIn* xp = x.data_ptr<TIn>();
    FTB_DISPATCH_FLOAT_BF16(y.scalar_type(), "rms_fwd_out", [&] {
      scalar_t* yp = y.data_ptr<scalar_t>();
      at::parallel_for(0, n, 16, [&](int64_t b, int64_t e) {
        std::vector<float> xb, yb;
        for (int64_t r = b; r < e; ++r) {
          const float* xr = asFloat(xp + r * d, d, xb);
          float inv = 1.0f / std::sqrt(dot(xr, xr, d) / static_cast<float>(d) + static_cast<float>(eps));
          rs[r] = inv;
          float* yr = outFloat(yp + r * d, d, yb);
          normRow(xr, wp, inv, yr, d);
          storeRow(yp + r * d, yr, d);
        }
      });
    });
  });
}

// gx [N, D] in x's dtype; gw_parts [chunks, D] fp32, one row per chunk of kNormChunkRows.
void rmsBackward(const torch::Tensor& gy, const torch::Tensor& x, const torch::Tensor& w,
                 const torch::Tensor& rstd, torch::Tensor& gx, torch::Tensor& gw_parts) {
  const int64_t n = x.size(0), d = x.size(1), chunks = gw_parts.size(0);
  const float *rs = rstd.data_ptr<float>(), *wp = w.data_ptr<float>();
  float* gwp = gw_parts.data_ptr<float>();
  FTB_DISPATCH_FLOAT_BF16(x.scalar_type(), "rms_bwd_x", [&] {
    using TX = scalar_t;
    const TX* xp = x.data_ptr<TX>();
    TX* gxp = gx.data_ptr<TX>();
    FTB_DISPATCH_FLOAT_BF16(gy.scalar_type(), "rms_bwd_gy", [&] {
      const scalar_t* gyp = gy.data_ptr<scalar_t>();
      at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
        std::vector<float> xb, gb, ob, gyw(d);
        for (int64_t c = cb; c < ce; ++c) {
          float* gw = gwp + c * d;
          for (int64_t r = c * kNormChunkRows; r < std::min(n, (c + 1) * kNormChunkRows); ++r) {
            const float* xr = asFloat(xp + r * d, d, xb);
            const float* gr = asFloat(gyp + r * d, d, gb);
            for (int64_t i = 0; i < d; ++i) gyw[i] = gr[i] * wp[i];
            float cf = dot(gyw.data(), xr, d) * rs[r] / static_cast<float>(d);
            float* o = outFloat(gxp + r * d, d, ob);
            normBackRow(gr, wp, xr, rs[r], cf, o, gw, d);
            storeRow(gxp + r * d, o, d);
          }
        }
      });
    });
  });
}

// Column sums of parts [C, D] fp32, rows added in order (independent of the thread count).
torch::Tensor sumRows(const torch::Tensor& parts) {
  const int64_t chunks = parts.size(0), d = parts.size(1);
  torch::Tensor out = parts[0].clone();
  float* o = out.data_ptr<float>();
  const float* p = parts.data_ptr<float>();
  for (int64_t c = 1; c < chunks; ++c) addRow(p + c * d, o, d);
  return out;
}

struct RmsNormFn : public torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight,
                               double eps, int64_t out_dtype) {
    const int64_t d = x.size(-1);
    torch::Tensor x2 = x.reshape({-1, d}).contiguous();
    torch::Tensor w = weight.to(torch::kFloat32).contiguous();
    auto dt = static_cast<torch::ScalarType>(out_dtype);
    torch::Tensor y = torch::empty(x2.sizes(), x.options().dtype(dt));
    torch::Tensor rstd = torch::empty({x2.size(0)}, x.options().dtype(torch::kFloat32));
    rmsForward(x2, w, eps, y, rstd);
    ctx->save_for_backward({x2, w, rstd});
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return y.view(x.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    torch::Tensor gy = grad_out[0].reshape(x.sizes()).contiguous();
    const int64_t chunks = (x.size(0) + kNormChunkRows - 1) / kNormChunkRows;
    torch::Tensor gx = torch::empty_like(x);
    torch::Tensor parts = torch::zeros({chunks, x.size(1)}, w.options());
    rmsBackward(gy, x, w, rstd, gx, parts);
    torch::Tensor gw = sumRows(parts);
    auto w_dtype = static_cast<torch::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    return {gx.view(grad_out[0].sizes()), gw.to(w_dtype), torch::Tensor(), torch::Tensor()};
  }
};

// ---- RoPE ------------------------------------------------------------------------

// out (contiguous [B,H,T,hd]) = rope(x) * scale, for sin as given (backward passes -sin).
void ropeApply(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
               float scale, torch::Tensor& out) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), hd = x.size(3), half = hd / 2;
  const int64_t sb = x.stride(0), sh = x.stride(1), st = x.stride(2);
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  FTB_DISPATCH_FLOAT_BF16(x.scalar_type(), "rope", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, B * H * T, 64, [&](int64_t b, int64_t e) {
      std::vector<float> xb, ob;
      for (int64_t r = b; r < e; ++r) {
        const int64_t t = r % T, h = (r / T) % H, bb = r / (T * H);
        const float* xr = asFloat(xp + bb * sb + h * sh + t * st, hd, xb);
        float* o = outFloat(op + r * hd, hd, ob);
        ropeRow(xr, cp + t * half, sp + t * half, scale, o, half);
        storeRow(op + r * hd, o, hd);
      }
    });
  });
}

struct RopeFn : public torch::autograd::Function<RopeFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor cos,
                               torch::Tensor sin, double scale) {
    torch::Tensor xs = x.stride(3) == 1 ? x : x.contiguous();
    torch::Tensor out = torch::empty(x.sizes(), x.options());
    ropeApply(xs, cos, sin, static_cast<float>(scale), out);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["scale"] = scale;
    return out;
  }

  // The rotation's transpose: the same kernel with sin negated.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor g = grad_out[0].stride(3) == 1 ? grad_out[0] : grad_out[0].contiguous();
    torch::Tensor gx = torch::empty(g.sizes(), g.options());
    ropeApply(g, saved[0], saved[1].neg(), static_cast<float>(ctx->saved_data["scale"].toDouble()),
              gx);
    return {gx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fusedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                           torch::ScalarType out_dtype) {
  return RmsNormFn::apply(x, weight, eps, static_cast<int64_t>(out_dtype));
}

torch::Tensor fusedRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        double scale) {
  const int64_t T = x.size(2), half = x.size(3) / 2;
  TORCH_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && cos.size(0) >= T && cos.size(1) == half,
              "fusedRope: x [B,H,T,hd] with even hd and tables [>=T, hd/2] expected, got x ",
              x.sizes(), ", cos ", cos.sizes());
  torch::Tensor c = cos.narrow(0, 0, T).to(torch::kFloat32).contiguous();
  torch::Tensor s = sin.narrow(0, 0, T).to(torch::kFloat32).contiguous();
  return RopeFn::apply(x, c, s, scale);
}

}  // namespace ftb
