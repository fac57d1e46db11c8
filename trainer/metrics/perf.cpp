#include "trainer/metrics/perf.h"

#include <ctime>
#include <fstream>
#include <sstream>

namespace ftb {
namespace {

int64_t procStatusKb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream is(line.substr(field.size() + 1));
      int64_t kb = 0;
      is >> kb;
      return kb;
    }
  }
  return 0;
}

}  // namespace

double measureGemmPeak(torch::ScalarType dtype, int64_t n, int reps) {
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::randn({n, n}).to(dtype), b = torch::randn({n, n}).to(dtype);
  torch::Tensor c = torch::matmul(a, b);  // warm-up: thread pools, packing buffers
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    double t0 = nowSeconds();
    c = torch::matmul(a, b);
    best = std::min(best, nowSeconds() - t0);
  }
  return 2.0 * double(n) * double(n) * double(n) / best;
}

int64_t peakRssBytes() { return procStatusKb("VmHWM") * 1024; }
int64_t currentRssBytes() { return procStatusKb("VmRSS") * 1024; }

std::string utcNowIso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace ftb
