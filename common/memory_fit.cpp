#include "common/memory_fit.h"

#include <algorithm>
#include <iomanip>
#include <optional>
#include <sstream>

#include "common/error.h"

namespace ftb {
namespace {

struct Combination {
  bool bf16_weights, adafactor, in_backward, checkpointing;
};

// The run's config with one combination applied, or nothing where the trainer refuses it.
std::optional<TrainConfig> withCombination(const Config& cfg, int world_size, const Combination& c) {
  Config v = cfg;
  const std::string origin = "--fit";
  v.set("training.master_weights", Value(std::string(c.bf16_weights ? "none" : "fp32")), origin);
  if (c.bf16_weights) v.set("training.dtype", Value(std::string("bf16")), origin);
  v.set("training.optimizer", Value(std::string(c.adafactor ? "adafactor" : "adamw")), origin);
  v.set("training.optimizer_in_backward", Value(c.in_backward), origin);
  if (c.in_backward) {
    v.set("training.max_grad_norm", Value(0.0), origin);
    v.set("training.grad_accum_steps", Value(int64_t(1)), origin);
  }
  v.set("training.activation_checkpointing",
        Value(std::string(c.checkpointing ? "full" : "none")), origin);
  try {
    return TrainConfig::fromConfig(v, world_size, Checks::kConfigOnly);
  } catch (const ConfigError&) {
    return std::nullopt;  // e.g. bf16 weights under ZeRO, or Adafactor with tp
  }
}

double estimateFor(const TrainConfig& tc, bool device) {
  return (device ? estimateDeviceMemory(tc) : estimateMemory(tc)).total();
}

// The largest micro-batch whose estimate fits (estimates grow with the micro-batch).
int64_t largestFitting(TrainConfig tc, const MemoryBudget& budget) {
  auto fits = [&](int64_t mb) {
    tc.training.micro_batch_size = mb;
    return estimateFor(tc, budget.device) <= budget.bytes;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;
  while (hi <= (int64_t(1) << 24) && fits(hi)) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

FitRow rowFor(const TrainConfig& tc, const Combination& c, const MemoryBudget& budget) {
  const bool bf16 = tc.training.dtype == DType::kBf16;
  FitRow r;
  r.weights = c.bf16_weights ? "bf16, no masters" : bf16 ? "fp32 masters" : "fp32 (fp32 math)";
  r.optimizer = c.adafactor ? "adafactor" : "adamw";
  r.step = c.in_backward ? "inside backward" : "after backward";
  r.activations = c.checkpointing ? "checkpointed" : "stored";
  TrainConfig one = tc;
  one.training.micro_batch_size = 1;
  const MemoryEstimate e = budget.device ? estimateDeviceMemory(one) : estimateMemory(one);
  r.bytes_at_one = e.total();
  r.largest_micro_batch = largestFitting(tc, budget);
  if (r.largest_micro_batch == 0) {
    const std::string why = memoryFitProblem(one, e, budget);
    const size_t at = why.find("largest term: ");
    r.largest_term = at == std::string::npos ? "" : why.substr(at + 14, why.find(" (", at) - at - 14);
  }
  return r;
}

std::string gibText(double b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << b / double(int64_t(1) << 30) << " GiB";
  return os.str();
}

}  // namespace

std::vector<FitRow> fitTable(const Config& cfg, int world_size, const MemoryBudget& budget) {
  std::vector<FitRow> rows;
  for (int bits = 0; bits < 16; ++bits) {
    const Combination c{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0, (bits & 8) != 0};
    if (std::optional<TrainConfig> tc = withCombination(cfg, world_size, c))
      rows.push_back(rowFor(*tc, c, budget));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const FitRow& a, const FitRow& b) { return a.bytes_at_one < b.bytes_at_one; });
  return rows;
}

std::string formatFitTable(const TrainConfig& tc, const std::vector<FitRow>& rows,
                           const MemoryBudget& budget) {
  std::ostringstream os;
  os << "memory fit per rank: " << tc.model.name << ", world " << tc.layout.world_size
     << ", zero_stage " << tc.layout.effectiveZeroStage() << ", tp " << tc.layout.tp << ", seq "
     << tc.data.seq_len << "; budget " << describeBudget(budget) << "\n";
  os << "  " << std::left << std::setw(18) << "weights" << std::setw(11) << "optimizer"
     << std::setw(17) << "step" << std::setw(14) << "activations" << std::setw(16)
     << "micro-batch 1" << "largest micro-batch that fits\n";
  for (const FitRow& r : rows) {
    os << "  " << std::left << std::setw(18) << r.weights << std::setw(11) << r.optimizer
       << std::setw(17) << r.step << std::setw(14) << r.activations << std::setw(16)
       << gibText(r.bytes_at_one);
    if (r.largest_micro_batch > 0)
      os << r.largest_micro_batch;
    else
      os << "none (largest term: " << r.largest_term << ")";
    os << "\n";
  }
  if (rows.empty()) os << "  no combination is valid for this layout\n";
  return os.str();
}

}  // namespace ftb
