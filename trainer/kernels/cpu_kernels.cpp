#include "trainer/kernels/cpu_kernels.h"

#include <cmath>

#include "trainer/kernels/clones.h"

namespace ftb::kernels {

namespace {
template <bool kZeroGrad>
inline __attribute__((always_inline)) void adamwBody(float* __restrict p, float* __restrict g,
                                                     float* __restrict m, float* __restrict v,
                                                     int64_t n, const AdamWScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = s.b1 * m[i] + s.omb1 * gi;
    const float vi = s.b2 * v[i] + s.omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = s.decay * p[i] - s.step * mi / (std::sqrt(vi * s.inv_bc2) + s.eps);
    if constexpr (kZeroGrad) g[i] = 0.0f;
  }
}
}  // namespace

FTB_CLONES void adamw(float* __restrict p, const float* __restrict g, float* __restrict m,
                      float* __restrict v, int64_t n, const AdamWScalars& sc) {
  const AdamWScalars s = sc;
  adamwBody<false>(p, const_cast<float*>(g), m, v, n, s);  // g is only read
}

FTB_CLONES void adamwZeroGrad(float* __restrict p, float* __restrict g, float* __restrict m,
                              float* __restrict v, int64_t n, const AdamWScalars& sc) {
  const AdamWScalars s = sc;
  adamwBody<true>(p, g, m, v, n, s);
}

FTB_CLONES double sumSquaresF64(const float* __restrict x, int64_t n) {
  double acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      const double v = x[i + j];
      acc[j] += v * v;
    }
  double s = 0;
  for (int j = 0; j < 16; ++j) s += acc[j];
  for (; i < n; ++i) {
    const double v = x[i];
    s += v * v;
  }
  return s;
}

}  // namespace ftb::kernels
