#include "common/env_check.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <sstream>

#include "common/config.h"

namespace ftb {
namespace {

// `lib`: RTLD_DEFAULT (this process's symbols) or a dlopen() handle.
template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

void detectBlas(EnvFacts& f, void* lib) {
  if (auto config = symbol<char* (*)()>(lib, "openblas_get_config")) {
    f.blas = trimmed(config());  // "OpenBLAS 0.3.21 ... USE_OPENMP Haswell MAX_THREADS=64"
    if (f.blas.rfind("OpenBLAS", 0) != 0) f.blas = "OpenBLAS " + f.blas;
    if (auto core = symbol<char* (*)()>(lib, "openblas_get_corename"))
      f.blas_core = trimmed(core());
    // An OpenMP build runs each call on omp_get_max_threads() of the calling thread
    // (libtorch's at::set_num_threads sets it); a pthreads build on its own pool.
    auto omp = symbol<int (*)()>(lib, "omp_get_max_threads");
    if (f.blas.find("USE_OPENMP") != std::string::npos && omp) {
      f.blas_threads = omp();
      f.blas_threads_source = "omp_get_max_threads() (OpenMP build)";
    } else if (auto n = symbol<int (*)()>(lib, "openblas_get_num_threads")) {
      f.blas_threads = n();
      f.blas_threads_source = "openblas_get_num_threads()";
    }
  } else if (auto mkl = symbol<void (*)(char*, int)>(lib, "mkl_get_version_string")) {
    char buf[256] = {};
    mkl(buf, sizeof buf - 1);
    f.blas = trimmed(buf);
  }
  f.blas_isa_level = openblasCoretypeLevel(f.blas_core);
}

void detectAllocator(EnvFacts& f, void* lib) {
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  if (auto mallctl = symbol<Mallctl>(lib, "mallctl")) {
    const char* version = nullptr;
    size_t len = sizeof version;
    f.allocator = mallctl("version", &version, &len, nullptr, 0) == 0 && version
                      ? std::string("jemalloc ") + version
                      : "jemalloc";
  }
}

int maxThreads(const EnvFacts& f) { return std::max(f.intra_threads, f.blas_threads); }

bool oversubscribed(const EnvFacts& f) { return f.bound_cpus > 0 && maxThreads(f) > f.bound_cpus; }

std::string threadsText(const EnvFacts& f) {
  return std::to_string(f.intra_threads) + " intra-op thread(s)" +
         (f.blas_threads > 0 ? " and " + std::to_string(f.blas_threads) + " BLAS thread(s)" : "");
}

std::string threadFix(const EnvFacts& f) {
  return "training.threads=" + std::to_string(f.bound_cpus) +
         " (or OMP_NUM_THREADS=" + std::to_string(f.bound_cpus) +
         "), or start ranks through the launcher, which binds cores and sizes threads";
}

// Why a GEMM falls short of the peak, most specific first: "cause: ...; fix: ...".
std::string gemmCause(const EnvFacts& f, const std::string& dtype, const PeakFlops& peak) {
  if (f.blas_isa_level > 0 && f.blas_isa_level < std::min(f.cpu_isa_level, 5))
    return "cause: OpenBLAS runs its " + f.blas_core + " (" + isaLevelName(f.blas_isa_level) +
           ") kernels" +
           (f.openblas_coretype.empty() ? ""
                                        : " because OPENBLAS_CORETYPE=" + f.openblas_coretype) +
           " on a CPU with " + isaLevelName(f.cpu_isa_level) +
           "; fix: unset OPENBLAS_CORETYPE or "
           "set it to " +
           f.recommended_core + " (the launcher does this by default)";
  if (oversubscribed(f))
    return "cause: " + threadsText(f) + " on " + std::to_string(f.bound_cpus) +
           " bound CPU(s); fix: " + threadFix(f);
  if (dtype == "bf16")
    return "cause: this libtorch's bf16 matmul does not reach the " + peak.unit +
           " units; fix: none in the environment (compare gemm_efficiency, or run fp32)";
  return "cause: other processes on these cores, or a BLAS (" + f.blas + ") without " +
         f.cpu_best_unit +
         " kernels; fix: run on idle cores bound to this rank (the launcher "
         "binds them), and check the BLAS with `perf top`";
}

}  // namespace

std::string isaLevelName(int level) {
  static const char* kNames[] = {"unknown", "sse",         "avx",     "avx2 FMA",
                                 "avx512",  "avx512_bf16", "amx_bf16"};
  return level >= 1 && level <= 6 ? kNames[level] : kNames[0];
}

namespace {

void fillCommon(EnvFacts& f, const CpuInfo& cpu, int intra_threads) {
  f.openblas_coretype = env("OPENBLAS_CORETYPE");
  f.omp_num_threads = env("OMP_NUM_THREADS");
  f.cpu_isa_level = cpuIsaLevel(cpu);
  f.recommended_core = recommendedOpenblasCoretype(cpu);
  f.cpu_best_unit = cpu.bestFmaUnit();
  f.intra_threads = intra_threads;
  f.bound_cpus = static_cast<int>(cpu.bound_cpus.size());
  f.bound_physical_cores = cpu.bound_physical_cores;
  f.bound_cpu_list = cpu.boundCpuList();
  f.online_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

std::string baseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool startsWithAny(const std::string& name, std::initializer_list<const char*> prefixes) {
  for (const char* p : prefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

// dlopen(path) or nullptr, with the loader's reason in *why.
void* openLibrary(const std::string& path, std::string* why) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    *why = e ? e : "dlopen failed";
  }
  return h;
}

}  // namespace

EnvFacts detectEnv(const CpuInfo& cpu, int intra_threads) {
  EnvFacts f;
  detectBlas(f, RTLD_DEFAULT);
  detectAllocator(f, RTLD_DEFAULT);
  fillCommon(f, cpu, intra_threads);
  return f;
}

LinkedLibs parseLoaderList(const std::string& text) {
  LinkedLibs libs;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // "\tlibblas.so.3 => /lib/x86_64-linux-gnu/libblas.so.3 (0x...)" or "\t/path/lib.so (0x...)"
    std::istringstream words(line);
    std::string name, arrow, path;
    words >> name >> arrow >> path;
    if (arrow != "=>") path = name;
    if (path.empty() || path[0] != '/') continue;  // "not found", the vdso
    const std::string base = baseName(name);
    if (libs.blas.empty() &&
        startsWithAny(base, {"libopenblas", "libblas.", "libmkl_rt", "libblis"}))
      libs.blas = path;
    if (libs.allocator.empty() &&
        startsWithAny(base, {"libjemalloc", "libtcmalloc", "libmimalloc"}))
      libs.allocator = path;
  }
  return libs;
}

EnvFacts detectEnvOf(const LinkedLibs& libs, const CpuInfo& cpu, int intra_threads) {
  EnvFacts f;
  std::string why;
  if (libs.blas.empty()) {
    f.blas = "none linked";
  } else if (void* h = openLibrary(libs.blas, &why)) {
    detectBlas(f, h);
    if (f.blas == "unknown") f.blas = "unknown (" + libs.blas + ")";
  } else {
    f.blas = "unknown (" + libs.blas + " does not load here: " + why + ")";
  }
  if (!libs.allocator.empty()) {
    // "libjemalloc.so.2" -> "jemalloc"; the version where the library loads here (a
    // jemalloc built for LD_PRELOAD refuses dlopen: "cannot allocate memory in static TLS").
    std::string name = baseName(libs.allocator).substr(3);
    f.allocator = name.substr(0, name.find('.'));
    if (void* h = openLibrary(libs.allocator, &why)) detectAllocator(f, h);
    f.allocator += " (" + libs.allocator + ")";
  }
  fillCommon(f, cpu, intra_threads);
  return f;
}

std::string envSummary(const EnvFacts& f) {
  std::string threads =
      (f.intra_threads > 0 ? std::to_string(f.intra_threads) + " intra-op / " : std::string()) +
      (f.blas_threads > 0 ? std::to_string(f.blas_threads) : std::string("?")) + " BLAS thread(s)";
  const std::string core =
      f.blas_core.empty() ? ""
                          : ", core " + f.blas_core + " (" + isaLevelName(f.blas_isa_level) + ")";
  return "BLAS " + f.blas + core + " on a CPU with " + isaLevelName(f.cpu_isa_level) + "; " +
         threads + "; " + bindingText(f) + "; allocator " + f.allocator;
}

std::vector<std::string> envWarnings(const EnvFacts& f, double gemm_flops, const PeakFlops& peak,
                                     const std::string& dtype) {
  std::vector<std::string> w;
  if (oversubscribed(f))
    w.push_back("environment: " + threadsText(f) + " on " + std::to_string(f.bound_cpus) +
                " bound CPU(s) (" + f.bound_cpu_list +
                "): the threads time-share cores; fix: " + threadFix(f));
  const bool cpu_peak = peak.cores > 0 && peak.flops > 0;
  if (cpu_peak && gemm_flops > 0 && gemm_flops < kGemmWarnFraction * peak.flops)
    w.push_back("environment: measured " + dtype + " GEMM " + formatFixed(gemm_flops / 1e9, 1) +
                " GFLOP/s is " + formatFixed(100 * gemm_flops / peak.flops, 0) + " % of the " +
                dtype + " hardware peak " + formatFixed(peak.flops / 1e9, 1) + " GFLOP/s (" +
                peak.unit + ", " + std::to_string(peak.cores) + " core(s)), below " +
                formatFixed(100 * kGemmWarnFraction, 0) + " %; " + gemmCause(f, dtype, peak));
  return w;
}

std::string bindingText(const EnvFacts& f) {
  if (f.bound_cpus <= 0 || f.bound_cpus >= f.online_cpus)
    return "not bound (all " + std::to_string(f.online_cpus) + " online CPUs)";
  return "bound to CPUs " + f.bound_cpu_list + " (" + std::to_string(f.bound_cpus) + " of " +
         std::to_string(f.online_cpus) + " online, " + std::to_string(f.bound_physical_cores) +
         " physical cores)";
}

std::vector<std::pair<std::string, AttrValue>> envAttrs(const EnvFacts& f,
                                                        const std::vector<std::string>& warnings) {
  std::string joined;
  for (const std::string& w : warnings) joined += (joined.empty() ? "" : "\n") + w;
  return {{"env_blas", f.blas},
          {"env_blas_core", f.blas_core},
          {"env_blas_isa", isaLevelName(f.blas_isa_level)},
          {"env_cpu_isa_best", isaLevelName(f.cpu_isa_level)},
          {"env_openblas_coretype", f.openblas_coretype},
          {"env_intra_threads", int64_t{f.intra_threads}},
          {"env_blas_threads", int64_t{f.blas_threads}},
          {"env_blas_threads_source", f.blas_threads_source},
          {"env_omp_num_threads", f.omp_num_threads},
          {"env_bound_cpus", f.bound_cpu_list},
          {"env_bound_physical_cores", int64_t{f.bound_physical_cores}},
          {"env_online_cpus", int64_t{f.online_cpus}},
          {"env_core_binding", bindingText(f)},
          {"env_allocator", f.allocator},
          {"env_warnings", joined}};
}

}  // namespace ftb
