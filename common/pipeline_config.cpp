// resolvePipeline(): see pipeline_config.h. The checks across the pipeline keys, the
// layout, the micro-batches and the model.
#include "common/pipeline_config.h"

#include <string>
#include <vector>

#include "common/pipeline.h"

namespace ftb {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

PipeSchedule scheduleOf(const std::string& name) {
  if (name == "gpipe") return PipeSchedule::kGpipe;
  if (name == "1f1b") return PipeSchedule::k1F1B;
  if (name == "zb_h1") return PipeSchedule::kZbH1;
  return PipeSchedule::kInterleaved1F1B;  // the schema allows no other name
}

std::string listText(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + num(v[i]);
  return out + "]";
}

// The schedule and its virtual stages against pp and the model's blocks.
void checkPipeShape(const Config& cfg, const TrainConfig& c) {
  const int64_t L = c.model.n_layers, v = c.pipeline.virtual_stages;
  if (c.layout.pp > L)
    cfg.failEither("parallel.pp", "model.n_layers",
                   "pp(" + num(c.layout.pp) + ") exceeds model.n_layers(" + num(L) +
                       "): every pipeline stage needs at least one transformer block",
                   "lower parallel.pp to at most " + num(L));
  const bool interleaved = c.pipeline.schedule == PipeSchedule::kInterleaved1F1B;
  if (v > 1 && !interleaved)
    cfg.failEither("parallel.pp_virtual_stages", "parallel.pp_schedule",
                   "pp_virtual_stages(" + num(v) +
                       ") > 1 needs pp_schedule \"interleaved_1f1b\", "
                       "got \"" +
                       pipeScheduleName(c.pipeline.schedule) + "\"",
                   "set parallel.pp_schedule = \"interleaved_1f1b\" or pp_virtual_stages = 1");
  if (v > 1 && c.layout.pp == 1)
    cfg.failEither("parallel.pp_virtual_stages", "parallel.pp",
                   "pp_virtual_stages(" + num(v) + ") > 1 needs a pipeline, but pp is 1",
                   "set parallel.pp >= 2, or pp_virtual_stages = 1");
  if (interleaved && c.layout.pp > 1 && v < 2)
    cfg.failEither("parallel.pp_virtual_stages", "parallel.pp_schedule",
                   "pp_schedule \"interleaved_1f1b\" needs pp_virtual_stages >= 2, got " + num(v),
                   "set parallel.pp_virtual_stages = 2 (two model chunks per stage), or use "
                   "pp_schedule = \"1f1b\"");
  const int64_t chunks = c.layout.pp * v;
  if (chunks > L || (interleaved && c.layout.pp > 1 &&
                     cfg.getIntList("parallel.pp_split").empty() && L % chunks != 0))
    cfg.failEither("parallel.pp_virtual_stages", "model.n_layers",
                   "pp(" + num(c.layout.pp) + ") * pp_virtual_stages(" + num(v) + ") = " +
                       num(chunks) + " model chunks do not divide model.n_layers(" + num(L) + ")",
                   "choose pp_virtual_stages so that pp * pp_virtual_stages divides n_layers, or "
                   "give the blocks per chunk in parallel.pp_split");
}

// The micro-batches against the schedule: 1F1B fills the pipeline with pp micro-batches
// before its first backward; interleaved 1F1B runs them in groups of pp.
void checkPipeMicrobatches(const Config& cfg, const TrainConfig& c) {
  const int64_t m = c.training.grad_accum_steps;
  if (c.layout.pp == 1 || c.pipeline.schedule == PipeSchedule::kGpipe) return;
  const std::string got =
      "got " + num(m) + " micro-batches per step (training.grad_accum_steps" +
      (cfg.getInt("training.global_batch_size") > 0 ? " from global_batch_size)"
                                                    : " or parallel.pp_microbatches)");
  const std::string hint = "set parallel.pp_microbatches to a multiple of pp(" + num(c.layout.pp) +
                           ") (the global batch grows with it), or use pp_schedule = \"gpipe\"";
  if (m < c.layout.pp)
    cfg.failEither("parallel.pp_microbatches", "parallel.pp",
                   std::string("pp_schedule \"") + pipeScheduleName(c.pipeline.schedule) +
                       "\" needs at least pp(" + num(c.layout.pp) + ") micro-batches, " + got,
                   hint);
  if (c.pipeline.schedule == PipeSchedule::kInterleaved1F1B && m % c.layout.pp != 0)
    cfg.failEither("parallel.pp_microbatches", "parallel.pp",
                   "pp_schedule \"interleaved_1f1b\" runs micro-batches in groups of pp(" +
                       num(c.layout.pp) + "), " + got,
                   hint);
}

// parallel.pp_split: pp · pp_virtual_stages entries >= 1 summing to n_layers, or
// [] for the FLOP-balanced split (common/pipeline.h).
std::vector<int64_t> pipeSplit(const Config& cfg, const TrainConfig& c) {
  const int64_t chunks = c.layout.pp * c.pipeline.virtual_stages, L = c.model.n_layers;
  const std::vector<int64_t>& given = cfg.getIntList("parallel.pp_split");
  // One chunk holds every block: nothing to balance (balancedSplit grows with the layers).
  if (given.empty() && chunks == 1) return {L};
  if (given.empty() && c.pipeline.virtual_stages > 1)
    return interleavedSplit(L, c.layout.pp, c.pipeline.virtual_stages,
                            layerCosts(c.model, c.data.seq_len));
  if (given.empty()) return balancedSplit(L, chunks, layerCosts(c.model, c.data.seq_len));
  int64_t sum = 0;
  for (int64_t n : given) {
    if (n < 1)
      cfg.fail("parallel.pp_split", listText(given) + " gives a chunk " + num(n) + " blocks",
               "every model chunk holds at least one block");
    sum += n;
  }
  if (int64_t(given.size()) != chunks)
    cfg.fail("parallel.pp_split",
             listText(given) + " has " + num(int64_t(given.size())) + " entries, expected pp(" +
                 num(c.layout.pp) + ") * pp_virtual_stages(" + num(c.pipeline.virtual_stages) +
                 ") = " + num(chunks),
             "one entry per model chunk, in model order; [] balances by FLOPs");
  if (sum != L)
    cfg.failEither(
        "parallel.pp_split", "model.n_layers",
        listText(given) + " sums to " + num(sum) + ", not model.n_layers(" + num(L) + ")",
        "the entries are the blocks of each model chunk; [] balances by FLOPs");
  return given;
}

// What a pipeline stage does not run yet: tied embeddings under ZeRO (the first and the
// last stage sum the tied weight's whole gradient, which ZeRO shards), ZeRO beyond two
// stages of one chunk (every ZeRO stage needs a root unit), and micro-batches of different
// lengths with recomputed blocks.
void checkPipeSupport(const Config& cfg, const TrainConfig& c) {
  if (c.layout.pp == 1) return;
  if (c.model.tie_embeddings && c.layout.effectiveZeroStage() > 0)
    cfg.failEither("parallel.zero_stage", "model.tie_embeddings",
                   "zero_stage(" + num(c.layout.zero_stage) +
                       ") with tied embeddings in a pipeline (pp " + num(c.layout.pp) +
                       ") is not supported: the first and the last stage sum the tied "
                       "weight's whole gradient every step, and ZeRO shards it",
                   "use parallel.zero_stage = 0 (DDP inside each stage), or parallel.pp = 1");
  if (c.layout.effectiveZeroStage() > 0 && (c.layout.pp > 2 || c.pipeline.virtual_stages > 1))
    cfg.failEither("parallel.zero_stage", "parallel.pp",
                   "zero_stage(" + num(c.layout.zero_stage) +
                       ") inside a pipeline needs pp = 2 with one "
                       "chunk per stage, got pp(" +
                       num(c.layout.pp) + "), pp_virtual_stages(" + num(c.pipeline.virtual_stages) +
                       ")",
                   "use parallel.pp = 2 with pp_schedule \"1f1b\" or \"gpipe\", or zero_stage = 0");
  // zb_h1's weight passes run after later micro-batches' backwards; ZeRO-2 and 3 reduce a
  // unit's gradients as soon as one backward has produced them all.
  if (c.pipeline.schedule == PipeSchedule::kZbH1 && c.layout.effectiveZeroStage() >= 2)
    cfg.failEither("parallel.pp_schedule", "parallel.zero_stage",
                   "pp_schedule \"zb_h1\" with zero_stage(" + num(c.layout.zero_stage) +
                       ") is not supported: zb_h1 computes the weight gradients after the "
                       "backward, which ZeRO-2/3 reduce-scatter as soon as it ends",
                   "use parallel.zero_stage = 0 or 1 with zb_h1, or pp_schedule = \"1f1b\"");
  // Recomputed blocks read the model's rope tables of the latest forward (llama.h); a
  // pipeline runs several forwards before a backward, so their lengths must agree.
  if (c.data.pad_longest &&
      (c.training.activation_checkpointing > 0 || c.layout.effectiveZeroStage() == 3))
    cfg.failEither("data.padding", "parallel.pp",
                   "\"longest\" gives the micro-batches of a pipeline different lengths, but its "
                   "recomputed blocks (activation checkpointing, ZeRO-3) need one length per step",
                   "use data.padding = \"max_length\" or \"packing\" with parallel.pp > 1");
}

}  // namespace

void resolvePipeline(const Config& cfg, TrainConfig& c) {
  PipePlan& plan = c.pipeline;
  plan.schedule = scheduleOf(cfg.getString("parallel.pp_schedule"));
  plan.stages = c.layout.pp;
  plan.virtual_stages = cfg.getInt("parallel.pp_virtual_stages");
  plan.microbatches = c.training.grad_accum_steps;
  checkPipeShape(cfg, c);
  checkPipeMicrobatches(cfg, c);
  checkPipeSupport(cfg, c);
  plan.split = pipeSplit(cfg, c);
}

}  // namespace ftb
