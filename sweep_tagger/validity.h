// Whether a (config, world size) point can run: ado's is_valid for sweeps.
//
// Contract: pointProblems() returns every broken world-size/layout invariant as a
// message with the numbers ("tp(2) does not divide n_kv_heads(3)"); empty means
// valid. It never throws for missing or unset keys (the check is skipped) so that a
// sweep can list any point. The trainer may call it too to fail early with the same
// wording; its own TrainConfig::fromConfig stays the authority on running.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"

namespace ftb {

// Checks: world_size >= 1; parallel.{tp, dp_shard} >= 1, dp_replicate >= 0;
// dp_replicate * dp_shard * tp == world_size (dp_replicate = 0: dp_shard * tp divides
// world_size); tp divides model.n_heads and model.n_kv_heads; data.seq_len <=
// model.max_seq_len; training.micro_batch_size >= 1.
std::vector<std::string> pointProblems(const Config& cfg, int world_size);

}  // namespace ftb
