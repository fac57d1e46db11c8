#include "common/hw_peak.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>

#include "common/config.h"
#include "common/log.h"

namespace ftb {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 200 dependent adds per call: one cycle each.
constexpr int64_t kAddsPerIter = 200;
uint64_t addChain(int64_t iters) {
  uint64_t x = 0;
  for (int64_t i = 0; i < iters; ++i) asm volatile(".rept 200\n\taddq $1, %0\n\t.endr" : "+r"(x));
  return x;
}

// Each kernel: 12 independent accumulator chains (enough for 2 pipes × 5-cycle latency),
// returns a value derived from them so nothing is optimised away.
constexpr int kChains = 12;

__attribute__((target("avx2,fma"))) float fmaAvx2(int64_t iters) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(float(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) float fmaAvx512(int64_t iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16Avx512(int64_t iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3380);  // bf16 ~6e-8
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}

// AMX: 4 accumulator tiles (16 rows × 16 fp32), A/B tiles 16 rows × 64 bytes.
// One tdpbf16ps = 16 × 16 × 32 multiply-adds.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
constexpr double kAmxFlopsPerOp = 2.0 * 16 * 16 * 32;

bool amxPermitted() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

__attribute__((target("amx-tile,amx-bf16"))) float dpbf16Amx(int64_t iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  alignas(64) static uint16_t src[16 * 32];
  for (auto& v : src) v = 0x3380;
  alignas(64) static float out[16 * 16];
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, src, 64);
  _tile_loadd(5, src, 64);
  _tile_loadd(6, src, 64);
  _tile_loadd(7, src, 64);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

volatile float g_sink;  // keeps kernel results alive

struct Kernel {
  const char* name;
  double flops_per_iter;
  float (*run)(int64_t);
};

// Best FLOP/s of `k` and best clock over interleaved repetitions of ~1 ms each, until
// neither improved by 0.5 % for 10 repetitions (at most 60): a descheduled repetition
// only lowers its own figure.
void measureKernel(const Kernel& k, double& best_flops, double& best_clock) {
  int64_t iters = 256;
  for (;; iters *= 2) {  // size one repetition to ~1 ms
    double t0 = now();
    g_sink = k.run(iters);
    if (now() - t0 >= 1e-3) break;
  }
  const int64_t add_iters = 5000;
  for (int rep = 0, stale = 0; rep < 60 && stale < 10; ++rep) {
    double t0 = now();
    g_sink = k.run(iters);
    double t1 = now();
    g_sink = float(addChain(add_iters));
    double t2 = now();
    double f = k.flops_per_iter * double(iters) / (t1 - t0);
    double c = double(add_iters * kAddsPerIter) / (t2 - t1);
    bool better = f > 1.005 * best_flops || c > 1.005 * best_clock;
    stale = better ? 0 : stale + 1;
    best_flops = std::max(best_flops, f);
    best_clock = std::max(best_clock, c);
  }
}

std::string cacheNamePart(const std::string& s) {
  std::string o;
  for (char c : s)
    o += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_';
  return o.substr(0, 120);
}

constexpr int kCacheVersion = 1;

bool readCache(const std::string& path, const CpuInfo& cpu, CpuUnits& u) {
  std::ifstream in(path);
  std::string line, model, isa;
  int version = 0;
  if (!std::getline(in, line) || std::sscanf(line.c_str(), "ftbench cpu peak v%d", &version) != 1 ||
      version != kCacheVersion)
    return false;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string key;
    is >> key;
    std::string rest;
    std::getline(is, rest);
    rest = rest.empty() ? rest : rest.substr(1);
    if (key == "model")
      model = rest;
    else if (key == "isa")
      isa = rest;
    else if (key == "clock_hz")
      u.clock_hz = std::atof(rest.c_str());
    else if (key == "unit") {
      CpuUnit cu;
      std::istringstream us(rest);
      us >> cu.measured_flops_per_cycle >> cu.flops_per_cycle;
      std::getline(us, cu.name);
      cu.name = cu.name.empty() ? cu.name : cu.name.substr(1);
      u.units.push_back(cu);
    }
  }
  return model == cpu.model_name && isa == cpu.isaString() && u.clock_hz > 0 && !u.units.empty();
}

std::string slurpFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The "gemm ..." lines of cache text, each ending in a newline.
std::string gemmLines(const std::string& text) {
  std::istringstream is(text);
  std::string line, out;
  while (std::getline(is, line))
    if (line.rfind("gemm ", 0) == 0) out += line + "\n";
  return out;
}

// Writes `text` to `path` through a temporary file and rename(2); false on failure.
bool replaceFile(const std::string& path, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return false;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

}  // namespace

const CpuUnit* CpuUnits::find(const std::string& name) const {
  for (const CpuUnit& cu : units)
    if (cu.name == name) return &cu;
  return nullptr;
}

double roundToPowerOfTwo(double v) {
  if (!(v > 0)) return 0;
  return std::exp2(std::round(std::log2(v)));
}

CpuUnits measureCpuUnits(const CpuInfo& cpu) {
  CpuUnits u;
  u.model_name = cpu.model_name;
  u.isa = cpu.isaString();
  std::vector<Kernel> kernels;
  if (cpu.avx2 && cpu.fma) kernels.push_back({"avx2 FMA", kChains * 8.0 * 2, fmaAvx2});
  if (cpu.avx512f) kernels.push_back({"avx512 FMA", kChains * 16.0 * 2, fmaAvx512});
  if (cpu.avx512f && cpu.avx512_bf16)
    kernels.push_back({"avx512_bf16", kChains * 32.0 * 2, dpbf16Avx512});
  if (cpu.amx_bf16 && cpu.amx_tile && amxPermitted())
    kernels.push_back({"amx_bf16", 4 * kAmxFlopsPerOp, dpbf16Amx});
  std::vector<double> flops(kernels.size(), 0.0);
  for (size_t i = 0; i < kernels.size(); ++i) measureKernel(kernels[i], flops[i], u.clock_hz);
  for (size_t i = 0; i < kernels.size(); ++i) {
    CpuUnit cu;
    cu.name = kernels[i].name;
    cu.measured_flops_per_cycle = flops[i] / u.clock_hz;
    cu.flops_per_cycle = roundToPowerOfTwo(cu.measured_flops_per_cycle);
    u.units.push_back(cu);
  }
  return u;
}

std::string cpuPeakCacheFile(const CpuInfo& cpu, const std::string& host) {
  std::string dir;
  if (const char* d = std::getenv("FTB_CACHE_DIR"); d && *d)
    dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    dir = std::string(x) + "/ftbench";
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = std::string(h) + "/.cache/ftbench";
  if (dir.empty()) return "";
  return dir + "/cpu_peak." + cacheNamePart(host) + "." + cacheNamePart(cpu.model_name) + ".txt";
}

CpuUnits loadOrMeasureCpuUnits(const CpuInfo& cpu) {
  const std::string path = cpuPeakCacheFile(cpu, hostName());
  CpuUnits u;
  if (!path.empty() && readCache(path, cpu, u)) {
    u.model_name = cpu.model_name;
    u.isa = cpu.isaString();
    u.cache_file = path;
    u.from_cache = true;
    return u;
  }
  u = measureCpuUnits(cpu);
  if (path.empty()) return u;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    const std::string gemm_lines = gemmLines(slurpFile(path));  // kept across re-measuring
    std::ofstream out(tmp);
    out << "ftbench cpu peak v" << kCacheVersion << "\nmodel " << cpu.model_name << "\nisa "
        << cpu.isaString() << "\nclock_hz " << std::setprecision(10) << u.clock_hz << "\n";
    for (const CpuUnit& cu : u.units)
      out << "unit " << cu.measured_flops_per_cycle << " " << cu.flops_per_cycle << " " << cu.name
          << "\n";
    out << gemm_lines;
    if (!out) return u;  // unwritable cache: measured figures are still valid
  }
  std::filesystem::rename(tmp, path, ec);  // atomic: concurrent ranks never read half a file
  if (ec)
    std::filesystem::remove(tmp, ec);
  else
    u.cache_file = path;
  return u;
}

double cachedGemmFigure(const std::string& cache_text, const std::string& key) {
  std::istringstream is(cache_text);
  std::string line;
  double best = 0;
  while (std::getline(is, line)) {
    if (line.rfind("gemm ", 0) != 0) continue;
    std::istringstream ls(line.substr(5));
    double flops = 0;
    std::string k;
    if (!(ls >> flops) || !std::getline(ls, k) || k.empty() || k.substr(1) != key) continue;
    if (std::isfinite(flops)) best = std::max(best, flops);
  }
  return best;
}

std::string withGemmFigure(const std::string& cache_text, const std::string& key, double flops) {
  std::istringstream is(cache_text);
  std::string line, out;
  while (std::getline(is, line))
    if (line.rfind("gemm ", 0) != 0 || cachedGemmFigure(line, key) == 0) out += line + "\n";
  std::ostringstream g;
  g << "gemm " << std::setprecision(10) << flops << " " << key << "\n";
  return out + g.str();
}

GemmBest recordGemmFigure(const CpuInfo& cpu, const std::string& key, double measured) {
  GemmBest b;
  const std::string path = cpuPeakCacheFile(cpu, hostName());
  const std::string text = path.empty() ? "" : slurpFile(path);
  b.cached = cachedGemmFigure(text, key);
  b.best = std::max(b.cached, measured);
  if (path.empty()) return b;
  if (measured > b.cached && !replaceFile(path, withGemmFigure(text, key, measured))) return b;
  b.cache_file = path;
  return b;
}

PeakFlops cpuPeak(const CpuUnits& u, const std::string& dtype, int cores_used) {
  PeakFlops p;
  const CpuUnit* best = nullptr;
  for (const CpuUnit& cu : u.units) {
    bool fp32_unit = cu.name == "avx2 FMA" || cu.name == "avx512 FMA";
    if (!fp32_unit && dtype != "bf16") continue;
    if (!best || cu.flops_per_cycle > best->flops_per_cycle) best = &cu;
  }
  if (!best || cores_used <= 0 || u.clock_hz <= 0) {
    p.source = "CPU peak unknown (no FMA unit measured on " + u.model_name + ")";
    return p;
  }
  p.unit = best->name;
  p.cores = cores_used;
  p.clock_hz = u.clock_hz;
  p.flops_per_cycle = best->flops_per_cycle;
  p.flops = double(cores_used) * u.clock_hz * best->flops_per_cycle;
  p.source = "CPU " + u.model_name + ": " + std::to_string(cores_used) + " core(s) x " +
             formatFixed(u.clock_hz / 1e9, 2) + " GHz x " + formatFixed(best->flops_per_cycle, 0) +
             " " + dtype + " FLOP/cycle (" + best->name + ", measured " +
             formatFixed(best->measured_flops_per_cycle, 1) + ")" +
             (u.from_cache ? ", cached in " + u.cache_file : "");
  return p;
}

const std::vector<GpuPeakEntry>& gpuPeakTable() {
  // Vendor data sheets, dense (no 2:4 sparsity); fp32 is the non-tensor-core figure.
  // Longer matches first: "H100 PCIe" before "H100".
  static const std::vector<GpuPeakEntry> kTable = {
      {"h100 pcie", "NVIDIA H100 PCIe", 51.2, 756.0},
      {"h100 nvl", "NVIDIA H100 NVL", 60.0, 835.0},
      {"h100", "NVIDIA H100 SXM", 66.9, 989.4},
      {"h200", "NVIDIA H200 SXM", 66.9, 989.4},
      {"gh200", "NVIDIA GH200", 66.9, 989.4},
      {"a100", "NVIDIA A100", 19.5, 312.0},
      {"l40s", "NVIDIA L40S", 91.6, 362.1},
      {"l4", "NVIDIA L4", 30.3, 121.0},
      {"a10g", "NVIDIA A10G", 31.2, 70.0},
      {"a10", "NVIDIA A10", 31.2, 125.0},
      {"mi300x", "AMD Instinct MI300X", 163.4, 1307.4},
      {"mi250x", "AMD Instinct MI250X", 47.9, 383.0},
  };
  return kTable;
}

PeakFlops gpuPeak(const std::string& device_name, const std::string& dtype) {
  PeakFlops p;
  const std::string n = asciiLower(device_name);
  // "l4" must not match "l40s": require the match to end at a word boundary.
  for (const GpuPeakEntry& e : gpuPeakTable()) {
    size_t at = n.find(e.match);
    size_t end = at + std::strlen(e.match);
    if (at == std::string::npos ||
        (end < n.size() && std::isalnum(static_cast<unsigned char>(n[end]))))
      continue;
    double tf = dtype == "bf16" ? e.bf16_tflops : e.fp32_tflops;
    p.flops = tf * 1e12;
    p.unit = "GPU table";
    p.source = std::string("GPU table: ") + e.label + " dense " + dtype + " " + formatFixed(tf, 1) +
               " TFLOPS (device '" + device_name + "')";
    return p;
  }
  p.source = "GPU '" + device_name + "' not in the peak table: set metrics.peak_tflops";
  return p;
}

PeakFlops applyPeakOverride(const PeakFlops& computed, double peak_tflops) {
  if (!(peak_tflops > 0)) return computed;
  PeakFlops p;
  p.flops = peak_tflops * 1e12;
  p.unit = "config";
  p.source = "config metrics.peak_tflops = " + formatFixed(peak_tflops, 4) + " TFLOPS" +
             (computed.flops > 0 ? " (computed: " + formatFixed(computed.flops / 1e12, 4) +
                                       " TFLOPS, " + computed.source + ")"
                                 : "");
  return p;
}

PeakCheck checkGemmAgainstPeak(double gemm_flops, const PeakFlops& peak) {
  PeakCheck c;
  if (peak.flops > 0 && gemm_flops > peak.flops) {
    c.ok = false;
    c.message = "peak error: the measured GEMM (" + formatFixed(gemm_flops / 1e9, 1) +
                " GFLOP/s) exceeds the computed hardware peak (" +
                formatFixed(peak.flops / 1e9, 1) + " GFLOP/s from " + peak.source +
                "), so that peak is wrong; MFU is not reported. Fix: set metrics.peak_tflops";
  }
  return c;
}

double mfuAgainst(double model_flops_per_s, const PeakFlops& peak, const PeakCheck& check) {
  if (!(peak.flops > 0) || !check.ok) return std::numeric_limits<double>::quiet_NaN();
  return model_flops_per_s / peak.flops;
}

// ---- Device memory (sweep_tagger expand --memory-budget) -----------------------------

const std::vector<GpuMemoryEntry>& gpuMemoryTable() {
  // Vendor data sheets: the capacity of one device (the driver reports a few % less).
  static const std::vector<GpuMemoryEntry> kTable = {
      {"h100", "NVIDIA H100 SXM/PCIe 80 GB", 80},
      {"h100 nvl", "NVIDIA H100 NVL 94 GB", 94},
      {"h200", "NVIDIA H200 141 GB", 141},
      {"gh200", "NVIDIA GH200 96 GB", 96},
      {"a100", "NVIDIA A100 80 GB", 80},
      {"a100 80gb", "NVIDIA A100 80 GB", 80},
      {"a100 40gb", "NVIDIA A100 40 GB", 40},
      {"l40s", "NVIDIA L40S 48 GB", 48},
      {"l4", "NVIDIA L4 24 GB", 24},
      {"l40", "NVIDIA L40 48 GB", 48},
      {"a40", "NVIDIA A40 48 GB", 48},
      {"rtx a6000", "NVIDIA RTX A6000 48 GB", 48},
      {"a6000", "NVIDIA RTX A6000 48 GB", 48},
      {"rtx 6000 ada", "NVIDIA RTX 6000 Ada 48 GB", 48},
      {"rtx 4090", "NVIDIA GeForce RTX 4090 24 GB", 24},
      {"rtx 3090", "NVIDIA GeForce RTX 3090 24 GB", 24},
      {"a10g", "NVIDIA A10G 24 GB", 24},
      {"a10", "NVIDIA A10 24 GB", 24},
      {"mi300x", "AMD Instinct MI300X 192 GB", 192},
      {"mi250x", "AMD Instinct MI250X 128 GB", 128},
  };
  return kTable;
}

const GpuMemoryEntry* findGpuMemory(const std::string& type) {
  std::string t = asciiLower(type);
  std::replace(t.begin(), t.end(), '-', ' ');
  std::replace(t.begin(), t.end(), '_', ' ');
  for (const GpuMemoryEntry& e : gpuMemoryTable())
    if (t == e.type) return &e;
  return nullptr;
}

}  // namespace ftb
