// `trainer --estimate-memory --fit`: which combinations of the memory techniques let a model
// fit a budget, and at which largest micro-batch, smallest first in memory.
//
// Contract: fitTable() varies, over the run's own config (model, layout, sequence, LoRA),
// the weights (fp32 masters, or bf16 without masters: bf16 compute), the optimizer (AdamW,
// Adafactor), where the step runs (after backward, or inside it: max_grad_norm 0) and
// activation checkpointing (none, full); a combination the trainer refuses for this
// layout is left out. Each row holds the estimate at micro-batch 1 and the largest
// micro-batch whose estimate fits the budget (0: none does). Pure arithmetic: nothing is
// allocated or measured. The estimate is GPU memory when budget.device, else the host's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/memory_estimate.h"

namespace ftb {

struct FitRow {
  std::string weights, optimizer, step, activations;  // the combination, as the table says it
  double bytes_at_one = 0;                            // estimate at micro-batch 1
  int64_t largest_micro_batch = 0;                    // 0 = not even 1 fits
  std::string largest_term;                           // when not even 1 fits: what dominates
};

// REQUIRES: cfg loaded (Config::load), world_size >= 1.
std::vector<FitRow> fitTable(const Config& cfg, int world_size, const MemoryBudget& budget);

// The table for listings: a header naming the model, layout, budget and which memory, then
// one line per row in fitTable's order.
std::string formatFitTable(const TrainConfig& tc, const std::vector<FitRow>& rows,
                           const MemoryBudget& budget);

}  // namespace ftb
