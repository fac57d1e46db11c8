// A reference table for `aggregate --compare REF.csv`: the CSV an earlier
// `sweep_tagger aggregate RESULTS --format csv` wrote, read back into runs.
//
// Contract:
// - readReferenceCsv() reads REF.csv (RFC 4180: quoted fields may hold commas, quotes and
//   line breaks) by column name. Needed columns: tag, status, world_size, nodes,
//   tokens_per_s_dataset, is_valid, config_hash. Optional: noisy, layout, repeat, host,
//   cpu_model, step_tokens_per_s_padded_p10/p50/p90 (the step bands of the noise rule).
//   Every column that is not one of aggregate's own (rowCells) is a config key that
//   varied across the reference runs: it becomes the runs' config and `varying`.
// - The keys equal in every reference run are in the side file aggregate --out wrote,
//   REF's stem + ".constants.csv" (key,value). When it exists they become `constant` and
//   every run's config; when it does not, constants_known is false: those keys are unknown.
// - Each run gets what compare.h needs: status, is_valid (the "noisy" cell: valid, and
//   noisy set), tokens/s, step band, config hash, world size, nodes, host, cpu model, and
//   config["sweep.layout"] / ["sweep.repeat"] from the layout / repeat columns.
// - Refusals are ConfigError (exit 2) naming the file and line, what was expected and a
//   hint: not a readable regular file, no header, a needed column missing, a record with
//   another number of fields than the header, a number or state that does not parse.
#pragma once

#include <string>

#include "sweep_tagger/aggregate.h"

namespace ftb {

struct ReferenceTable {
  std::string path;            // REF.csv as given
  std::string constants_path;  // REF's stem + ".constants.csv"
  bool constants_known = false;
  AggregateTable table;  // runs in file order; results_dir = path
};

ReferenceTable readReferenceCsv(const std::string& path);

}  // namespace ftb
