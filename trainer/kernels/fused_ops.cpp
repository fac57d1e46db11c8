#include "trainer/kernels/fused_ops.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "trainer/kernels/clones.h"
#include "trainer/kernels/fused_cuda.h"

namespace ftb {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The inner loops work on fp32 rows and are built for each ISA (FTB_CLONES).

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

// exp(x) for x in [-87, 88] (clamped outside), Cephes' expf: x = n ln2 + r, |r| <= ln2/2,
// exp(r) by a degree-7 polynomial, 2^n by the exponent bits. Within 2 ulp of expf; plain
// arithmetic so that the loops calling it vectorize.
inline float expApprox(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

FTB_CLONES float maxOf(const float* x, int64_t n) {
  float acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = -INFINITY;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  float m = -INFINITY;
  for (int j = 0; j < 16; ++j) m = acc[j] > m ? acc[j] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// o = exp(x - m); returns the sum of o (sixteen partial sums, fixed order).
FTB_CLONES float expShiftSum(const float* x, float m, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = expApprox(x[i] - m);
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += o[i + j];
  float s = 0;
  for (int j = 0; j < 16; ++j) s += acc[j];
  for (; i < n; ++i) s += o[i];
  return s;
}

// o = exp(x - m) * g
FTB_CLONES void expShiftScale(const float* x, float m, float g, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = expApprox(x[i] - m) * g;
}

FTB_CLONES void scaleRow(float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

// gs = p * (g - c)
FTB_CLONES void softmaxBackRow(const float* p, const float* g, float c, float* gs, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gs[i] = p[i] * (g[i] - c);
}

// out = silu(a) * b
FTB_CLONES void swigluRow(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] / (1.0f + expApprox(-a[i])) * b[i];
}

// s = sigmoid(a): ga = g * b * s * (1 + a (1 - s)), gb = g * a * s
FTB_CLONES void swigluBackRow(const float* a, const float* b, const float* g, float* ga, float* gb,
                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float s = 1.0f / (1.0f + expApprox(-a[i]));
    ga[i] = g[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
    gb[i] = g[i] * a[i] * s;
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

// bf16 <-> fp32 on raw bits, written so the compiler vectorises them (c10::BFloat16's
// scalar conversions do not; they took 2.6 % of the bf16 D512/L8 step, perf). Same
// results as c10: widening is exact; narrowing rounds to nearest even, NaN -> 0x7FC0.
FTB_CLONES void bf16ToFloat(const uint16_t* p, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t(p[i]) << 16;
    std::memcpy(&out[i], &bits, sizeof(float));
  }
}

FTB_CLONES void floatToBf16(const float* f, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &f[i], sizeof(u));
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    out[i] = f[i] != f[i] ? uint16_t(0x7FC0) : uint16_t(rounded);
  }
}

// A row of T as fp32: the row itself for float, else converted into `buf`.
template <typename T>
const float* asFloat(const T* p, int64_t n, std::vector<float>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return p;
  } else {
    buf.resize(n);
    if constexpr (std::is_same_v<T, c10::BFloat16>) {
      bf16ToFloat(reinterpret_cast<const uint16_t*>(p), buf.data(), n);
    } else {
      for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(p[i]);
    }
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
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    floatToBf16(f, reinterpret_cast<uint16_t*>(p), n);
  } else if constexpr (!std::is_same_v<T, float>) {
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(f[i]);
  }
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
          float inv =
              1.0f / std::sqrt(dot(xr, xr, d) / static_cast<float>(d) + static_cast<float>(eps));
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

// ---- causal softmax --------------------------------------------------------------

// p[r, :] = softmax over columns 0..t of s[r, :] (t = r mod T, the query position), 0 after.
void causalSoftmaxFwd(const torch::Tensor& sc, torch::Tensor& p) {
  const int64_t T = sc.size(-1), rows = sc.numel() / T;
  FTB_DISPATCH_FLOAT_BF16(sc.scalar_type(), "csm_in", [&] {
    using TIn = scalar_t;
    const TIn* sp = sc.data_ptr<TIn>();
    FTB_DISPATCH_FLOAT_BF16(p.scalar_type(), "csm_out", [&] {
      scalar_t* pp = p.data_ptr<scalar_t>();
      at::parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
        std::vector<float> xb, ob;
        for (int64_t r = b; r < e; ++r) {
          const int64_t valid = r % T + 1;
          const float* x = asFloat(sp + r * T, valid, xb);
          float* o = outFloat(pp + r * T, T, ob);
          float sum = expShiftSum(x, maxOf(x, valid), o, valid);
          scaleRow(o, 1.0f / sum, valid);
          std::fill(o + valid, o + T, 0.0f);
          storeRow(pp + r * T, o, T);
        }
      });
    });
  });
}

// gs = p * (g - sum(p * g)) over columns 0..t, 0 after; gs in gs's dtype.
void causalSoftmaxBwd(const torch::Tensor& p, const torch::Tensor& g, torch::Tensor& gs) {
  const int64_t T = p.size(-1), rows = p.numel() / T;
  FTB_DISPATCH_FLOAT_BF16(p.scalar_type(), "csm_bwd_p", [&] {
    using TP = scalar_t;
    const TP* pp = p.data_ptr<TP>();
    const TP* gp = g.data_ptr<TP>();
    FTB_DISPATCH_FLOAT_BF16(gs.scalar_type(), "csm_bwd_out", [&] {
      scalar_t* op = gs.data_ptr<scalar_t>();
      at::parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
        std::vector<float> pb, gb, ob;
        for (int64_t r = b; r < e; ++r) {
          const int64_t valid = r % T + 1;
          const float* pr = asFloat(pp + r * T, valid, pb);
          const float* gr = asFloat(gp + r * T, valid, gb);
          float* o = outFloat(op + r * T, T, ob);
          softmaxBackRow(pr, gr, dot(pr, gr, valid), o, valid);
          std::fill(o + valid, o + T, 0.0f);
          storeRow(op + r * T, o, T);
        }
      });
    });
  });
}

struct CausalSoftmaxFn : public torch::autograd::Function<CausalSoftmaxFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor scores, int64_t out_dtype) {
    torch::Tensor sc = scores.contiguous();
    torch::Tensor p =
        torch::empty(sc.sizes(), sc.options().dtype(static_cast<torch::ScalarType>(out_dtype)));
    causalSoftmaxFwd(sc, p);
    ctx->save_for_backward({p});
    ctx->saved_data["in_dtype"] = static_cast<int64_t>(scores.scalar_type());
    return p;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    torch::Tensor p = ctx->get_saved_variables()[0];
    torch::Tensor g = grad_out[0].to(p.scalar_type()).contiguous();
    auto in_dtype = static_cast<torch::ScalarType>(ctx->saved_data["in_dtype"].toInt());
    torch::Tensor gs = torch::empty(p.sizes(), p.options().dtype(in_dtype));
    causalSoftmaxBwd(p, g, gs);
    return {gs, torch::Tensor()};
  }
};

// ---- SwiGLU gate -----------------------------------------------------------------

constexpr int64_t kGateChunk = 4096;  // elements per task

template <typename F>
void forChunks(int64_t n, const F& f) {
  at::parallel_for(0, (n + kGateChunk - 1) / kGateChunk, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) f(c * kGateChunk, std::min(kGateChunk, n - c * kGateChunk));
  });
}

struct SwiGluFn : public torch::autograd::Function<SwiGluFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor a, torch::Tensor b) {
    torch::Tensor ac = a.contiguous(), bc = b.contiguous();
    torch::Tensor out = torch::empty(ac.sizes(), ac.options());
    FTB_DISPATCH_FLOAT_BF16(ac.scalar_type(), "swiglu", [&] {
      const scalar_t *ap = ac.data_ptr<scalar_t>(), *bp = bc.data_ptr<scalar_t>();
      scalar_t* op = out.data_ptr<scalar_t>();
      forChunks(ac.numel(), [&](int64_t i, int64_t n) {
        std::vector<float> x, y, z;
        float* o = outFloat(op + i, n, z);
        swigluRow(asFloat(ap + i, n, x), asFloat(bp + i, n, y), o, n);
        storeRow(op + i, o, n);
      });
    });
    ctx->save_for_backward({ac, bc});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &a = saved[0], &b = saved[1];
    torch::Tensor g = grad_out[0].to(a.scalar_type()).contiguous();
    torch::Tensor ga = torch::empty_like(a), gb = torch::empty_like(b);
    FTB_DISPATCH_FLOAT_BF16(a.scalar_type(), "swiglu_bwd", [&] {
      const scalar_t *ap = a.data_ptr<scalar_t>(), *bp = b.data_ptr<scalar_t>(),
                     *gp = g.data_ptr<scalar_t>();
      scalar_t *gap = ga.data_ptr<scalar_t>(), *gbp = gb.data_ptr<scalar_t>();
      forChunks(a.numel(), [&](int64_t i, int64_t n) {
        std::vector<float> x, y, w, u, v;
        float *oa = outFloat(gap + i, n, u), *ob = outFloat(gbp + i, n, v);
        swigluBackRow(asFloat(ap + i, n, x), asFloat(bp + i, n, y), asFloat(gp + i, n, w), oa, ob,
                      n);
        storeRow(gap + i, oa, n);
        storeRow(gbp + i, ob, n);
      });
    });
    return {ga, gb};
  }
};

// ---- cross-entropy ---------------------------------------------------------------

// lse[r] = logsumexp(logits[r, :]); nll[r] = lse[r] - logits[r, targets[r]].
void crossEntropyFwd(const torch::Tensor& logits, const int64_t* tg, float* lse, float* nll) {
  const int64_t n = logits.size(0), V = logits.size(1);
  FTB_DISPATCH_FLOAT_BF16(logits.scalar_type(), "ce_fwd", [&] {
    const scalar_t* lp = logits.data_ptr<scalar_t>();
    at::parallel_for(0, n, 4, [&](int64_t b, int64_t e) {
      std::vector<float> xb, tmp(V);
      for (int64_t r = b; r < e; ++r) {
        const float* x = asFloat(lp + r * V, V, xb);
        float m = maxOf(x, V);
        lse[r] = m + std::log(expShiftSum(x, m, tmp.data(), V));
        nll[r] = lse[r] - x[tg[r]];
      }
    });
  });
}

// grad[r, :] = softmax(logits[r, :]) * g[r], minus g[r] at the target.
void crossEntropyBwd(const torch::Tensor& logits, const int64_t* tg, const float* lse,
                     const float* g, torch::Tensor& grad) {
  const int64_t n = logits.size(0), V = logits.size(1);
  FTB_DISPATCH_FLOAT_BF16(logits.scalar_type(), "ce_bwd", [&] {
    const scalar_t* lp = logits.data_ptr<scalar_t>();
    scalar_t* gp = grad.data_ptr<scalar_t>();
    at::parallel_for(0, n, 4, [&](int64_t b, int64_t e) {
      std::vector<float> xb, ob;
      for (int64_t r = b; r < e; ++r) {
        float* o = outFloat(gp + r * V, V, ob);
        expShiftScale(asFloat(lp + r * V, V, xb), lse[r], g[r], o, V);
        o[tg[r]] -= g[r];
        storeRow(gp + r * V, o, V);
      }
    });
  });
}

struct CrossEntropyFn : public torch::autograd::Function<CrossEntropyFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor targets) {
    torch::Tensor lc = logits.contiguous(), tc = targets.to(torch::kInt64).contiguous();
    const int64_t V = lc.size(1);
    const int64_t* tg = tc.data_ptr<int64_t>();
    for (int64_t r = 0; r < tc.numel(); ++r)
      TORCH_CHECK(tg[r] >= 0 && tg[r] < V, "cross-entropy: target ", tg[r], " of row ", r,
                  " is outside the vocabulary [0, ", V, ")");
    torch::Tensor lse = torch::empty({lc.size(0)}, lc.options().dtype(torch::kFloat32));
    torch::Tensor nll = torch::empty_like(lse);
    crossEntropyFwd(lc, tg, lse.data_ptr<float>(), nll.data_ptr<float>());
    ctx->save_for_backward({lc, tc, lse});
    return nll;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    torch::Tensor g = grad_out[0].to(torch::kFloat32).contiguous();
    torch::Tensor grad = torch::empty_like(logits);
    crossEntropyBwd(logits, targets.data_ptr<int64_t>(), lse.data_ptr<float>(), g.data_ptr<float>(),
                    grad);
    return {grad, torch::Tensor()};
  }
};

}  // namespace

namespace composed {

// The dtype the composed forms compute in: fp32, or fp64 for fp64 input (a float64 check
// against a reference: `trainer logits --dtype fp64`).
torch::ScalarType opmath(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      torch::ScalarType out_dtype) {
  const torch::Tensor xf = x.to(opmath(x));
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight.to(opmath(x)))
      .to(out_dtype);
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                   double scale) {
  const int64_t T = x.size(2), half = x.size(3) / 2;
  const torch::Tensor xf = x.to(opmath(x));
  const torch::Tensor c = cos.narrow(0, 0, T).to(opmath(x)), s = sin.narrow(0, 0, T).to(opmath(x));
  const torch::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
  return (torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1) * scale)
      .to(x.scalar_type())
      .contiguous();
}

torch::Tensor causalSoftmax(const torch::Tensor& scores, torch::ScalarType out_dtype) {
  const int64_t T = scores.size(-1);
  const torch::Tensor masked =
      torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(scores.device()))
          .triu(1);
  return scores.to(opmath(scores))
      .masked_fill(masked, -std::numeric_limits<float>::infinity())
      .softmax(-1)
      .to(out_dtype);
}

torch::Tensor swiGlu(const torch::Tensor& a, const torch::Tensor& b) {
  return (torch::silu(a.to(opmath(a))) * b.to(opmath(a))).to(a.scalar_type());
}

torch::Tensor crossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  const torch::Tensor z = logits.to(opmath(logits));
  return z.logsumexp(-1) - z.gather(1, targets.to(torch::kLong).unsqueeze(1)).squeeze(1);
}

}  // namespace composed

namespace {

std::atomic<CudaKernels> g_cuda_kernels{CudaKernels::kFused};

// fp64 input takes the composed forms in fp64 (the fused kernels keep fp32 statistics).
bool isF64(const torch::Tensor& t) { return t.scalar_type() == torch::kFloat64; }

// Whether t (not on the CPU) takes the CUDA kernels of fused_cuda.h.
bool fusedOnCuda(const torch::Tensor& t) {
  return t.is_cuda() && g_cuda_kernels.load() == CudaKernels::kFused && cuda_fused::available();
}

}  // namespace

void setCudaKernels(CudaKernels k) { g_cuda_kernels.store(k); }

torch::Tensor fusedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                           torch::ScalarType out_dtype) {
  if (fusedOnCuda(x)) return cuda_fused::rmsNorm(x, weight, eps, out_dtype);
  if (!x.device().is_cpu() || isF64(x)) return composed::rmsNorm(x, weight, eps, out_dtype);
  return RmsNormFn::apply(x, weight, eps, static_cast<int64_t>(out_dtype));
}

torch::Tensor fusedRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        double scale) {
  TORCH_CHECK(x.dim() == 4, "fusedRope: x [B,H,T,hd] expected, got x ", x.sizes());
  const int64_t T = x.size(2), half = x.size(3) / 2;
  TORCH_CHECK(x.size(3) % 2 == 0 && cos.size(0) >= T && cos.size(1) == half,
              "fusedRope: x [B,H,T,hd] with even hd and tables [>=T, hd/2] expected, got x ",
              x.sizes(), ", cos ", cos.sizes());
  if (fusedOnCuda(x)) return cuda_fused::rope(x, cos, sin, scale);
  if (!x.device().is_cpu() || isF64(x)) return composed::rope(x, cos, sin, scale);
  torch::Tensor c = cos.narrow(0, 0, T).to(torch::kFloat32).contiguous();
  torch::Tensor s = sin.narrow(0, 0, T).to(torch::kFloat32).contiguous();
  return RopeFn::apply(x, c, s, scale);
}

torch::Tensor fusedCausalSoftmax(const torch::Tensor& scores, torch::ScalarType out_dtype) {
  TORCH_CHECK(scores.dim() >= 2 && scores.size(-1) == scores.size(-2),
              "fusedCausalSoftmax: square [..., T, T] scores expected, got ", scores.sizes());
  if (!scores.device().is_cpu() || isF64(scores)) return composed::causalSoftmax(scores, out_dtype);
  return CausalSoftmaxFn::apply(scores, static_cast<int64_t>(out_dtype));
}

torch::Tensor fusedSwiGlu(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(),
              "fusedSwiGlu: a and b of one shape and dtype expected, got ", a.sizes(), " ",
              a.scalar_type(), " and ", b.sizes(), " ", b.scalar_type());
  if (fusedOnCuda(a)) return cuda_fused::swiGlu(a, b);
  if (!a.device().is_cpu() || isF64(a)) return composed::swiGlu(a, b);
  return SwiGluFn::apply(a, b);
}

torch::Tensor fusedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "fusedCrossEntropy: logits [N, V] and targets [N] expected, got ", logits.sizes(),
              " and ", targets.sizes());
  if (fusedOnCuda(logits)) return cuda_fused::crossEntropy(logits, targets);
  if (!logits.device().is_cpu() || isF64(logits)) return composed::crossEntropy(logits, targets);
  return CrossEntropyFn::apply(logits, targets);
}

}  // namespace ftb

#undef FTB_DISPATCH_FLOAT_BF16
