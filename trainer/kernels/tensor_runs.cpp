#include "trainer/kernels/tensor_runs.h"

#include <algorithm>
#include <utility>

#include "trainer/kernels/cpu_kernels.h"

namespace ftb {

std::vector<std::vector<size_t>> adjacentRuns(const std::vector<torch::Tensor>& ts) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].defined()) idx.push_back(i);
  auto key = [&](size_t i) {
    return std::make_pair(ts[i].storage().unsafeGetStorageImpl(), ts[i].storage_offset());
  };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  std::vector<std::vector<size_t>> runs;
  for (size_t i : idx) {
    if (!runs.empty()) {
      const torch::Tensor &last = ts[runs.back().back()], &cur = ts[i];
      if (last.is_contiguous() && cur.is_contiguous() && last.scalar_type() == cur.scalar_type() &&
          key(runs.back().back()).first == key(i).first &&
          cur.storage_offset() == last.storage_offset() + last.numel()) {
        runs.back().push_back(i);
        continue;
      }
    }
    runs.push_back({i});
  }
  return runs;
}

torch::Tensor flatSpan(const std::vector<torch::Tensor>& ts, const std::vector<size_t>& run) {
  const torch::Tensor& first = ts[run[0]];
  if (!first.defined()) return {};
  int64_t n = 0;
  for (size_t i : run) {
    const torch::Tensor& t = ts[i];
    if (!t.defined() || !t.is_contiguous() || t.scalar_type() != first.scalar_type() ||
        t.storage().unsafeGetStorageImpl() != first.storage().unsafeGetStorageImpl() ||
        t.storage_offset() != first.storage_offset() + n)
      return {};
    n += t.numel();
  }
  if (run.size() == 1) return first.view(-1);
  return torch::empty({0}, first.options()).set_(first.storage(), first.storage_offset(), {n}, {1});
}

double gradSquaredNorm(const std::vector<torch::Tensor>& grads,
                       const std::vector<torch::Tensor>& weights) {
  torch::NoGradGuard no_grad;
  // Dense fp32 CPU runs: one fused pass, each square summed in fp64 (sumSquaresF64: no fp64
  // copy, which cost the D512 model ~17 ms a step). Other runs: fp64 reductions of fp64
  // copies of 1 Mi-element chunks (64 Mi on a GPU), summed in a fixed order: on the CPU in
  // a host double, each term read at once; on a GPU in a 0-dim fp64 tensor on the device,
  // read once at the end (one sync, not one per chunk).
  torch::Tensor dev;
  double host = 0;
  auto add = [&dev, &host](const torch::Tensor& x, bool square) {  // x: 0-dim fp64
    if (x.device().is_cpu()) {
      const double v = x.item<double>();
      host += square ? v * v : v;
    } else {
      const torch::Tensor term = square ? x * x : x;
      dev = dev.defined() ? dev + term : term;
    }
  };
  if (weights.empty()) {  // one reduction per run of adjacent gradients (a DDP bucket)
    // An fp32 norm of a whole bucket is off by ~1e-5 relative (ATen reduces fp32 in fp32:
    // 350 K values gave -1.2e-5), enough to separate layouts that bucket differently.
    // On a GPU, 64 Mi-element chunks: five small kernels per chunk are launch-bound there.
    for (const std::vector<size_t>& run : adjacentRuns(grads)) {
      torch::Tensor flat = flatSpan(grads, run);
      torch::Tensor t = (flat.defined() ? flat : grads[run[0]]).reshape({-1});
      if (t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous()) {
        host += kernels::sumSquaresF64(t.data_ptr<float>(), t.numel());
        continue;
      }
      const int64_t kChunk = int64_t(1) << (t.device().is_cpu() ? 20 : 26);
      for (int64_t i = 0; i < t.numel(); i += kChunk)
        add(t.narrow(0, i, std::min(kChunk, t.numel() - i)).to(torch::kFloat64).norm(), true);
    }
  } else {
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (weights[i].defined())
        add((grads[i].pow(2) * weights[i]).sum().to(torch::kFloat64), false);
      else
        add(grads[i].norm().to(torch::kFloat64), true);
    }
  }
  return host + (dev.defined() ? dev.item<double>() : 0.0);
}

void scaleGrads(const std::vector<torch::Tensor>& grads, double factor) {
  torch::NoGradGuard no_grad;
  for (const std::vector<size_t>& run : adjacentRuns(grads)) {
    torch::Tensor flat = flatSpan(grads, run);
    if (flat.defined()) {
      flat.mul_(factor);
    } else {
      for (size_t i : run) grads[i].mul_(factor);
    }
  }
}

}  // namespace ftb
