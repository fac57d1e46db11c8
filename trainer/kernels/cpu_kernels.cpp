#include "trainer/kernels/cpu_kernels.h"

#include <cmath>

#define FTB_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

namespace ftb::kernels {

FTB_CLONES void adamw(float* __restrict p, const float* __restrict g, float* __restrict m,
                      float* __restrict v, int64_t n, const AdamWScalars& sc) {
  const AdamWScalars s = sc;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = s.b1 * m[i] + s.omb1 * gi;
    const float vi = s.b2 * v[i] + s.omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = s.decay * p[i] - s.step * mi / (std::sqrt(vi * s.inv_bc2) + s.eps);
  }
}

FTB_CLONES void rmsNormForward(const float* __restrict x, const float* __restrict w,
                               float* __restrict y, float* __restrict rstd, int64_t rows,
                               int64_t d, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
    const float rs = 1.0f / std::sqrt(ss / float(d) + eps);
    rstd[r] = rs;
    float* yr = y + r * d;
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * rs * w[i];
  }
}

FTB_CLONES void rmsNormBackward(const float* __restrict gy, const float* __restrict x,
                                const float* __restrict w, const float* __restrict rstd,
                                float* __restrict gx, float* __restrict gw, int64_t rows,
                                int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *gr = gy + r * d, *xr = x + r * d;
    const float rs = rstd[r];
    float dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += gr[i] * w[i] * xr[i];
    const float c = rs * rs * rs * dot / float(d);
    float* gxr = gx + r * d;
    for (int64_t i = 0; i < d; ++i) {
      gxr[i] = rs * gr[i] * w[i] - c * xr[i];
      gw[i] += gr[i] * xr[i] * rs;
    }
  }
}

}  // namespace ftb::kernels
