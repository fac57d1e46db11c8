// What the pipeline plan gives each stage, and how a stage's executor
// (trainer/parallel/pipeline.h) runs it, in one process. The plan's action lists themselves
// are tested in tests/unit/common/pipeline_test.cpp; here: parallelize builds on each stage
// exactly the blocks of its model chunks (chunk c of stage s = model chunk c·p + s, the
// embedding with model chunk 0, the norm and output with the last), and two stages run as
// two threads joined by an in-memory link that matches messages by tag and records every
// post and wait, with a GradSync that records its hooks. What it proves beyond the
// end-to-end pp runs, which see only the loss and gradient norm: every receive of a step is
// posted before the first compute, each is waited on just before the compute that needs it,
// the sends are waited on at the end; each message's tag is unique and the receiver posts
// the sender's tag for it; beforeBackward(last) is true for the final backward only and
// zb_h1's beforeWeightPass(final) for the final weight pass only; and the two stages' loss
// and every parameter's gradient equal one whole model's over the same micro-batches.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "trainer/parallel/parallelize.h"
#include "trainer/parallel/pipeline.h"

namespace ftb {
namespace pipeline_plan_test {

TrainConfig pipeConfig(int world, std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"parallel.pp=2", "parallel.pp_microbatches=2"});
  return TrainConfig::fromConfig(Config::load(FTB_SOURCE_DIR "/configs/runs/tiny.toml", overrides),
                                 world);
}

// The parameter names a stage's parallelize gives the optimizer: "layers.N" for a block's,
// the full name for the root's.
std::set<std::string> stageParams(const TrainConfig& tc, int64_t stage) {
  std::vector<std::unique_ptr<Comm>> selves;
  Mesh m;
  m.world = tc.layout.world_size;
  m.pp = tc.layout.pp;
  m.pp_rank = stage;
  for (Comm** c : {&m.tp_comm, &m.shard_comm, &m.replicate_comm, &m.dp_comm}) {
    selves.push_back(makeSelfComm());
    *c = selves.back().get();
  }
  ParallelModel pm = parallelize(tc, m);
  std::set<std::string> names;
  for (const FlatLayout& l : pm.sync->optimizerLayout())
    for (const ModelParam& p : l.params)
      names.insert(p.name.rfind("layers.", 0) == 0 ? p.name.substr(0, p.name.find('.', 7))
                                                   : p.name);
  return names;
}

TEST(PipePlanStages, EachStageBuildsTheBlocksOfItsModelChunks) {
  // 1F1B, 4 blocks split [3, 1].
  const TrainConfig one = pipeConfig(2, {"model.n_layers=4", "parallel.pp_split=[3, 1]"});
  EXPECT_EQ(stageParams(one, 0),
            (std::set<std::string>{"tok_embeddings.weight", "layers.0", "layers.1", "layers.2"}));
  EXPECT_EQ(stageParams(one, 1),
            (std::set<std::string>{"layers.3", "norm.weight", "output.weight"}));
  // Interleaved, 6 blocks split [1, 2, 1, 2] over model chunks 0-3: stage 0 holds model
  // chunks 0 and 2, stage 1 chunks 1 and 3.
  const TrainConfig inter = pipeConfig(
      2, {"model.n_layers=6", "parallel.pp_schedule=\"interleaved_1f1b\"",
          "parallel.pp_virtual_stages=2", "parallel.pp_split=[1, 2, 1, 2]"});
  EXPECT_EQ(stageParams(inter, 0),
            (std::set<std::string>{"tok_embeddings.weight", "layers.0", "layers.3"}));
  EXPECT_EQ(stageParams(inter, 1), (std::set<std::string>{"layers.1", "layers.2", "layers.4",
                                                          "layers.5", "norm.weight",
                                                          "output.weight"}));
  // Tied embeddings: the last stage holds its own copy of the embedding, no output.
  const TrainConfig tied = pipeConfig(2, {"model.tie_embeddings=true"});
  EXPECT_EQ(stageParams(tied, 1),
            (std::set<std::string>{"layers.1", "norm.weight", "tok_embeddings.weight"}));
}

// ---- two stages in two threads

// Messages in flight, by (sending stage, tag); a receive waits at most 20 s for its send.
struct Wire {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, torch::Tensor> box;
  void put(int from, int tag, torch::Tensor bytes) {
    std::lock_guard<std::mutex> lock(mu);
    box[{from, tag}] = std::move(bytes);
    cv.notify_all();
  }
  torch::Tensor take(int from, int tag) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return box.count({from, tag}) > 0; }))
      throw std::runtime_error("no message with tag " + std::to_string(tag));
    return box.at({from, tag});
  }
};

class CallbackWork final : public PendingWork {
 public:
  explicit CallbackWork(std::function<void()> f) : f_(std::move(f)) {}
  void wait() override { f_(); }

 private:
  std::function<void()> f_;
};

// This stage's end of the wire: sends are delivered at once; every post and wait is logged
// with its tag (and a post with its bytes).
class WireLink final : public P2PLink {
 public:
  // `turn`: held by this stage's thread while it computes, let go while it waits to receive.
  WireLink(int stage, Wire& wire, std::vector<std::string>& log, std::unique_lock<std::mutex>& turn)
      : P2PLink(PeerInfo{1 - stage, 1 - stage, "localhost"}),
        stage_(stage),
        wire_(wire),
        log_(log),
        turn_(turn) {}
  std::string transport() const override { return "in-process wire"; }

 protected:
  std::unique_ptr<PendingWork> postSend(const torch::Tensor& bytes, int tag,
                                        const std::string&) override {
    log_.push_back("send " + std::to_string(tag) + " " + std::to_string(bytes.numel()));
    wire_.put(stage_, tag, bytes.clone());
    return std::make_unique<CallbackWork>(
        [this, tag] { log_.push_back("wait send " + std::to_string(tag)); });
  }
  std::unique_ptr<PendingWork> postRecv(const torch::Tensor& bytes, int tag,
                                        const std::string&) override {
    log_.push_back("post recv " + std::to_string(tag) + " " + std::to_string(bytes.numel()));
    return std::make_unique<CallbackWork>([this, bytes, tag]() mutable {
      log_.push_back("wait recv " + std::to_string(tag));
      turn_.unlock();
      torch::Tensor got;
      try {
        got = wire_.take(1 - stage_, tag);
      } catch (...) {
        turn_.lock();
        throw;
      }
      turn_.lock();
      bytes.copy_(got);
    });
  }

 private:
  int stage_;
  Wire& wire_;
  std::vector<std::string>& log_;
  std::unique_lock<std::mutex>& turn_;
};

// Logs the GradSync hooks the executor calls; synchronises nothing (one data-parallel rank).
class HookLog final : public GradSync {
 public:
  explicit HookLog(std::vector<std::string>& log) : log_(log) {}
  void beforeBackward(bool last) override { log_.push_back(last ? "backward last" : "backward"); }
  void beforeWeightPass(bool final) override {
    log_.push_back(final ? "weight pass final" : "weight pass");
  }
  void finishGradients() override {}
  std::vector<torch::Tensor> optimizerParams() const override { return {}; }
  std::vector<torch::Tensor> gradients() const override { return {}; }
  double localSquaredNorm() const override { return 0; }
  void afterOptimizer() override {}
  std::vector<FlatLayout> optimizerLayout() const override { return {}; }

 private:
  std::vector<std::string>& log_;
};

// Runs each block as usual and logs its forward by the block's global name ("layers.1").
class ForwardLog final : public BlockExecutor {
 public:
  explicit ForwardLog(std::vector<std::string>& log) : log_(log) {}
  torch::Tensor run(int64_t, TransformerBlockImpl& block, const torch::Tensor& x,
                    const RopeTables& rope) override {
    const std::string& name = block.modelParams()[0].name;
    log_.push_back("forward " + name.substr(0, name.find('.', 7)));
    return block.forward(x, rope);
  }

 private:
  std::vector<std::string>& log_;
};

constexpr int64_t kB = 2, kT = 8, kD = 64;

StepBatches twoMicroBatches() {
  StepBatches s;
  for (int64_t mb = 0; mb < 2; ++mb) {
    Batch b;
    b.inputs = ((torch::arange(kB * kT, torch::kLong) * 37 + mb * 101) % 512).view({kB, kT});
    b.targets = (b.inputs * 5 + 3 + mb) % 512;
    b.mask = torch::ones({kB, kT}, torch::kBool);
    b.mask[0][0].fill_(mb == 1);  // the micro-batches' positions differ
    b.padded_tokens = b.dataset_tokens = kB * kT;
    b.loss_tokens = b.mask.sum().item<int64_t>();
    s.positions += b.loss_tokens;
    s.micro.push_back(b);
  }
  return s;
}

ModelOptions fp32Options(const TrainConfig& tc) {
  ModelOptions opt;
  opt.seed = static_cast<uint64_t>(tc.training.seed);
  return opt;
}

// One step of both stages of `tc` (pp 2, one block each), each on its own thread. The
// stages take turns (one computes while the other waits to receive): zb_h1's active
// weight-gradient store is process-wide (model/linear.h), as in a rank's own process.
struct TwoStages {
  std::vector<std::string> log[2];
  Transformer chunk[2] = {Transformer(nullptr), Transformer(nullptr)};
  FwdBwdStats stats[2];
  std::string error[2];

  TwoStages(const TrainConfig& tc, const StepBatches& batches) {
    Wire wire;
    std::mutex turns;
    std::vector<std::thread> threads;
    for (int s = 0; s < 2; ++s) {
      chunk[s] = Transformer(tc.model, TpContext{}, fp32Options(tc), nullptr,
                             ModelPart{s, s + 1, s == 0, s == 1});
      threads.emplace_back([&, s] {
        try {
          std::unique_lock<std::mutex> turn(turns);
          WireLink link(s, wire, log[s], turn);
          HookLog sync(log[s]);
          ForwardLog forwards(log[s]);
          chunk[s]->setBlockExecutor(&forwards);
          auto runner = makePipelineRunner(tc.pipeline, s, {chunk[s]}, sync,
                                           std::map<int64_t, P2PLink*>{{1 - s, &link}}, 1,
                                           tc.model.dim, torch::kFloat32);
          stats[s] = runner->run(batches, double(batches.positions));
          chunk[s]->setBlockExecutor(nullptr);
        } catch (const std::exception& e) {
          error[s] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
  }
};

// The tags of a log's lines that start with `prefix`, in order.
std::vector<std::string> tagsOf(const std::vector<std::string>& log, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& line : log)
    if (line.rfind(prefix, 0) == 0) {
      const size_t end = line.find(' ', prefix.size());
      out.push_back(line.substr(prefix.size(), end - prefix.size()));
    }
  return out;
}

TEST(PipePlanRunner, OneFOneBPostsReceivesFirstWaitsBeforeTheirComputeAndSendsLast) {
  const TrainConfig tc = pipeConfig(2, {});
  TwoStages run(tc, twoMicroBatches());
  ASSERT_EQ(run.error[0], "");
  ASSERT_EQ(run.error[1], "");
  // Activations (stage 0 -> 1) and gradients (1 -> 0) of micro-batches 0 and 1, by tag.
  const std::vector<std::string> act = tagsOf(run.log[0], "send ");
  const std::vector<std::string> grad = tagsOf(run.log[1], "send ");
  ASSERT_EQ(act.size(), 2u);
  ASSERT_EQ(grad.size(), 2u);
  EXPECT_EQ(std::set<std::string>({act[0], act[1], grad[0], grad[1]}).size(), 4u) << "unique tags";
  const std::string bytes = " " + std::to_string(kB * kT * kD * 4);  // [B, T, dim] fp32
  // Stage 0: F0 F1 B0 B1 (1F1B warm-up of one forward).
  const std::vector<std::string> first = {
      "post recv " + grad[0] + bytes, "post recv " + grad[1] + bytes,
      "forward layers.0",             "send " + act[0] + bytes,
      "forward layers.0",             "send " + act[1] + bytes,
      "wait recv " + grad[0],         "backward",
      "wait recv " + grad[1],         "backward last",
      "wait send " + act[0],          "wait send " + act[1]};
  EXPECT_EQ(run.log[0], first);
  // Stage 1: F0 B0 F1 B1.
  const std::vector<std::string> last = {
      "post recv " + act[0] + bytes, "post recv " + act[1] + bytes,
      "wait recv " + act[0],         "forward layers.1",
      "backward",                    "send " + grad[0] + bytes,
      "wait recv " + act[1],         "forward layers.1",
      "backward last",               "send " + grad[1] + bytes,
      "wait send " + grad[0],        "wait send " + grad[1]};
  EXPECT_EQ(run.log[1], last);
  EXPECT_EQ(run.stats[0].p2p_bytes, 2 * kB * kT * kD * 4);
  EXPECT_EQ(run.stats[1].p2p_bytes, 2 * kB * kT * kD * 4);
}

TEST(PipePlanRunner, ZeroBubbleCallsTheFinalWeightPassLastOnEachStage) {
  const TrainConfig tc = pipeConfig(2, {"parallel.pp_schedule=\"zb_h1\""});
  TwoStages run(tc, twoMicroBatches());
  ASSERT_EQ(run.error[0], "");
  ASSERT_EQ(run.error[1], "");
  auto hooks = [](const std::vector<std::string>& log) {
    std::vector<std::string> out;
    for (const std::string& l : log)
      if (l.rfind("backward", 0) == 0 || l.rfind("weight", 0) == 0) out.push_back(l);
    return out;
  };
  // Stage 0 runs each weight pass right after its backward; stage 1 defers them by one.
  EXPECT_EQ(hooks(run.log[0]), (std::vector<std::string>{"backward", "weight pass",
                                                         "backward last", "weight pass final"}));
  EXPECT_EQ(hooks(run.log[1]), (std::vector<std::string>{"backward", "backward last",
                                                         "weight pass", "weight pass final"}));
}

// The whole model (same seed, so the same initial weights) over the same micro-batches.
void expectWholeModelsLossAndGradients(const TrainConfig& tc, const TwoStages& run,
                                       const StepBatches& batches) {
  Transformer whole(tc.model, TpContext{}, fp32Options(tc));
  double loss = 0;
  for (const Batch& b : batches.micro) {
    torch::Tensor l = whole->lossSum(whole->forward(b.inputs), b.targets, b.mask);
    loss += l.item<double>();
    (l / double(batches.positions)).backward();
  }
  EXPECT_NEAR(run.stats[1].loss_sum, loss, 1e-5 * loss);
  EXPECT_EQ(run.stats[0].loss_sum, 0.0) << "the first stage computes no loss";
  std::map<std::string, torch::Tensor> want;
  for (const ModelParam& p : whole->paramsInForwardOrder()) want[p.name] = p.tensor.grad();
  size_t seen = 0;
  for (const Transformer& c : run.chunk) {
    for (const ModelParam& p : c->paramsInForwardOrder()) {
      ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
      EXPECT_TRUE(torch::allclose(p.tensor.grad(), want.at(p.name), 1e-5, 1e-7)) << p.name;
      ++seen;
    }
  }
  EXPECT_EQ(seen, want.size()) << "the stages hold every parameter once";
}

TEST(PipePlanRunner, TwoStagesGiveTheWholeModelsLossAndGradients) {
  const StepBatches batches = twoMicroBatches();
  for (const char* schedule : {"gpipe", "1f1b", "zb_h1"}) {
    SCOPED_TRACE(schedule);
    const TrainConfig tc =
        pipeConfig(2, {"parallel.pp_schedule=\"" + std::string(schedule) + "\""});
    TwoStages run(tc, batches);
    ASSERT_EQ(run.error[0], "");
    ASSERT_EQ(run.error[1], "");
    expectWholeModelsLossAndGradients(tc, run, batches);
  }
}

}  // namespace pipeline_plan_test
}  // namespace ftb
