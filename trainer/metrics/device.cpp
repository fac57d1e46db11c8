#include "trainer/metrics/device.h"

#include <ATen/DeviceAccelerator.h>
#include <torch/cuda.h>

#include <mutex>

#include "trainer/metrics/device_cuda.h"

namespace ftb {
namespace {

std::mutex g_mu;
torch::Device g_device(torch::kCPU);

}  // namespace

void useComputeDevice(const torch::Device& d) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_device = d;
  if (d.is_cuda()) at::accelerator::setDeviceIndex(d.index() < 0 ? 0 : d.index());
}

torch::Device computeDevice() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_device;
}

bool computeOnCuda() { return computeDevice().is_cuda(); }

void syncComputeDevice() {
  const torch::Device d = computeDevice();
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

DeviceMemoryPeaks deviceMemoryPeaks() {
  const torch::Device d = computeDevice();
  DeviceMemoryPeaks p;
  if (!d.is_cuda()) return p;
  const auto stats = at::accelerator::getDeviceStats(d.index());
  const size_t all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  p.allocated = stats.allocated_bytes[all].peak;
  p.reserved = stats.reserved_bytes[all].peak;
  return p;
}

double deviceTotalMemory() {
  const torch::Device d = computeDevice();
  if (!d.is_cuda()) return 0;
  return double(at::accelerator::getMemoryInfo(d.index()).second);
}

bool capDeviceMemory(double bytes) {
  const double total = deviceTotalMemory();
  if (!(total > 0) || bytes > total) return false;
  const torch::Device d = computeDevice();
  setCudaMemoryFraction(bytes / total, d.index() < 0 ? 0 : d.index());
  return true;
}

}  // namespace ftb
