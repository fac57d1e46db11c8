#include "common/run_status.h"

#include <filesystem>

#include "common/error.h"
#include "common/h5_metrics.h"

namespace ftb {

std::string runState(const std::string& run_dir) {
  const std::string path = metricsFilePath(run_dir, 0);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "missing";
  try {
    return readMetricsFile(path).status.state;
  } catch (const std::exception&) {
    return "corrupt";
  }
}

}  // namespace ftb
