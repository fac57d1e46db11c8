#include "common/run_status.h"

#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "common/h5_metrics.h"
#include "common/hdf5.h"
#include "common/run_lock.h"
#include "common/tag.h"

namespace ftb {

RunState runState(const std::string& run_dir) {
  if (!lockHolder(run_dir).empty()) return RunState::Held;
  const std::string path = metricsFilePath(run_dir, 0);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return RunState::Missing;
  if (!notRegularFileReason(path).empty()) return RunState::Corrupt;  // a FIFO would block HDF5
  try {
    return readMetricsFile(path).status.state;
  } catch (const std::exception&) {
    return RunState::Corrupt;
  }
}

std::optional<int> runNodes(const std::string& run_dir) {
  const std::string run_toml = run_dir + "/run.toml";
  if (!notRegularFileReason(run_toml).empty()) return std::nullopt;
  std::string text;
  try {
    text = readInputFile(run_toml, "run.toml");
  } catch (const std::exception&) {
    return std::nullopt;
  }
  try {
    if (std::string n = runTomlField(text, "nodes"); !n.empty()) return std::stoi(n);
    int world_size = std::stoi(runTomlField(text, "world_size"));
    int max_node = -1;
    h5::silenceErrorPrinting();
    for (int r = 0; r < world_size; ++r) {
      const std::string path = metricsFilePath(run_dir, r);
      if (!notRegularFileReason(path).empty()) continue;
      try {
        h5::H5Handle f = h5::openFile(path, false, false);
        max_node = std::max(max_node, static_cast<int>(h5::readAttrInt(f.get(), "node_rank")));
      } catch (const std::exception&) {
      }
    }
    if (max_node >= 0) return max_node + 1;
  } catch (const std::exception&) {  // no or unparsable header
  }
  return std::nullopt;
}

}  // namespace ftb
