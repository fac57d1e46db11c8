// The fused CUDA kernels (fused_cuda.h) in the CPU build of the trainer and the unit tests:
// no CUDA library is linked, so available() is false and the kernels throw. A run on a GPU
// runs `trainer_cuda` (metrics/device.h, cudaTrainerPath), which has them (fused_cuda.cpp).
#include <stdexcept>
#include <string>

#include "trainer/kernels/fused_cuda.h"

namespace ftb::cuda_fused {
namespace {

[[noreturn]] void noCuda(const char* op) {
  throw std::logic_error(std::string("cuda_fused::") + op +
                         ": this build of the trainer was built without CUDA (trainer_cuda has "
                         "the fused CUDA kernels)");
}

}  // namespace

bool available() { return false; }

torch::Tensor rmsNorm(const torch::Tensor&, const torch::Tensor&, double, torch::ScalarType) {
  noCuda("rmsNorm");
}

torch::Tensor rope(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double) {
  noCuda("rope");
}

torch::Tensor swiGlu(const torch::Tensor&, const torch::Tensor&) { noCuda("swiGlu"); }

torch::Tensor crossEntropy(const torch::Tensor&, const torch::Tensor&) { noCuda("crossEntropy"); }

}  // namespace ftb::cuda_fused
