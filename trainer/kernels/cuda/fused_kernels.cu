// The fused CUDA kernels of fused_kernels.cuh (contracts there). Each kernel is templated on
// its element types (float, __nv_bfloat16) and computes in fp32. Reductions use a fixed
// tree (warp butterflies, then the warps' results in order), so results are deterministic.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "trainer/kernels/cuda/fused_kernels.cuh"

namespace ftb::cuda_kernels {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRowMaxThreads = 512;          // RMSNorm blocks (one per row or chunk)
constexpr int kCeMaxThreads = 1024;          // cross-entropy blocks (one per row)
constexpr int kFlatThreads = 256;            // elementwise kernels
constexpr int64_t kMaxFlatBlocks = 1 << 20;  // grid-stride loops beyond this

// ---- element conversions --------------------------------------------------------------

__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T fromFloat(float v);
template <>
__device__ __forceinline__ float fromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);  // round to nearest even
}

// ---- block reductions -----------------------------------------------------------------
// REQUIRES: blockDim.x a multiple of 32 (at most 1024), every thread of the block calls.
// Every thread gets the result (blockSum: the same bits in every lane; blockMaxSum: each
// lane's may differ in the last bit, and only thread 0's is read).

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ float blockSum(float v, float* red /* [32] shared */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warpSum(v);
  __syncthreads();  // `red` may still be read by the previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warpSum(lane < warps ? red[lane] : 0.0f);
}

// (m, s) += (m2, s2) for running (max, sum of exp(x - max)); (-inf, 0) is empty.
__device__ __forceinline__ void mergeMaxSum(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  // A side at the max keeps its sum as is: exp(m - mx) would be NaN for two infinite maxima
  // (both -inf: empty, or both +inf), and a NaN sum must survive the merge.
  const float a = m == mx ? s : s * expf(m - mx), b = m2 == mx ? s2 : s2 * expf(m2 - mx);
  s = a + b;
  m = mx;
}

__device__ __forceinline__ void warpMaxSum(float& m, float& s) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(kFullMask, m, o), s2 = __shfl_xor_sync(kFullMask, s, o);
    mergeMaxSum(m, s, m2, s2);
  }
}

__device__ void blockMaxSum(float& m, float& s, float* red_m, float* red_s /* [32] shared */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  warpMaxSum(m, s);
  __syncthreads();
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  __syncthreads();
  m = lane < warps ? red_m[lane] : -INFINITY;
  s = lane < warps ? red_s[lane] : 0.0f;
  warpMaxSum(m, s);
}

// ---- RMSNorm --------------------------------------------------------------------------

// One block per row.
template <typename TX, typename TY>
__global__ void __launch_bounds__(kRowMaxThreads)
    rmsNormFwdKernel(const TX* __restrict__ x, const float* __restrict__ w, TY* __restrict__ y,
                     float* __restrict__ rstd, int d, float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const TX* xr = x + row * d;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = toFloat(xr[j]);
    ss += v * v;
  }
  const float r = 1.0f / sqrtf(blockSum(ss, red) / static_cast<float>(d) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  TY* yr = y + row * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x)
    yr[j] = fromFloat<TY>((toFloat(xr[j]) * r) * w[j]);
}

// One block per chunk of `chunk_rows` rows: gx of each row, and the chunk's partial weight
// gradient in parts[blockIdx.x, :] (column j owned by one thread: no race, fixed order).
template <typename TX, typename TG>
__global__ void __launch_bounds__(kRowMaxThreads)
    rmsNormBwdKernel(const TG* __restrict__ gy, const TX* __restrict__ x,
                     const float* __restrict__ w, const float* __restrict__ rstd,
                     TX* __restrict__ gx, float* __restrict__ parts, int64_t rows,
                     int64_t chunk_rows, int d) {
  __shared__ float red[32];
  const int64_t r0 = blockIdx.x * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  float* part = parts + static_cast<int64_t>(blockIdx.x) * d;
  for (int64_t row = r0; row < r1; ++row) {  // uniform across the block
    const TG* g = gy + row * d;
    const TX* xr = x + row * d;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x)
      dot += (toFloat(g[j]) * w[j]) * toFloat(xr[j]);
    const float c = blockSum(dot, red) * r / static_cast<float>(d);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      const float gv = toFloat(g[j]), xh = toFloat(xr[j]) * r;
      gx[row * d + j] = fromFloat<TX>(r * (gv * w[j] - xh * c));
      part[j] = (row == r0 ? 0.0f : part[j]) + gv * xh;
    }
  }
}

// gw[j] = sum over c of parts[c, j], c in order.
__global__ void __launch_bounds__(kFlatThreads)
    sumChunksKernel(const float* __restrict__ parts, float* __restrict__ gw, int64_t chunks,
                    int d) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  float s = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) s += parts[c * d + j];
  gw[j] = s;
}

// ---- RoPE -----------------------------------------------------------------------------

// One thread per (row, k < hd/2) pair: reads x[.., k] and x[.., k + hd/2] through the
// strides, writes both outputs (contiguous rows).
template <typename T>
__global__ void __launch_bounds__(kFlatThreads)
    ropeKernel(RopeInput in, const float* __restrict__ cos_tab, const float* __restrict__ sin_tab,
               float sin_sign, float scale, T* __restrict__ out) {
  const T* x = static_cast<const T*>(in.x);
  const int64_t half = in.hd / 2, n = in.B * in.H * in.T * half;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t k = i % half, row = i / half;
    const int64_t t = row % in.T, h = (row / in.T) % in.H, b = row / (in.T * in.H);
    const T* xr = x + b * in.stride_b + h * in.stride_h + t * in.stride_t;
    const float x1 = toFloat(xr[k * in.stride_d]), x2 = toFloat(xr[(k + half) * in.stride_d]);
    const float c = cos_tab[t * half + k], s = sin_sign * sin_tab[t * half + k];
    out[row * in.hd + k] = fromFloat<T>((x1 * c - x2 * s) * scale);
    out[row * in.hd + k + half] = fromFloat<T>((x2 * c + x1 * s) * scale);
  }
}

// ---- SwiGLU ---------------------------------------------------------------------------

// 16 bytes of elements: one vector load or store.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

__device__ __forceinline__ float siluMul(float a, float b) { return a / (1.0f + expf(-a)) * b; }

__device__ __forceinline__ void siluMulBack(float a, float b, float g, float& ga, float& gb) {
  const float s = 1.0f / (1.0f + expf(-a));
  ga = g * b * s * (1.0f + a * (1.0f - s));
  gb = g * a * s;
}

// REQUIRES (vec): a, b, out 16-byte aligned. Packs first, then the tail element by element.
template <typename T>
__global__ void __launch_bounds__(kFlatThreads)
    swiGluFwdKernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                    int64_t n, bool vec) {
  constexpr int kV = Pack<T>::kSize;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = vec ? n / kV : 0;
  for (int64_t p = first; p < packs; p += step) {
    const Pack<T> pa = reinterpret_cast<const Pack<T>*>(a)[p];
    const Pack<T> pb = reinterpret_cast<const Pack<T>*>(b)[p];
    Pack<T> po;
#pragma unroll
    for (int k = 0; k < kV; ++k)
      po.v[k] = fromFloat<T>(siluMul(toFloat(pa.v[k]), toFloat(pb.v[k])));
    reinterpret_cast<Pack<T>*>(out)[p] = po;
  }
  for (int64_t i = packs * kV + first; i < n; i += step)
    out[i] = fromFloat<T>(siluMul(toFloat(a[i]), toFloat(b[i])));
}

template <typename T>
__global__ void __launch_bounds__(kFlatThreads)
    swiGluBwdKernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ g,
                    T* __restrict__ ga, T* __restrict__ gb, int64_t n, bool vec) {
  constexpr int kV = Pack<T>::kSize;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = vec ? n / kV : 0;
  float da, db;
  for (int64_t p = first; p < packs; p += step) {
    const Pack<T> pa = reinterpret_cast<const Pack<T>*>(a)[p];
    const Pack<T> pb = reinterpret_cast<const Pack<T>*>(b)[p];
    const Pack<T> pg = reinterpret_cast<const Pack<T>*>(g)[p];
    Pack<T> oa, ob;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      siluMulBack(toFloat(pa.v[k]), toFloat(pb.v[k]), toFloat(pg.v[k]), da, db);
      oa.v[k] = fromFloat<T>(da);
      ob.v[k] = fromFloat<T>(db);
    }
    reinterpret_cast<Pack<T>*>(ga)[p] = oa;
    reinterpret_cast<Pack<T>*>(gb)[p] = ob;
  }
  for (int64_t i = packs * kV + first; i < n; i += step) {
    siluMulBack(toFloat(a[i]), toFloat(b[i]), toFloat(g[i]), da, db);
    ga[i] = fromFloat<T>(da);
    gb[i] = fromFloat<T>(db);
  }
}

// ---- cross-entropy --------------------------------------------------------------------

// One block per row: an online (max, sum) pass, then the block's merge.
template <typename T>
__global__ void __launch_bounds__(kCeMaxThreads)
    ceFwdKernel(const T* __restrict__ logits, const int64_t* __restrict__ targets,
                float* __restrict__ nll, float* __restrict__ lse, int V) {
  __shared__ float red_m[32], red_s[32];
  const int64_t row = blockIdx.x;
  const T* z = logits + row * V;
  float m = -INFINITY, s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = toFloat(z[j]);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else if (v == m) {  // exp(0), also for +inf (exp(inf - inf) would be NaN)
      s += 1.0f;
    } else if (v != -INFINITY) {  // -inf adds nothing (and exp(-inf - -inf) would be NaN)
      s += expf(v - m);
    }
  }
  blockMaxSum(m, s, red_m, red_s);
  if (threadIdx.x == 0) {
    const float l = m + logf(s);
    const int64_t t = targets[row];
    lse[row] = l;
    nll[row] = (t >= 0 && t < V) ? l - toFloat(z[t]) : NAN;
  }
}

// One block per row, one pass: grad = g * softmax, minus g at the target.
template <typename T>
__global__ void __launch_bounds__(kCeMaxThreads)
    ceBwdKernel(const T* __restrict__ logits, const int64_t* __restrict__ targets,
                const float* __restrict__ lse, const float* __restrict__ g, T* __restrict__ grad,
                int V) {
  const int64_t row = blockIdx.x;
  const int64_t t = targets[row];
  const bool valid = t >= 0 && t < V;
  const float l = lse[row], gr = g[row];
  const T* z = logits + row * V;
  T* o = grad + row * V;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float v = expf(toFloat(z[j]) - l) * gr;
    if (j == t) v -= gr;
    o[j] = fromFloat<T>(valid ? v : NAN);
  }
}

// ---- launch helpers -------------------------------------------------------------------

// Threads for a block working through `n` elements, about `per_thread` each: a multiple
// of 32 in [32, max_threads].
int threadsFor(int64_t n, int64_t per_thread, int max_threads) {
  const int64_t t = ((n + per_thread - 1) / per_thread + 31) / 32 * 32;
  return static_cast<int>(std::min<int64_t>(max_threads, std::max<int64_t>(32, t)));
}

unsigned flatBlocks(int64_t n) {
  return static_cast<unsigned>(std::min(kMaxFlatBlocks, (n + kFlatThreads - 1) / kFlatThreads));
}

bool fitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// f(T{}) for the element type T of dt.
template <typename F>
cudaError_t withType(Dtype dt, const F& f) {
  switch (dt) {
    case Dtype::kFloat32:
      return f(float{});
    case Dtype::kBFloat16:
      return f(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t rmsNormForward(const void* x, Dtype x_dt, const float* w, void* y, Dtype y_dt,
                           float* rstd, int64_t rows, int64_t d, float eps, cudaStream_t stream) {
  if (!fitsInt(rows) || !fitsInt(d)) return cudaErrorInvalidValue;
  if (rows == 0 || d == 0) return cudaSuccess;
  const int threads = threadsFor(d, 8, kRowMaxThreads);
  return withType(x_dt, [&](auto tx) {
    using TX = decltype(tx);
    return withType(y_dt, [&](auto ty) {
      using TY = decltype(ty);
      rmsNormFwdKernel<TX, TY><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
          static_cast<const TX*>(x), w, static_cast<TY*>(y), rstd, static_cast<int>(d), eps);
      return cudaGetLastError();
    });
  });
}

cudaError_t rmsNormBackward(const void* gy, Dtype gy_dt, const void* x, Dtype x_dt, const float* w,
                            const float* rstd, void* gx, float* parts, float* gw, int64_t rows,
                            int64_t d, cudaStream_t stream) {
  if (!fitsInt(rows) || !fitsInt(d)) return cudaErrorInvalidValue;
  if (d == 0) return cudaSuccess;
  const int64_t chunks = rmsNormChunks(rows);
  if (rows > 0) {
    const int threads = threadsFor(d, 8, kRowMaxThreads);
    const cudaError_t err = withType(x_dt, [&](auto tx) {
      using TX = decltype(tx);
      return withType(gy_dt, [&](auto tg) {
        using TG = decltype(tg);
        rmsNormBwdKernel<TX, TG><<<static_cast<unsigned>(chunks), threads, 0, stream>>>(
            static_cast<const TG*>(gy), static_cast<const TX*>(x), w, rstd, static_cast<TX*>(gx),
            parts, rows, rmsNormChunkRows(rows), static_cast<int>(d));
        return cudaGetLastError();
      });
    });
    if (err != cudaSuccess) return err;
  }
  // No rows: zero chunks, gw = 0.
  const unsigned blocks = static_cast<unsigned>((d + kFlatThreads - 1) / kFlatThreads);
  sumChunksKernel<<<blocks, kFlatThreads, 0, stream>>>(parts, gw, chunks, static_cast<int>(d));
  return cudaGetLastError();
}

cudaError_t ropeApply(const RopeInput& in, Dtype dt, const float* cos_tab, const float* sin_tab,
                      float sin_sign, float scale, void* out, cudaStream_t stream) {
  if (in.B < 0 || in.H < 0 || in.T < 0 || in.hd < 0 || in.hd % 2 != 0) return cudaErrorInvalidValue;
  const int64_t n = in.B * in.H * in.T * (in.hd / 2);
  if (n == 0) return cudaSuccess;
  return withType(dt, [&](auto tag) {
    using T = decltype(tag);
    ropeKernel<T><<<flatBlocks(n), kFlatThreads, 0, stream>>>(in, cos_tab, sin_tab, sin_sign, scale,
                                                              static_cast<T*>(out));
    return cudaGetLastError();
  });
}

cudaError_t swiGluForward(const void* a, const void* b, void* out, Dtype dt, int64_t n,
                          cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const bool vec = aligned16(a) && aligned16(b) && aligned16(out);
  return withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const int64_t work = vec ? (n + Pack<T>::kSize - 1) / Pack<T>::kSize : n;
    swiGluFwdKernel<T><<<flatBlocks(work), kFlatThreads, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, vec);
    return cudaGetLastError();
  });
}

cudaError_t swiGluBackward(const void* a, const void* b, const void* g, void* ga, void* gb,
                           Dtype dt, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const bool vec = aligned16(a) && aligned16(b) && aligned16(g) && aligned16(ga) && aligned16(gb);
  return withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const int64_t work = vec ? (n + Pack<T>::kSize - 1) / Pack<T>::kSize : n;
    swiGluBwdKernel<T><<<flatBlocks(work), kFlatThreads, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(g),
        static_cast<T*>(ga), static_cast<T*>(gb), n, vec);
    return cudaGetLastError();
  });
}

cudaError_t crossEntropyForward(const void* logits, Dtype dt, const int64_t* targets, float* nll,
                                float* lse, int64_t rows, int64_t V, cudaStream_t stream) {
  if (!fitsInt(rows) || !fitsInt(V)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int threads = threadsFor(V, 16, kCeMaxThreads);
  return withType(dt, [&](auto tag) {
    using T = decltype(tag);
    ceFwdKernel<T><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
        static_cast<const T*>(logits), targets, nll, lse, static_cast<int>(V));
    return cudaGetLastError();
  });
}

cudaError_t crossEntropyBackward(const void* logits, Dtype dt, const int64_t* targets,
                                 const float* lse, const float* g, void* grad, int64_t rows,
                                 int64_t V, cudaStream_t stream) {
  if (!fitsInt(rows) || !fitsInt(V)) return cudaErrorInvalidValue;
  if (rows == 0 || V == 0) return cudaSuccess;
  const int threads = threadsFor(V, 16, kCeMaxThreads);
  return withType(dt, [&](auto tag) {
    using T = decltype(tag);
    ceBwdKernel<T><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
        static_cast<const T*>(logits), targets, lse, g, static_cast<T*>(grad), static_cast<int>(V));
    return cudaGetLastError();
  });
}

}  // namespace ftb::cuda_kernels
