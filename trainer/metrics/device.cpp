#include "trainer/metrics/device.h"

#include <ATen/DeviceAccelerator.h>
#include <torch/cuda.h>

#include <chrono>
#include <mutex>
#include <stdexcept>

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

void syncComputeStream() {
  const torch::Device d = computeDevice();
  if (d.is_cuda()) at::accelerator::getCurrentStream(d.index() < 0 ? 0 : d.index()).synchronize();
}

DeviceMark DeviceMark::mark() {
  DeviceMark m;
  const torch::Device d = computeDevice();
  if (!d.is_cuda()) {
    m.host_s_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return m;
  }
  // BACKEND_DEFAULT: a CUDA event with timing (PyTorch's default event has none).
  m.event_ = std::make_shared<c10::Event>(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  m.event_->record(at::accelerator::getCurrentStream(d.index() < 0 ? 0 : d.index()));
  return m;
}

double DeviceMark::secondsSince(const DeviceMark& earlier) const {
  if (!event_ && !earlier.event_) return host_s_ - earlier.host_s_;
  if (!event_ || !earlier.event_)
    throw std::logic_error("DeviceMark: a host mark and a device mark cannot be compared");
  event_->synchronize();
  earlier.event_->synchronize();                       // done already when both are on one stream
  return earlier.event_->elapsedTime(*event_) * 1e-3;  // milliseconds from earlier to this
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
