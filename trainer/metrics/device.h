// The device this process computes on: the CPU, or one CUDA GPU per rank.
//
// Contracts:
// - useComputeDevice(d) is called once per process, before the model exists; every
//   other function reads that choice (the CPU until then). For a CUDA device it makes
//   it the process's current CUDA device (NCCL and the caching allocator use it).
// - syncComputeDevice() returns once all work queued on the compute device is done
//   (torch::cuda::synchronize); on the CPU, where every op has finished when it
//   returns, it does nothing. Timings that must include a device's queued work end with
//   it (perf.h phaseEnd()); a step's phases use DeviceMark instead (below).
// - deviceMemoryPeaks(): the CUDA caching allocator's peak allocated and peak reserved
//   bytes on the compute device since the process began; both -1 on the CPU.
// - cudaDeviceName(i): the GPU's name as the driver reports it ("NVIDIA H100 80GB HBM3");
//   "" when the device does not exist. visibleCudaDevices(): 0 without a usable GPU.
#pragma once

#include <c10/core/Event.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace ftb {

void useComputeDevice(const torch::Device& d);
torch::Device computeDevice();
bool computeOnCuda();
void syncComputeDevice();
// Waits for the work queued on the compute device's current stream, not for other streams
// (a collective's NCCL stream goes on); nothing on the CPU. Before a collective's host wait
// is timed (comm.cpp), so that wait counts the collective, not the compute queued before it.
void syncComputeStream();

// A point on the compute device's timeline, so that a step's phases are timed without
// stalling the host at each phase end (comm/phase_timer.h).
// - mark(): on the CPU, the host clock now (every op queued before has finished then); on
//   a GPU, a timing CUDA event recorded on the current stream, which the device reaches
//   once the work queued before it is done. Marking never waits.
// - secondsSince(earlier): the seconds from `earlier` to this mark on that timeline; on a
//   GPU it waits until the device has reached this mark (one wait for any number of
//   earlier marks). REQUIRES: both marks made on one compute device, `earlier` first.
class DeviceMark {
 public:
  static DeviceMark mark();
  double secondsSince(const DeviceMark& earlier) const;

 private:
  double host_s_ = 0;                  // the CPU's mark
  std::shared_ptr<c10::Event> event_;  // a GPU's mark
};

struct DeviceMemoryPeaks {
  int64_t allocated = -1;
  int64_t reserved = -1;
};
DeviceMemoryPeaks deviceMemoryPeaks();

// The compute device's total memory in bytes (cudaMemGetInfo); 0 on the CPU.
double deviceTotalMemory();

// training.device_memory_limit_gb: caps the CUDA caching allocator of the compute device at
// `bytes` for this process (setMemoryFraction of the device's total); an allocation past it
// raises CUDA's out-of-memory error. Returns false, capping nothing, when the compute device
// is not a GPU or has less than `bytes`. REQUIRES: bytes > 0; after useComputeDevice.
bool capDeviceMemory(double bytes);

int visibleCudaDevices();
std::string cudaDeviceName(int index);

// Two builds of the trainer (trainer/CMakeLists.txt): `trainer` links libtorch's CPU library
// alone, so a CPU run loads no CUDA library (about 0.3 CPU-s and 350 MiB of resident memory
// less per process); `trainer_cuda`, beside it where libtorch has CUDA, links CUDA and NCCL.
// cudaTrainerPath(): in `trainer`, the path of `trainer_cuda` when it exists, for a run on a
// GPU to exec; "" in `trainer_cuda` itself and where it was not built. In `trainer`,
// visibleCudaDevices() counts the driver's GPUs (cuDeviceGetCount; 0 without a driver or
// without `trainer_cuda`) and cudaDeviceName() is "".
std::string cudaTrainerPath();

}  // namespace ftb
