// Charts of an aggregation table, drawn by gnuplot (gnuplot-nox).
//
// Contract: writePlots() writes into `dir` (created) for every axis that varies
// across the plotted runs (varying config keys, world_size, nodes; with sweep.layout
// variants, `layout` replaces the axes that are the same in every run of each variant):
//   tokens_per_s_vs_<axis>.{dat,gp,png,svg}: dataset tokens/s against the axis, one
//     line per combination of the other axes;
// and, when world_size varies, scaling_efficiency.{dat,gp,png,svg}: per device
// throughput relative to the smallest world size of the same combination.
// Invariant: every series is titled in the key (the canvas grows to fit the titles), with
// its own colour and point symbol; a configuration with repeats is one point, the median
// of its counted runs (groupRepeats), with min-max error bars. A categorical axis (a value
// that is not a number: layout names) draws points with their bars and no joining lines,
// the series side by side within +-0.25 of each category. A point whose configuration has
// a run the trainer marked noisy is ringed (column 5 of the .dat is 1), with one key entry
// for all rings. Axis labels carry the unit where the axis has one.
// Only completed runs with a tokens/s value are plotted. Axes whose values span a
// factor >= 8 are log2-scaled. Returns the image files written;
// problems (no gnuplot, gnuplot failed, nothing to plot) go to `warnings` and never
// throw, except IoError (exit 4) when `dir` cannot be created or a file cannot be written.
// Every file appears whole or not at all: .dat and .gp by writeFileDurably, the images
// drawn under temporary names and renamed once complete (a PNG ends with IEND, an SVG
// with </svg>); a failed or killed aggregate leaves the previous files as they were.
#pragma once

#include <string>
#include <vector>

#include "sweep_tagger/aggregate.h"

namespace ftb {

// Each gnuplot run may take `gnuplot_timeout_s`; past it gnuplot is killed and that chart
// is a warning ("gnuplot did not finish X.gp within 120.0 s: killed").
// `failures` (when given) also receives the messages of charts that are missing or not
// readable: gnuplot not found, failed, killed, an incomplete image, or a warning gnuplot
// printed (its .gp.log is kept: "could not fit the key" means a legend is missing).
std::vector<std::string> writePlots(const AggregateTable& t, const std::string& dir,
                                    std::vector<std::string>& warnings,
                                    double gnuplot_timeout_s = 120,
                                    std::vector<std::string>* failures = nullptr);

}  // namespace ftb
