#include "common/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "common/pipeline.h"
#include "common/pipeline_limits.h"

namespace ftb {
namespace {

// GPU activations per sample over the CPU formula's: the CUDA caching allocator's peak grew
// by 5426 MiB per sample of 2048 tokens (micro-batch 4 -> 8) on a D2048/L16 GQA model in bf16
// on an H200 (scripts/gpu_check.sh, results/gpu/), where the CPU formula gives 3706 MiB.
constexpr double kGpuActivationScale = 5426.0 / 3706.0;

// A rank's share of the model and of a step's activations: the whole model without a
// pipeline, else its stage's chunks (memory_estimate.h "Pipeline stages").
struct StageShare {
  double blocks = 0;  // blocks held
  bool embed = true, head = true;
  double blocks_in_flight = 0, logits_in_flight = 1;  // most alive at once
  double transfers = 0;  // [B, T, D] pipeline transfer buffers alive during a step
  double weight_blocks = 0;  // zb_h1: blocks whose weight pass is pending (pipeline_limits.h)
};

StageShare stageShare(const TrainConfig& tc, int64_t stage) {
  StageShare sh;
  if (tc.layout.pp == 1) {
    sh.blocks = sh.blocks_in_flight = double(tc.model.n_layers);
    return sh;
  }
  const PipePlan& plan = tc.pipeline;
  sh.embed = stage == 0;
  sh.head = stage == plan.stages - 1;
  for (int64_t c = 0; c < plan.virtual_stages; ++c)
    sh.blocks += double(plan.split[plan.modelChunk(stage, c)]);
  const PipeInFlight f = pipeInFlight(plan, stage);  // closed form: no list per micro-batch
  sh.blocks_in_flight = f.blocks;
  sh.logits_in_flight = f.heads;
  sh.transfers = f.transfers;
  sh.weight_blocks = f.weight_blocks;
  return sh;
}

struct Counts {
  double block = 0, block_replicated = 0;  // per-block params on this tp rank
  double root = 0, root_replicated = 0;    // embedding, final norm and output the share holds
};

// A tied embedding is one tensor on one rank, but two equal copies in a pipeline: the
// first stage's embedding and the last stage's output projection.
Counts countParams(const ModelArgs& m, int64_t tp, const StageShare& sh) {
  const double D = m.dim, t = double(tp), table = double(m.vocab_size) * D / t;
  Counts c;
  c.block = double(m.blockMatrixParams()) / t + 2 * D;
  c.block_replicated = 2 * D;
  c.root =
      (sh.embed ? table : 0.0) + (sh.head ? D + (m.tie_embeddings && sh.embed ? 0.0 : table) : 0.0);
  c.root_replicated = sh.head ? D : 0.0;
  return c;
}

// One block's adapter parameters on this tp rank: column-parallel targets keep A whole
// and 1/tp of B's rows, row-parallel ones (o, down) 1/tp of A's columns and B whole.
double loraBlockParams(const ModelArgs& m, const LoraConfig& lora, int64_t tp) {
  if (!lora.enabled()) return 0;
  const double r = double(lora.rank), t = double(tp);
  double sum = 0;
  for (const std::string& target : kLoraTargets) {
    if (!lora.hasTarget(target)) continue;
    const LoraTargetShape s = loraTargetShape(m, target);
    const double in = double(s.in), out = double(s.out);
    const bool row = target == "o" || target == "down";
    sum += row ? r * in / t + out * r : r * in + out / t * r;
  }
  return sum;
}

// Bytes per NF4 weight: a 4-bit code plus its block's fp32 absmax (trainer/kernels/nf4.h).
constexpr double kNf4BytesPerWeight = 0.5 + 4.0 / 64;

// The frozen base's bytes on this rank before ZeRO-3 sharding: P in lora.base_dtype, or
// with "nf4" the block matrices in NF4, their norms in fp32 and the root (embedding, output)
// in bf16 (its norm fp32).
double loraBaseBytes(const TrainConfig& tc, const Counts& c, double L) {
  if (tc.lora.base_dtype != BaseDType::kNf4)
    return (tc.lora.base_dtype == BaseDType::kBf16 ? 2.0 : 4.0) * (L * c.block + c.root);
  const double matrices = c.block - c.block_replicated;
  return L * (kNf4BytesPerWeight * matrices + 4 * c.block_replicated) +
         2 * (c.root - c.root_replicated) + 4 * c.root_replicated;
}

// The NF4 projection's scratch: its largest block matrix dequantized (fp32) beside the int32
// code indices it is looked up from, 8 bytes per weight (trainer/kernels/nf4.cpp).
double nf4Scratch(const TrainConfig& tc) {
  if (!tc.lora.enabled() || tc.lora.base_dtype != BaseDType::kNf4) return 0;
  const ModelArgs& m = tc.model;
  const double largest = double(std::max({m.ffn_dim, m.n_heads * m.headDim()})) * double(m.dim);
  return 8.0 * largest / double(tc.layout.tp);
}

// LoRA's model states: the frozen base (loraBaseBytes; no gradient, no optimizer state;
// ZeRO-3 shards it, stages 1-2 hold it whole as DDP does), the adapters Pa as full
// finetuning holds its weights. Stage 3 gathers a block's base in the compute dtype and
// the root in its storage dtype.
void loraModelStates(const TrainConfig& tc, const Counts& c, double L, MemoryEstimate& e) {
  const double N = double(tc.layout.dp_shard);
  const double pa_block = loraBlockParams(tc.model, tc.lora, tc.layout.tp), Pa = L * pa_block;
  const double b = tc.lora.base_dtype == BaseDType::kBf16 ? 2.0 : 4.0,
               base = loraBaseBytes(tc, c, L);
  const double elt = tc.training.dtype == DType::kBf16 ? 2.0 : 4.0;
  const int stage = static_cast<int>(tc.layout.effectiveZeroStage());
  e.optimizer = tc.training.optimizer == "adafactor" ? 4.0 * 2 * std::sqrt(Pa / L) * L
                                                     : 8.0 * (stage >= 1 ? Pa / N : Pa);
  e.parameters = (stage == 3 ? (base + 4 * Pa) / N : base + 4 * Pa);
  e.scratch = nf4Scratch(tc);
  e.gradients = stage == 0   ? 4 * Pa
                : stage == 1 ? 4 * Pa + 4 * Pa / N
                : stage == 2 ? 4 * Pa / N + 4 * pa_block
                             : 4 * Pa / N;
  e.comm_buffers = stage == 0 ? 0 : 2 * 4 * pa_block;
  e.gathered = stage == 3 ? b * c.root + std::min(b, elt) * c.block + (elt + 4) * pa_block : 0;
}

// Activations LoRA does not save: a frozen projection's input is kept only when an adapter
// on it needs it (q/k/v share theirs, gate/up theirs); each adapter keeps its [B, T, r]
// intermediate and its scaled copy.
double loraActivationDelta(const TrainConfig& tc, double elt) {
  if (!tc.lora.enabled()) return 0;
  const LoraConfig& l = tc.lora;
  const double BT = double(tc.training.micro_batch_size) * double(tc.data.seq_len),
               D = tc.model.dim;
  const double F = double(tc.model.ffn_dim) / double(tc.layout.tp), r = double(l.rank);
  double delta = 0;
  if (!l.hasTarget("q") && !l.hasTarget("k") && !l.hasTarget("v")) delta -= elt * BT * D;
  if (!l.hasTarget("o")) delta -= elt * BT * D;
  if (!l.hasTarget("gate") && !l.hasTarget("up")) delta -= elt * BT * D;
  if (!l.hasTarget("down")) delta -= elt * BT * F;
  return delta + double(l.targets.size()) * 2 * elt * BT * r;
}

// What one block's pending weight pass keeps (zb_h1, trainer/model/linear.h
// WeightGradStore): for each trainable projection (every one in full finetuning, the
// adapted ones with LoRA) its input and its output's gradient, in the compute dtype; q/k/v
// share their input, as gate/up do. LoRA's rank-r terms are left out.
double weightPassBytes(const TrainConfig& tc, double elt) {
  const ModelArgs& m = tc.model;
  const double BT = double(tc.training.micro_batch_size) * double(tc.data.seq_len);
  const double t = double(tc.layout.tp), D = m.dim, F = double(m.ffn_dim) / t;
  const double Q = double(m.n_heads * m.headDim()) / t, KV = double(m.n_kv_heads * m.headDim()) / t;
  auto on = [&](const char* target) { return !tc.lora.enabled() || tc.lora.hasTarget(target); };
  double values = 0;
  if (on("q") || on("k") || on("v")) values += D;  // shared input
  if (on("gate") || on("up")) values += D;
  values += (on("o") ? Q + D : 0) + (on("down") ? F + D : 0);  // inputs and output gradients
  values += (on("q") ? Q : 0) + (on("k") ? KV : 0) + (on("v") ? KV : 0) + (on("gate") ? F : 0) +
            (on("up") ? F : 0);
  return elt * BT * values;
}

std::string gib(double b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(b < 10.0 * (1 << 30) ? 3 : 2) << b / (1 << 30) << " GiB";
  return os.str();
}

}  // namespace

namespace {

// Parameters, gradients, optimizer state, gathered units and communication buffers of the
// share's L blocks and root parameters, by ZeRO stage.
void modelStates(const TrainConfig& tc, const Counts& c, double L, MemoryEstimate& e) {
  const double P = L * c.block + c.root;
  const double N = double(tc.layout.dp_shard);
  const int stage = static_cast<int>(tc.layout.effectiveZeroStage());
  const double elt = tc.training.dtype == DType::kBf16 ? 2.0 : 4.0;  // compute dtype
  e.params_local = static_cast<int64_t>(std::min(P, 9.2e18));        // checkSizes bounds P
  double opt_params = stage >= 1 ? P / N : P;
  e.optimizer =
      tc.training.optimizer == "adafactor" ? 4.0 * 2 * std::sqrt(P) * L : 8.0 * opt_params;
  if (stage == 0) {
    // training.master_weights = "none": bf16 weights and gradients (the norms' fp32 is
    // negligible), and with bf16_update = "kahan" a bf16 compensation buffer per weight.
    const bool bf16_weights = tc.training.master_weights == "none";
    const double w = bf16_weights ? 2.0 : 4.0;
    e.parameters = w * P;
    e.gradients = w * P;
    if (bf16_weights && tc.training.bf16_update == "kahan") e.optimizer += 2 * P;
    e.comm_buffers = 0;  // gradients are views of the all-reduce buckets (trainer/parallel/ddp.h)
  } else if (stage == 1) {
    e.parameters = 4 * P;
    e.gradients = 4 * P + 4 * P / N;  // all gradients live until the step's all-reduce
    e.comm_buffers = 2 * 4 * std::max(c.block, c.root);  // largest unit's flat buffer
  } else if (stage == 2) {
    // Each unit is reduce-scattered and freed during backward: the shard, plus the root
    // (its output-projection gradient comes first, its embedding gradient last) and the
    // block in flight. Staging: the unit's flat buffer and the alltoall receive buffer.
    e.parameters = 4 * P;
    e.gradients = 4 * P / N + 4 * (c.root + c.block);
    e.comm_buffers = 2 * 4 * std::max(c.block, c.root);
  } else {
    // Shards + the fp32 root unit for the whole step + one block gathered in the
    // compute dtype (forward, then again for its recompute in backward).
    e.parameters = 4 * P / N;
    e.gradients = 4 * P / N;
    e.gathered = 4 * c.root + elt * c.block + 4 * c.root + 4 * c.block;
    e.comm_buffers = 4 * std::max(c.block, c.root) + elt * c.block;
  }
  if (tc.lora.enabled()) loraModelStates(tc, c, L, e);
}

// training.optimizer_in_backward (DDP, trainer/parallel/ddp.h): no gradient buffers. A
// parameter's gradient lives from its accumulation to its bucket's hand-over: the largest
// tensor's alone in a world of one; across ranks the bucket being filled, plus two staging
// buffers of the largest bucket (communication buffers). ZeRO-3 (zero.h): no shard
// gradients; a unit's reduce-scattered shard lives until its update.
void optimizerInBackward(const TrainConfig& tc, const StageShare& sh, const Counts& c,
                         MemoryEstimate& e) {
  if (!tc.training.optimizer_in_backward) return;
  if (tc.layout.effectiveZeroStage() == 3) {
    e.gradients = 4 * std::max(c.block, c.root) / double(tc.layout.dp_shard);
    return;
  }
  const ModelArgs& m = tc.model;
  const double t = double(tc.layout.tp), D = m.dim;
  const double table = (sh.embed || sh.head) ? double(m.vocab_size) * D / t : 0.0;
  const double w = tc.training.master_weights == "none" ? 2.0 : 4.0;  // gradient bytes
  const double largest = w * std::max({table, double(m.ffn_dim) * D / t, D * D / t});
  const double bucket = std::max(largest, std::min(tc.comm.bucket_bytes, e.gradients));
  const bool alone = tc.layout.dpSize() == 1;
  e.gradients = std::min(e.gradients, alone ? largest : bucket);
  if (!alone) e.comm_buffers += 2 * std::min(bucket, w * double(e.params_local));
}

// Activations of one micro-batch: per block ≈ 16·BTD + 4·BTF values in the compute
// dtype, the fp32 softmax output B·H·T² (plus its compute-dtype copy when that is
// not fp32; on a GPU, whose attention is flash SDPA, one fp32 value per row) and, in
// bf16, the weight casts saved for backward; times the share's blocks in flight, and the
// logits of each head micro-batch in flight. Plus the pipeline's transfer buffers.
// Calibrated against measured peak RSS (README §Memory estimate).
void activations(const TrainConfig& tc, const Counts& c, const StageShare& sh, MemoryEstimate& e) {
  const ModelArgs& m = tc.model;
  const double elt = tc.training.dtype == DType::kBf16 ? 2.0 : 4.0;  // compute dtype
  const double B = tc.training.micro_batch_size, T = tc.data.seq_len, D = m.dim, L = m.n_layers;
  const double H = double(m.n_heads) / tc.layout.tp, F = double(m.ffn_dim) / tc.layout.tp;
  const bool low = tc.training.dtype == DType::kBf16;
  // SDPA on a GPU (flash attention) keeps no T² tensor, only a log-sum-exp per row.
  const bool flash = tc.training.device.rfind("cuda", 0) == 0;
  const double scores = flash ? 4.0 * B * H * T : (4.0 + (low ? elt : 0.0)) * B * H * T * T;
  // A weight stored in another dtype than the compute dtype is cast on use, and the cast
  // saved for backward (fp32 masters in bf16; a bf16 LoRA base in fp32).
  // An NF4 base is dequantized again in backward: nothing of it is saved.
  const bool bf16_base = (tc.lora.enabled() && tc.lora.base_dtype == BaseDType::kBf16) ||
                         tc.training.master_weights == "none";
  const bool nf4_base = tc.lora.enabled() && tc.lora.base_dtype == BaseDType::kNf4;
  const double casts = low != bf16_base && !nf4_base ? elt * c.block : 0.0;
  // On a GPU the fused CPU kernels run as composed ATen ops, which keep fp32 intermediates
  // for backward: kGpuActivationScale times the CPU kernels' activations (measured: see there).
  const double scale = flash ? kGpuActivationScale : 1.0;
  const double per_block = scale * (elt * (16 * B * T * D + 4 * B * T * F) + scores) + casts +
                           loraActivationDelta(tc, elt);
  const double logit_elems = B * T * double(m.vocab_size) / tc.layout.tp;
  // One rank with the whole vocabulary: the chunked cross-entropy saves only the
  // logits (4 bytes/value in fp32; bf16 logits + their bf16 gradient in bf16). The
  // vocab-parallel path keeps ~3 fp32 copies plus the compute-dtype logits.
  const double logits =
      sh.logits_in_flight * scale * (tc.layout.tp > 1 ? 3 * 4.0 + elt : 4.0) * logit_elems;
  const double n = sh.blocks_in_flight;
  e.blocks_in_flight = n;
  e.logits_in_flight = sh.logits_in_flight;
  e.activations_full = n * per_block + logits;
  // Checkpointed blocks keep only their input; one block is live during recompute. In
  // flight, the model's share of checkpointed blocks (n = L without a pipeline).
  const double every =
      tc.training.activation_checkpointing > 0 ? double(tc.training.activation_checkpointing) : 1.0;
  const double ckpt = n * std::ceil(L / every) / L;
  // training.activation_offload = "host": the checkpointed inputs live in host memory.
  const double kept = tc.training.activation_offload == "host" ? 0.0 : ckpt * elt * B * T * D;
  e.activations_checkpointed = kept + (n - ckpt) * per_block + per_block + logits;
  e.weight_passes = sh.weight_blocks * weightPassBytes(tc, elt);
  e.comm_buffers += sh.transfers * elt * B * T * D;
}

// training.optimizer_offload = "host" on a GPU (trainer/optim/offload.h): the optimizer state
// leaves the device for host memory, beside a host copy of the parameters it updates (the
// rank's shard under ZeRO; LoRA's adapters) and a buffer of their gradients, in their dtype.
void optimizerOffload(const TrainConfig& tc, const Counts& c, double L, MemoryEstimate& e) {
  if (tc.training.optimizer_offload != "host" || tc.training.device.rfind("cuda", 0) != 0) return;
  const bool lora = tc.lora.enabled();
  const double trained =
      lora ? L * loraBlockParams(tc.model, tc.lora, tc.layout.tp) : L * c.block + c.root;
  const int stage = static_cast<int>(tc.layout.effectiveZeroStage());
  const double shard = stage >= 1 ? trained / double(tc.layout.dp_shard) : trained;
  const double w = !lora && stage == 0 && tc.training.master_weights == "none" ? 2.0 : 4.0;
  e.host_offloaded = e.optimizer + 2 * w * shard;
  e.optimizer = 0;
}

}  // namespace

MemoryEstimate estimateStage(const TrainConfig& tc, int64_t stage) {
  const StageShare sh = stageShare(tc, stage);
  const Counts c = countParams(tc.model, tc.layout.tp, sh);
  MemoryEstimate e;
  e.pp_stage = tc.layout.pp > 1 ? stage : -1;
  e.runtime = kRuntimeBaselineBytes;
  e.checkpointing = tc.training.activation_checkpointing > 0 || tc.layout.effectiveZeroStage() == 3;
  modelStates(tc, c, sh.blocks, e);
  optimizerInBackward(tc, sh, c, e);
  optimizerOffload(tc, c, sh.blocks, e);
  activations(tc, c, sh, e);
  return e;
}

MemoryEstimate estimateMemory(const TrainConfig& tc) {
  MemoryEstimate worst = estimateStage(tc, 0);
  for (int64_t s = 1; s < tc.layout.pp; ++s) {
    MemoryEstimate e = estimateStage(tc, s);
    if (e.total() > worst.total()) worst = e;
  }
  return worst;
}

MemoryEstimate estimateDeviceMemory(const TrainConfig& tc) {
  TrainConfig gpu = tc;
  if (gpu.training.device.rfind("cuda", 0) != 0) gpu.training.device = "cuda";
  MemoryEstimate e = estimateMemory(gpu);
  e.runtime = 0;
  e.device = true;
  return e;
}

std::string formatMemoryEstimate(const TrainConfig& tc, const MemoryEstimate& e,
                                 double limit_bytes) {
  std::ostringstream os;
  const int stage = static_cast<int>(tc.layout.effectiveZeroStage());
  os << "memory estimate per rank: " << tc.model.name << ", world " << tc.layout.world_size
     << " = dp_replicate " << tc.layout.dp_replicate << " x dp_shard " << tc.layout.dp_shard
     << " x tp " << tc.layout.tp << ", zero_stage " << stage << ", "
     << (tc.training.dtype == DType::kBf16 ? "bf16" : "fp32") << ", " << tc.training.optimizer
     << (tc.training.master_weights == "none" ? " (bf16 weights, " + tc.training.bf16_update +
                                                     " update, no fp32 masters)"
                                               : "")
     << (tc.training.optimizer_in_backward ? ", optimizer step inside backward" : "")
     << (e.host_offloaded > 0 ? ", optimizer state on the host" : "")
     << ", micro-batch " << tc.training.micro_batch_size << " x seq " << tc.data.seq_len << "\n";
  if (e.pp_stage >= 0)
    os << "  pipeline stage " << e.pp_stage << " of pp " << tc.layout.pp << " ("
       << pipeScheduleName(tc.pipeline.schedule) << ", " << tc.training.grad_accum_steps
       << " micro-batches): " << e.blocks_in_flight << " block activations and "
       << e.logits_in_flight << " logits in flight\n";
  os << (e.device ? "  GPU memory: the CUDA caching allocator's bytes, no host runtime\n"
                   : "  host memory: peak RSS, with the process's runtime baseline\n");
  os << "  parameters on this tp rank: " << e.params_local << "\n";
  auto row = [&os](const std::string& k, double v) {
    os << "  " << std::left << std::setw(34) << k << std::right << std::setw(14) << gib(v) << "\n";
  };
  row("parameters", e.parameters);
  row("gradients", e.gradients);
  row("optimizer state", e.optimizer);
  row("model states (sum of the above)", e.modelStates());
  if (e.gathered > 0) row("gathered units (ZeRO-3)", e.gathered);
  if (e.scratch > 0) row("NF4 dequantization scratch", e.scratch);
  if (e.weight_passes > 0) row("pending weight passes (zb_h1)", e.weight_passes);
  row("activations (no checkpointing)", e.activations_full);
  row("activations (checkpointing)", e.activations_checkpointed);
  row("communication buffers", e.comm_buffers);
  row("runtime baseline", e.runtime);
  row(std::string("total (") + (e.checkpointing ? "checkpointing" : "no checkpointing") + ")",
      e.total());
  if (e.host_offloaded > 0)
    row("host: optimizer state and copies", e.host_offloaded);  // not in the device's total
  for (int64_t st = 0; tc.layout.pp > 1 && st < tc.layout.pp; ++st) {
    const MemoryEstimate se = estimateStage(tc, st);
    row("stage " + std::to_string(st) + " total (" + formatFixed(se.blocks_in_flight, 0) +
            " in flight)",
        se.total());
  }
  if (limit_bytes > 0)
    os << "  memory_limit " << gib(limit_bytes) << ": "
       << (e.total() <= limit_bytes ? "fits" : "does NOT fit") << "\n";
  return os.str();
}

}  // namespace ftb

namespace ftb {
namespace {

// A cgroup memory limit in bytes, 0 when none is set or readable.
double cgroupLimitBytes() {
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string v;
    if (in >> v && v != "max") {
      double b = std::atof(v.c_str());
      if (b > 0 && b < 1e18) return b;  // v1 reports ~9.2e18 for "no limit"
    }
  }
  return 0;
}

// The term of `e` that dominates, and what shrinks it.
std::pair<std::string, double> largestTerm(const MemoryEstimate& e, const TrainConfig& tc,
                                           std::string& hint) {
  const double act = e.checkpointing ? e.activations_checkpointed : e.activations_full;
  std::vector<std::pair<std::string, double>> terms = {
      {"parameters", e.parameters},
      {"gradients", e.gradients},
      {"optimizer state", e.optimizer},
      {"gathered units", e.gathered},
      {std::string("activations") + (e.checkpointing ? " (checkpointing)" : ""), act},
      {"communication buffers", e.comm_buffers}};
  auto it = std::max_element(terms.begin(), terms.end(),
                             [](auto& a, auto& b) { return a.second < b.second; });
  hint = it->first.rfind("activations", 0) == 0
             ? "lower training.micro_batch_size or data.seq_len, or set "
               "training.activation_checkpointing = \"full\""
             : "a smaller model (model.*), or shard it: parallel.dp_shard with "
               "parallel.zero_stage, or parallel.tp";
  if (it->first == "parameters" && tc.lora.enabled() && tc.lora.base_dtype == BaseDType::kFp32)
    hint = "store the frozen base in bf16 (lora.base_dtype = \"bf16\" halves it), " + hint;
  if (it->first == "parameters" && tc.lora.enabled() && tc.lora.base_dtype == BaseDType::kBf16)
    hint =
        "store the frozen base's block matrices in NF4 (lora.base_dtype = \"nf4\": 0.56 "
        "bytes per weight), " +
        hint;
  return *it;
}

}  // namespace

double nodeMemoryBytes() {
  double phys = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  double cg = cgroupLimitBytes();
  return cg > 0 ? std::min(phys, cg) : phys;
}

MemoryBudget memoryBudget(const TrainConfig& tc, int ranks_on_node) {
  if (tc.training.device_memory_limit_bytes > 0)
    return {tc.training.device_memory_limit_bytes, "training.device_memory_limit_gb", true};
  if (tc.comm.memory_limit_bytes > 0)
    return {tc.comm.memory_limit_bytes, "parallel.memory_limit_gb"};
  const int n = std::max(1, ranks_on_node);
  const double node = nodeMemoryBytes();
  return {node / n,
          "this node's memory " + gib(node) + " / " + std::to_string(n) + " rank(s) on it"};
}

std::string describeBudget(const MemoryBudget& budget) {
  return gib(budget.bytes) + " per rank (" + budget.source + ")" +
         (budget.device ? ": device memory (the CUDA allocator's bytes, the GPU's kernels), no "
                          "host runtime baseline"
                        : ", host estimate: peak RSS with the host runtime baseline");
}

std::string memoryFitProblem(const TrainConfig& tc, const MemoryEstimate& e,
                             const MemoryBudget& budget) {
  if (!(e.total() > budget.bytes)) return "";
  std::string hint;
  auto [name, bytes] = largestTerm(e, tc, hint);
  return "estimated memory per rank " + gib(e.total()) + " exceeds " + gib(budget.bytes) + " (" +
         budget.source + "); largest term: " + name + " " + gib(bytes) + " (micro-batch " +
         std::to_string(tc.training.micro_batch_size) + " x seq " +
         std::to_string(tc.data.seq_len) + ", " + std::to_string(e.params_local) +
         " parameters per tp rank). Hint: " + hint + "; trainer --estimate-memory shows every term";
}

}  // namespace ftb
