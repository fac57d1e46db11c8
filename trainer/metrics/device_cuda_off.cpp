// device_cuda.h in the CPU build of the trainer (`trainer`): no CUDA library is linked.
// The driver is asked for its GPU count through dlopen (libcuda.so.1), so that "auto"
// placements and --estimate-memory see the GPUs a run would get from `trainer_cuda`.
#include <dlfcn.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "common/files.h"
#include "trainer/metrics/device.h"
#include "trainer/metrics/device_cuda.h"

namespace ftb {
namespace {

// cuInit + cuDeviceGetCount of the driver API (CUDA_VISIBLE_DEVICES applies); 0 on any
// failure. The library stays loaded: the driver keeps its state for the process.
int driverDeviceCount() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 0;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  if (!init || !count || init(0) != 0 || count(&n) != 0) return 0;
  return n;
}

}  // namespace

void setCudaMemoryFraction(double, int) {
  throw std::logic_error("setCudaMemoryFraction: this build of the trainer has no CUDA");
}

int visibleCudaDevices() {
  static const int n = cudaTrainerPath().empty() ? 0 : driverDeviceCount();
  return n;
}

std::string cudaDeviceName(int) { return ""; }

std::string cudaTrainerPath() {
  const std::string dir = ownExecutableDir();
  if (dir.empty()) return "";
  const std::string path = dir + "/trainer_cuda";
  return access(path.c_str(), X_OK) == 0 ? path : "";
}

}  // namespace ftb
