// Optimizer-state offload (trainer/optim/offload.h) and its copies (trainer/kernels/host_copy.h)
// on the CPU, where every copy is synchronous: the offloaded optimizer steps each parameter as
// the plain one does, bit for bit (AdamW, Adafactor, bf16 weights, the step inside backward,
// zeroed gradients), and a restore through state() and setStepCount continues as the plain
// optimizer restored the same way. The asynchronous GPU path runs in scripts/gpu_check.sh.
#include <gtest/gtest.h>

#include "trainer/kernels/host_copy.h"
#include "trainer/optim/offload.h"

namespace ftb {
namespace {

// Separate tensors (no two lie back to back, so the plain AdamW has no flat run to fuse).
std::vector<torch::Tensor> someParams(torch::Dtype dtype) {
  return {torch::randn({6, 5}).to(dtype), torch::randn({7}).to(dtype),
          torch::randn({4, 3}).to(dtype)};
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& t : ts) out.push_back(t.clone());
  return out;
}

std::vector<torch::Tensor> gradsLike(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> gs;
  for (const torch::Tensor& p : ps) gs.push_back(torch::randn(p.sizes()).to(p.scalar_type()));
  return gs;
}

void expectSameBits(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i;
}

void expectSameState(Optimizer& a, Optimizer& b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    auto sa = a.state(i), sb = b.state(i);
    ASSERT_EQ(sa.size(), sb.size()) << i;
    for (size_t k = 0; k < sa.size(); ++k) {
      EXPECT_EQ(sa[k].first, sb[k].first);
      EXPECT_TRUE(torch::equal(sa[k].second, sb[k].second)) << sa[k].first << " of " << i;
    }
  }
  EXPECT_EQ(a.stepCount(), b.stepCount());
}

// Five steps of the offloaded and the plain optimizer from equal parameters and gradients.
void checkSteps(const OptimizerOptions& o, torch::Dtype dtype) {
  torch::manual_seed(11);
  std::vector<torch::Tensor> plain = someParams(dtype), off = clones(plain);
  auto p_opt = makeOptimizer(plain, o), o_opt = offloadOptimizer(off, o);
  for (int step = 0; step < 5; ++step) {
    std::vector<torch::Tensor> g = gradsLike(plain), g2 = clones(g);
    if (step == 2) g[1] = g2[1] = torch::Tensor();  // a parameter without a gradient
    const bool zero = step % 2 == 1;
    p_opt->step(g, 1e-2, zero);
    o_opt->step(g2, 1e-2, zero);
    expectSameBits(plain, off);
    for (const torch::Tensor& t : g2)
      if (zero && t.defined()) EXPECT_EQ(t.abs().max().item<double>(), 0.0);
  }
  expectSameState(*p_opt, *o_opt, plain.size());
}

TEST(OptimizerOffload, AdamWStepsEqualThePlainOptimizer) {
  OptimizerOptions o;
  o.weight_decay = 0.1;
  checkSteps(o, torch::kFloat32);
}

TEST(OptimizerOffload, AdafactorStepsEqualThePlainOptimizer) {
  OptimizerOptions o;
  o.kind = "adafactor";
  checkSteps(o, torch::kFloat32);
}

TEST(OptimizerOffload, Bf16WeightsWithStochasticAndKahanUpdatesEqualThePlainOptimizer) {
  for (const char* how : {"stochastic", "kahan"}) {
    SCOPED_TRACE(how);
    OptimizerOptions o;
    o.bf16_update = how;
    o.seed = 5;
    checkSteps(o, torch::kBFloat16);
  }
}

TEST(OptimizerOffload, StepInsideBackwardEqualsTheWholeStep) {
  torch::manual_seed(12);
  OptimizerOptions o;
  std::vector<torch::Tensor> plain = someParams(torch::kFloat32), off = clones(plain);
  auto p_opt = makeOptimizer(plain, o), o_opt = offloadOptimizer(off, o);
  for (int step = 0; step < 3; ++step) {
    std::vector<torch::Tensor> g = gradsLike(plain), g2 = clones(g);
    p_opt->step(g, 1e-2);
    o_opt->startStep();
    for (size_t i = off.size(); i-- > 0;) o_opt->update(i, g2[i], 1e-2);  // backward's order
    expectSameBits(plain, off);
    expectSameBits(g, g2);  // update leaves the gradient as it was
  }
  expectSameState(*p_opt, *o_opt, plain.size());
}

// A restore writes the parameters and the state in place, then sets the step count: the
// offloaded optimizer continues from what was written, not from its stale host copies.
TEST(OptimizerOffload, RestoreRereadsTheParametersTheCheckpointWrote) {
  torch::manual_seed(13);
  OptimizerOptions o;
  std::vector<torch::Tensor> plain = someParams(torch::kFloat32), off = clones(plain);
  auto p_opt = makeOptimizer(plain, o), o_opt = offloadOptimizer(off, o);
  for (int step = 0; step < 2; ++step) {
    std::vector<torch::Tensor> g = gradsLike(plain);
    p_opt->step(g, 1e-2);
    o_opt->step(clones(g), 1e-2);
  }
  // "Load" a checkpoint of other values into both: parameters, moments, step count.
  std::vector<torch::Tensor> saved = someParams(torch::kFloat32);
  for (size_t i = 0; i < plain.size(); ++i) {
    plain[i].copy_(saved[i]);
    off[i].copy_(saved[i]);
    for (size_t k = 0; k < p_opt->state(i).size(); ++k) {
      const torch::Tensor v = torch::rand(p_opt->state(i)[k].second.sizes());
      p_opt->state(i)[k].second.copy_(v);
      o_opt->state(i)[k].second.copy_(v);
    }
  }
  p_opt->setStepCount(7);
  o_opt->setStepCount(7);
  std::vector<torch::Tensor> g = gradsLike(plain);
  p_opt->step(g, 1e-2);
  o_opt->step(clones(g), 1e-2);
  expectSameBits(plain, off);
  expectSameState(*p_opt, *o_opt, plain.size());
}

TEST(OptimizerOffload, HostBytesCountStateParameterCopiesAndGradientBuffers) {
  OptimizerOptions o;
  std::vector<torch::Tensor> ps = someParams(torch::kFloat32);
  auto opt = offloadOptimizer(ps, o);
  const int64_t n = 6 * 5 + 7 + 4 * 3;
  EXPECT_EQ(opt->stateBytes(), 2 * 4 * n + 4 * n);  // moments + host copies, no step yet
  opt->step(gradsLike(ps), 1e-2);
  EXPECT_EQ(opt->stateBytes(), 2 * 4 * n + 4 * n + 4 * n);  // + the gradient buffers
}

TEST(SideCopies, OnTheCpuCopiesAtOnceAndMarksRestartAfterDeviceWait) {
  SideCopies copies(torch::Device(torch::kCPU));
  torch::Tensor src = torch::arange(5, torch::kFloat32), host = hostBufferLike(src);
  EXPECT_FALSE(host.is_pinned());  // pinned only for a GPU tensor
  copies.toHost(host, src);
  EXPECT_TRUE(torch::equal(host, src));
  torch::Tensor dst = torch::zeros({5});
  copies.toDevice(dst, host.mul(2));
  EXPECT_TRUE(torch::equal(dst, src * 2));
  EXPECT_EQ(copies.mark(), 0u);
  EXPECT_EQ(copies.mark(), 1u);
  copies.hostWait(1);
  copies.deviceWait();
  EXPECT_EQ(copies.mark(), 0u);
}

}  // namespace
}  // namespace ftb
