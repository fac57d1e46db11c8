// Comparisons a user can trust: the repeats of a configuration grouped, the work per
// optimizer step, and a ranking that says whether its margin exceeds the measured noise.
//
// Contract:
// - A run counts (exclusionReason() == "") when its status is completed, the trainer
//   accepts its config (is_valid exactly true: false, unknown and any mark a run carries
//   instead exclude it) and it has a dataset tokens/s figure. Others are listed with the
//   reason and left out of the groups and rankings. A run the trainer marked noisy counts
//   (its interference exceeded metrics.max_interference): rankings mark it.
// - A group is every run of one config hash (the repeats of a sweep point: sweep.repeat is
//   not part of the hash); a run without a recorded hash is its own group.
// - groupRepeats() sets on every row of a group: repeats (runs that count), the median
//   (middle value, mean of the two middle ones for an even count), min and max of their
//   tokens_per_s_dataset.
// - bestReport(): every configuration that has the metric, ranked by the median of the
//   metric over its runs, each with its spread (min-max of its runs), its number of runs,
//   its noisy runs marked, and the noise verdict against the next one below it; then the
//   winner against the runner-up in full, and every run left out with its reason.
//   A configuration is named by the sweep axes that differ between the configurations
//   ranked (axes.h: "layout=pp2 training.micro_batch_size=4"), by its tag when none does,
//   and by both when two would share a name.
//   Noisy runs: ranked and marked; with exclude_noisy left out (listed with the reason)
//   unless every run that counts is noisy: then ranked anyway and the report says so.
//   exit_code 1 when nothing can be ranked (no run counts, or none has the metric);
//   ConfigError (exit 2) for cost when runs count but none has a price.
//   The noise verdict of `a` over `b` (the next one) is "beyond noise" when every test that
//   can be made holds, and at least one can:
//     (a) repeats: both have >= 2 runs and their min-max ranges do not overlap (a's worst
//         run beats b's best run);
//     (b) steps (tokens/s and cost): a's step band beats b's without overlap. A run's step
//         band is its figure scaled by p10/p50 and p90/p50 of its per-step padded
//         tokens/s (the timing spread of its steps); a group's band spans its runs' bands
//         (for cost, turned into $/M tokens).
//   Otherwise "within noise" naming the test that failed, or "noise not measured" when no
//   test applies (one run each, and no per-step figures: memory).
// - applyPrice(): a run's recorded metrics.price_per_hour wins; the flag's price goes to
//   the runs recorded without one (price_per_hour, usd_per_mt, price_from_flag).
// - compareReport(ref, now): each configuration of `now` against the same configuration of
//   the reference table (reference.h), by dataset tokens/s. Configurations are the groups
//   above (config hash). The same configuration: first the same config hash; then, for
//   the rest, the same world size, nodes, layout and values of the keys that vary across
//   `now`'s runs (its sweep point), the reference configuration with the fewest differing
//   keys winning (then table order). A reference value that is unknown (a key constant in
//   the reference, without its .constants.csv) matches nothing.
//   Differing keys: every experiment key (aggregate.h) whose value is known on both sides
//   and differs ("-" = not set), then host and cpu_model when both are recorded.
//   Verdict: "regression" / "improvement" when the change of the medians passes the noise
//   rule above, applied to the better side over the worse one (every test that can be
//   made holds, and at least one can); else "within noise" or "noise not measured"; a side
//   with one run has no measured spread: the row says so (the ranges test is not made);
//   noisy runs on either side add the rankings' caveat.
//   "only in ref" / "only in new" for unmatched ones; "not compared" when a side has no
//   run that counts.
//   exit_code 1 when fail_pct is set and a regression exceeds fail_pct % (the report names
//   each); else 0.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sweep_tagger/aggregate.h"
#include "sweep_tagger/reference.h"

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

enum class BestMetric { kTokensPerS, kCost, kMemory, kTokensPerCpuS };
// "tokens_per_s" | "cost" | "memory" | "tokens_per_cpu_s"; ConfigError (exit 2) otherwise.
BestMetric parseBestMetric(const std::string& name);
struct BestOptions {
  bool exclude_noisy = false;  // --exclude-noisy
};
struct BestReport {
  std::string text;
  int exit_code = 0;  // 0, or 1 when nothing can be ranked
  std::vector<std::string> ranked;  // groupKey() of each configuration ranked, best first
  bool winner_beyond_noise = false;  // ranked[0] beats ranked[1] beyond the noise
};
BestReport bestReport(const AggregateTable& t, BestMetric metric, const BestOptions& opts = {});

// Prices the runs without a recorded price at `usd_per_hour` $ per device-hour; returns how
// many it priced. REQUIRES: usd_per_hour > 0 and finite.
size_t applyPrice(AggregateTable& t, double usd_per_hour);

struct CompareOptions {
  std::optional<double> fail_pct;  // --fail-on-regression PCT; REQUIRES: >= 0 and finite
};
struct CompareReport {
  std::string text;
  int exit_code = 0;  // 0, or 1 for a regression beyond fail_pct
};
CompareReport compareReport(const ReferenceTable& ref, const AggregateTable& now,
                            const CompareOptions& opts = {});

}  // namespace ftb
