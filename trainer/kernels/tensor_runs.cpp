#include "trainer/kernels/tensor_runs.h"

#include <algorithm>
#include <map>
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

double foreachSquaredNorm(const std::vector<torch::Tensor>& ts) {
  if (ts.empty()) return 0;
  torch::NoGradGuard no_grad;
  std::map<int, std::vector<torch::Tensor>> by_dtype;  // ATen's fast path takes one dtype
  for (const torch::Tensor& t : ts) by_dtype[static_cast<int>(t.scalar_type())].push_back(t);
  std::vector<torch::Tensor> norms;
  for (const auto& [dtype, list] : by_dtype)
    for (torch::Tensor& n : at::_foreach_norm(list, 2, torch::kFloat32)) norms.push_back(n);
  return torch::stack(norms).to(torch::kFloat64).square_().sum().item<double>();
}

double gradSquaredNorm(const std::vector<torch::Tensor>& grads,
                       const std::vector<torch::Tensor>& weights) {
  torch::NoGradGuard no_grad;
  // Dense fp32 CPU runs: one fused pass, each square summed in fp64 (sumSquaresF64: no fp64
  // copy, which cost the D512 model ~17 ms a step); other CPU runs: fp64 reductions of fp64
  // copies of 1 Mi-element chunks, summed in a fixed order. Runs off the CPU: one
  // foreachSquaredNorm over all of them (a few launches and one read for the whole model).
  if (weights.empty()) {  // one reduction per run of adjacent gradients (a DDP bucket)
    // An fp32 norm of a whole bucket is off by ~1e-5 relative on the CPU (ATen reduces fp32
    // in fp32: 350 K values gave -1.2e-5), enough to separate layouts that bucket differently.
    double host = 0;
    std::vector<torch::Tensor> on_device;
    for (const std::vector<size_t>& run : adjacentRuns(grads)) {
      torch::Tensor flat = flatSpan(grads, run);
      torch::Tensor t = (flat.defined() ? flat : grads[run[0]]).reshape({-1});
      if (!t.device().is_cpu()) {
        on_device.push_back(t);
      } else if (t.scalar_type() == torch::kFloat32 && t.is_contiguous()) {
        host += kernels::sumSquaresF64(t.data_ptr<float>(), t.numel());
      } else {
        constexpr int64_t kChunk = int64_t(1) << 20;
        for (int64_t i = 0; i < t.numel(); i += kChunk) {
          const double n = t.narrow(0, i, std::min(kChunk, t.numel() - i))
                               .to(torch::kFloat64)
                               .norm()
                               .item<double>();
          host += n * n;
        }
      }
    }
    return host + foreachSquaredNorm(on_device);
  }
  // Weighted (tp > 1): one fp64 term per gradient, summed on its device, read once.
  torch::Tensor dev;
  double host = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    torch::Tensor term = weights[i].defined()
                             ? (grads[i].pow(2) * weights[i]).sum().to(torch::kFloat64)
                             : grads[i].norm().to(torch::kFloat64).square();
    if (term.device().is_cpu())
      host += term.item<double>();
    else
      dev = dev.defined() ? dev + term : term;
  }
  return host + (dev.defined() ? dev.item<double>() : 0.0);
}

void scaleGrads(const std::vector<torch::Tensor>& grads, double factor) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> on_device;  // one _foreach_mul_ for all of them
  for (const std::vector<size_t>& run : adjacentRuns(grads)) {
    torch::Tensor flat = flatSpan(grads, run);
    if (flat.defined()) {
      if (flat.device().is_cpu())
        flat.mul_(factor);
      else
        on_device.push_back(flat);
      continue;
    }
    for (size_t i : run) {
      if (grads[i].device().is_cpu())
        grads[i].mul_(factor);
      else
        on_device.push_back(grads[i]);
    }
  }
  if (!on_device.empty()) at::_foreach_mul_(on_device, factor);
}

}  // namespace ftb
