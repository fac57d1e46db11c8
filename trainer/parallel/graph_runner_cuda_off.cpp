// makeCudaGraphRunner in the CPU build of the trainer (graph_runner.h): no CUDA library is
// linked here; a run on a GPU runs `trainer_cuda` (metrics/device.h, cudaTrainerPath).
#include <stdexcept>

#include "trainer/parallel/graph_runner.h"

namespace ftb {

std::unique_ptr<StepRunner> makeCudaGraphRunner(Transformer, GradSync&, int64_t) {
  throw std::logic_error(
      "training.cuda_graphs: this build of the trainer has no CUDA (trainer_cuda has)");
}

}  // namespace ftb
