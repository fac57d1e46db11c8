// parallel.backend = "auto" follows where the tensors are: the trainer keeps them on the
// CPU, so auto must pick Gloo even in a build where CUDA and NCCL exist.
#include "trainer/parallel/backend.h"

#include <gtest/gtest.h>

namespace ftb {
namespace {

TEST(ResolveBackend, AutoIsGlooForCpuTensors) {
  EXPECT_EQ(resolveBackend("auto"), BackendKind::kGloo);
  EXPECT_EQ(resolveBackend("auto", /*tensors_on_cuda=*/false), BackendKind::kGloo);
}

TEST(ResolveBackend, ExplicitNamesAreKept) {
  EXPECT_EQ(resolveBackend("gloo", true), BackendKind::kGloo);
  EXPECT_EQ(resolveBackend("nccl"), BackendKind::kNccl);
}

TEST(ResolveBackend, AutoWithCudaTensorsNeedsNcclCompiledIn) {
  if (!ncclCompiledIn()) EXPECT_EQ(resolveBackend("auto", true), BackendKind::kGloo);
}

}  // namespace
}  // namespace ftb
