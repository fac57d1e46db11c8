// FTB_CLONES: build a CPU loop for AVX-512 (x86-64-v4), AVX2 + FMA (x86-64-v3) and baseline
// x86-64, and pick one at load time (GCC target_clones, glibc ifunc). One definition for
// every hand-written loop (kernels/cpu_kernels.cpp, kernels/fused_ops.cpp), so all run the
// same ISA on a given CPU: results are deterministic on one machine and may differ in
// the last bits between CPU kinds, as BLAS results do.
#pragma once

#define FTB_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
