// The environment a rank computes in, checked at start: which BLAS and which
// of its kernels, the ISA the CPU offers against the one the BLAS uses, thread counts
// against the CPUs the process is bound to, and the allocator. The trainer checks its own
// process; the launcher (launcher/env_probe.h) checks the program it is about to start,
// with the worker's environment, through the same code.
//
// Contracts:
// - detectEnv() only looks: dlsym(RTLD_DEFAULT) for openblas_get_config /
//   openblas_get_corename / openblas_get_num_threads, mkl_get_version_string and
//   omp_get_max_threads, jemalloc's mallctl (whatever this process has loaded), $OPENBLAS_CORETYPE,
//   $OMP_NUM_THREADS, sched_getaffinity (via CpuInfo) and the online CPU count. No
//   libtorch: the caller passes its intra-op thread count.
// - detectEnvOf() is the same for libraries this process has not loaded: it dlopen()s
//   the BLAS and allocator of `libs` (RTLD_LOCAL, never closed) and reads the same
//   symbols from them; what it cannot open is named in EnvFacts::blas / allocator. A
//   BLAS reads $OPENBLAS_CORETYPE and its thread variables when loaded, so the caller
//   runs it in a process with the worker's environment and binding.
// - parseLoaderList() is pure: it reads the dynamic loader's `--list` output (the lines
//   `ldd` prints) and picks the BLAS (libopenblas*, libblas*, libmkl_rt*, libblis*: the
//   first listed) and the allocator (libjemalloc*, libtcmalloc*, libmimalloc*).
// - envWarnings() is pure: one line per problem, each naming the measured figures,
//   the cause and the fix. Problems: threads (intra-op or BLAS) above the CPUs this
//   process is bound to; a measured GEMM below kGemmWarnFraction of the peak of its
//   dtype (CPU peaks only; a config or GPU peak is not an FMA peak).
// - envAttrs() are the metrics file's env_* root attributes (trainer/README.md).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/cpu_info.h"
#include "common/h5_metrics.h"
#include "common/hw_peak.h"

namespace ftb {

inline constexpr double kGemmWarnFraction = 0.70;

struct EnvFacts {
  std::string blas = "unknown";     // "OpenBLAS 0.3.21 DYNAMIC_ARCH ...", "MKL 2023...", "unknown"
  std::string blas_core;            // openblas_get_corename(): "Haswell"; "" = not OpenBLAS
  std::string openblas_coretype;    // $OPENBLAS_CORETYPE; "" = unset
  int blas_isa_level = 0;           // openblasCoretypeLevel(blas_core); 0 = unknown
  int cpu_isa_level = 0;            // cpuIsaLevel(cpu)
  std::string recommended_core;     // recommendedOpenblasCoretype(cpu)
  std::string cpu_best_unit;        // CpuInfo::bestFmaUnit()
  int intra_threads = 0;            // libtorch intra-op threads
  int blas_threads = 0;             // threads a BLAS call uses; 0 = unknown
  std::string blas_threads_source;  // how blas_threads was read
  std::string omp_num_threads;      // $OMP_NUM_THREADS; "" = unset
  int bound_cpus = 0, bound_physical_cores = 0, online_cpus = 0;
  std::string bound_cpu_list;              // "0-3"
  std::string allocator = "glibc malloc";  // or "jemalloc <version>"
};

// "sse", "avx", "avx2 FMA", "avx512", "avx512_bf16", "amx_bf16" for levels 1..6
// (openblasCoretypeLevel / cpuIsaLevel); "unknown" otherwise.
std::string isaLevelName(int level);

EnvFacts detectEnv(const CpuInfo& cpu, int intra_threads);

// The BLAS and allocator libraries a program loads (paths as the loader resolved them;
// "" = none found).
struct LinkedLibs {
  std::string blas, allocator;
};
LinkedLibs parseLoaderList(const std::string& loader_list_output);

// detectEnv() for a program that links `libs`, seen from this process.
EnvFacts detectEnvOf(const LinkedLibs& libs, const CpuInfo& cpu, int intra_threads);

// One line: "BLAS <config>, core <core> (<isa>) on a CPU with <isa>; <threads>; <binding>;
// allocator <allocator>" (the core part only for OpenBLAS; intra-op threads left out when
// intra_threads is 0).
std::string envSummary(const EnvFacts& f);

// gemm_flops: measured GEMM in `dtype`; peak: this rank's hardware peak for `dtype`.
std::vector<std::string> envWarnings(const EnvFacts& f, double gemm_flops, const PeakFlops& peak,
                                     const std::string& dtype);

// "not bound (all 2 online CPUs)" or "bound to CPUs 0-1 (2 of 4 online, 2 physical cores)".
std::string bindingText(const EnvFacts& f);

std::vector<std::pair<std::string, AttrValue>> envAttrs(const EnvFacts& f,
                                                        const std::vector<std::string>& warnings);

}  // namespace ftb
