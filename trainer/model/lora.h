// LoRA (Hu et al. 2021) adapters on the model's projections, as PEFT computes them, split
// across tensor-parallel ranks as their base weights are (Megatron).
//
// Contracts:
// - A target's base weight W [out, in] (frozen) gains A [rank, in] and B [out, rank],
//   named "<W's name without .weight>.lora_A.weight" / ".lora_B.weight". The layer computes
//   W x + (alpha / rank) · B A dropout(x). Init as PEFT: A ~ U(-1/sqrt(in), 1/sqrt(in))
//   (kaiming-uniform, a = sqrt(5)), seeded by (seed, A's name) on its full shape; B = 0.
// - Column-parallel W (rows split across tp): A is tp-replicated, B split by rows. The
//   delta is B_local · copyToTp(s · A x̂) with x̂ the block input BEFORE its copyToTp, so
//   A's gradient arrives whole (summed over tp in backward) and x̂'s is not counted tp times.
// - Row-parallel W (columns split): A split by columns, B tp-replicated. The delta is
//   B · reduceFromTp(s · A_local x_local), added after W's own reduceFromTp: one all-reduce
//   of [tokens, rank] values, and every tp rank holds the same full delta.
// - With tp = 1 both are the plain PEFT computation. Dropout (training only) draws its mask
//   from a generator seeded by (forward_seed, the adapter's name): a recomputed block
//   (activation checkpointing) draws the same mask. REQUIRES: dropout = 0 when tp > 1
//   (TrainConfig refuses it).
#pragma once

#include <torch/torch.h>

#include <string>

#include "common/run_config.h"
#include "trainer/comm/tp.h"

namespace ftb {

struct LoraAdapter {
  std::string name;  // the base weight's torchtitan name prefix, e.g. "layers.0.attention.wq"
  torch::Tensor a, b;
  bool row_parallel = false;
  bool defined() const { return a.defined(); }
};

// FNV-1a of s from the offset basis h: seeds a generator by a tensor's name (dropout masks
// here, parameter init in llama.cpp). The default basis is the one parameter init has always
// used (1469598103934665603, not FNV's 14695981039346656037): initializations stay
// bit-identical across builds.
uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ULL);

// Adapter names of a target: "<prefix>.lora_A.weight", "<prefix>.lora_B.weight".
std::string loraAName(const std::string& prefix);
std::string loraBName(const std::string& prefix);

// The delta of `ad` for input x (column-parallel: the block input before copyToTp;
// row-parallel: this rank's input slice). `mask_seed` 0 = no dropout.
torch::Tensor loraDelta(const torch::Tensor& x, const LoraAdapter& ad, double scale, double dropout,
                        uint64_t mask_seed, const TpContext& tp);

}  // namespace ftb
