// Tests for common/checkpoint_manifest.h: JSON round trip, directory naming, that
// damaged checkpoints (missing/partial manifest, truncated file, flipped byte) are
// refused with a message naming the file, and the compat comparison of resume.
#include "common/checkpoint_manifest.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/config.h"
#include "test_util.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A step directory holding one 4 KiB file and a manifest that describes it.
std::string makeCheckpoint(const std::string& root, int64_t step) {
  std::string dir = (fs::path(root) / checkpointDirName(step)).string();
  fs::create_directories(dir);
  std::string data(4096, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 7);
  writeBytes(dir + "/rank_00000.h5", data);
  Manifest m;
  m.ftbench_version = "test";
  m.layout.world = 1;
  m.compat["model.dim"] = "64";
  m.state["step"] = step;
  int64_t bytes = 0;
  m.files.push_back({"rank_00000.h5", 0, 4096, fileCrc32(dir + "/rank_00000.h5", &bytes)});
  m.tensors["model.norm.weight"] = {
      {64}, "float32", {{"rank_00000.h5", "/model.norm.weight/0", {0}, {64}}}};
  writeFileDurably(dir + "/" + kManifestName, manifestToJson(m));
  return dir;
}

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string problemOf(const std::string& dir) {
  try {
    loadVerifiedManifest(dir);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointManifest, RoundTripsThroughJson) {
  std::string root = test::makeTempDir("ftb_ckpt_");
  std::string dir = makeCheckpoint(root, 8);
  Manifest m = loadVerifiedManifest(dir);
  EXPECT_EQ(m.state.at("step"), 8);
  EXPECT_EQ(m.compat.at("model.dim"), "64");
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.files[0].bytes, 4096);
  const CkptTensor& t = m.tensors.at("model.norm.weight");
  EXPECT_EQ(t.shape, std::vector<int64_t>{64});
  EXPECT_EQ(t.slices.at(0).dataset, "/model.norm.weight/0");
  // Same crc as zlib (and Python's zlib.crc32) over the same bytes.
  std::string data(4096, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 7);
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx",
                crc32(0, reinterpret_cast<const Bytef*>(data.data()), uInt(data.size())));
  EXPECT_EQ(m.files[0].crc32, hex);
}

TEST(CheckpointManifest, ListsStepDirsNewestFirstAndIgnoresPartialOnes) {
  std::string root = test::makeTempDir("ftb_ckpt_");
  makeCheckpoint(root, 4);
  makeCheckpoint(root, 12);
  fs::create_directories(root + "/step_00000016.tmp");
  fs::create_directories(root + "/step_00000008.replaced_1");
  std::vector<std::string> dirs = listCheckpointDirs(root);
  ASSERT_EQ(dirs.size(), 2u);
  EXPECT_EQ(fs::path(dirs[0]).filename(), "step_00000012");
  EXPECT_EQ(fs::path(dirs[1]).filename(), "step_00000004");
  EXPECT_EQ(checkpointStepOf("step_00000012"), 12);
  EXPECT_FALSE(checkpointStepOf("step_12.tmp").has_value());
  EXPECT_TRUE(listCheckpointDirs(root + "/missing").empty());
}

TEST(CheckpointManifest, MissingManifestIsRefused) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  fs::remove(dir + "/manifest.json");
  EXPECT_NE(problemOf(dir).find("manifest.json: manifest missing"), std::string::npos);
}

TEST(CheckpointManifest, PartialManifestIsRefused) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  std::string path = dir + "/manifest.json";
  fs::resize_file(path, fs::file_size(path) / 2);
  EXPECT_NE(problemOf(dir).find("not valid JSON"), std::string::npos) << problemOf(dir);
  writeBytes(path, R"({"format": "ftbench-checkpoint", "format_version": 1})");
  EXPECT_NE(problemOf(dir).find("missing 'ftbench_version'"), std::string::npos) << problemOf(dir);
}

TEST(CheckpointManifest, TruncatedShardIsRefused) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  fs::resize_file(dir + "/rank_00000.h5", 1000);
  std::string p = problemOf(dir);
  EXPECT_NE(p.find("rank_00000.h5: size 1000 bytes, the manifest says 4096"), std::string::npos)
      << p;
}

TEST(CheckpointManifest, FlippedByteIsRefused) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  std::fstream f(dir + "/rank_00000.h5", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(100);
  f.put(char(0x55));
  f.close();
  std::string p = problemOf(dir);
  EXPECT_NE(p.find("rank_00000.h5: crc32"), std::string::npos) << p;
  EXPECT_NE(p.find("damaged"), std::string::npos) << p;
}

TEST(CheckpointManifest, SliceOutsideTheTensorIsRefused) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  Manifest m = loadVerifiedManifest(dir);
  m.tensors["model.norm.weight"].slices[0].size = {65};
  EXPECT_THROW(parseManifest(manifestToJson(m), "m.json"), CheckpointError);
}

// Rewrites dir's manifest after `edit` (the files stay as they are, crc32s still right).
template <typename F>
void editManifest(const std::string& dir, F edit) {
  Manifest m = parseManifest(readText(dir + "/manifest.json"), "m.json");
  edit(m);
  writeBytes(dir + "/manifest.json", manifestToJson(m));
}

// Each case below loaded without complaint before the structure checks.
TEST(CheckpointUntrusted, FileNamesOutsideTheStepDirectoryAreRefused) {
  std::string root = test::makeTempDir("ftb_ckpt_");
  std::string old_dir = makeCheckpoint(root, 15);
  std::string dir = makeCheckpoint(root, 20);
  // Step 15's file with its true size and crc32, named from step 20's manifest.
  for (std::string name :
       {std::string("../step_00000015/rank_00000.h5"), old_dir + "/rank_00000.h5"}) {
    editManifest(dir, [&](Manifest& m) {
      m.files[0].name = name;
      m.tensors["model.norm.weight"].slices[0].file = name;
    });
    std::string p = problemOf(dir);
    EXPECT_NE(p.find("files[] name '" + name + "' is a path"), std::string::npos) << p;
  }
  editManifest(dir, [&](Manifest& m) { m.files[0].name = ".."; });
  EXPECT_NE(problemOf(dir).find("files[] name '..' is '..'"), std::string::npos) << problemOf(dir);
}

TEST(CheckpointUntrusted, SymlinkedShardIsRefused) {
  std::string root = test::makeTempDir("ftb_ckpt_");
  std::string old_dir = makeCheckpoint(root, 15);
  std::string dir = makeCheckpoint(root, 20);
  fs::remove(dir + "/rank_00000.h5");
  fs::create_symlink(old_dir + "/rank_00000.h5", dir + "/rank_00000.h5");  // same bytes, same crc
  std::string p = problemOf(dir);
  EXPECT_NE(p.find("rank_00000.h5: is a symbolic link"), std::string::npos) << p;
}

TEST(CheckpointUntrusted, FifoManifestIsRefusedWithoutBlocking) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  fs::remove(dir + "/manifest.json");
  ASSERT_EQ(mkfifo((dir + "/manifest.json").c_str(), 0600), 0);
  std::string p = problemOf(dir);  // would block forever in an open() for reading
  EXPECT_NE(p.find("manifest.json"), std::string::npos) << p;
  EXPECT_NE(p.find("FIFO"), std::string::npos) << p;
}

TEST(CheckpointUntrusted, StepBelowZeroOrNotTheDirectorysIsRefused) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 20);
  editManifest(dir, [](Manifest& m) { m.state["step"] = -5; });
  EXPECT_NE(problemOf(dir).find("state.step is -5, below 0"), std::string::npos) << problemOf(dir);
  editManifest(dir, [](Manifest& m) { m.state["step"] = 999999; });
  EXPECT_NE(problemOf(dir).find("state.step is 999999 but the directory is step_00000020"),
            std::string::npos)
      << problemOf(dir);
}

TEST(CheckpointUntrusted, SliceNamingAnotherTensorsDatasetIsRefused) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  editManifest(dir, [](Manifest& m) {
    m.tensors["model.output.weight"] = {
        {64}, "float32", {{"rank_00000.h5", "/model.norm.weight/0", {0}, {64}}}};
  });
  std::string p = problemOf(dir);
  EXPECT_NE(p.find("a slice of tensor 'model.output.weight' names dataset '/model.norm.weight/0'"),
            std::string::npos)
      << p;
}

// A pipeline's layout: pp is recorded (only when > 1, so other manifests are unchanged),
// read back, and counts in the world size.
TEST(CheckpointManifest, PipelineStagesCountInTheLayout) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  editManifest(dir, [](Manifest& m) { m.layout.world = 2, m.layout.pp = 2; });
  EXPECT_NE(readText(dir + "/manifest.json").find("\"pp\": 2"), std::string::npos);
  EXPECT_EQ(parseManifest(readText(dir + "/manifest.json"), "m").layout.pp, 2);
  EXPECT_NE(problemOf(dir).find("lists 1 files for layout.world 2"), std::string::npos)
      << problemOf(dir);  // the product holds: only the file count is wrong
  editManifest(dir, [](Manifest& m) { m.layout.pp = 3; });
  EXPECT_NE(problemOf(dir).find("is not pp x dp_replicate x dp_shard x tp (3 x 1 x 1 x 1)"),
            std::string::npos)
      << problemOf(dir);
  EXPECT_EQ(
      readText(makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4) + "/manifest.json").find("\"pp\""),
      std::string::npos);
}

TEST(CheckpointUntrusted, UnknownDtypeWorldAndDuplicateKeysAreRefused) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  editManifest(dir, [](Manifest& m) { m.tensors["model.norm.weight"].dtype = "complex128"; });
  EXPECT_NE(problemOf(dir).find("dtype 'complex128'"), std::string::npos) << problemOf(dir);
  dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  editManifest(dir, [](Manifest& m) { m.layout.world = 2, m.layout.dp_replicate = 2; });
  EXPECT_NE(problemOf(dir).find("lists 1 files for layout.world 2"), std::string::npos)
      << problemOf(dir);
  dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  std::string text = readText(dir + "/manifest.json");
  const std::string step = "\"step\": 4";
  ASSERT_NE(text.find(step), std::string::npos) << text;
  text.replace(text.find(step), step.size(), "\"step\": 4, \"step\": 9");
  writeBytes(dir + "/manifest.json", text);
  EXPECT_NE(problemOf(dir).find("has the key 'step' twice"), std::string::npos) << problemOf(dir);
}

// JSON numbers an int64 field cannot hold: converting them was undefined behaviour
// (tests/fuzz/fuzz_manifest found a 86-digit layout.nodes, which nlohmann reads as a double).
TEST(CheckpointUntrusted, NumbersAnInt64CannotHoldAreRefused) {
  std::string dir = makeCheckpoint(test::makeTempDir("ftb_ckpt_"), 4);
  const std::string text = readText(dir + "/manifest.json");
  for (const std::string& bad :
       {std::string("1e300"), std::string("18446744073709551615"), std::string("2.5")}) {
    std::string t = text;
    const std::string key = "\"nodes\": 1";
    ASSERT_NE(t.find(key), std::string::npos) << t;
    t.replace(t.find(key), key.size(), "\"nodes\": " + bad);
    writeBytes(dir + "/manifest.json", t);
    std::string p = problemOf(dir);
    EXPECT_NE(p.find("manifest field 'layout.nodes' holds"), std::string::npos) << bad << ": " << p;
  }
}

// "%.17g": how ftbench spelled config floats in manifests before formatDouble became its
// one float spelling (it took the shortest of %.15g..%.17g that read back exactly).
std::string oldSpelling(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", prec, v);
  return buf;
}

// A checkpoint written by the old spelling resumes against today's valueToString: the
// record is compared as values (through the manifest's JSON, as planResume reads it).
TEST(CheckpointCompat, OldFloatSpellingInTheManifestIsAccepted) {
  std::string root = test::makeTempDir("ftb_ckpt_");
  std::string dir = makeCheckpoint(root, 4);
  Manifest m = loadVerifiedManifest(dir);
  m.compat = {{"model.dim", "64"},
              {"model.norm_eps", oldSpelling(1e-5, 17)},       // 1.0000000000000001e-05
              {"model.rope_theta", oldSpelling(10000.0, 17)},  // 10000 (no ".0")
              {"training.lr", oldSpelling(1e-4, 15)},          // 0.0001
              {"model.tie_embeddings", "false"},
              {"training.optimizer", "\"adamw\""}};
  writeBytes(dir + "/" + kManifestName, manifestToJson(m));
  const Manifest saved = loadVerifiedManifest(dir);
  ASSERT_EQ(saved.compat.at("model.norm_eps"), "1.0000000000000001e-05");
  ASSERT_EQ(saved.compat.at("training.lr"), "0.0001");
  const std::map<std::string, std::string> now = {
      {"model.dim", valueToString(Value(int64_t{64}))},
      {"model.norm_eps", valueToString(Value(1e-5))},
      {"model.rope_theta", valueToString(Value(10000.0))},
      {"training.lr", valueToString(Value(1e-4))},
      {"model.tie_embeddings", valueToString(Value(false))},
      {"training.optimizer", valueToString(Value(std::string("adamw")))}};
  ASSERT_EQ(now.at("model.norm_eps"), "1e-5");  // the spellings really differ
  ASSERT_EQ(now.at("training.lr"), "1e-4");
  EXPECT_EQ(compatDiff(saved.compat, now), "");
}

TEST(CheckpointCompat, ATrulyDifferentValueIsRefusedNamingTheKey) {
  const std::map<std::string, std::string> saved = {{"model.norm_eps", oldSpelling(1e-5, 17)},
                                                    {"model.dim", "64"},
                                                    {"training.optimizer", "\"adamw\""}};
  auto now = saved;
  now["model.norm_eps"] = valueToString(Value(1e-6));
  EXPECT_EQ(compatDiff(saved, now),
            "model.norm_eps = 1.0000000000000001e-05 in the checkpoint, 1e-6 now");
  now = saved;
  now["model.norm_eps"] = valueToString(Value(std::nextafter(1e-5, 1.0)));  // one ulp off
  EXPECT_NE(compatDiff(saved, now).find("model.norm_eps = "), std::string::npos);
  now = saved;
  now["model.dim"] = "128";
  now["training.optimizer"] = "\"adafactor\"";
  EXPECT_EQ(compatDiff(saved, now),
            "model.dim = 64 in the checkpoint, 128 now; training.optimizer = \"adamw\" in the "
            "checkpoint, \"adafactor\" now");
  now = saved;
  now["model.ffn_dim"] = "192";
  EXPECT_EQ(compatDiff(saved, now), "model.ffn_dim = (absent) in the checkpoint, 192 now");
}

}  // namespace
}  // namespace ftb
