// Comparisons a user can trust: the repeats of a configuration grouped, the work per
// optimizer step, and a ranking that says whether its margin exceeds the measured noise.
//
// Contract:
// - A run counts (exclusionReason() == "") when its status is completed, the trainer
//   accepts its config (is_valid exactly true: false, unknown and any mark a run carries
//   instead exclude it) and it has a dataset tokens/s figure. Others are listed with the
//   reason and left out of the groups and rankings.
// - A group is every run of one config hash (the repeats of a sweep point: sweep.repeat is
//   not part of the hash); a run without a recorded hash is its own group.
// - groupRepeats() sets on every row of a group: repeats (runs that count), the median
//   (middle value, mean of the two middle ones for an even count), min and max of their
//   tokens_per_s_dataset.
// - bestReport(): the configurations ranked by the median of a metric over their counted
//   runs; the winner, the runner-up, the margin and the noise verdict. "beyond noise" when
//   every test that can be made holds, and at least one can:
//     (a) repeats: both have >= 2 runs and their min-max ranges do not overlap (the
//         winner's worst run beats the runner-up's best run);
//     (b) steps (tokens/s and cost): the winner's step band beats the runner-up's without
//         overlap. A run's step band is its figure scaled by p10/p50 and p90/p50 of its
//         per-step padded tokens/s (the timing spread of its steps); a group's band spans
//         its runs' bands (for cost, turned into $/M tokens).
//   Otherwise "within noise" naming the test that failed, or "noise not measured" when no
//   test applies (one run each, and no per-step figures: memory).
#pragma once

#include <string>

#include "sweep_tagger/aggregate.h"

namespace ftb {

std::string exclusionReason(const RunRow& row);
// The run's config hash, else its tag.
std::string groupKey(const RunRow& row);
// The tag without the ".rN" of a repeat (sweep.repeat = N > 0).
std::string groupLabel(const RunRow& row);
void groupRepeats(AggregateTable& t);

// Markdown: the work per optimizer step of the runs (equal or not, which mode), and with
// repeats a table of each configuration's median, min-max and step spread. "" when there
// is nothing to say.
std::string workNote(const AggregateTable& t);
std::string repeatsTable(const AggregateTable& t);

enum class BestMetric { kTokensPerS, kCost, kMemory };
// "tokens_per_s" | "cost" | "memory"; ConfigError (exit 2) otherwise.
BestMetric parseBestMetric(const std::string& name);
// ConfigError (exit 2) for cost when no counted run has metrics.price_per_hour.
std::string bestReport(const AggregateTable& t, BestMetric metric);

}  // namespace ftb
