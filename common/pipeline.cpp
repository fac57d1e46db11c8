#include "common/pipeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

namespace ftb {

const char* pipeScheduleName(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::kGpipe:
      return "gpipe";
    case PipeSchedule::k1F1B:
      return "1f1b";
    case PipeSchedule::kInterleaved1F1B:
      return "interleaved_1f1b";
    case PipeSchedule::kZbH1:
      return "zb_h1";
  }
  return "?";
}

// Forward + backward per token: 6 FLOPs per weight (as flopsPerToken), attention scores
// 12·H·hd·T per block; the embedding a gather forward and a scatter-add backward (2·D);
// the loss a softmax forward and its gradient (3·V).
LayerCosts layerCosts(const ModelArgs& m, int64_t seq_len) {
  LayerCosts c;
  c.block = 3.0 * m.blockForwardFlops(seq_len);
  c.embed = 2.0 * double(m.dim);
  c.head = 6.0 * double(m.vocab_size * m.dim + m.dim) + 3.0 * double(m.vocab_size);
  return c;
}

namespace {

// balancedSplit with at least min_blocks blocks in every chunk.
std::vector<int64_t> minMaxSplit(int64_t n_layers, int64_t chunks, int64_t min_blocks,
                                 const LayerCosts& costs) {
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest largest-chunk cost of blocks [0, i) in chunks [0, k);
  // cut[k][i]: where chunk k-1 starts in that split.
  std::vector<std::vector<double>> best(chunks + 1, std::vector<double>(n_layers + 1, inf));
  std::vector<std::vector<int64_t>> cut(chunks + 1, std::vector<int64_t>(n_layers + 1, 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= chunks; ++k) {
    const double extra = (k == 1 ? costs.embed : 0) + (k == chunks ? costs.head : 0);
    for (int64_t i = k * min_blocks; i <= n_layers; ++i) {
      for (int64_t j = i - min_blocks; j >= (k - 1) * min_blocks; --j) {  // chunk k-1 = [j, i)
        const double v = std::max(best[k - 1][j], double(i - j) * costs.block + extra);
        if (v < best[k][i]) best[k][i] = v, cut[k][i] = j;  // largest j on ties
      }
    }
  }
  std::vector<int64_t> split(chunks);
  for (int64_t k = chunks, i = n_layers; k >= 1; --k) {
    split[k - 1] = i - cut[k][i];
    i = cut[k][i];
  }
  return split;
}

}  // namespace

std::vector<int64_t> balancedSplit(int64_t n_layers, int64_t chunks, const LayerCosts& costs) {
  if (chunks < 1 || chunks > n_layers)
    throw std::logic_error("balancedSplit: need 1 <= chunks <= n_layers");
  return minMaxSplit(n_layers, chunks, 1, costs);
}

std::vector<int64_t> interleavedSplit(int64_t n_layers, int64_t stages, int64_t v,
                                      const LayerCosts& costs) {
  if (stages < 1 || v < 1 || stages * v > n_layers)
    throw std::logic_error("interleavedSplit: need stages, v >= 1 and stages * v <= n_layers");
  const std::vector<int64_t> per_stage = minMaxSplit(n_layers, stages, v, costs);
  std::vector<int64_t> split(stages * v);
  for (int64_t s = 0; s < stages; ++s) {
    const LayerCosts own{costs.block, s == 0 ? costs.embed : 0.0,
                         s == stages - 1 ? costs.head : 0.0};
    const std::vector<int64_t> chunks = minMaxSplit(per_stage[s], v, 1, own);
    for (int64_t c = 0; c < v; ++c) split[c * stages + s] = chunks[c];
  }
  return split;
}

std::string describe(const PipeAction& a) {
  const std::string mb = " mb " + std::to_string(a.mb) + " chunk " + std::to_string(a.chunk);
  const std::string peer = " stage " + std::to_string(a.peer);
  switch (a.kind) {
    case PipeAction::kForward:
      return "forward" + mb;
    case PipeAction::kBackward:
      return "backward" + mb;
    case PipeAction::kSendAct:
      return "send activations" + mb + " to" + peer;
    case PipeAction::kRecvAct:
      return "receive activations" + mb + " from" + peer;
    case PipeAction::kSendGrad:
      return "send gradients" + mb + " to" + peer;
    case PipeAction::kRecvGrad:
      return "receive gradients" + mb + " from" + peer;
    case PipeAction::kWeight:
      return "weight gradients" + mb;
  }
  return "?";
}

int64_t PipePlan::firstLayer(int64_t model_chunk) const {
  int64_t first = 0;
  for (int64_t k = 0; k < model_chunk; ++k) first += split[k];
  return first;
}

namespace {

PipeAction fwd(int64_t mb, int64_t chunk) { return {PipeAction::kForward, mb, chunk, -1}; }
PipeAction bwd(int64_t mb, int64_t chunk) { return {PipeAction::kBackward, mb, chunk, -1}; }
PipeAction wgt(int64_t mb, int64_t chunk) { return {PipeAction::kWeight, mb, chunk, -1}; }

// ZB-H1: 1F1B's forwards and (input-gradient) backwards; stage s defers each weight pass
// by s backwards and runs the deferred ones after its last backward. So stage s holds at
// most p − s micro-batches' activations (as 1F1B) and s pending weight passes: no stage
// holds more than stage 0 does in 1F1B.
std::vector<PipeAction> zbH1Order(const PipePlan& plan, int64_t stage) {
  const int64_t p = plan.stages, m = plan.microbatches, warmup = std::min(p - stage - 1, m);
  std::vector<PipeAction> out;
  int64_t next_weight = 0;
  auto backward = [&](int64_t mb) {
    out.push_back(bwd(mb, 0));
    if (mb - next_weight >= stage) out.push_back(wgt(next_weight++, 0));
  };
  for (int64_t i = 0; i < warmup; ++i) out.push_back(fwd(i, 0));
  for (int64_t i = 0; i < m - warmup; ++i) {
    out.push_back(fwd(warmup + i, 0));
    backward(i);
  }
  for (int64_t i = m - warmup; i < m; ++i) backward(i);
  while (next_weight < m) out.push_back(wgt(next_weight++, 0));
  return out;
}

// Interleaved 1F1B (Megatron): forward step k runs micro-batch (k / pv)·p + k % p on
// chunk (k / p) % v; backward step k the same micro-batch on chunk v − 1 − (k / p) % v.
std::vector<PipeAction> interleavedOrder(const PipePlan& plan, int64_t stage) {
  const int64_t p = plan.stages, v = plan.virtual_stages, total = plan.microbatches * v;
  auto step = [&](int64_t k, bool forward) {
    const int64_t within = k % (p * v), mb = (k / (p * v)) * p + within % p;
    const int64_t c = (within / p) % v;
    return forward ? fwd(mb, c) : bwd(mb, v - 1 - c);
  };
  const int64_t warmup = std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  std::vector<PipeAction> out;
  for (int64_t k = 0; k < warmup; ++k) out.push_back(step(k, true));
  for (int64_t i = 0; i < total - warmup; ++i) {
    out.push_back(step(warmup + i, true));
    out.push_back(step(i, false));
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(step(k, false));
  return out;
}

}  // namespace

std::vector<PipeAction> computeOrder(const PipePlan& plan, int64_t stage) {
  const int64_t p = plan.stages, m = plan.microbatches;
  std::vector<PipeAction> out;
  switch (plan.schedule) {
    case PipeSchedule::kGpipe:
      for (int64_t i = 0; i < m; ++i) out.push_back(fwd(i, 0));
      for (int64_t i = 0; i < m; ++i) out.push_back(bwd(i, 0));
      break;
    case PipeSchedule::k1F1B: {
      const int64_t warmup = std::min(p - stage - 1, m);
      for (int64_t i = 0; i < warmup; ++i) out.push_back(fwd(i, 0));
      for (int64_t i = 0; i < m - warmup; ++i) {
        out.push_back(fwd(warmup + i, 0));
        out.push_back(bwd(i, 0));
      }
      for (int64_t i = m - warmup; i < m; ++i) out.push_back(bwd(i, 0));
      break;
    }
    case PipeSchedule::kInterleaved1F1B:
      out = interleavedOrder(plan, stage);
      break;
    case PipeSchedule::kZbH1:
      out = zbH1Order(plan, stage);
      break;
  }
  return out;
}

std::vector<PipeAction> withTransfers(const PipePlan& plan, int64_t stage,
                                      const std::vector<PipeAction>& compute) {
  const int64_t p = plan.stages, last = p * plan.virtual_stages - 1;
  std::vector<PipeAction> out;
  for (const PipeAction& a : compute) {
    if (a.kind == PipeAction::kWeight) {  // local: consumes and produces no message
      out.push_back(a);
      continue;
    }
    const int64_t k = plan.modelChunk(stage, a.chunk);
    const bool f = a.kind == PipeAction::kForward;
    // Receive what this compute consumes, compute, send what it produced.
    if (f && k > 0) out.push_back({PipeAction::kRecvAct, a.mb, a.chunk, (k - 1) % p});
    if (!f && k < last) out.push_back({PipeAction::kRecvGrad, a.mb, a.chunk, (k + 1) % p});
    out.push_back(a);
    if (f && k < last) out.push_back({PipeAction::kSendAct, a.mb, a.chunk, (k + 1) % p});
    if (!f && k > 0) out.push_back({PipeAction::kSendGrad, a.mb, a.chunk, (k - 1) % p});
  }
  return out;
}

std::vector<std::vector<PipeAction>> pipeActions(const PipePlan& plan) {
  std::vector<std::vector<PipeAction>> all;
  for (int64_t s = 0; s < plan.stages; ++s)
    all.push_back(withTransfers(plan, s, computeOrder(plan, s)));
  return all;
}

double theoreticalBubble(const PipePlan& plan) {
  const double p = double(plan.stages), m = double(plan.microbatches);
  if (plan.schedule == PipeSchedule::kZbH1) return (p - 1) / (3 * m + p - 1);
  const double b = (p - 1) / (m + p - 1);
  return plan.schedule == PipeSchedule::kInterleaved1F1B ? b / double(plan.virtual_stages) : b;
}

std::string theoreticalBubbleFormula(const PipePlan& plan) {
  switch (plan.schedule) {
    case PipeSchedule::kInterleaved1F1B:
      return "(p-1)/(m+p-1)/v";
    case PipeSchedule::kZbH1:
      return "(p-1)/(3m+p-1)";
    default:
      return "(p-1)/(m+p-1)";
  }
}

double pipelineIdleFraction(double span, double waited, double makespan) {
  return makespan > 0 ? (makespan - (span - waited)) / makespan : 0.0;
}

PipeSimulation simulatePipeline(const std::vector<std::vector<PipeAction>>& actions,
                                PipeTimes times) {
  const int64_t p = int64_t(actions.size());
  PipeSimulation sim;
  sim.peak_in_flight.assign(p, 0);
  sim.forwards.assign(p, 0);
  sim.backwards.assign(p, 0);
  sim.waited.assign(p, 0);
  std::vector<double> clock(p, 0);
  std::vector<size_t> next(p, 0);
  std::vector<int64_t> in_flight(p, 0);
  // (is gradient, micro-batch, receiver's model chunk) -> arrival time
  std::map<std::tuple<bool, int64_t, int64_t>, double> sent;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      for (; next[s] < actions[s].size(); ++next[s], progress = true) {
        const PipeAction& a = actions[s][next[s]];
        const int64_t k = a.chunk * p + s;
        if (a.kind == PipeAction::kSendAct || a.kind == PipeAction::kSendGrad) {
          const bool g = a.kind == PipeAction::kSendGrad;
          sent[{g, a.mb, g ? k - 1 : k + 1}] = clock[s];
        } else if (a.kind == PipeAction::kRecvAct || a.kind == PipeAction::kRecvGrad) {
          auto it = sent.find({a.kind == PipeAction::kRecvGrad, a.mb, k});
          if (it == sent.end()) break;
          sim.waited[s] += std::max(0.0, it->second - clock[s]);
          clock[s] = std::max(clock[s], it->second);
        } else if (a.kind == PipeAction::kWeight) {
          clock[s] += times.weight;
        } else {
          const bool f = a.kind == PipeAction::kForward;
          clock[s] += f ? times.forward : times.backward;
          in_flight[s] += f ? 1 : -1;
          (f ? sim.forwards : sim.backwards)[s] += 1;
          sim.peak_in_flight[s] = std::max(sim.peak_in_flight[s], in_flight[s]);
        }
      }
    }
  }
  sim.finish = clock;
  for (int64_t s = 0; s < p; ++s) {
    sim.makespan = std::max(sim.makespan, clock[s]);
    if (next[s] < actions[s].size())
      sim.deadlock += (sim.deadlock.empty() ? "" : "; ") + std::string("stage ") +
                      std::to_string(s) + " waits to " + describe(actions[s][next[s]]);
  }
  return sim;
}

}  // namespace ftb
