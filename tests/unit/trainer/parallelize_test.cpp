// parallelize (trainer/parallel/parallelize.h) in one process, over a Mesh whose groups
// are recording Comms: each stands for its group (rank 0 of the configured size) and
// writes every collective, with its element count and dtype, to one log shared by all of
// them, so the log shows which group received which collective and in what order while a
// step runs. What it proves beyond the end-to-end runs, which see only losses and norms:
// the strategy chosen for each config (DDP over the dp group; ZeRO-1, 2 and 3 over the
// shard group, with the replicas of HSDP after them; Megatron's collectives on the tp
// group only), that the model handed to the sync is this rank's tensor-parallel slice
// (one DDP bucket of exactly its elements), that ZeRO-3's executor is wired into the
// model (each block gathered before its forward and again for its recompute, in the
// compute dtype, its gradients reduce-scattered in fp32), and that tied embeddings in a
// pipeline add one all-reduce of the copy's gradient over the tied pair after the stage's
// own, counted in the norm by the first stage only.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "trainer/parallel/ddp.h"
#include "trainer/parallel/parallelize.h"
#include "trainer/parallel/zero.h"

namespace ftb {
namespace parallelize_test {

// The tiny model (configs/models/tiny.toml): D 64, 2 blocks, 4 heads of 16, 2 kv heads,
// ffn 192, vocabulary 512. Elements of one block: norms 2·64, wq and wo 64·64 each, wk
// and wv 32·64 each, w1, w2 and w3 192·64 each; root: embedding and output 512·64, norm 64.
constexpr int64_t kBlock = 49280, kRoot = 65600, kModel = 2 * kBlock + kRoot;  // 164160
constexpr int64_t kEmbed = 512 * 64;
// With tp = 2 every matrix is halved, the norms are whole: 24704 per block, 32832 root.
constexpr int64_t kModelTp2 = 2 * 24704 + 32832;
constexpr int64_t kB = 2, kT = 8, kD = 64;

// A group of `size` in which this rank is rank 0; the others add `peer` to every summed
// element and hold zeros in every gathered shard.
class RecordingGroup final : public Comm {
 public:
  RecordingGroup(std::string name, int size, std::vector<std::string>& log, float peer = 0)
      : name_(std::move(name)), size_(size), log_(log), peer_(peer) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void allReduceSum(torch::Tensor& t) override {
    record("all_reduce", t);
    last_data = t.data_ptr();
    t.add_(peer_);
  }
  void allReduceMax(torch::Tensor& t) override { record("all_reduce_max", t); }
  void allGather(torch::Tensor& out, const torch::Tensor& in) override {
    record("all_gather", out);
    out.zero_();
    out.narrow(0, 0, in.numel()).copy_(in);
  }
  void reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) override {
    record("reduce_scatter", in);
    out.copy_(in.narrow(0, 0, out.numel()));
  }
  void broadcast(torch::Tensor& t, int) override { record("broadcast", t); }
  void barrier() override {}
  void* last_data = nullptr;  // the buffer of the latest all-reduce

 private:
  void record(const char* op, const torch::Tensor& t) {
    log_.push_back(name_ + " " + op + " " + std::to_string(t.numel()) + " " +
                   std::string(c10::toString(t.scalar_type())));
  }
  std::string name_;
  int size_;
  std::vector<std::string>& log_;
  float peer_;
};

TrainConfig tinyConfig(int world, std::vector<std::string> overrides) {
  return TrainConfig::fromConfig(Config::load(FTB_SOURCE_DIR "/configs/runs/tiny.toml", overrides),
                                 world);
}

// This rank's Mesh with recording groups sized as buildMesh sizes them for `tc` (rank 0
// of every group; stage `pp_rank`).
struct RecordingMesh {
  std::vector<std::string> log;
  RecordingGroup tp, shard, replicate, dp, tied;
  Mesh mesh;
  RecordingMesh(const TrainConfig& tc, int64_t pp_rank = 0, float tied_peer = 0)
      : tp("tp", int(tc.layout.tp), log),
        shard("shard", tc.layout.effectiveZeroStage() > 0 ? int(tc.layout.dp_shard) : 1, log),
        replicate("replicate",
                  tc.layout.effectiveZeroStage() > 0 ? int(tc.layout.dp_replicate) : 1, log),
        dp("dp", tc.layout.effectiveZeroStage() > 0 ? 1 : int(tc.layout.dpSize()), log),
        tied("tied", 2, log, tied_peer) {
    mesh.world = tc.layout.world_size;
    mesh.tp = tc.layout.tp;
    mesh.dp_shard = tc.layout.dp_shard;
    mesh.dp_replicate = tc.layout.dp_replicate;
    mesh.pp = tc.layout.pp;
    mesh.pp_rank = pp_rank;
    mesh.tp_comm = &tp;
    mesh.shard_comm = &shard;
    mesh.replicate_comm = &replicate;
    mesh.dp_comm = &dp;
    const bool end = pp_rank == 0 || pp_rank == tc.layout.pp - 1;
    if (tc.layout.pp > 1 && tc.model.tie_embeddings && end) mesh.tied_comm = &tied;
  }
};

// One micro-batch of kB × kT tokens spread over the whole vocabulary, every target counted.
StepBatches oneMicroBatch() {
  Batch b;
  b.inputs = (torch::arange(kB * kT, torch::kLong) * 37 % 512).view({kB, kT});
  b.targets = (b.inputs * 5 + 3) % 512;
  b.mask = torch::ones({kB, kT}, torch::kBool);
  b.padded_tokens = b.dataset_tokens = b.loss_tokens = kB * kT;
  StepBatches s;
  s.micro.push_back(b);
  s.positions = kB * kT;
  return s;
}

// beginStep, the runner's step, finishGradients and afterOptimizer, as the loop calls them.
void step(ParallelModel& pm) {
  pm.sync->beginStep();
  const StepBatches s = oneMicroBatch();
  pm.runner->run(s, double(s.positions));
  pm.sync->finishGradients();
  pm.sync->afterOptimizer();
}

using Log = std::vector<std::string>;

TEST(Parallelize, DataParallelWithoutShardingAllReducesTheWholeModelOverTheDpGroup) {
  const TrainConfig tc = tinyConfig(2, {});  // dp_replicate 2, zero_stage 0
  RecordingMesh rm(tc);
  ParallelModel pm = parallelize(tc, rm.mesh);
  ASSERT_NE(dynamic_cast<DdpSync*>(pm.sync.get()), nullptr);
  EXPECT_EQ(pm.sync->optimizerParams().size(), 21u);  // embedding, 9 per block, norm, output
  EXPECT_EQ(pm.runner->sampleCopies(), 1);
  step(pm);
  // 25 MiB buckets: the model's 656,640 bytes are one.
  EXPECT_EQ(rm.log, (Log{"dp all_reduce " + std::to_string(kModel) + " Float"}));
}

TEST(Parallelize, TensorParallelRunsMegatronCollectivesOnTheTpGroupAndDdpOnItsSlice) {
  const TrainConfig tc = tinyConfig(4, {"parallel.tp=2"});  // dp 2 x tp 2
  RecordingMesh rm(tc);
  ParallelModel pm = parallelize(tc, rm.mesh);
  ASSERT_NE(dynamic_cast<DdpSync*>(pm.sync.get()), nullptr);
  EXPECT_EQ(pm.runner->sampleCopies(), 2);
  step(pm);
  const std::string act = "tp all_reduce " + std::to_string(kB * kT * kD) + " Float";
  const std::string row = "tp all_reduce " + std::to_string(kB * kT) + " Float";
  const Log want = {
      act,                                                 // vocab-parallel embedding
      act, act,                                            // block 0: wo, w2 (row-parallel)
      act, act,                                            // block 1
      "tp all_reduce_max " + std::to_string(kB * kT) + " Float",  // loss: global max,
      row, row,                                            // Σ exp and the target logit
      act,                                                 // backward: the output's input
      act, act,                                            // block 1: w1/w3, then wq/wk/wv inputs
      act, act,                                            // block 0
      "dp all_reduce " + std::to_string(kModelTp2) + " Float"};  // this rank's slice, one bucket
  EXPECT_EQ(rm.log, want);
}

TEST(Parallelize, ZeroStagesRunTheirCollectivesOnTheShardGroup) {
  const std::string block = std::to_string(kBlock), root = std::to_string(kRoot);
  const std::vector<Log> want = {
      // stage 1: one all-reduce per unit after the backward, then the updated shards gathered
      {"shard all_reduce " + block + " Float", "shard all_reduce " + block + " Float",
       "shard all_reduce " + root + " Float", "shard all_gather " + block + " Float",
       "shard all_gather " + block + " Float", "shard all_gather " + root + " Float"},
      // stage 2: each unit reduce-scattered in the backward that completes it (the root's
      // embedding gradient comes last)
      {"shard reduce_scatter " + block + " Float", "shard reduce_scatter " + block + " Float",
       "shard reduce_scatter " + root + " Float", "shard all_gather " + block + " Float",
       "shard all_gather " + block + " Float", "shard all_gather " + root + " Float"},
      // stage 3: the root for the whole step, each block for its forward and its recompute
      {"shard all_gather " + root + " Float", "shard all_gather " + block + " Float",
       "shard all_gather " + block + " Float", "shard all_gather " + block + " Float",
       "shard reduce_scatter " + block + " Float", "shard all_gather " + block + " Float",
       "shard reduce_scatter " + block + " Float", "shard reduce_scatter " + root + " Float"}};
  for (int stage = 1; stage <= 3; ++stage) {
    const TrainConfig tc =
        tinyConfig(2, {"parallel.dp_shard=2", "parallel.zero_stage=" + std::to_string(stage)});
    RecordingMesh rm(tc);
    ParallelModel pm = parallelize(tc, rm.mesh);
    ASSERT_NE(dynamic_cast<ZeroSync*>(pm.sync.get()), nullptr) << "stage " << stage;
    EXPECT_TRUE(rm.log.empty()) << "stage " << stage << ": shards are cut without a collective";
    step(pm);
    EXPECT_EQ(rm.log, want[stage - 1]) << "stage " << stage;
  }
}

TEST(Parallelize, ZeroThreeGathersBlocksInTheComputeDtypeAndReducesInFp32) {
  const TrainConfig tc = tinyConfig(
      2, {"parallel.dp_shard=2", "parallel.zero_stage=3", "training.dtype=\"bf16\""});
  RecordingMesh rm(tc);
  ParallelModel pm = parallelize(tc, rm.mesh);
  step(pm);
  const std::string block = std::to_string(kBlock), root = std::to_string(kRoot);
  const Log want = {
      "shard all_gather " + root + " Float",          "shard all_gather " + block + " BFloat16",
      "shard all_gather " + block + " BFloat16",      "shard all_gather " + block + " BFloat16",
      "shard reduce_scatter " + block + " Float",     "shard all_gather " + block + " BFloat16",
      "shard reduce_scatter " + block + " Float",     "shard reduce_scatter " + root + " Float"};
  EXPECT_EQ(rm.log, want);
}

TEST(Parallelize, HsdpAllReducesTheShardGradientsAcrossReplicasAfterTheReduceScatters) {
  const TrainConfig tc = tinyConfig(4, {"parallel.dp_shard=2", "parallel.zero_stage=2"});
  ASSERT_EQ(tc.layout.dp_replicate, 2);
  RecordingMesh rm(tc);
  ParallelModel pm = parallelize(tc, rm.mesh);
  pm.sync->beginStep();
  const StepBatches s = oneMicroBatch();
  pm.runner->run(s, double(s.positions));
  pm.sync->finishGradients();
  const std::string block = std::to_string(kBlock), root = std::to_string(kRoot);
  const Log want = {"shard reduce_scatter " + block + " Float",
                    "shard reduce_scatter " + block + " Float",
                    "shard reduce_scatter " + root + " Float",
                    "replicate all_reduce " + std::to_string(kBlock / 2) + " Float",
                    "replicate all_reduce " + std::to_string(kBlock / 2) + " Float",
                    "replicate all_reduce " + std::to_string(kRoot / 2) + " Float"};
  EXPECT_EQ(rm.log, want);
}

TEST(Parallelize, TiedEmbeddingsInAPipelineAllReduceTheCopyOverTheTiedPairAfterTheStage) {
  // world 4 = pp 2 x dp 2, one block per stage; the other end of the tied pair adds 1 to
  // every element of the copy's gradient.
  const TrainConfig tc = tinyConfig(
      4, {"parallel.pp=2", "parallel.pp_microbatches=2", "model.tie_embeddings=true"});
  for (int64_t stage : {0, 1}) {
    RecordingMesh rm(tc, stage, /*tied_peer=*/1);
    ParallelModel pm = parallelize(tc, rm.mesh);
    pm.sync->beginStep();
    pm.sync->beforeBackward(true);
    pm.sync->finishGradients();  // no backward: every local gradient is zero
    // Stage 0: the embedding and block 0; stage 1: block 1, the norm and the copy.
    const int64_t own = stage == 0 ? kEmbed + kBlock : kBlock + 64 + kEmbed;
    EXPECT_EQ(rm.log, (Log{"dp all_reduce " + std::to_string(own) + " Float",
                           "tied all_reduce " + std::to_string(kEmbed) + " Float"}))
        << "stage " << stage;
    const torch::Tensor copy = pm.model->tok_embeddings;
    ASSERT_TRUE(copy.defined()) << "stage " << stage << " holds the tied weight";
    EXPECT_EQ(rm.tied.last_data, copy.grad().data_ptr());
    EXPECT_TRUE(torch::equal(copy.grad(), torch::ones_like(copy)));
    // The tied weight counts once, on the first stage, as a dp replica's half share.
    EXPECT_DOUBLE_EQ(pm.sync->localSquaredNorm(), stage == 0 ? kEmbed / 2.0 : 0.0)
        << "stage " << stage;
  }
}

}  // namespace parallelize_test
}  // namespace ftb
