// SideCopies::Cuda in the CPU build of the trainer (host_copy_cuda.h): no CUDA library is
// linked, so a SideCopies of a GPU is never made here; a run on a GPU runs `trainer_cuda`
// (metrics/device.h, cudaTrainerPath).
#include <stdexcept>

#include "trainer/kernels/host_copy_cuda.h"

namespace ftb {

struct SideCopies::Cuda::State {};

std::unique_ptr<SideCopies::Cuda> SideCopies::cudaFor(torch::Device device) {
  throw std::logic_error("SideCopies on " + device.str() +
                         ": this build of the trainer has no CUDA (trainer_cuda has)");
}

SideCopies::Cuda::Cuda(torch::Device) {}
SideCopies::Cuda::~Cuda() = default;
void SideCopies::Cuda::copy(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {}
void SideCopies::Cuda::mark() {}
void SideCopies::Cuda::hostWait(size_t) {}
void SideCopies::Cuda::deviceWait() {}

}  // namespace ftb
