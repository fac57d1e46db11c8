// What this process's CPU offers and which cores it may run on. No libtorch, no BLAS.
//
// Contracts:
// - detectCpu() reads /proc/cpuinfo (model name, vendor, family/model, flags as the
//   kernel enabled them); where that file or its flags line is missing, the ISA bits
//   come from cpuid. Bound CPUs come from sched_getaffinity(0); physical cores are the
//   distinct (package, core_id) pairs of /sys/devices/system/cpu/cpuN/topology among
//   them (SMT siblings share FMA units, so peaks count physical cores).
// - parseCpuInfo() is the pure part (tests feed it fixture text).
// - OpenBLAS core types: openblasCoretypeLevel() ranks a name (case-insensitive, as
//   OpenBLAS compares) by the ISA its kernels use: 1 SSE, 2 AVX, 3 AVX2+FMA,
//   4 AVX-512 (F/BW/DQ/VL), 5 + AVX512-BF16, 6 + AMX; 0 = unknown name.
//   recommendedOpenblasCoretype() is the highest level the CPU runs that every
//   OpenBLAS >= 0.3.10 knows (SapphireRapids is absent from Debian 12's 0.3.21 and
//   its sgemm kernels are Cooperlake's, so AMX machines get Cooperlake).
// - checkOpenblasCoretype() compares a setting (e.g. $OPENBLAS_CORETYPE) with that
//   recommendation: unset and equal are fine; below wastes the wider units; above
//   what the CPU runs is an illegal-instruction crash; unknown names are reported.
#pragma once

#include <string>
#include <vector>

namespace ftb {

struct CpuInfo {
  std::string model_name;  // "AMD EPYC 9R14 96-Core Processor"; "unknown" if absent
  std::string vendor;      // "AuthenticAMD", "GenuineIntel", ...
  int family = -1, model = -1;
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_bf16 = false, amx_tile = false, amx_bf16 = false;
  std::vector<int> bound_cpus;   // logical CPU ids from sched_getaffinity, ascending
  int bound_physical_cores = 0;  // distinct (package, core) among bound_cpus
  std::string flags_source;      // "/proc/cpuinfo" or "cpuid"

  // "avx512 FMA" (512-bit FMA3), "avx2 FMA" (256-bit FMA3) or "sse2" (no FMA).
  std::string bestFmaUnit() const;
  // Best unit for bf16 matmul: "amx_bf16", "avx512_bf16" (vdpbf16ps) or bestFmaUnit().
  std::string bestBf16Unit() const;
  // "avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile" — the ISA bits set, in that order.
  std::string isaString() const;
  // "0-3,8" style list of bound_cpus.
  std::string boundCpuList() const;
};

// `s` in ASCII lower case (CPU and device names, flags).
std::string asciiLower(std::string s);

// REQUIRES: text in /proc/cpuinfo format (the first processor block is used). Leaves
// bound_cpus empty and bound_physical_cores 0.
CpuInfo parseCpuInfo(const std::string& text);
CpuInfo detectCpu();

int openblasCoretypeLevel(const std::string& name);
// The highest ISA level (see openblasCoretypeLevel) this CPU runs.
int cpuIsaLevel(const CpuInfo& cpu);
std::string recommendedOpenblasCoretype(const CpuInfo& cpu);

struct CoretypeCheck {
  enum class Verdict { kUnset, kOk, kBelow, kAbove, kUnknown };
  Verdict verdict = Verdict::kUnset;
  std::string setting;      // as given ("" = unset)
  std::string recommended;  // recommendedOpenblasCoretype(cpu)
  std::string message;      // one line: what is wrong and the fix; "" when kUnset/kOk
};
CoretypeCheck checkOpenblasCoretype(const CpuInfo& cpu, const std::string& setting);

}  // namespace ftb
