// SLURM hostlist expressions.
//
// expandHostlist("n[01-04,07],gpu-a[1-2]") -> n01 n02 n03 n04 n07 gpu-a1 gpu-a2.
// Supports several bracket groups per name ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2),
// zero padding (width of the lower bound), comma lists at top level.
// expandTasksPerNode("2(x3),1") -> {2,2,2,1} (SLURM_TASKS_PER_NODE format).
// Throws ConfigError (key = `what`) with the offending position on malformed input:
// unbalanced brackets, empty ranges, hi < lo, non-numeric ranges, characters other than
// letters, digits, '-', '.', '_' in a name. Time and memory are linear in the output.
#pragma once

#include <string>
#include <vector>

namespace ftb {

// Upper bound on one expansion: a typo like n[1-99999999] fails fast instead of
// allocating without limit.
inline constexpr size_t kMaxHostlistHosts = 1000000;

std::vector<std::string> expandHostlist(const std::string& expr,
                                        const std::string& what = "hostlist");
std::vector<int> expandTasksPerNode(const std::string& expr,
                                    const std::string& what = "SLURM_TASKS_PER_NODE");

}  // namespace ftb
