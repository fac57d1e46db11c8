// Golden tests of the tag fmt language: tests/data/sweep_tagger/fmt_cases.tsv.
//
// Each non-comment line: world_size TAB overrides ("-" or "k=v|k=v") TAB fmt TAB
// expected, where expected is the tag or "error: <exact ConfigError message>", and
// "<hash>" stands for configHash(). The config is tests/data/sweep_tagger/base.toml
// under the trainer schema plus two list keys (test.ids, test.names).
// FTB_UPDATE_GOLDEN=1 rewrites the expected column from the current output.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/tag.h"
#include "test_util.h"

namespace ftb {
namespace {

const Schema& schemaWithLists() {
  static const Schema schema = [] {
    Schema s = trainerSchema();
    s.add(KeySpec{"test.ids", ValueType::kIntList, Value(std::vector<int64_t>{1, 2, 3}), "ids"});
    s.add(KeySpec{"test.names", ValueType::kStringList, Value(std::vector<std::string>{"a b", "c"}),
                  "names"});
    return s;
  }();
  return schema;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

std::string render(const std::string& ws, const std::string& overrides, const std::string& fmt) {
  std::vector<std::string> ov;
  if (overrides != "-") ov = split(overrides, '|');
  const std::string base = test::dataDir() + "/base.toml";
  Config cfg = Config::load(base, ov, schemaWithLists());
  int world = std::stoi(ws);
  try {
    std::string tag = formatTag(cfg, world, fmt);
    std::string hash = configHash(cfg, world);
    for (size_t p; (p = tag.find(hash)) != std::string::npos;)
      tag.replace(p, hash.size(), "<hash>");
    return tag;
  } catch (const ConfigError& e) {
    return std::string("error: ") + e.what();
  }
}

TEST(FmtGolden, EveryCaseMatches) {
  const std::string path = test::dataDir() + "/fmt_cases.tsv";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const bool update = std::getenv("FTB_UPDATE_GOLDEN") != nullptr;
  std::string line, rewritten;
  int cases = 0, errors = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') {
      rewritten += line + "\n";
      continue;
    }
    std::vector<std::string> f = split(line, '\t');
    ASSERT_GE(f.size(), 3u) << line;
    std::string got = render(f[0], f[1], f[2]);
    if (update) {
      rewritten += f[0] + "\t" + f[1] + "\t" + f[2] + "\t" + got + "\n";
    } else {
      ASSERT_EQ(f.size(), 4u) << line;
      EXPECT_EQ(got, f[3]) << "fmt: " << f[2];
    }
    ++cases;
    errors += got.rfind("error: ", 0) == 0;
  }
  if (update) std::ofstream(path) << rewritten;
  EXPECT_GE(cases, 30);
  EXPECT_GE(errors, 15);
}

}  // namespace
}  // namespace ftb
