// Datasets and batches: synthetic documents are a pure function of (seed, index),
// batches put each document's n-1 (input, target) pairs on the left of a padded row,
// the token counts agree everywhere, and token files round-trip or fail with file:line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/config.h"
#include "common/error.h"
#include "common/proc_memory.h"
#include "trainer/data/dataset.h"
#include "trainer/data/text_dataset.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;

TrainConfig tinyConfig(std::vector<std::string> overrides = {}, int world = 1) {
  overrides.insert(overrides.begin(), {"data.seq_len=16", "data.num_samples=50",
                                       "data.min_doc_len=4", "training.seed=99"});
  Config cfg = Config::load(FTB_SOURCE_DIR "/configs/runs/tiny.toml", overrides);
  return TrainConfig::fromConfig(cfg, world);
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ftb_data_test_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

TEST(SyntheticDataset, PureFunctionOfSeedAndIndex) {
  TrainConfig c = tinyConfig();
  auto a = makeDataset(c);
  auto b = makeDataset(c);
  ASSERT_EQ(a->size(), 50);
  std::set<std::vector<int32_t>> distinct;
  for (int64_t i = 0; i < a->size(); ++i) {
    std::vector<int32_t> d = a->document(i);
    EXPECT_EQ(d, a->document(i)) << "not repeatable, index " << i;
    EXPECT_EQ(d, b->document(i)) << "differs between instances, index " << i;
    EXPECT_EQ(d, a->document(i + a->size())) << "does not wrap modulo size, index " << i;
    distinct.insert(d);
  }
  EXPECT_EQ(distinct.size(), 50u) << "different indices must give different documents";
  // Reading in another order gives the same documents (no hidden generator state).
  EXPECT_EQ(a->document(17), b->document(17));

  TrainConfig other = tinyConfig({"training.seed=100"});
  auto s = makeDataset(other);
  int same = 0;
  for (int64_t i = 0; i < 50; ++i) same += s->document(i) == a->document(i);
  EXPECT_EQ(same, 0) << "another seed must give other documents";
}

TEST(SyntheticDataset, LengthsAndTokenRange) {
  TrainConfig c = tinyConfig({"data.num_samples=400"});
  ASSERT_EQ(c.data.min_doc_len, 4);
  ASSERT_EQ(c.data.seq_len, 16);
  auto ds = makeDataset(c);
  std::set<size_t> lengths;
  int64_t follows = 0, pairs = 0;
  const int64_t V = c.model.vocab_size;
  for (int64_t i = 0; i < ds->size(); ++i) {
    std::vector<int32_t> d = ds->document(i);
    EXPECT_GE(d.size(), size_t(c.data.min_doc_len + 1)) << i;
    EXPECT_LE(d.size(), size_t(c.data.seq_len + 1)) << i;
    lengths.insert(d.size());
    for (size_t t = 0; t < d.size(); ++t) {
      EXPECT_GE(d[t], 1);
      EXPECT_LT(d[t], V);
      if (t > 0) {
        ++pairs;
        follows += d[t] == (int64_t(d[t - 1]) * 7 + 3) % (V - 1) + 1;
      }
    }
  }
  // Every length in [min_doc_len, seq_len] + 1 occurs among 400 documents.
  EXPECT_EQ(lengths.size(), size_t(c.data.seq_len - c.data.min_doc_len + 1));
  EXPECT_EQ(*lengths.begin(), size_t(c.data.min_doc_len + 1));
  EXPECT_EQ(*lengths.rbegin(), size_t(c.data.seq_len + 1));
  // About half of the tokens follow the successor rule (something to learn).
  double frac = double(follows) / double(pairs);
  EXPECT_GT(frac, 0.4);
  EXPECT_LT(frac, 0.6);

  // min_doc_len = 0 means seq_len / 4.
  EXPECT_EQ(tinyConfig({"data.min_doc_len=0"}).data.min_doc_len, 4);
}

// Checks every row of `b` against the documents it was built from.
void expectBatchMatches(const Batch& b, const Dataset& ds, int64_t first, int64_t seq_len,
                        int64_t pad_id) {
  int64_t B = b.inputs.size(0), T = b.inputs.size(1);
  ASSERT_EQ(b.targets.sizes(), b.inputs.sizes());
  ASSERT_EQ(b.mask.sizes(), b.inputs.sizes());
  EXPECT_EQ(b.inputs.scalar_type(), torch::kInt64);
  EXPECT_EQ(b.targets.scalar_type(), torch::kInt64);
  EXPECT_EQ(b.mask.scalar_type(), torch::kBool);
  EXPECT_EQ(b.padded_tokens, B * T);
  EXPECT_EQ(b.mask.sum().item<int64_t>(), b.dataset_tokens);
  auto in = b.inputs.accessor<int64_t, 2>();
  auto tg = b.targets.accessor<int64_t, 2>();
  auto mk = b.mask.accessor<bool, 2>();
  for (int64_t i = 0; i < B; ++i) {
    std::vector<int32_t> d = ds.document(first + i);
    int64_t n = std::min<int64_t>(seq_len, int64_t(d.size()) - 1);
    ASSERT_LE(n, T);
    for (int64_t t = 0; t < T; ++t) {
      bool real = t < n;
      EXPECT_EQ(mk[i][t], real) << i << "," << t;
      if (real) {
        EXPECT_EQ(in[i][t], d[t]);
        EXPECT_EQ(tg[i][t], d[t + 1]);
        if (t + 1 < n) {
          EXPECT_EQ(tg[i][t], in[i][t + 1]) << "targets are inputs shifted by one";
        }
      } else {
        EXPECT_EQ(in[i][t], pad_id);
        EXPECT_EQ(tg[i][t], pad_id);
      }
    }
  }
}

TEST(MakeBatch, MaxLengthAndLongest) {
  TrainConfig c = tinyConfig();
  auto ds = makeDataset(c);
  const int64_t first = 3, count = 5, pad = 7;
  int64_t longest = 0;
  for (int64_t i = 0; i < count; ++i)
    longest = std::max<int64_t>(longest, int64_t(ds->document(first + i).size()) - 1);
  ASSERT_LT(longest, c.data.seq_len)
      << "pick a window whose longest document is shorter than seq_len";

  Batch full = makeBatch(*ds, first, count, c.data.seq_len, /*pad_longest=*/false, pad);
  Batch tight = makeBatch(*ds, first, count, c.data.seq_len, /*pad_longest=*/true, pad);
  EXPECT_EQ(full.inputs.sizes().vec(), (std::vector<int64_t>{count, c.data.seq_len}));
  EXPECT_EQ(tight.inputs.sizes().vec(), (std::vector<int64_t>{count, longest}));
  expectBatchMatches(full, *ds, first, c.data.seq_len, pad);
  expectBatchMatches(tight, *ds, first, c.data.seq_len, pad);

  // Same real tokens either way; only the amount of padding differs.
  EXPECT_EQ(full.dataset_tokens, tight.dataset_tokens);
  EXPECT_EQ(full.dataset_tokens, countPositions(*ds, first, count, c.data.seq_len));
  EXPECT_EQ(tight.padded_tokens, count * longest);
  EXPECT_TRUE(torch::equal(full.inputs.narrow(1, 0, longest), tight.inputs));
  EXPECT_TRUE(torch::equal(full.mask.narrow(1, 0, longest), tight.mask));
}

TEST(MakeBatch, CountPositionsEqualsMaskSumWhenTruncating) {
  TrainConfig c = tinyConfig();
  auto ds = makeDataset(c);
  // A seq_len shorter than most documents: rows are cut to seq_len positions.
  for (int64_t seq : {3, 5, 16}) {
    for (bool longest : {false, true}) {
      Batch b = makeBatch(*ds, 10, 8, seq, longest, 0);
      EXPECT_EQ(b.mask.sum().item<int64_t>(), countPositions(*ds, 10, 8, seq)) << seq;
      EXPECT_EQ(b.dataset_tokens, countPositions(*ds, 10, 8, seq)) << seq;
      EXPECT_LE(b.inputs.size(1), seq);
      expectBatchMatches(b, *ds, 10, seq, 0);
    }
  }
  // Wrapping: samples past the end are documents from the start.
  EXPECT_EQ(countPositions(*ds, 48, 4, 16),
            countPositions(*ds, 48, 2, 16) + countPositions(*ds, 0, 2, 16));
}

TEST(TokenFiles, JsonlRoundTrip) {
  TempDir dir;
  TrainConfig c = tinyConfig();
  std::string path = dir.file("docs.jsonl");
  writeSyntheticDataset(c, path);
  auto synth = makeDataset(c);
  TrainConfig fc = c;
  fc.data.data_source = path;
  auto file = makeDataset(fc);
  ASSERT_EQ(file->size(), synth->size());
  for (int64_t i = 0; i < synth->size(); ++i) EXPECT_EQ(file->document(i), synth->document(i)) << i;
  Batch a = makeBatch(*synth, 0, 6, c.data.seq_len, false, 0);
  Batch b = makeBatch(*file, 0, 6, c.data.seq_len, false, 0);
  EXPECT_TRUE(torch::equal(a.inputs, b.inputs));
  EXPECT_TRUE(torch::equal(a.targets, b.targets));
}

TEST(TokenFiles, BinWindows) {
  TempDir dir;
  for (std::string dtype : {"uint16", "uint32"}) {
    TrainConfig c = tinyConfig({"data.bin_dtype=\"" + dtype + "\""});
    std::string path = dir.file("docs_" + dtype + ".bin");
    writeSyntheticDataset(c, path);
    auto synth = makeDataset(c);
    std::vector<int32_t> stream;
    for (int64_t i = 0; i < synth->size(); ++i) {
      auto d = synth->document(i);
      stream.insert(stream.end(), d.begin(), d.end());
    }
    EXPECT_EQ(int64_t(fs::file_size(path)), int64_t(stream.size()) * (dtype == "uint16" ? 2 : 4));
    TrainConfig fc = c;
    fc.data.data_source = path;
    auto file = makeDataset(fc);
    // Windows of seq_len + 1 tokens with stride seq_len.
    int64_t S = c.data.seq_len, n = int64_t(stream.size());
    EXPECT_EQ(file->size(), (n - 1) / S);
    for (int64_t w = 0; w < file->size(); ++w) {
      std::vector<int32_t> want(stream.begin() + w * S, stream.begin() + w * S + S + 1);
      EXPECT_EQ(file->document(w), want) << dtype << " window " << w;
    }
  }
}

// A .bin file was read whole into memory, then copied into windows (a 64 GiB sparse file:
// 3.2 GB of RSS in 2.4 s and growing). Now windows are read on demand: opening a 256 MiB
// file (sparse: every id 0) leaves resident memory where it was.
TEST(TokenFiles, BinFileIsNotReadIntoMemory) {
  TempDir dir;
  const std::string path = dir.file("sparse.bin");
  const int64_t bytes = int64_t(256) << 20;
  fs::resize_file((std::ofstream(path), path), uintmax_t(bytes));
  TrainConfig c = tinyConfig();
  c.data.data_source = path;
  const int64_t before = currentRssBytes();
  std::unique_ptr<Dataset> ds = makeDataset(c);
  const int64_t grown = currentRssBytes() - before;
  EXPECT_LT(grown, bytes / 16) << "resident memory grew by " << grown << " bytes";
  EXPECT_EQ(ds->size(), (bytes / 2 - 1) / c.data.seq_len);
  EXPECT_EQ(ds->document(ds->size() - 1), std::vector<int32_t>(size_t(c.data.seq_len + 1), 0));
}

// writeSyntheticDataset() with data.bin_dtype = "uint16" (the default) and a vocabulary
// larger than 65536 (e.g. Llama-3, 128256) must not truncate ids to 16 bits: it
// refuses (ConfigError) or round-trips.
TEST(TokenFiles, Uint16BinWithLargeVocabIsRefused) {
  TempDir dir;
  TrainConfig c = tinyConfig({"model.vocab_size=70000"});
  ASSERT_EQ(c.data.bin_dtype, "uint16");
  std::string path = dir.file("big_vocab.bin");
  try {
    writeSyntheticDataset(c, path);
  } catch (const FtbError&) {
    return;  // refusing is a fix
  }
  auto synth = makeDataset(c);
  std::vector<int32_t> stream;
  for (int64_t i = 0; i < synth->size(); ++i) {
    auto d = synth->document(i);
    stream.insert(stream.end(), d.begin(), d.end());
  }
  ASSERT_TRUE(std::any_of(stream.begin(), stream.end(), [](int32_t t) { return t > 65535; }));
  TrainConfig fc = c;
  fc.data.data_source = path;
  auto file = makeDataset(fc);
  int64_t S = c.data.seq_len, mismatched = 0;
  for (int64_t w = 0; w < file->size(); ++w)
    mismatched += file->document(w) !=
                  std::vector<int32_t>(stream.begin() + w * S, stream.begin() + w * S + S + 1);
  EXPECT_EQ(mismatched, 0) << "windows with ids above 65535 truncated to 16 bits";
}

// Writes `text` to a fresh .jsonl and expects makeDataset to throw ConfigError whose
// message contains "<path>:<line>" and `what`.
void expectJsonlError(const std::string& text, int line, const std::string& what) {
  TempDir dir;
  std::string path = dir.file("bad.jsonl");
  std::ofstream(path) << text;
  TrainConfig c = tinyConfig();
  c.data.data_source = path;
  try {
    makeDataset(c);
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    std::string where = line > 0 ? path + ":" + std::to_string(line) : path;
    EXPECT_NE(msg.find(where), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(msg.find("data.source"), std::string::npos) << msg;
    EXPECT_EQ(e.exitCode(), 2);
  }
}

TEST(TokenFiles, MalformedJsonlNamesFileAndLine) {
  // Line numbers count blank lines too.
  expectJsonlError(
      "{\"input_ids\": [1, 2, 3]}\n\n{\"input_ids\": [4, 5]}\n{\"input_ids\": [1, 2,\n", 4,
      "invalid JSON");
  expectJsonlError("{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [1, 512]}\n", 2,
                   "token id 512 outside [0, vocab_size(512))");
  expectJsonlError("{\"input_ids\": [1, -1]}\n", 1, "token id -1");
  expectJsonlError("{\"tokens\": [1, 2]}\n", 1, "input_ids");
  expectJsonlError("{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, 2.5]}\n", 2, "non-integer");
  expectJsonlError("{\"input_ids\": [1]}\n\n", 0, "no document with at least 2 tokens");
}

// A 200 MB single-line record took over 10 GB of RSS (the whole line, then its parse).
TEST(TokenFiles, JsonlLineAboveTheBoundIsRefusedNamingFileAndLine) {
  const std::string ok = "{\"input_ids\": [1, 2, 3]}\n";
  expectJsonlError(ok + "{\"input_ids\": [1, 2" + std::string(kMaxJsonlLineBytes, ' ') + "]}\n", 2,
                   "line longer than 16 MiB (the bound on one JSONL record)");
  // At the bound a line is read whole, as are the lines around it.
  TempDir dir;
  const std::string path = dir.file("long.jsonl");
  const std::string head = "{\"input_ids\": [4, 5, 6", tail = "]}";
  std::ofstream(path) << ok << head
                      << std::string(kMaxJsonlLineBytes - head.size() - tail.size(), ' ') << tail
                      << "\n\n"
                      << ok;
  TrainConfig c = tinyConfig();
  c.data.data_source = path;
  std::unique_ptr<Dataset> ds = makeDataset(c);
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->document(1), (std::vector<int32_t>{4, 5, 6}));
}

TEST(TokenFiles, JsonlTruncatesAndSkipsShortDocuments) {
  TempDir dir;
  std::string path = dir.file("docs.jsonl");
  std::vector<int32_t> longdoc;
  for (int i = 1; i <= 40; ++i) longdoc.push_back(i);
  {
    std::ofstream out(path);
    out << "{\"input_ids\": [9]}\n";  // one token: nothing to predict, skipped
    out << "{\"input_ids\": [";
    for (size_t i = 0; i < longdoc.size(); ++i) out << (i ? "," : "") << longdoc[i];
    out << "]}\n{\"input_ids\": [3, 4]}\n";
  }
  TrainConfig c = tinyConfig();
  c.data.data_source = path;
  auto ds = makeDataset(c);
  ASSERT_EQ(ds->size(), 2);
  EXPECT_EQ(ds->document(0),
            std::vector<int32_t>(longdoc.begin(), longdoc.begin() + c.data.seq_len + 1));
  EXPECT_EQ(ds->document(1), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(countPositions(*ds, 0, 2, c.data.seq_len), c.data.seq_len + 1);
}

// HF's labels (-100 = not a target, otherwise what the position before learns to predict) and
// attention_mask (0 = padding, removed): the documents, targets and batches they give, alone
// and packed.
TEST(TokenFiles, LabelsAndAttentionMaskOfHfRecords) {
  TempDir dir;
  std::string path = dir.file("hf.jsonl");
  std::ofstream(path)
      << "{\"input_ids\": [0, 5, 6, 7, 8, 0], \"attention_mask\": [0, 1, 1, 1, 1, 0], "
         "\"labels\": [-100, -100, 6, 9, 8, -100]}\n"
      << "{\"input_ids\": [3, 4, 5], \"labels\": [-100, -100, -100]}\n"  // no target
      << "{\"input_ids\": [3, 4, 5, 0], \"attention_mask\": [1, 1, 1, 0]}\n"
      << "{\"input_ids\": [1, 2], \"labels\": [1, 2], \"attention_mask\": [1, 1]}\n";
  TrainConfig c = tinyConfig();
  c.data.data_source = path;
  auto ds = makeDataset(c);
  ASSERT_EQ(ds->size(), 3) << "the record without a target is dropped";
  EXPECT_EQ(ds->document(0), (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(ds->targets(0), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(ds->labels(0), (std::vector<int32_t>{5, 6, 9, 8}));
  EXPECT_EQ(ds->document(1), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_TRUE(ds->targets(1).empty());
  EXPECT_TRUE(ds->labels(1).empty());
  EXPECT_TRUE(ds->labels(2).empty()) << "labels equal to the ids are not kept";
  Batch b = makeBatch(*ds, 0, 3, c.data.seq_len, /*pad_longest=*/true, 0);
  auto t = [](std::vector<int64_t> v) { return torch::tensor(v).view({3, 3}); };
  EXPECT_TRUE(torch::equal(b.inputs, t({5, 6, 7, 3, 4, 0, 1, 0, 0})));
  EXPECT_TRUE(torch::equal(b.targets, t({6, 9, 8, 4, 5, 0, 2, 0, 0})));
  EXPECT_TRUE(torch::equal(b.mask, t({1, 1, 1, 1, 1, 0, 1, 0, 0}).to(torch::kBool)));
  EXPECT_EQ(b.dataset_tokens, 6);
  EXPECT_EQ(b.loss_tokens, 6);
  // Packed: the stream of every record (the one without a target too), labels and flags with it.
  c.data.pack = true;
  auto packed = makeDataset(c);
  ASSERT_EQ(packed->size(), 1);
  EXPECT_EQ(packed->document(0), (std::vector<int32_t>{5, 6, 7, 8, 3, 4, 5, 3, 4, 5, 1, 2}));
  EXPECT_EQ(packed->labels(0), (std::vector<int32_t>{5, 6, 9, 8, 3, 4, 5, 3, 4, 5, 1, 2}));
  EXPECT_EQ(packed->targets(0), (std::vector<uint8_t>{0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1}));
}

TEST(TokenFiles, MalformedLabelsAndAttentionMaskNameFileAndLine) {
  const std::string ok = "{\"input_ids\": [1, 2, 3]}\n";
  expectJsonlError(ok + "{\"input_ids\": [1, 2, 3], \"labels\": [1, 2]}\n", 2,
                   "\"labels\" has 2 entries, \"input_ids\" 3");
  expectJsonlError(
      ok + "{\"input_ids\": [1, 2, 3], \"labels\": [1, -1, 3]}\n", 2,
      "labels[1] = -1: expected -100 (not a target) or a token id in [0, vocab_size(512))");
  expectJsonlError("{\"input_ids\": [1, 2, 3], \"labels\": \"1 2 3\"}\n", 1,
                   "\"labels\" is a JSON string, expected a list");
  expectJsonlError("{\"input_ids\": [1, 2, 3], \"attention_mask\": [1, 2, 1]}\n", 1,
                   "attention_mask[1] = 2, expected 0 (padding) or 1");
  expectJsonlError("{\"input_ids\": [1, 2, 3], \"attention_mask\": [1, 1]}\n", 1,
                   "\"attention_mask\" has 2 entries");
  expectJsonlError("{\"input_ids\": [1, 2, 3, 4], \"attention_mask\": [1, 0, 1, 1]}\n", 1,
                   "attention_mask[1] is 0 between ones");
  expectJsonlError("{\"input_ids\": [1, 2], \"labels\": [1, 2.5]}\n", 1,
                   "non-integer value in \"labels\"");
}

// FNV-1a over a tensor's shape and bytes.
uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}
uint64_t fnv(uint64_t h, const torch::Tensor& t) {
  for (int64_t d : t.sizes()) h = fnv(h, &d, sizeof(d));
  torch::Tensor c = t.contiguous();
  return fnv(h, c.data_ptr(), size_t(c.numel() * c.element_size()));
}

struct Layout {
  int world;
  std::vector<std::string> overrides;
  std::vector<uint64_t> pinned;  // one checksum per data-parallel rank
};

// What each data-parallel rank trains on over `steps` steps: the step's loss
// normaliser (Σ over ranks of their positions, what the trainer's all-reduce sums),
// then every micro-batch's inputs, targets, mask and token counts.
uint64_t rankChecksum(const TrainConfig& tc, const Dataset& ds, int64_t dp_rank, int steps) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int64_t step = 0; step < steps; ++step) {
    int64_t positions = 0;
    for (int64_t r = 0; r < tc.layout.dpSize(); ++r)
      positions += rankBatches(ds, tc, step, r).positions;
    h = fnv(h, &positions, sizeof(positions));
    for (const Batch& b : rankBatches(ds, tc, step, dp_rank).micro) {
      for (const torch::Tensor& t : {b.inputs, b.targets, b.mask}) h = fnv(h, t);
      h = fnv(h, &b.dataset_tokens, sizeof(b.dataset_tokens));
      h = fnv(h, &b.padded_tokens, sizeof(b.padded_tokens));
    }
  }
  return h;
}

// The samples each rank sees are pinned. These checksums were computed with
// the code in which every rank regenerated the whole global batch each step; a data
// path that changes what any rank trains on (order, slicing, padding, normaliser)
// fails here. 8 steps wrap the 50-sample dataset in every layout.
TEST(RankSamples, PinnedPerRankChecksums) {
  const std::vector<Layout> layouts = {
      {1, {"training.micro_batch_size=2", "training.grad_accum_steps=4"}, {0xc926ce135c1d7cf1ULL}},
      {1, {"training.micro_batch_size=3", "data.padding=\"longest\""}, {0x9e90c37d19da944fULL}},
      {2,
       {"training.micro_batch_size=2", "training.grad_accum_steps=2"},
       {0x2e7ef504758e4f19ULL, 0xc99c61c8bbceae45ULL}},
      {2,
       {"training.micro_batch_size=1", "parallel.dp_shard=2", "data.padding=\"longest\""},
       {0xd5288498d21149dbULL, 0xde6efad08a2043efULL}},
      {4,
       {"training.micro_batch_size=2", "training.grad_accum_steps=3", "parallel.tp=2"},
       {0xbd6878f365120abdULL, 0xe5d8804f8b0bdc4cULL}},
  };
  for (const Layout& l : layouts) {
    TrainConfig tc = tinyConfig(l.overrides, l.world);
    auto ds = makeDataset(tc);
    ASSERT_EQ(tc.layout.dpSize(), int64_t(l.pinned.size())) << l.overrides.back();
    for (int64_t r = 0; r < tc.layout.dpSize(); ++r)
      EXPECT_EQ(rankChecksum(tc, *ds, r, 8), l.pinned[size_t(r)])
          << "world " << l.world << ", " << l.overrides.back() << ", dp rank " << r << " of "
          << tc.layout.dpSize() << ": the samples this rank trains on changed";
  }
}

// The data-parallel ranks' micro-batches of one step tile the global batch: every
// sample once, in order, and the normaliser is the global batch's mask sum.
TEST(RankSamples, RanksTileTheGlobalBatch) {
  TrainConfig tc = tinyConfig(
      {"training.micro_batch_size=2", "training.grad_accum_steps=3", "parallel.tp=2"}, 8);
  ASSERT_EQ(tc.layout.dpSize(), 4);
  auto ds = makeDataset(tc);
  const int64_t G = tc.globalBatch();
  for (int64_t step : {0, 2, 5}) {
    std::vector<torch::Tensor> parts;
    int64_t positions = 0;
    for (int64_t r = 0; r < tc.layout.dpSize(); ++r) {
      StepBatches mine = rankBatches(*ds, tc, step, r);
      ASSERT_EQ(int64_t(mine.micro.size()), tc.training.grad_accum_steps);
      for (const Batch& b : mine.micro) parts.push_back(b.inputs);
      positions += mine.positions;
    }
    Batch whole = makeBatch(*ds, step * G, G, tc.data.seq_len, false, tc.data.pad_id);
    EXPECT_TRUE(torch::equal(torch::cat(parts), whole.inputs)) << "step " << step;
    EXPECT_EQ(positions, whole.mask.sum().item<int64_t>()) << "step " << step;
    EXPECT_EQ(positions, countPositions(*ds, step * G, G, tc.data.seq_len)) << "step " << step;
  }
}

// The text-dataset keys are checked together before anything is read.
TEST(TextDataConfig, RefusesInconsistentKeys) {
  TempDir dir;
  std::string jsonl = dir.file("d.jsonl"), bin = dir.file("d.bin");
  std::ofstream(jsonl) << "{\"text\": \"x\"}\n";
  std::ofstream(bin) << std::string(200, '\0');
  auto refusal = [&](std::vector<std::string> o) {
    try {
      tinyConfig(o);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string src = "data.source=\"" + jsonl + "\"";
  EXPECT_NE(refusal({src, "data.prompt_field=\"p\""})
                .find("data.prompt_field and "
                      "data.completion_field are set together"),
            std::string::npos);
  EXPECT_NE(refusal({src, "data.prompt_field=\"p\"", "data.completion_field=\"c\""})
                .find("data.prompt_field needs a tokenizer"),
            std::string::npos);
  EXPECT_NE(refusal({src, "data.tokenizer=\"/nonexistent/tokenizer.model\""})
                .find("tokenizer \"/nonexistent/tokenizer.model\" is not a readable file"),
            std::string::npos);
  EXPECT_NE(refusal({"data.source=\"" + bin + "\"", "data.tokenizer=\"" + jsonl + "\""})
                .find("need a .jsonl data.source"),
            std::string::npos);
  EXPECT_NE(refusal({"data.source=\"" + bin + "\"", "data.padding=\"packing\""})
                .find("already one packed stream"),
            std::string::npos);
  EXPECT_EQ(refusal({src}), "") << "a .jsonl without a tokenizer holds input_ids";
}

// Packing: the documents in order, cut into seq_len+1 windows with stride seq_len, no
// padding except in the last window; every id after the first is a target once.
TEST(Packing, WindowsOfTheDocumentStream) {
  TrainConfig c = tinyConfig();
  auto docs = makeDataset(c);
  std::vector<int32_t> stream;
  for (int64_t i = 0; i < docs->size(); ++i) {
    auto d = docs->document(i);
    stream.insert(stream.end(), d.begin(), d.end());
  }
  TrainConfig pc = tinyConfig({"data.padding=\"packing\""});
  ASSERT_TRUE(pc.data.pack);
  auto packed = makeDataset(pc);
  const int64_t S = c.data.seq_len, n = int64_t(stream.size());
  ASSERT_EQ(packed->size(), (n - 1 + S - 1) / S);
  int64_t positions = 0;
  for (int64_t w = 0; w < packed->size(); ++w) {
    const int64_t e = std::min(n, w * S + S + 1);
    EXPECT_EQ(packed->document(w),
              std::vector<int32_t>(stream.begin() + w * S, stream.begin() + e));
    EXPECT_TRUE(packed->targets(w).empty()) << "no masks without a prompt";
    positions += e - w * S - 1;
  }
  EXPECT_EQ(positions, n - 1);
  Batch b = makeBatch(*packed, 0, 3, S, false, 0);
  EXPECT_EQ(b.dataset_tokens, 3 * S);
  EXPECT_EQ(b.loss_tokens, 3 * S);
}

}  // namespace
}  // namespace ftb
