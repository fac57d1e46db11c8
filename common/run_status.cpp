#include "common/run_status.h"

#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "common/h5_metrics.h"
#include "common/run_lock.h"

namespace ftb {

std::string runState(const std::string& run_dir) {
  if (!lockHolder(run_dir).empty()) return "held";
  const std::string path = metricsFilePath(run_dir, 0);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "missing";
  if (!notRegularFileReason(path).empty()) return "corrupt";  // a FIFO would block HDF5
  try {
    return readMetricsFile(path).status.state;
  } catch (const std::exception&) {
    return "corrupt";
  }
}

}  // namespace ftb
