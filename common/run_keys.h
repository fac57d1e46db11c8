// The key table of run configs: one row per key, declared once. A row is the key's schema
// entry (name, type, domain or choices, default, help, whether and how it enters the run's
// tag) and the TrainConfig member its value fills. trainerSchema(), TrainConfig::fromConfig's
// member values, `trainer --help-config` and the docs' key table are all made from the rows.
//
// Adding a key is adding a row (common/run_keys.cpp); a key whose value is resolved
// together with others (training.global_batch_size, the pipeline keys, ...) is a row
// without a member and names the function that reads it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/run_config.h"

namespace ftb {

struct KeyRow {
  KeySpec spec;
  // "TrainingConfig::lr": the member the key fills; "" for a row without one.
  std::string member;
  // Writes cfg's value of spec.key into the member (converted where the row says how).
  // REQUIRES: cfg resolved by Config::load and checkDomains() passed. Leaves the member
  // untouched when the key has no value (optional keys without a default). Empty for a
  // row without a member.
  std::function<void(const Config& cfg, TrainConfig& tc)> fill;
  // Whether the member of a value-initialised TrainConfig is T{}: true unless the struct
  // declares a default of its own beside the row's. Empty for a row without a member.
  std::function<bool()> member_value_initialised;
  // For a row without a member: the function that reads the key (or why none does).
  std::string read_by;
};

// Every run-config key in the order of `trainer --help-config`.
const std::vector<KeyRow>& runKeyRows();

// Fills every member a row names from cfg, in row order: the rows whose key starts with
// `prefix` ("" = all). REQUIRES: as KeyRow::fill.
void fillMembers(const Config& cfg, TrainConfig& tc, const std::string& prefix = "");

}  // namespace ftb
