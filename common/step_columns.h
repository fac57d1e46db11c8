// The per-step columns of the metrics file (/steps/<name>, common/h5_metrics.h): the one
// declaration of each column's name, type, units and meaning. Everything that spells a
// column reads it: the trainer's rows (trainer/loop/step_log.cpp), the `units` and
// `description` attributes of each dataset, metricsProblem's "may be NaN", the synthetic
// runs (sweep_tagger/bench/synth_runs.cpp) and `trainer --help-metrics`.
//
// A row is a StepRow: a value set for every column, addressed by StepCol, so a column
// missing from the table cannot be written, and MetricsFile::appendStep(const StepRow&)
// refuses a row that leaves one out (std::logic_error naming it).
//
// Units: "s" seconds, "bytes", "tokens", "tokens/s", "FLOP/token", "nats/token", "CPUs",
// "1" dimensionless (a fraction, ratio, count or index). Scope in the descriptions: "rank"
// = this rank's own figure; otherwise the figure is the same on every rank (global).
// No libtorch.
#pragma once

#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ftb {

// One id per column, in the table's order (stepColumns()[i].id is StepCol(i)). Adding a
// column: an id here, a row in common/step_columns.cpp (a static_assert checks the two
// agree), and its value in every writer (StepRow refuses a row without it).
enum class StepCol : uint8_t {
  kStep,
  kTimeS,
  kStepTimeS,
  kDataS,
  kForwardS,
  kBackwardS,
  kOptimizerS,
  kCommS,
  kAgreeS,
  kLoss,
  kGradNorm,
  kLr,
  kTokensPadded,
  kTokensDataset,
  kTokensPerSPadded,
  kTokensPerSDataset,
  kTokensPerSPerDevice,
  kMfu,
  kMfuCausal,
  kHfu,
  kGemmEfficiency,
  kFlopsPerToken,
  kRssBytes,
  kPeakRssBytes,
  kAllocatorKeptBytes,
  kPpBubbleS,
  kPpBubbleFraction,
  kPpMakespanS,
  kPpP2pBytes,
  kInterference,
  kRunqueueWaitFrac,
  kCpuStealFrac,
  kOtherLoadCpus,
  kInvoluntarySwitches,
  kCpuThreadS,
  kTokensPerCpuS,
  kCount  // not a column
};
inline constexpr size_t kStepColumnCount = static_cast<size_t>(StepCol::kCount);

enum class ColumnType { kInt, kFloat };  // int64 (llround, NaN -> -1) or float64 datasets

struct StepColumn {
  StepCol id;
  const char* name;   // the /steps dataset
  const char* units;  // its `units` attribute (see above)
  ColumnType type;
  bool nan_allowed;  // NaN (-1 in an int64 column) means "not reported" (metricsProblem accepts it)
  const char* description;  // its `description` attribute: one line, no `|` or `<`
};

// Every column, in the order MetricsFile::declareStepColumns declares them.
const std::array<StepColumn, kStepColumnCount>& stepColumns();
const StepColumn& stepColumn(StepCol c);
// The row of `name`; nullptr for a name outside the table.
const StepColumn* findStepColumn(std::string_view name);

// The table as Markdown, one row per column in table order:
// | column | units | type | meaning |   (trainer --help-metrics)
std::string stepColumnsMarkdown();

// One row of /steps. Invariant: get(c) is the value last set for c (NaN before).
class StepRow {
 public:
  StepRow();
  StepRow& set(StepCol c, double value);
  double get(StepCol c) const { return values_[static_cast<size_t>(c)]; }
  bool isSet(StepCol c) const { return set_.test(static_cast<size_t>(c)); }
  // The first column (table order) never set; nullptr when every column has a value.
  const StepColumn* firstUnset() const;

 private:
  std::array<double, kStepColumnCount> values_;
  std::bitset<kStepColumnCount> set_;
};

}  // namespace ftb
