// device_cuda.h in the CUDA build of the trainer (`trainer_cuda`).
#include "trainer/metrics/device_cuda.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <string>

#include "trainer/metrics/device.h"

namespace ftb {

void setCudaMemoryFraction(double fraction, int index) {
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, index);
}

int visibleCudaDevices() { return static_cast<int>(torch::cuda::device_count()); }

std::string cudaDeviceName(int index) {
  if (index < 0 || index >= visibleCudaDevices()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "";
  return prop.name;
}

std::string cudaTrainerPath() { return ""; }

}  // namespace ftb
