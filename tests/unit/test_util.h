// Helpers shared by the unit tests (tests/unit/*/): test configs, temporary directories.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/config.h"

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

inline void writeFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace ftb::test
