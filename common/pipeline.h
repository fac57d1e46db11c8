// Pipeline parallelism as pure functions: the layer split over virtual stages and the
// schedules (GPipe, 1F1B, interleaved 1F1B) as per-stage ordered action lists, plus the
// schedules' theoretical bubble fractions and a simulator that executes the lists.
// No libtorch: the trainer's stage executor runs these lists, the config validation and
// the memory estimator read them.
//
// Terms: p pipeline stages (ranks along the pipeline), v virtual stages (chunks) per
// stage, S = p·v model chunks in model order. Chunk c of stage s is model chunk
// k = c·p + s (Megatron's interleaving: stage s holds chunks s, s + p, ...). Chunk 0 also
// holds the embedding, chunk S−1 the final norm, output projection and loss.
// m micro-batches per optimizer step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/pipe_plan.h"
#include "common/run_config.h"

namespace ftb {

// FLOPs per token of each model piece, forward + backward (6 per parameter per token and
// the attention scores), as ModelArgs::flopsPerToken counts them.
struct LayerCosts {
  double block = 0;  // one transformer block
  double embed = 0;  // the embedding gather forward and its scatter-add backward
  double head = 0;   // final norm, output projection and the cross-entropy
};
LayerCosts layerCosts(const ModelArgs& m, int64_t seq_len);

// The contiguous split of n_layers blocks into `chunks` model chunks (each >= 1 block)
// that minimises the largest chunk cost, chunk 0 counting costs.embed and the last chunk
// costs.head. Ties go to the split that puts more blocks on earlier chunks.
// REQUIRES: 1 <= chunks <= n_layers.
std::vector<int64_t> balancedSplit(int64_t n_layers, int64_t chunks, const LayerCosts& costs);

// The default split of interleaved 1F1B, `stages` stages of v chunks each (chunk c of stage s
// is model chunk c·stages + s): first the stages' totals, which bound the step time, as
// balancedSplit over the stages would give them with at least v blocks each (the embedding
// on stage 0, the head on the last stage); then each stage's blocks over its v chunks by
// balancedSplit. Balancing the chunks alone can leave the stages far apart when the head
// outweighs a chunk's share: blocks of cost 1 and a head of 4.5, 8 blocks in 2 × 2 chunks
// give [2, 3, 2, 1] (stage 0: 4 blocks, stage 1: 4 and the head); this gives [3, 1, 3, 1].
// REQUIRES: stages >= 1, v >= 1, stages·v <= n_layers.
std::vector<int64_t> interleavedSplit(int64_t n_layers, int64_t stages, int64_t v,
                                      const LayerCosts& costs);

// What a stage does, in order. Compute: kForward / kBackward of micro-batch `mb` on its
// local chunk `chunk`; kBackward computes the gradient of the chunk's input and, except in
// zb_h1, its weights' gradients too; zb_h1's kWeight computes the projection weights'
// gradients of an earlier kBackward of the same (mb, chunk). Communication with stage
// `peer`: activations go forward (kSendAct, kRecvAct), their gradients backward (kSendGrad,
// kRecvGrad); each message is identified by (kind, mb, model chunk of the receiver).
struct PipeAction {
  enum Kind { kForward, kBackward, kSendAct, kRecvAct, kSendGrad, kRecvGrad, kWeight };
  Kind kind = kForward;
  int64_t mb = 0, chunk = 0;  // chunk: the local chunk index on this stage
  int64_t peer = -1;          // the other stage of a send/recv
  bool operator==(const PipeAction& o) const {
    return kind == o.kind && mb == o.mb && chunk == o.chunk && peer == o.peer;
  }
};
std::string describe(const PipeAction& a);  // "F3c1", "B0c0", "send_act mb 2 -> stage 1", ...

// PipePlan (common/pipe_plan.h): a run's plan is TrainConfig::pipeline.

// Every stage's actions (index = stage). Sends follow the compute that produced their
// tensor; receives come just before the compute that consumes it.
// REQUIRES: plan as TrainConfig::fromConfig leaves it (PipePlan's invariant): m >= 1, split
// of size p·v with every entry >= 1; 1F1B and interleaved m >= p, interleaved m % p == 0.
std::vector<std::vector<PipeAction>> pipeActions(const PipePlan& plan);

// The compute actions of stage `stage` alone, in order.
std::vector<PipeAction> computeOrder(const PipePlan& plan, int64_t stage);
// `compute` (stage `stage`'s compute actions) with the receives and sends around each:
// pipeActions(plan)[s] == withTransfers(plan, s, computeOrder(plan, s)).
std::vector<PipeAction> withTransfers(const PipePlan& plan, int64_t stage,
                                      const std::vector<PipeAction>& compute);

// Theory: the fraction of a step's stage time spent idle in the pipeline bubble,
// (p−1)/(m+p−1) for GPipe and 1F1B, divided by v for interleaved 1F1B, and for zb_h1
// (p−1)/(3m+p−1): its bubble (p−1)(F+B−W) with the forward F, the input-gradient pass B and
// the weight pass W equally long (each a third of a micro-batch's compute).
double theoreticalBubble(const PipePlan& plan);
std::string theoreticalBubbleFormula(const PipePlan& plan);  // "(p-1)/(m+p-1)", ...

// The measured counterpart, the same on every stage: the fraction of the pipeline's
// makespan this stage is idle, (makespan − busy) / makespan with busy = span − waited.
// `span`: the stage's forward-backward phase (from the step's common start to its own last
// action); `waited`: the receive waits inside it; `makespan`: the longest stage's span in
// the same step. The stage's own span is not the window: the last stage ends its phase
// while the first still drains the backwards, and that wait falls after its span.
// 0 when makespan <= 0. REQUIRES: 0 <= waited <= span <= makespan.
double pipelineIdleFraction(double span, double waited, double makespan);

// How long each compute action takes in simulatePipeline.
struct PipeTimes {
  double forward = 1, backward = 1, weight = 1;  // kForward, kBackward, kWeight
};

// Executes every stage's list with buffered sends and blocking receives, each compute
// action taking its PipeTimes entry (messages arrive when sent). forwards and backwards
// count kForward and kBackward; a kWeight adds to the stage's busy time only.
struct PipeSimulation {
  std::string deadlock;                 // "" when every stage finished; else who waits for what
  double makespan = 0;                  // the last stage's finish time
  std::vector<int64_t> peak_in_flight;  // per stage: most chunks forwarded, not backwarded
  std::vector<int64_t> forwards, backwards;  // per stage: compute actions run
  std::vector<double> finish, waited;        // per stage: its last action's end, receive waits
};
PipeSimulation simulatePipeline(const std::vector<std::vector<PipeAction>>& actions,
                                PipeTimes times = {});

}  // namespace ftb
