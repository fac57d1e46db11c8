#include "trainer/kernels/openblas.h"

#include <dlfcn.h>

#include <mutex>

namespace ftb::kernels {
namespace {

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // cblas.h's enum values
using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                       float, float*, int);
using Describe = char* (*)();

class LoadedOpenBlas final : public OpenBlas {
 public:
  LoadedOpenBlas(Sgemm sgemm, Describe config, Describe core)
      : sgemm_(sgemm), config_(config), core_(core) {}
  void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc) const override {
    sgemm_(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, int(m), int(n),
           int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  }
  std::string describe() const override {
    std::string s = config_ ? config_() : "OpenBLAS";
    while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
    if (s.rfind("OpenBLAS", 0) != 0) s = "OpenBLAS " + s;
    return core_ ? s + " (core " + core_() + ")" : s;
  }

 private:
  Sgemm sgemm_;
  Describe config_, core_;
};

struct Loaded {
  const OpenBlas* blas = nullptr;
  std::string why;
};

Loaded load() {
  Loaded l;
  // The trainer links it (trainer/CMakeLists.txt): this finds the loaded copy, and dlsym on
  // its handle reaches OpenBLAS's cblas_sgemm whatever else the process exports.
  void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    l.why = dlerror();
    return l;
  }
  auto sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
  if (!sgemm) {
    l.why = "libopenblas.so.0 has no cblas_sgemm";
    return l;
  }
  l.blas = new LoadedOpenBlas(sgemm, reinterpret_cast<Describe>(dlsym(h, "openblas_get_config")),
                              reinterpret_cast<Describe>(dlsym(h, "openblas_get_corename")));
  return l;  // the library and this object live as long as the process
}

}  // namespace

const OpenBlas* openblas(std::string* why) {
  static const Loaded loaded = load();
  if (!loaded.blas && why) *why = loaded.why;
  return loaded.blas;
}

}  // namespace ftb::kernels
