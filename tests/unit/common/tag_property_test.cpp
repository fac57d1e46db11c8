// On 100,000 generated distinct configs the tag has no
// collisions, does not depend on how the TOML was written, and is always a safe
// relative path below the output dir.
#include <gtest/gtest.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <random>
#include <unordered_set>

#include "common/tag.h"
#include "test_util.h"

namespace ftb {
namespace {

constexpr int kConfigs = 100000;
constexpr int kSpellingEvery = 50;  // 2,000 configs also go through TOML text
constexpr int kTrickyEvery = 4;     // 25,000 tags with every string value in the path

// Pieces that make concatenation ambiguities likely ({"a":"bc"} vs {"ab":"c"}) and
// exercise path safety: separators, dots, quotes, braces, UTF-8, control bytes.
const std::vector<std::string> kPieces = {"a",        "b",  "bc", "c", "/", ".", "..", " ",
                                          "\xc3\xa9", "\"", "{",  "}", "_", "-", "\\", "\t"};

struct Point {
  double lr;
  int64_t seq_len;
  std::string name, source;
  bool tie;
  int ws;
};

std::string randomString(std::mt19937_64& rng) {
  std::string s;
  int n = static_cast<int>(rng() % 4);
  if (rng() % 200 == 0) n = 40 + static_cast<int>(rng() % 40);  // long: shortened in tags
  for (int i = 0; i < n; ++i) s += kPieces[rng() % kPieces.size()];
  return s;
}

Point randomPoint(std::mt19937_64& rng) {
  static const double kFixedLr[] = {1e-4, 3e-4, 0.1, 1.0, 0.0, 2.5e-5, 1e-3};
  static const int kWorld[] = {1, 2, 3, 4, 6, 8, 16, 64, 1024};
  Point p;
  if (rng() % 4 == 0) {
    p.lr = kFixedLr[rng() % 7];
  } else {
    std::uniform_real_distribution<double> exp10(-7, 0);
    p.lr = std::pow(10.0, exp10(rng));
  }
  p.seq_len = (rng() % 2) ? 1 + static_cast<int64_t>(rng() % 8192) : int64_t{128} << (rng() % 8);
  p.name = randomString(rng);
  p.source = randomString(rng);
  p.tie = rng() % 2;
  p.ws = kWorld[rng() % 9];
  return p;
}

// An unambiguous identity of the point (length-prefixed fields).
std::string identity(const Point& p) {
  char lr[32];
  auto r = std::to_chars(lr, lr + sizeof lr, p.lr);
  std::string id(lr, r.ptr);
  id += "|" + std::to_string(p.seq_len) + "|" + std::to_string(p.name.size()) + ":" + p.name + "|" +
        std::to_string(p.source.size()) + ":" + p.source + "|" + (p.tie ? "1" : "0") + "|" +
        std::to_string(p.ws);
  return id;
}

Config build(const Config& base, const Point& p) {
  Config c = base;
  c.set("training.lr", p.lr, "gen");
  c.set("data.seq_len", p.seq_len, "gen");
  c.set("model.name", p.name, "gen");
  c.set("data.source", p.source, "gen");
  c.set("model.tie_embeddings", p.tie, "gen");
  return c;
}

// ---- TOML spellings ----------------------------------------------------------

std::string tomlString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string floatSpelling(double v, std::mt19937_64& rng) {
  char buf[64];
  switch (rng() % 4) {
    case 0:
      snprintf(buf, sizeof buf, "%.17g", v);
      break;  // may look like an int: "1"
    case 1:
      snprintf(buf, sizeof buf, "%.17e", v);
      break;  // 1.00000000000000005e-04
    case 2:
      snprintf(buf, sizeof buf, "%.17E", v);
      break;
    default:
      return formatDouble(v);  // shortest
  }
  return buf;
}

std::string intSpelling(int64_t v, std::mt19937_64& rng) {
  char buf[64];
  switch (rng() % 3) {
    case 0:
      snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
      break;
    case 1:
      snprintf(buf, sizeof buf, "0o%llo", static_cast<unsigned long long>(v));
      break;
    default:
      snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
      break;
  }
  return buf;
}

// The point as TOML text in a random style: [tables] or inline tables or dotted
// keys, keys and tables in random order, numbers in random spellings; some
// values are moved to `overrides` instead.
std::string randomToml(const Point& p, std::mt19937_64& rng, std::vector<std::string>& overrides) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> tables;
  tables["model"] = {{"dim", intSpelling(64, rng)},
                     {"n_layers", "2"},
                     {"n_heads", "4"},
                     {"n_kv_heads", "2"},
                     {"ffn_dim", "128"},
                     {"vocab_size", "256"},
                     {"max_seq_len", "1_024"},
                     {"name", tomlString(p.name)},
                     {"tie_embeddings", p.tie ? "true" : "false"}};
  tables["data"] = {{"seq_len", intSpelling(p.seq_len, rng)}, {"source", tomlString(p.source)}};
  tables["training"] = {{"lr", floatSpelling(p.lr, rng)}};
  if (rng() % 2) tables["metrics"] = {{"log_every", std::to_string(1 + rng() % 100)}};
  if (rng() % 3 == 0) {  // lr as an override
    overrides.push_back("training.lr=" + floatSpelling(p.lr, rng));
    tables["training"] = {{"lr", "0.5"}};
  }
  std::vector<std::string> names;
  for (auto& [name, keys] : tables) {
    std::shuffle(keys.begin(), keys.end(), rng);
    names.push_back(name);
  }
  std::shuffle(names.begin(), names.end(), rng);
  std::string root, body;
  for (const std::string& name : names) {
    const auto& keys = tables[name];
    switch (rng() % 3) {
      case 0:
        body += "[" + name + "]\n";
        for (const auto& [k, v] : keys) body += k + " = " + v + "\n";
        break;
      case 1: {
        root += name + " = { ";
        for (size_t i = 0; i < keys.size(); ++i)
          root += (i ? ", " : "") + keys[i].first + " = " + keys[i].second;
        root += " }\n";
        break;
      }
      default:
        for (const auto& [k, v] : keys) root += name + "." + k + " = " + v + "\n";
    }
  }
  return root + body;  // root keys must precede the first [table]
}

bool isSafeRelativePath(const std::string& tag) {
  if (tag.empty() || tag[0] == '/') return false;
  size_t start = 0;
  while (true) {
    size_t slash = tag.find('/', start);
    std::string comp =
        tag.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (comp.empty() || comp == "." || comp == ".." || comp.size() > kMaxPathComponent)
      return false;
    for (char c : comp)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
        return false;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  std::filesystem::path out("/results"), full = (out / tag).lexically_normal();
  return full.string().rfind("/results/", 0) == 0;
}

TEST(TagProperty, NoCollisionsInvariantSpellingSafePaths) {
  const Config base = test::configFrom(test::kModelToml);
  const std::string tricky_fmt = "{model.name}/{data.source}/lr{training.lr}.{hash}";
  std::mt19937_64 rng(20240605);
  std::unordered_set<std::string> ids, hashes, tags;
  ids.reserve(2 * kConfigs);
  hashes.reserve(2 * kConfigs);
  tags.reserve(2 * kConfigs);
  int n = 0, spelled = 0;
  while (n < kConfigs) {
    Point p = randomPoint(rng);
    if (!ids.insert(identity(p)).second) continue;  // keep configs distinct
    ++n;
    Config cfg = build(base, p);
    const std::string hash = configHash(cfg, p.ws);
    ASSERT_TRUE(hashes.insert(hash).second) << "hash collision at config " << n << ": " << hash;
    const std::string tag = formatTag(cfg, p.ws, kDefaultTagFmt);
    ASSERT_TRUE(tags.insert(tag).second) << "tag collision: " << tag;
    ASSERT_TRUE(isSafeRelativePath(tag)) << tag;
    if (n % kTrickyEvery == 0) {  // values straight into path components
      const std::string tricky = formatTag(cfg, p.ws, tricky_fmt);
      ASSERT_TRUE(isSafeRelativePath(tricky)) << tricky << " from " << identity(p);
    }

    if (n % kSpellingEvery == 0) {
      for (int style = 0; style < 2; ++style) {
        std::vector<std::string> overrides;
        std::string text = randomToml(p, rng, overrides);
        Config spelled_cfg = Config::fromString(text, "generated.toml", overrides);
        ASSERT_EQ(configHash(spelled_cfg, p.ws), hash) << text;
        ++spelled;
      }
    }
  }
  EXPECT_EQ(hashes.size(), static_cast<size_t>(kConfigs));
  EXPECT_EQ(spelled, 2 * kConfigs / kSpellingEvery);
}

// Named cases of the properties, so that a failure reads as a sentence.
TEST(TagProperty, FairseqCaseThroughStringValues) {
  Config base = test::configFrom(test::kModelToml);
  Point a{1e-4, 128, "a", "bc", false, 2}, b{1e-4, 128, "ab", "c", false, 2};
  EXPECT_NE(configHash(build(base, a), 2), configHash(build(base, b), 2));
}

}  // namespace
}  // namespace ftb
