// Helpers shared by the unit tests (tests/unit/*/): test configs, temporary directories.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/run_config.h"

namespace ftb::test {

inline std::string dataDir() { return std::string(FTB_TEST_DATA_DIR) + "/sweep_tagger"; }

// The model block every test config uses (explicit shape: no preset lookup).
inline const char* kModelToml = R"([model]
name = "tinytest"
dim = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
ffn_dim = 128
vocab_size = 256
max_seq_len = 1024
)";

// configs/runs/tiny.toml of the source tree.
inline const std::string kTinyRun = std::string(FTB_SOURCE_DIR) + "/configs/runs/tiny.toml";

// The trainer's refusal of tiny.toml with these overrides at this world size ("" if none).
inline std::string refusal(const std::vector<std::string>& overrides, int world_size = 1) {
  return refusalOf(Config::load(kTinyRun, overrides), world_size);
}

// The message of the ConfigError f throws, else "(no error)".
inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

inline Config configFrom(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  return Config::fromString(toml, "test.toml", overrides);
}

// A fresh directory under $TMPDIR, removed with its contents by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ftb_sweep_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A fresh directory under GoogleTest's temporary directory, named prefix + 6 characters;
// left in place for a failed test's files.
inline std::string makeTempDir(const std::string& prefix) {
  std::string tmpl = ::testing::TempDir() + prefix + "XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

inline void writeFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The sweep file of the sweep_tagger unit tests with three axes.
inline const std::string kThreeAxis = dataDir() + "/sweeps/three_axis.toml";

// `body` after a `base = ` line naming the test data's base.toml, written to dir/sweep.toml.
inline std::string writeSweep(const TempDir& dir, const std::string& body) {
  std::string path = dir.path() + "/sweep.toml";
  writeFile(path, "base = \"" + dataDir() + "/base.toml\"\n" + body);
  return path;
}

}  // namespace ftb::test
