// What device.cpp needs from CUDA itself, defined once per build of the trainer
// (device.h, cudaTrainerPath): device_cuda.cpp in `trainer_cuda`, device_cuda_off.cpp in
// `trainer` and the unit tests. The two also define visibleCudaDevices(), cudaDeviceName()
// and cudaTrainerPath() of device.h.
#pragma once

namespace ftb {

// The CUDA caching allocator of device `index` keeps this process under `fraction` of the
// device's memory. REQUIRES: the CUDA build (the CPU build's throws std::logic_error).
void setCudaMemoryFraction(double fraction, int index);

}  // namespace ftb
