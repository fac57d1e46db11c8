// Activation checkpointing: checkpointedBlock() must be numerically invisible. The
// recompute runs the very same ops on the very same inputs, so outputs and every
// gradient (input and parameters) must match the plain graph bit for bit (max abs
// diff 0), in fp32 and under a bf16 compute dtype. With UnitHooks (ZeRO-3) the same
// gradients go to consumeGrads() instead of .grad, between materialize and release.
#include "trainer/model/activation_checkpoint.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainer/model/llama.h"
#include "tests/unit/trainer/tensor_util.h"

namespace ftb {
namespace {

ModelArgs smallArgs() {
  ModelArgs a;
  a.name = "ckpt-test";
  a.dim = 32;
  a.n_layers = 2;
  a.n_heads = 2;
  a.n_kv_heads = 1;  // GQA: one kv head serves both query heads
  a.ffn_dim = 64;
  a.vocab_size = 50;
  a.max_seq_len = 8;
  a.rope_theta = 10000.0;
  a.norm_eps = 1e-5;
  return a;
}

struct Grads {
  torch::Tensor out, dx;
  std::vector<torch::Tensor> dparams;  // in block->parameters() order
};

// Forward + backward of one block with a fixed upstream gradient; returns the
// output and every gradient, and leaves the block's .grad fields cleared.
Grads runBlock(TransformerBlock& block, const torch::Tensor& x0, const torch::Tensor& grad_out,
               const RopeTables& rope, bool checkpointed) {
  for (auto& p : block->parameters()) p.mutable_grad() = torch::Tensor();
  torch::Tensor x = x0.detach().clone().requires_grad_(true);
  torch::Tensor y =
      checkpointed ? checkpointedBlock(*block, x, rope, nullptr) : block->forward(x, rope);
  y.backward(grad_out);
  Grads g;
  g.out = y.detach().clone();
  g.dx = x.grad().clone();
  for (auto& p : block->parameters()) {
    EXPECT_TRUE(p.grad().defined());
    g.dparams.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
    p.mutable_grad() = torch::Tensor();
  }
  return g;
}

// A block with non-trivial norm weights (ones would hide a missing norm gradient path).
TransformerBlock makeBlock(const ModelArgs& a) {
  TransformerBlock block(a, TpContext{}, /*layer=*/0,
                         ModelOptions{torch::kFloat32, 0, /*seed=*/7, {}});
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  block->attention_norm.uniform_(0.5, 1.5);
  block->ffn_norm.uniform_(0.5, 1.5);
  return block;
}

void expectIdentical(const Grads& plain, const Grads& ckpt, TransformerBlock& block) {
  EXPECT_EQ(plain.out.scalar_type(), ckpt.out.scalar_type());
  EXPECT_EQ(maxAbsDiff(plain.out, ckpt.out), 0.0) << "outputs differ";
  EXPECT_EQ(plain.dx.scalar_type(), ckpt.dx.scalar_type());
  EXPECT_EQ(maxAbsDiff(plain.dx, ckpt.dx), 0.0) << "input gradients differ";
  EXPECT_GT(plain.dx.abs().max().item<double>(), 0.0);
  auto named = block->named_parameters();
  ASSERT_EQ(plain.dparams.size(), named.size());
  ASSERT_EQ(ckpt.dparams.size(), named.size());
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string& name = named[i].key();
    ASSERT_TRUE(plain.dparams[i].defined() && ckpt.dparams[i].defined()) << name;
    // Gradients land in fp32 on the fp32 master weights, whatever the compute dtype.
    EXPECT_EQ(ckpt.dparams[i].scalar_type(), torch::kFloat32) << name;
    EXPECT_EQ(maxAbsDiff(plain.dparams[i], ckpt.dparams[i]), 0.0) << name;
    EXPECT_GT(plain.dparams[i].abs().max().item<double>(), 0.0) << name << " has a zero gradient";
  }
}

TEST(CheckpointedBlock, Fp32IdenticalToPlainGraph) {
  ModelArgs a = smallArgs();
  TransformerBlock block = makeBlock(a);
  RopeTables rope = RopeTables::make(a.headDim(), a.max_seq_len, a.rope_theta);
  torch::manual_seed(11);
  torch::Tensor x = torch::randn({3, a.max_seq_len, a.dim});
  torch::Tensor g = torch::randn({3, a.max_seq_len, a.dim});

  Grads plain = runBlock(block, x, g, rope, /*checkpointed=*/false);
  Grads ckpt = runBlock(block, x, g, rope, /*checkpointed=*/true);
  EXPECT_EQ(block->parameters().size(), 9u);  // wq wk wv wo w1 w2 w3 + 2 norms
  expectIdentical(plain, ckpt, block);
}

TEST(CheckpointedBlock, Bf16ComputeIdenticalToPlainGraph) {
  ModelArgs a = smallArgs();
  TransformerBlock block = makeBlock(a);
  RopeTables rope = RopeTables::make(a.headDim(), a.max_seq_len, a.rope_theta);
  torch::manual_seed(12);
  // In the model the residual stream is in the compute dtype.
  torch::Tensor x = torch::randn({2, a.max_seq_len, a.dim}).to(torch::kBFloat16);
  torch::Tensor g = torch::randn({2, a.max_seq_len, a.dim}).to(torch::kBFloat16);

  Grads plain, ckpt;
  {
    ComputeDtypeGuard bf16(torch::kBFloat16);
    plain = runBlock(block, x, g, rope, /*checkpointed=*/false);
  }
  {
    ComputeDtypeGuard bf16(torch::kBFloat16);
    ckpt = runBlock(block, x, g, rope, /*checkpointed=*/true);
  }
  EXPECT_EQ(computeDtype(), torch::kFloat32);  // guards restore the previous dtype
  EXPECT_EQ(plain.out.scalar_type(), torch::kBFloat16);
  expectIdentical(plain, ckpt, block);

  // Sanity: bf16 really changed the numbers (otherwise the test proves nothing new).
  Grads fp32 = runBlock(block, x.to(torch::kFloat32), g.to(torch::kFloat32), rope, false);
  EXPECT_GT(maxAbsDiff(fp32.out, plain.out), 0.0);
}

// The recompute must happen in the dtype active at forward time, even if the caller
// runs backward outside the ComputeDtypeGuard (as the trainer does).
TEST(CheckpointedBlock, BackwardOutsideGuardUsesForwardDtype) {
  ModelArgs a = smallArgs();
  TransformerBlock block = makeBlock(a);
  RopeTables rope = RopeTables::make(a.headDim(), a.max_seq_len, a.rope_theta);
  torch::manual_seed(13);
  torch::Tensor x0 = torch::randn({2, a.max_seq_len, a.dim}).to(torch::kBFloat16);
  torch::Tensor g = torch::randn({2, a.max_seq_len, a.dim}).to(torch::kBFloat16);

  Grads plain;
  {
    ComputeDtypeGuard bf16(torch::kBFloat16);
    plain = runBlock(block, x0, g, rope, false);
  }
  torch::Tensor x = x0.clone().requires_grad_(true);
  torch::Tensor y;
  {
    ComputeDtypeGuard bf16(torch::kBFloat16);
    y = checkpointedBlock(*block, x, rope, nullptr);
  }
  y.backward(g);  // compute dtype is fp32 here
  EXPECT_EQ(maxAbsDiff(plain.dx, x.grad()), 0.0);
  auto params = block->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(maxAbsDiff(plain.dparams[i], params[i].grad()), 0.0) << i;
}

// Whole model: recompute_every = 1 ("full") and 2 give the same loss and the same
// gradient on every parameter as no checkpointing, in fp32 and bf16.
TEST(CheckpointedBlock, WholeModelGradientsUnchanged) {
  ModelArgs a = smallArgs();
  a.n_layers = 3;
  torch::manual_seed(21);
  torch::Tensor tokens = torch::randint(1, a.vocab_size, {2, a.max_seq_len}, torch::kInt64);
  torch::Tensor targets = torch::randint(1, a.vocab_size, {2, a.max_seq_len}, torch::kInt64);
  torch::Tensor mask = torch::ones({2, a.max_seq_len}, torch::kBool);
  mask[1].narrow(0, 5, 3).fill_(false);

  for (torch::ScalarType dt : {torch::kFloat32, torch::kBFloat16}) {
    std::vector<std::vector<torch::Tensor>> grads;
    std::vector<double> losses;
    for (int64_t every : {0, 1, 2}) {
      Transformer model(a, TpContext{}, ModelOptions{dt, every, /*seed=*/5, {}});
      torch::Tensor loss = model->lossSum(model->forward(tokens), targets, mask);
      loss.backward();
      losses.push_back(loss.item<double>());
      std::vector<torch::Tensor> g;
      for (auto& p : model->parameters()) g.push_back(p.grad().clone());
      grads.push_back(std::move(g));
    }
    for (size_t k = 1; k < grads.size(); ++k) {
      EXPECT_EQ(losses[k], losses[0]) << "dtype " << dt << " variant " << k;
      ASSERT_EQ(grads[k].size(), grads[0].size());
      for (size_t i = 0; i < grads[0].size(); ++i)
        EXPECT_EQ(maxAbsDiff(grads[k][i], grads[0][i]), 0.0)
            << "dtype " << dt << " variant " << k << " param " << i;
    }
  }
}

// ZeRO-3 path: hooks bracket the forward and the recompute, and receive exactly the
// plain-graph parameter gradients (in parameters() order) instead of .grad.
class RecordingHooks : public UnitHooks {
 public:
  void materialize() override { events.push_back("materialize"); }
  void release() override { events.push_back("release"); }
  void consumeGrads(const std::vector<torch::Tensor>& g) override {
    events.push_back("consume");
    grads = g;
  }
  std::vector<std::string> events;
  std::vector<torch::Tensor> grads;
};

TEST(CheckpointedBlock, HooksReceiveGradientsInsteadOfGrad) {
  ModelArgs a = smallArgs();
  TransformerBlock block = makeBlock(a);
  RopeTables rope = RopeTables::make(a.headDim(), a.max_seq_len, a.rope_theta);
  torch::manual_seed(14);
  torch::Tensor x0 = torch::randn({2, a.max_seq_len, a.dim});
  torch::Tensor g = torch::randn({2, a.max_seq_len, a.dim});
  Grads plain = runBlock(block, x0, g, rope, false);

  RecordingHooks hooks;
  torch::Tensor x = x0.clone().requires_grad_(true);
  torch::Tensor y = checkpointedBlock(*block, x, rope, &hooks);
  EXPECT_EQ(hooks.events, (std::vector<std::string>{"materialize", "release"}));
  EXPECT_EQ(maxAbsDiff(y, plain.out), 0.0);
  y.backward(g);
  EXPECT_EQ(hooks.events, (std::vector<std::string>{"materialize", "release", "materialize",
                                                    "consume", "release"}));
  EXPECT_EQ(maxAbsDiff(x.grad(), plain.dx), 0.0);
  auto params = block->parameters();
  ASSERT_EQ(hooks.grads.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_FALSE(params[i].grad().defined()) << "hooks own the gradients, param " << i;
    ASSERT_TRUE(hooks.grads[i].defined()) << i;
    EXPECT_EQ(maxAbsDiff(hooks.grads[i], plain.dparams[i]), 0.0) << i;
  }
}

}  // namespace
}  // namespace ftb
