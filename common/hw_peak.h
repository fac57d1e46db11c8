// The hardware's theoretical peak, the denominator of MFU (PaLM / torchtitan definition).
// No libtorch.
//
// CPU: peak = cores used × measured clock × FLOPs per cycle of the best unit for the dtype.
// - measureCpuUnits() runs short register-only microbenchmarks on the calling thread:
//   a dependent chain of integer adds (1 cycle each on every x86-64 core) gives the
//   clock; 12 independent FMA chains per unit (AVX2 ymm, AVX-512 zmm, AVX512-BF16
//   vdpbf16ps zmm, AMX-BF16 tdpbf16ps) give each unit's FLOPs per cycle. The measured
//   FLOPs/cycle is rounded to the nearest power of two (FMA pipes × lanes × 2 is one for
//   every known unit) and kept unrounded beside it. Each kernel is compiled for its ISA
//   with target attributes and only run where the CPU reports that ISA.
//   The clock is taken with the other cores as they are (a single-core turbo clock on an
//   idle machine); under load each figure is the best of interleaved repetitions.
// - loadOrMeasureCpuUnits() caches the result in a small text file per host and CPU
//   model: $FTB_CACHE_DIR, else $XDG_CACHE_HOME/ftbench, else $HOME/.cache/ftbench.
//   An unwritable cache only costs the re-measurement (~0.3 s).
// GPU: gpuPeakTable() dense (no sparsity) vendor peak TFLOPS by device name and dtype.
// Override: metrics.peak_tflops > 0 replaces either.
// A measured GEMM faster than the peak means the peak is wrong: checkGemmAgainstPeak()
// says so, and MFU is then not reported (NaN), never above 100 %.
#pragma once

#include <string>
#include <vector>

#include "common/cpu_info.h"

namespace ftb {

struct CpuUnit {
  std::string name;                     // "avx2 FMA", "avx512 FMA", "avx512_bf16", "amx_bf16"
  double measured_flops_per_cycle = 0;  // FLOP/s of the kernel ÷ measured clock
  double flops_per_cycle = 0;           // rounded to a power of two
};

struct CpuUnits {
  std::string model_name, isa;  // CpuInfo::model_name, CpuInfo::isaString()
  double clock_hz = 0;          // measured by the dependent-add chain
  std::vector<CpuUnit> units;   // every unit this CPU has, measured
  std::string cache_file;       // where the figures were read from / written to ("" = none)
  bool from_cache = false;

  // nullptr when absent.
  const CpuUnit* find(const std::string& name) const;
};

// REQUIRES: cpu from detectCpu() on this machine (the kernels run only where its ISA
// bits are set).
CpuUnits measureCpuUnits(const CpuInfo& cpu);
CpuUnits loadOrMeasureCpuUnits(const CpuInfo& cpu);
// "<dir>/cpu_peak.<host>.<model>.txt" with path-safe host and model; "" if no dir.
std::string cpuPeakCacheFile(const CpuInfo& cpu, const std::string& host);

// ---- The best GEMM per host (gemm_efficiency's denominator, trainer/README.md "Metrics").
// Kept in the same cache file as the CPU peak (cpuPeakCacheFile: one per host and CPU
// model), one line "gemm <FLOP/s> <key>" per key; the key names what the figure depends
// on (dtype, size, threads, BLAS, $OPENBLAS_CORETYPE). recordGemmFigure() returns the
// best cached for `key` before this call and records `measured` when it beats it
// (read-modify-write, atomic rename: two processes racing may lose the better of their
// two figures, never the file). An unwritable cache keeps nothing: best = measured.
// Re-measuring the CPU units (loadOrMeasureCpuUnits) keeps the gemm lines.
struct GemmBest {
  double cached = 0;       // best for the key before this call (0 = none)
  double best = 0;         // max(cached, measured)
  std::string cache_file;  // "" when nothing could be read or written
};
GemmBest recordGemmFigure(const CpuInfo& cpu, const std::string& key, double measured);
// Pure: the best figure of `key` in cache text (0 when absent), and the text with
// `flops` recorded for `key` (other lines kept, in order).
double cachedGemmFigure(const std::string& cache_text, const std::string& key);
std::string withGemmFigure(const std::string& cache_text, const std::string& key, double flops);
// A start-up GEMM below (1 - kGemmBusyFraction) × the cached best: the machine was busy.
inline constexpr double kGemmBusyFraction = 0.10;

// Nearest power of two (in log space) to v > 0; 0 for v <= 0.
double roundToPowerOfTwo(double v);

struct PeakFlops {
  double flops = 0;    // FLOP/s for one rank; 0 = unknown
  std::string source;  // one line saying where `flops` comes from
  std::string unit;    // the unit used ("avx512 FMA", "GPU table", "config")
  int cores = 0;       // CPU cores counted (0 for GPU / config)
  double clock_hz = 0, flops_per_cycle = 0;
};

// dtype: "fp32" or "bf16". cores_used: physical cores this rank's threads run on.
// bf16 uses the fastest of amx_bf16, avx512_bf16 and the fp32 FMA units.
PeakFlops cpuPeak(const CpuUnits& u, const std::string& dtype, int cores_used);

struct GpuPeakEntry {
  const char* match;  // case-insensitive substring of the device name
  const char* label;
  double fp32_tflops, bf16_tflops;  // dense
};
const std::vector<GpuPeakEntry>& gpuPeakTable();
// flops 0 and a source naming the device when it is not in the table.
PeakFlops gpuPeak(const std::string& device_name, const std::string& dtype);
// peak_tflops > 0: the config override; else `computed` unchanged.
PeakFlops applyPeakOverride(const PeakFlops& computed, double peak_tflops);

// ok: gemm <= peak. Otherwise `message` is one line naming both figures and the fix.
struct PeakCheck {
  bool ok = true;
  std::string message;
};
PeakCheck checkGemmAgainstPeak(double gemm_flops, const PeakFlops& peak);
// Model FLOP/s ÷ peak; NaN when the peak is unknown (0) or failed its check.
double mfuAgainst(double model_flops_per_s, const PeakFlops& peak, const PeakCheck& check);

// ---- Device memory (sweep_tagger expand --memory-budget) -----------------------------
// The memory of one device of the GPU table, by its type ("h100", "a100 40gb", "mi300x").
struct GpuMemoryEntry {
  const char* type;   // lower case, words separated by one space
  const char* label;  // "NVIDIA H100 SXM 80 GB"
  double gib;         // the data sheet's capacity (HBM/GDDR), GiB
};
const std::vector<GpuMemoryEntry>& gpuMemoryTable();
// The entry whose type equals `type` (case-insensitive; '-' and '_' read as spaces), or
// nullptr.
const GpuMemoryEntry* findGpuMemory(const std::string& type);

}  // namespace ftb
