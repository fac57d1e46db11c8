// The CPU build of the trainer (`trainer`, trainer/CMakeLists.txt): NCCL is refused by name.
// A run that asks for it on a GPU runs `trainer_cuda`, which has it where libtorch has CUDA.
#include "common/error.h"
#include "trainer/parallel/backend.h"

namespace ftb {

c10::intrusive_ptr<c10d::Backend> makeNcclBackend(c10::intrusive_ptr<c10d::Store>, int, int,
                                                  std::chrono::milliseconds) {
  throw ConfigError("parallel.backend", "config",
                    "NCCL is not in this build of the trainer (the CPU build; trainer_cuda "
                    "has it where libtorch has CUDA)",
                    "use backend = \"gloo\" or \"auto\"");
}

}  // namespace ftb
