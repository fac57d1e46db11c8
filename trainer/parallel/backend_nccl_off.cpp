// Built when FTB_USE_NCCL resolves OFF (CPU libtorch): NCCL is refused by name.
#include "common/error.h"
#include "trainer/parallel/backend.h"

namespace ftb {

c10::intrusive_ptr<c10d::Backend> makeNcclBackend(c10::intrusive_ptr<c10d::Store>, int, int,
                                                  std::chrono::milliseconds) {
  throw ConfigError("parallel.backend", "config",
                    "NCCL is not compiled into this build (libtorch has no CUDA)",
                    "use backend = \"gloo\" or \"auto\"");
}

}  // namespace ftb
