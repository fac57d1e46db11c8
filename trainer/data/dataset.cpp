#include "trainer/data/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "common/error.h"
#include "common/json_input.h"
#include "common/log.h"
#include "common/splitmix64.h"
#include "trainer/data/text_dataset.h"

namespace ftb {
namespace {

class SyntheticDataset final : public Dataset {
 public:
  explicit SyntheticDataset(const TrainConfig& c)
      : n_(c.data.num_samples),
        seed_(c.training.seed),
        vocab_(c.model.vocab_size),
        min_len_(c.data.min_doc_len),
        max_len_(c.data.seq_len) {}
  int64_t size() const override { return n_; }
  int32_t successor(int32_t t) const {
    return static_cast<int32_t>((int64_t(t) * 7 + 3) % (vocab_ - 1) + 1);
  }
  std::vector<int32_t> document(int64_t index) const override {
    std::mt19937_64 rng(splitmix64(static_cast<uint64_t>(seed_) * 0x100000001b3ULL ^
                                   splitmix64(static_cast<uint64_t>(index % n_))));
    std::uniform_int_distribution<int64_t> len(min_len_, max_len_);
    std::uniform_int_distribution<int32_t> tok(1, static_cast<int32_t>(vocab_ - 1));
    std::bernoulli_distribution follow(0.5);
    std::vector<int32_t> ids(static_cast<size_t>(len(rng) + 1));
    // Half the tokens follow a fixed successor rule, so the loss can really fall.
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = (i > 0 && follow(rng)) ? successor(ids[i - 1]) : tok(rng);
    return ids;
  }

 private:
  int64_t n_, seed_, vocab_, min_len_, max_len_;
};

// Documents with their target flags and labels, as the Dataset accessors give them.
// Invariant: targets (labels) is empty or has one vector per document, each empty or as long
// as the document.
struct Docs {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<uint8_t>> targets;
  std::vector<std::vector<int32_t>> labels;
};

class InMemoryDataset final : public Dataset {
 public:
  explicit InMemoryDataset(Docs d) : d_(std::move(d)) {}
  int64_t size() const override { return static_cast<int64_t>(d_.ids.size()); }
  std::vector<int32_t> document(int64_t index) const override { return d_.ids[index % size()]; }
  std::vector<uint8_t> targets(int64_t index) const override {
    return d_.targets.empty() ? std::vector<uint8_t>{} : d_.targets[index % size()];
  }
  std::vector<int32_t> labels(int64_t index) const override {
    return d_.labels.empty() ? std::vector<int32_t>{} : d_.labels[index % size()];
  }

 private:
  Docs d_;
};

// Loss positions of a document cut to seq_len+1 ids with target flags `tg`.
int64_t lossPositions(const std::vector<int32_t>& ids, const std::vector<uint8_t>& tg,
                      int64_t seq_len) {
  const int64_t n = std::min<int64_t>(seq_len, int64_t(ids.size()) - 1);
  if (tg.empty()) return std::max<int64_t>(n, 0);
  int64_t k = 0;
  for (int64_t t = 1; t <= n; ++t) k += tg[size_t(t)] != 0;
  return k;
}

// Adds one document to `d`, cut to seq_len+1 ids unless packing (packing cuts the stream);
// false, adding nothing, when it then has no loss target.
bool addDocument(const TrainConfig& c, Docs& d, std::vector<int32_t> ids, std::vector<uint8_t> tg,
                 std::vector<int32_t> labels) {
  const size_t keep = size_t(c.data.seq_len + 1);
  if (!c.data.pack && ids.size() > keep) {
    ids.resize(keep);
    if (tg.size() > keep) tg.resize(keep);
    if (labels.size() > keep) labels.resize(keep);
  }
  if (!c.data.pack && lossPositions(ids, tg, c.data.seq_len) == 0) return false;
  d.ids.push_back(std::move(ids));
  d.targets.push_back(std::move(tg));
  d.labels.push_back(std::move(labels));
  return true;
}

// The dataset of `d`, `dropped` of whose `total` documents had no loss target (a warning).
std::unique_ptr<Dataset> inMemory(const TrainConfig& c, Docs d, int64_t dropped, int64_t total) {
  if (dropped > 0)
    FTB_WARN(c.data.data_source << ": " << dropped << " of " << total
                                << " documents have no loss target within seq_len("
                                << c.data.seq_len << ") and are skipped");
  if (d.ids.empty())
    throw ConfigError(
        "data.source", c.data.data_source,
        "no document has a loss target within seq_len(" + std::to_string(c.data.seq_len) + ")",
        "raise data.seq_len, or shorten the prompts (what is masked: prompts, the turns that are "
        "not the assistant's, labels of -100)");
  const auto none = [](const auto& v) {
    return std::all_of(v.begin(), v.end(), [](const auto& x) { return x.empty(); });
  };
  if (none(d.targets)) d.targets.clear();
  if (none(d.labels)) d.labels.clear();
  return std::make_unique<InMemoryDataset>(std::move(d));
}

// Every document of `ds` concatenated and cut into windows of seq_len+1 ids with
// stride seq_len (each id after the first is a target in exactly one window); windows
// without a loss target are dropped.
std::unique_ptr<Dataset> pack(const Dataset& ds, int64_t seq_len) {
  std::vector<int32_t> stream, labels;
  std::vector<uint8_t> flags;
  bool masked = false, labelled = false;
  for (int64_t i = 0; i < ds.size(); ++i) {
    std::vector<int32_t> d = ds.document(i), lb = ds.labels(i);
    std::vector<uint8_t> tg = ds.targets(i);
    masked = masked || !tg.empty();
    if (!lb.empty() && !labelled) labels = stream, labelled = true;  // the ids so far
    if (tg.empty()) tg.assign(d.size(), 1);
    if (labelled)
      labels.insert(labels.end(), lb.empty() ? d.begin() : lb.begin(),
                    lb.empty() ? d.end() : lb.end());
    stream.insert(stream.end(), d.begin(), d.end());
    flags.insert(flags.end(), tg.begin(), tg.end());
  }
  Docs out;
  const int64_t n = int64_t(stream.size());
  for (int64_t s = 0; s + 1 < n; s += seq_len) {
    const int64_t e = std::min(n, s + seq_len + 1);
    std::vector<int32_t> w(stream.begin() + s, stream.begin() + e);
    std::vector<uint8_t> f(flags.begin() + s, flags.begin() + e);
    if (lossPositions(w, f, seq_len) == 0) continue;
    out.ids.push_back(std::move(w));
    if (masked) out.targets.push_back(std::move(f));
    if (labelled) out.labels.emplace_back(labels.begin() + s, labels.begin() + e);
  }
  if (out.ids.empty())
    throw ConfigError("data.padding", "\"packing\"", "packing left no window with a loss target");
  return std::make_unique<InMemoryDataset>(std::move(out));
}

// Tokenized text documents (text_dataset.h), each as addDocument keeps it.
std::unique_ptr<Dataset> loadText(const TrainConfig& c) {
  TokenizedDocs t = loadTextJsonl(c);
  Docs d;
  int64_t dropped = 0;
  for (size_t i = 0; i < t.ids.size(); ++i)
    dropped += !addDocument(c, d, std::move(t.ids[i]), std::move(t.targets[i]), {});
  return inMemory(c, std::move(d), dropped, int64_t(t.ids.size()));
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void checkId(int64_t id, int64_t vocab, const std::string& where) {
  if (id < 0 || id >= vocab)
    throw ConfigError("data.source", where,
                      "token id " + std::to_string(id) + " outside [0, vocab_size(" +
                          std::to_string(vocab) + "))",
                      "the file was tokenized for a different vocabulary");
}

// The integers of record `j`'s array `name` (which the caller checked is there).
std::vector<int64_t> intArray(const nlohmann::json& j, const char* name, const std::string& where) {
  const nlohmann::json& a = j[name];
  if (!a.is_array())
    throw ConfigError(
        "data.source", where,
        std::string("\"") + name + "\" is a JSON " + a.type_name() + ", expected a list");
  std::vector<int64_t> out;
  out.reserve(a.size());
  for (const auto& v : a) {
    if (!v.is_number_integer())
      throw ConfigError(
          "data.source", where,
          std::string("non-integer ") + (std::string(name) == "input_ids"
                                             ? "token id"
                                             : "value in \"" + std::string(name) + "\""));
    out.push_back(v.get<int64_t>());
  }
  return out;
}

// The optional array `name` of record `j`: empty when absent, else as long as input_ids (n).
std::vector<int64_t> sideArray(const nlohmann::json& j, const char* name, size_t n,
                               const std::string& where) {
  if (!j.contains(name)) return {};
  std::vector<int64_t> a = intArray(j, name, where);
  if (a.size() != n)
    throw ConfigError("data.source", where,
                      std::string("\"") + name + "\" has " + std::to_string(a.size()) +
                          " entries, \"input_ids\" " + std::to_string(n),
                      std::string("one entry per input id: ") +
                          (std::string(name) == "labels"
                               ? "labels[i] is the target at position i, -100 where there is none"
                               : "attention_mask[i] is 1 for a token, 0 for padding"));
  return a;
}

// [first, last] of the ones of an attention mask of n entries (all when it is empty): padding
// only before and after them. first > last when every entry is 0.
std::pair<size_t, size_t> unpadded(const std::vector<int64_t>& mask, size_t n,
                                   const std::string& where) {
  if (mask.empty()) return {0, n - 1};
  size_t first = n, last = 0;
  for (size_t k = 0; k < n; ++k) {
    if (mask[k] != 0 && mask[k] != 1)
      throw ConfigError("data.source", where,
                        "attention_mask[" + std::to_string(k) + "] = " + std::to_string(mask[k]) +
                            ", expected 0 (padding) or 1");
    if (mask[k] == 1) first = std::min(first, k), last = k;
  }
  for (size_t k = first; k < last; ++k)
    if (mask[k] == 0)
      throw ConfigError("data.source", where,
                        "attention_mask[" + std::to_string(k) +
                            "] is 0 between ones: padding must come before or after the tokens",
                        "the trainer drops padded positions, and a gap inside a sequence would "
                        "move the positions of the tokens after it; split the record in two");
  return {first, last};
}

// One record of a token-id file: {"input_ids": [...]} with optional "labels" and
// "attention_mask" (dataset.h says what they mean); the ids of padding are removed, a label of
// -100 clears the target flag, and labels equal to the ids are left out.
struct TokenRecord {
  std::vector<int32_t> ids, labels;
  std::vector<uint8_t> targets;
};
TokenRecord tokenRecord(const nlohmann::json& j, int64_t vocab, const std::string& where) {
  if (!j.is_object() || !j.contains("input_ids") || !j["input_ids"].is_array())
    throw ConfigError("data.source", where, "expected an object with an \"input_ids\" array",
                      "a record of text or messages needs a tokenizer: set data.tokenizer, or "
                      "use a model.from_pretrained directory that holds one");
  const std::vector<int64_t> ids = intArray(j, "input_ids", where);
  for (int64_t id : ids) checkId(id, vocab, where);
  const std::vector<int64_t> labels = sideArray(j, "labels", ids.size(), where);
  for (size_t k = 0; k < labels.size(); ++k)
    if (labels[k] != -100 && (labels[k] < 0 || labels[k] >= vocab))
      throw ConfigError("data.source", where,
                        "labels[" + std::to_string(k) + "] = " + std::to_string(labels[k]) +
                            ": expected -100 (not a target) or a token id in [0, vocab_size(" +
                            std::to_string(vocab) + "))");
  TokenRecord r;
  if (ids.empty()) return r;
  const auto [first, last] =
      unpadded(sideArray(j, "attention_mask", ids.size(), where), ids.size(), where);
  bool differ = false;
  for (size_t k = first; k <= last && first <= last; ++k) {
    r.ids.push_back(int32_t(ids[k]));
    if (labels.empty()) continue;
    r.targets.push_back(labels[k] != -100);
    r.labels.push_back(int32_t(labels[k] == -100 ? ids[k] : labels[k]));
    differ = differ || (labels[k] != -100 && labels[k] != ids[k]);
  }
  if (!differ) r.labels.clear();
  return r;
}

std::unique_ptr<Dataset> loadJsonl(const TrainConfig& c) {
  std::ifstream in(c.data.data_source);
  if (!in) throw ConfigError("data.source", c.data.data_source, "cannot open data file");
  Docs d;
  int64_t total = 0, dropped = 0;
  std::string line;
  for (int64_t lineno = 1; readJsonlLine(in, line, c.data.data_source, lineno); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string where = c.data.data_source + ":" + std::to_string(lineno);
    nlohmann::json j = parseJsonInput(line, "data.source", where,
                                      "one JSON object per line: {\"input_ids\": [1, 2, 3]}");
    TokenRecord r = tokenRecord(j, c.model.vocab_size, where);
    if (r.ids.size() < 2) continue;  // nothing to predict
    ++total;
    dropped += !addDocument(c, d, std::move(r.ids), std::move(r.targets), std::move(r.labels));
  }
  if (total == 0)
    throw ConfigError("data.source", c.data.data_source, "no document with at least 2 tokens");
  return inMemory(c, std::move(d), dropped, total);
}

// True when the first record of the .jsonl holds "input_ids" and no text field: a file of
// token ids, whatever tokenizer is configured (one from model.from_pretrained included).
bool holdsTokenIds(const TrainConfig& c) {
  std::ifstream in(c.data.data_source);
  std::string line;
  for (int64_t lineno = 1; readJsonlLine(in, line, c.data.data_source, lineno); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const nlohmann::json j = parseJsonInput(line, "data.source", c.data.data_source);
      return j.is_object() && j.contains("input_ids") && !j.contains(c.data.text_field) &&
             !j.contains("messages") &&
             (c.data.prompt_field.empty() || !j.contains(c.data.prompt_field));
    } catch (const ConfigError&) {
      return false;  // the text reader names the line
    }
  }
  return false;
}

// A .bin token file, window by window: document(i) reads its seq_len+1 ids with pread, so
// memory does not grow with the file (a 64 GiB file was read whole). Every id of the
// windows is checked against the vocabulary at open, in one streaming pass.
template <typename T>
class BinDataset final : public Dataset {
 public:
  explicit BinDataset(const TrainConfig& c) : path_(c.data.data_source), seq_len_(c.data.seq_len) {
    fd_.fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd_.fd < 0 || ::fstat(fd_.fd, &st) != 0)
      throw ConfigError("data.source", path_,
                        std::string("cannot open data file: ") + std::strerror(errno));
    if (st.st_size % int64_t(sizeof(T)) != 0)
      throw ConfigError("data.source", path_,
                        "size " + std::to_string(st.st_size) + " is not a multiple of " +
                            std::to_string(sizeof(T)) + " (data.bin_dtype = " + c.data.bin_dtype +
                            ")");
    const int64_t n = st.st_size / int64_t(sizeof(T));
    if (n < seq_len_ + 1)
      throw ConfigError("data.source", path_,
                        "holds " + std::to_string(n) + " tokens, fewer than seq_len + 1 (" +
                            std::to_string(seq_len_ + 1) + ")");
    windows_ = (n - 1) / seq_len_;
    checkIds(windows_ * seq_len_ + 1, c.model.vocab_size);
  }
  int64_t size() const override { return windows_; }
  std::vector<int32_t> document(int64_t index) const override {
    std::vector<T> raw(size_t(seq_len_ + 1));
    readTokens(raw.data(), (index % windows_) * seq_len_, seq_len_ + 1);
    return std::vector<int32_t>(raw.begin(), raw.end());
  }
  std::optional<PositionCounts> positionCounts(int64_t seq_len) const override {
    const int64_t per = std::min(seq_len, seq_len_);  // every window holds seq_len_ targets
    return PositionCounts{windows_ * per, windows_ * per};
  }

 private:
  void readTokens(T* dst, int64_t first, int64_t count) const {
    char* p = reinterpret_cast<char*>(dst);
    size_t left = size_t(count) * sizeof(T);
    off_t at = off_t(first) * off_t(sizeof(T));
    while (left > 0) {
      const ssize_t got = ::pread(fd_.fd, p, left, at);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw IoError("reading " + path_ + " at byte " + std::to_string(at) + ": " +
                      (got == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
      p += got, at += got, left -= size_t(got);
    }
  }
  // Tokens [0, count): each id in [0, vocab), read in chunks of 1 Mi tokens.
  void checkIds(int64_t count, int64_t vocab) const {
    std::vector<T> chunk(size_t(1) << 20);
    for (int64_t first = 0; first < count; first += int64_t(chunk.size())) {
      const int64_t k = std::min<int64_t>(int64_t(chunk.size()), count - first);
      readTokens(chunk.data(), first, k);
      for (int64_t i = 0; i < k; ++i)
        if (int64_t(chunk[size_t(i)]) >= vocab)  // the message is built only for a bad id
          checkId(int64_t(chunk[size_t(i)]), vocab,
                  path_ + " (token " + std::to_string(first + i) + ")");
    }
    ::posix_fadvise(fd_.fd, 0, 0, POSIX_FADV_DONTNEED);  // the pass leaves no page cache behind
  }

  struct OwnedFd {
    int fd = -1;
    ~OwnedFd() {
      if (fd >= 0) ::close(fd);
    }
  };
  std::string path_;
  OwnedFd fd_;  // closed however the constructor ends
  int64_t seq_len_, windows_ = 0;
};

std::unique_ptr<Dataset> loadSource(const TrainConfig& c) {
  if (c.data.data_source == "synthetic") return std::make_unique<SyntheticDataset>(c);
  if (endsWith(c.data.data_source, ".jsonl")) {
    if (c.data.tokenizer.empty()) return loadJsonl(c);
    if (!holdsTokenIds(c)) return loadText(c);
    FTB_INFO(c.data.data_source << " holds input_ids: read as token ids, without "
                                << c.data.tokenizer);
    return loadJsonl(c);
  }
  if (endsWith(c.data.data_source, ".bin"))
    return c.data.bin_dtype == "uint32" ? std::unique_ptr<Dataset>(new BinDataset<uint32_t>(c))
                                        : std::unique_ptr<Dataset>(new BinDataset<uint16_t>(c));
  throw ConfigError("data.source", "config",
                    "unknown data file type \"" + c.data.data_source + "\"",
                    "expected \"synthetic\", a .jsonl or a .bin file");
}

}  // namespace

std::unique_ptr<Dataset> makeDataset(const TrainConfig& c, bool announce) {
  std::unique_ptr<Dataset> ds = loadSource(c);
  if (c.data.pack) ds = pack(*ds, c.data.seq_len);
  if (announce && c.data.data_source != "synthetic") {
    int64_t positions = 0, loss = 0;
    if (std::optional<Dataset::PositionCounts> known = ds->positionCounts(c.data.seq_len)) {
      positions = known->positions, loss = known->loss;
    } else {
      for (int64_t i = 0; i < ds->size(); ++i) {
        std::vector<int32_t> d = ds->document(i);
        positions += std::min<int64_t>(c.data.seq_len, int64_t(d.size()) - 1);
        loss += lossPositions(d, ds->targets(i), c.data.seq_len);
      }
    }
    FTB_INFO("data " << c.data.data_source << ": " << ds->size() << " samples, " << positions
                     << " training positions, " << positions - loss
                     << " of them masked (not loss targets)" << (c.data.pack ? " (packed)" : ""));
  }
  return ds;
}

int64_t countPositions(const Dataset& ds, int64_t first, int64_t count, int64_t seq_len) {
  int64_t n = 0;
  for (int64_t i = 0; i < count; ++i)
    n += std::min<int64_t>(seq_len, static_cast<int64_t>(ds.document(first + i).size()) - 1);
  return n;
}

RankSamples rankSamples(const TrainConfig& tc, int64_t step, int64_t dp_rank) {
  const int64_t G = tc.globalBatch();
  return {step * G + dp_rank * (G / tc.layout.dpSize()), tc.training.micro_batch_size,
          tc.training.grad_accum_steps};
}

StepBatches rankBatches(const Dataset& ds, const TrainConfig& tc, int64_t step, int64_t dp_rank) {
  const RankSamples mine = rankSamples(tc, step, dp_rank);
  StepBatches sb;
  for (int64_t m = 0; m < mine.micro_batches; ++m) {
    sb.micro.push_back(makeBatch(ds, mine.microFirst(m), mine.micro_batch, tc.data.seq_len,
                                 tc.data.pad_longest, tc.data.pad_id));
    sb.positions += sb.micro.back().loss_tokens;
  }
  return sb;
}

Batch makeBatch(const Dataset& ds, int64_t first, int64_t count, int64_t seq_len, bool pad_longest,
                int64_t pad_id) {
  std::vector<std::vector<int32_t>> docs, labels;
  std::vector<std::vector<uint8_t>> tgs;
  int64_t T = pad_longest ? 1 : seq_len;
  for (int64_t i = 0; i < count; ++i) {
    docs.push_back(ds.document(first + i));
    tgs.push_back(ds.targets(first + i));
    labels.push_back(ds.labels(first + i));
    if (static_cast<int64_t>(docs.back().size()) > seq_len + 1) docs.back().resize(seq_len + 1);
    if (pad_longest) T = std::max<int64_t>(T, static_cast<int64_t>(docs.back().size()) - 1);
  }
  Batch b;
  b.inputs = torch::full({count, T}, pad_id, torch::kInt64);
  b.targets = torch::full({count, T}, pad_id, torch::kInt64);
  b.mask = torch::zeros({count, T}, torch::kBool);
  auto in = b.inputs.accessor<int64_t, 2>();
  auto tg = b.targets.accessor<int64_t, 2>();
  auto mk = b.mask.accessor<bool, 2>();
  for (int64_t i = 0; i < count; ++i) {
    int64_t n = static_cast<int64_t>(docs[i].size()) - 1;
    for (int64_t t = 0; t < n; ++t) {
      in[i][t] = docs[i][t];
      tg[i][t] = labels[i].empty() ? docs[i][t + 1] : labels[i][size_t(t + 1)];
      mk[i][t] = tgs[i].empty() || tgs[i][size_t(t + 1)] != 0;
      b.loss_tokens += mk[i][t];
    }
    b.dataset_tokens += n;
  }
  b.padded_tokens = count * T;
  return b;
}

void writeSyntheticDataset(const TrainConfig& c, const std::string& path) {
  const bool bin = endsWith(path, ".bin");
  if (!bin && !endsWith(path, ".jsonl"))  // the trainer reads only these two back
    throw ConfigError("--generate-data", "command line",
                      "'" + path + "' ends in neither .jsonl nor .bin",
                      "name the file PATH.jsonl ({\"input_ids\": [...]} per line) or PATH.bin "
                      "(flat data.bin_dtype ids): data.source reads the format from the name");
  if (bin && !binDtypeProblem(c).empty())  // before the file is created: nothing written
    throw ConfigError("data.bin_dtype", "--generate-data " + path, binDtypeProblem(c),
                      "set data.bin_dtype = \"uint32\"");
  SyntheticDataset ds(c);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw IoError("cannot write " + path + ": " + std::strerror(errno));
  for (int64_t i = 0; i < ds.size(); ++i) {
    std::vector<int32_t> ids = ds.document(i);
    if (bin) {
      for (int32_t id : ids) {
        if (c.data.bin_dtype == "uint32") {
          uint32_t v = static_cast<uint32_t>(id);
          out.write(reinterpret_cast<const char*>(&v), sizeof(v));
        } else {
          uint16_t v = static_cast<uint16_t>(id);
          out.write(reinterpret_cast<const char*>(&v), sizeof(v));
        }
      }
    } else {
      nlohmann::json j;
      j["input_ids"] = ids;
      out << j.dump() << '\n';
    }
  }
  if (!out) throw IoError("write to " + path + " failed");
}

}  // namespace ftb
