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
  if (!ncclCompiledIn()) {
    EXPECT_EQ(resolveBackend("auto", true), BackendKind::kGloo);
  }
}

TEST(ResolveDevice, AutoPicksTheGpuWhenOneIsPresent) {
  DeviceChoice cpu = resolveDevice("auto", "auto", 3, 0);
  EXPECT_EQ(cpu.device, "cpu");
  EXPECT_FALSE(cpu.cuda);
  EXPECT_TRUE(cpu.problem.empty());
  EXPECT_EQ(resolveDevice("auto", "gloo", 1, 8).device, "cuda:1");  // a GPU is present
  EXPECT_EQ(resolveDevice("auto", "auto", 0, 1).device, "cuda:0");
  EXPECT_EQ(resolveDevice("auto", "gloo", 0, 0).device, "cpu");
  DeviceChoice nccl = resolveDevice("auto", "nccl", 3, 8);
  EXPECT_EQ(nccl.device, "cuda:3");  // cuda:LOCAL_RANK
  EXPECT_TRUE(nccl.cuda);
  EXPECT_TRUE(nccl.problem.empty());
}

TEST(ResolveDevice, ExplicitDevices) {
  EXPECT_EQ(resolveDevice("cpu", "gloo", 2, 8).device, "cpu");
  EXPECT_EQ(resolveDevice("cuda", "auto", 2, 8).device, "cuda:2");
  EXPECT_EQ(resolveDevice("cuda:5", "auto", 2, 8).device, "cuda:5");
}

TEST(ResolveDevice, ProblemsNameTheKeyAndTheFix) {
  DeviceChoice none = resolveDevice("cuda", "auto", 1, 0);
  EXPECT_EQ(none.problem_key, "training.device");
  EXPECT_EQ(none.problem,
            "\"cuda\" resolves to cuda:1 but 0 CUDA device(s) are visible (no "
            "GPU on this machine, or CUDA_VISIBLE_DEVICES hides them); use \"cpu\" "
            "or \"auto\"");
  EXPECT_EQ(resolveDevice("cuda:8", "gloo", 0, 8).problem_key, "training.device");
  // More local ranks than GPUs: "auto" refuses rather than mix devices across ranks.
  DeviceChoice short_of = resolveDevice("auto", "auto", 2, 2);
  EXPECT_EQ(short_of.problem_key, "training.device");
  EXPECT_EQ(short_of.problem,
            "\"auto\" resolves to cuda:2 (local rank 2) but 2 CUDA device(s) "
            "are visible; set training.device = \"cpu\", or start at most "
            "one rank per GPU");
  DeviceChoice nccl_none = resolveDevice("auto", "nccl", 0, 0);
  EXPECT_NE(nccl_none.problem.find("(backend nccl) but 0 CUDA device(s) are visible"),
            std::string::npos);
  DeviceChoice nccl_cpu = resolveDevice("cpu", "nccl", 0, 8);
  EXPECT_EQ(nccl_cpu.problem_key, "parallel.backend");
  EXPECT_NE(nccl_cpu.problem.find("CUDA tensors only"), std::string::npos);
}

TEST(DeviceName, Syntax) {
  for (const char* ok : {"auto", "cpu", "cuda", "cuda:0", "cuda:15"})
    EXPECT_TRUE(validDeviceName(ok)) << ok;
  for (const char* bad : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", "cuda:12345"})
    EXPECT_FALSE(validDeviceName(bad)) << bad;
}

}  // namespace
}  // namespace ftb
