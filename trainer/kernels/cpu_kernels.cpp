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

}  // namespace ftb::kernels
