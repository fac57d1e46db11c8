// Launchers of the fused CUDA kernels (fused_kernels.cu) behind kernels/fused_cuda.cpp: raw
// device pointers, sizes, an element type and a stream; no torch header (nvcc on libtorch's
// headers is slow), so the ATen glue is compiled by the host compiler alone.
//
// Contracts shared by every launcher:
// - Pointers are device pointers of the current device; the work is queued on `stream`.
// - Element types (Dtype) are fp32 or bf16; statistics and arithmetic are fp32, with one
//   rounding to the output type. exp is expf (not __expf), division and sqrt IEEE.
// - Deterministic: the same inputs give the same bits (fixed reduction trees, no atomics).
// - The return value is the launch status (cudaGetLastError after the launches):
//   cudaErrorInvalidValue for sizes the kernels cannot index (a row count, a row length or
//   a vocabulary over INT32_MAX, an unknown Dtype). Errors of the kernels' execution show
//   at the next synchronising call, as for any CUDA kernel.
// - Empty inputs (no rows, no elements) launch nothing and return cudaSuccess.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ftb::cuda_kernels {

enum class Dtype : int32_t { kFloat32, kBFloat16 };

// ---- RMSNorm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) per row ----------

// The weight gradient is summed per chunk of rmsNormChunkRows(rows) rows into a row of a
// [rmsNormChunks(rows), d] fp32 buffer, then the chunks in order (a function of `rows`
// alone, so the result does not depend on the GPU). At least 8 rows a chunk: 4096 rows (a
// micro-batch of 2 x 2048 tokens) make 512 blocks, enough for every SM of an H100.
inline int64_t rmsNormChunkRows(int64_t rows) {
  const int64_t per = (rows + 1023) / 1024;  // at most 1024 chunks
  return per > 8 ? per : 8;
}
inline int64_t rmsNormChunks(int64_t rows) {
  return (rows + rmsNormChunkRows(rows) - 1) / rmsNormChunkRows(rows);
}

// REQUIRES: x [rows, d] contiguous of x_dt; w fp32 [d]; y [rows, d] contiguous of y_dt;
// rstd fp32 [rows] (written: the per-row statistic the backward needs).
cudaError_t rmsNormForward(const void* x, Dtype x_dt, const float* w, void* y, Dtype y_dt,
                           float* rstd, int64_t rows, int64_t d, float eps, cudaStream_t stream);

// gx = rstd * (gy*w - xhat * c), c = rstd * sum(gy*w*x) / d, xhat = x * rstd (per row);
// gw = sum over rows of gy * xhat.
// REQUIRES: gy [rows, d] contiguous of gy_dt; x [rows, d] contiguous of x_dt; w fp32 [d];
// rstd fp32 [rows] from rmsNormForward; gx [rows, d] contiguous of x_dt; parts fp32
// [rmsNormChunks(rows), d] (scratch, need not be initialised); gw fp32 [d].
cudaError_t rmsNormBackward(const void* gy, Dtype gy_dt, const void* x, Dtype x_dt, const float* w,
                            const float* rstd, void* gx, float* parts, float* gw, int64_t rows,
                            int64_t d, cudaStream_t stream);

// ---- RoPE (HF rotate_half) ---------------------------------------------------------

// x [B, H, T, hd] read through element strides (any, 0 included); hd even.
struct RopeInput {
  const void* x;
  int64_t B, H, T, hd;
  int64_t stride_b, stride_h, stride_t, stride_d;
};

// With x = (x1, x2) the halves of the last dimension, c = cos_tab[t], s = sin_sign * sin_tab[t]:
// out = (x1 c - x2 s, x2 c + x1 s) * scale. sin_sign = -1 is the backward (the rotation
// by -angle, the transpose).
// REQUIRES: cos_tab, sin_tab fp32 contiguous [>= T, hd/2]; out contiguous [B, H, T, hd] of dt (the
// dtype of x too); out does not overlap x.
cudaError_t ropeApply(const RopeInput& in, Dtype dt, const float* cos_tab, const float* sin_tab,
                      float sin_sign, float scale, void* out, cudaStream_t stream);

// ---- SwiGLU gate --------------------------------------------------------------------

// out = silu(a) * b, silu(a) = a / (1 + exp(-a)).
// REQUIRES: a, b, out contiguous [n] of dt (16-byte aligned pointers take the vector path).
cudaError_t swiGluForward(const void* a, const void* b, void* out, Dtype dt, int64_t n,
                          cudaStream_t stream);

// s = sigmoid(a): ga = g * b * s * (1 + a (1 - s)), gb = g * a * s.
// REQUIRES: a, b, g, ga, gb contiguous [n] of dt.
cudaError_t swiGluBackward(const void* a, const void* b, const void* g, void* ga, void* gb,
                           Dtype dt, int64_t n, cudaStream_t stream);

// ---- cross-entropy ------------------------------------------------------------------

// lse[r] = logsumexp(logits[r, :]) (one online max/sum pass), nll[r] = lse[r] - logits[r, t_r].
// A target outside [0, V) is not an error here (no device assert, no host sync): its row's
// nll is NaN, so the loss it enters is NaN.
// REQUIRES: logits [rows, V] contiguous of dt; targets int64 [rows]; nll, lse fp32 [rows].
cudaError_t crossEntropyForward(const void* logits, Dtype dt, const int64_t* targets, float* nll,
                                float* lse, int64_t rows, int64_t V, cudaStream_t stream);

// grad[r, j] = g[r] * exp(logits[r, j] - lse[r]), minus g[r] at j = t_r; a row whose target
// is outside [0, V) is all NaN.
// REQUIRES: logits [rows, V] contiguous of dt; targets int64 [rows]; lse fp32 [rows] from
// crossEntropyForward; g fp32 [rows]; grad [rows, V] contiguous of dt.
cudaError_t crossEntropyBackward(const void* logits, Dtype dt, const int64_t* targets,
                                 const float* lse, const float* g, void* grad, int64_t rows,
                                 int64_t V, cudaStream_t stream);

}  // namespace ftb::cuda_kernels
