#include "common/step_time_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/pipeline.h"

namespace ftb {
namespace {

double dtypeBytes(DType d) { return d == DType::kBf16 ? 2.0 : 4.0; }

// The costliest pipeline stage: its share of the model's training FLOPs and of its
// blocks (1 and n_layers without a pipeline).
struct StageCost {
  double flops_frac = 1, blocks = 0;
};

StageCost costliestStage(const TrainConfig& tc) {
  const ModelArgs& m = tc.model;
  const PipePlan& plan = tc.pipeline;
  if (tc.layout.pp <= 1 || plan.split.empty()) return {1.0, double(m.n_layers)};
  const LayerCosts c = layerCosts(m, tc.data.seq_len);
  const double total = double(m.n_layers) * c.block + c.embed + c.head;
  const int64_t chunks = plan.stages * plan.virtual_stages;
  StageCost worst{0, 0};
  for (int64_t s = 0; s < plan.stages; ++s) {
    double cost = 0, blocks = 0;
    for (int64_t v = 0; v < plan.virtual_stages; ++v) {
      const int64_t k = plan.modelChunk(s, v);
      blocks += double(plan.split[k]);
      cost += double(plan.split[k]) * c.block + (k == 0 ? c.embed : 0) +
              (k == chunks - 1 ? c.head : 0);
    }
    if (cost / total > worst.flops_frac) worst = {cost / total, blocks};
  }
  return worst;
}

// Bytes one rank moves, by nccl-tests' convention: an all-reduce of S bytes over n ranks
// 2(n−1)/n · S, a reduce-scatter or an all-gather (n−1)/n · S.
double allReduce(double s, int64_t n) { return n > 1 ? s * 2.0 * double(n - 1) / double(n) : 0; }
double gatherOrScatter(double s, int64_t n) { return n > 1 ? s * double(n - 1) / double(n) : 0; }

struct Comm {
  double bw;
  StepPrediction& p;
  void add(const std::string& name, double moved) {
    if (!(moved > 0)) return;
    const double s = bw > 0 ? moved / bw : std::numeric_limits<double>::infinity();
    p.comm_bytes += moved;
    p.comm_s += s;
    p.terms.push_back({name, s});
  }
};

void dataParallelComm(const TrainConfig& tc, const FlopsCount& f, double param_frac, Comm& c) {
  const LayoutConfig& l = tc.layout;
  const double grad_b = tc.training.master_weights == "none" ? 2.0 : 4.0;
  const double cd = dtypeBytes(tc.training.dtype);
  const double per_rank = param_frac / double(l.tp);
  const double g = double(f.trainable_params) * per_rank * grad_b;
  const double params = double(f.trainable_params) * per_rank;
  const double m = double(tc.training.grad_accum_steps);
  const int64_t shard = l.dp_shard, n = l.dpSize();  // ZeRO shards over dp_shard
  switch (l.effectiveZeroStage()) {
    case 0:
      c.add("comm: DDP gradient all-reduce", allReduce(g, n));
      return;
    case 1:
      c.add("comm: ZeRO-1 gradient all-reduce", allReduce(g, shard));
      c.add("comm: ZeRO-1 parameter all-gather", gatherOrScatter(params * cd, shard));
      break;
    case 2:
      c.add("comm: ZeRO-2 gradient reduce-scatter", m * gatherOrScatter(g, shard));
      c.add("comm: ZeRO-2 parameter all-gather", gatherOrScatter(params * cd, shard));
      break;
    default: {
      const ModelArgs& a = tc.model;
      const double blocks = double(a.n_layers * (a.blockMatrixParams() + 2 * a.dim)) /
                            double(a.numParams());
      const double all = double(f.total_params) * per_rank;
      c.add("comm: ZeRO-3 block all-gathers", 2 * m * gatherOrScatter(all * blocks * cd, shard));
      c.add("comm: ZeRO-3 block gradient reduce-scatter", m * gatherOrScatter(g * blocks, shard));
      c.add("comm: ZeRO-3 root all-gather and reduce-scatter",
            gatherOrScatter(all * (1 - blocks) * 4 + g * (1 - blocks), shard));
    }
  }
  if (l.dp_replicate > 1)
    c.add("comm: replica gradient all-reduce", allReduce(g / double(shard), l.dp_replicate));
}

}  // namespace

std::string StepPrediction::largestTerm() const {
  const StepTerm* best = nullptr;
  for (const StepTerm& t : terms)
    if (!best || t.seconds > best->seconds) best = &t;
  return best ? best->name : "";
}

StepPrediction predictStep(const TrainConfig& tc, const MachineFigures& m) {
  StepPrediction p;
  const LayoutConfig& l = tc.layout;
  const ModelArgs& a = tc.model;
  const int64_t seq = tc.data.seq_len, mb = tc.training.micro_batch_size;
  const double micro = double(tc.training.grad_accum_steps);
  const double tokens = double(mb) * micro * double(seq);  // this rank's data slice
  const FlopsCount f = trainingFlops(a, tc.lora, seq);
  const StageCost stage = costliestStage(tc);
  const double block_fwd = a.blockForwardFlops(seq);
  const double recomputed = recomputedBlocks(tc, stage.blocks);
  p.flops = tokens * (f.per_token * stage.flops_frac + recomputed * block_fwd) / double(l.tp);
  p.compute_s = p.flops / m.gemm_flops;
  p.terms.push_back({"compute", p.compute_s});

  Comm c{m.busbw_Bps, p};
  dataParallelComm(tc, f, stage.flops_frac, c);
  const double act = double(mb * seq * a.dim) * dtypeBytes(tc.training.dtype);
  const double tp_per_block = 4.0 + 2.0 * (recomputed / std::max(stage.blocks, 1.0));
  c.add("comm: tp activation all-reduces",
        micro * stage.blocks * tp_per_block * allReduce(act, l.tp));
  if (l.pp > 1)
    c.add("comm: pp activations and their gradients",
          2 * micro * double(tc.pipeline.virtual_stages) * act / double(l.tp));

  if (l.pp > 1) {
    const double b = theoreticalBubble(tc.pipeline);
    p.bubble_s = p.compute_s * b / (1 - b);
    p.terms.push_back({"pipeline bubble " + theoreticalBubbleFormula(tc.pipeline), p.bubble_s});
  }
  return p;
}

}  // namespace ftb
