// Fused fp32 CPU loops outside the model (the model's are in kernels/fused_ops.cpp): the
// optimizer update and the gradient norm's sum of squares, one pass instead of one per
// ATen op. Plain C++, no torch header: the file is compiled with -fno-math-errno
// -fassociative-math (so sqrt vectorises) and each kernel is cloned for AVX-512, AVX2 + FMA
// and baseline x86-64, picked at load time (FTB_CLONES, kernels/clones.h).
//
// Contracts:
// - All pointers are dense row-major fp32 arrays of the sizes given; outputs do not
//   alias inputs unless stated.
// - Results are deterministic for a given CPU (same clone) but may differ from ATen's
//   per-op results in the last bits (summation order, fused multiply-add).
#pragma once

#include <cstdint>

namespace ftb::kernels {

// AdamW, one pass: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g², p = decay p - step m /
// (sqrt(v inv_bc2) + eps), for n elements in place.
struct AdamWScalars {
  float b1, omb1, b2, omb2, inv_bc2, eps, step, decay;
};
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s);
// The same update, and g[i] = 0 once read: the gradient buffer is ready for the next
// step's accumulation without a separate pass over it (g is in cache when zeroed).
void adamwZeroGrad(float* p, float* g, float* m, float* v, int64_t n, const AdamWScalars& s);

// Σ x[i]² in fp64, reading x once: each square is exact in fp64 (a float has 24 significant
// bits), summed in sixteen partial sums added in a fixed order. No fp64 copy of x is made.
double sumSquaresF64(const float* x, int64_t n);

}  // namespace ftb::kernels
