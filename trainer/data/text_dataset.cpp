#include "trainer/data/text_dataset.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/checkpoint_manifest.h"
#include "common/error.h"
#include "common/json_input.h"
#include "common/log.h"
#include "common/sha256.h"
#include "trainer/data/chat_template.h"
#include "trainer/data/tokenizer.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;
constexpr char kCacheMagic[8] = {'F', 'T', 'B', 'T', 'O', 'K', '0', '1'};

std::string fileSha256(const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(key, path, "cannot open file: " + std::string(std::strerror(errno)));
  Sha256 h;
  std::vector<char> buf(1 << 20);
  while (in.read(buf.data(), std::streamsize(buf.size())) || in.gcount() > 0)
    h.update(buf.data(), size_t(in.gcount()));
  std::string hex;
  char b[3];
  for (uint8_t x : h.finish()) {
    std::snprintf(b, sizeof(b), "%02x", x);
    hex += b;
  }
  return hex;
}

bool promptMode(const TrainConfig& c) { return !c.data.prompt_field.empty(); }

std::string fieldsKey(const TrainConfig& c) {
  if (promptMode(c))
    return "prompt:" + c.data.prompt_field + "\ncompletion:" + c.data.completion_field;
  // The default template adds nothing: caches written before chat records stay valid.
  return "text:" + c.data.text_field +
         (c.data.chat_template == "auto" ? "" : "\nchat:" + c.data.chat_template);
}

// The field `name` (config key `key`) of line `where` as a string.
std::string field(const nlohmann::json& j, const std::string& name, const std::string& key,
                  const std::string& where) {
  auto it = j.find(name);
  if (it == j.end()) {
    std::string present;
    for (auto& kv : j.items()) present += (present.empty() ? "" : ", ") + kv.key();
    throw ConfigError(key, where,
                      "no \"" + name + "\" field in this line (fields: " +
                          (present.empty() ? "none" : present) + ")",
                      "set " + key + " to the field that holds the text" +
                          (key == "data.text_field" ? ", or give a \"messages\" list" : ""));
  }
  if (!it->is_string())
    throw ConfigError(key, where,
                      "field \"" + name + "\" is a " + it->type_name() + ", expected a string");
  return it->get<std::string>();
}

// Target flags of a document of n ids whose first `masked` ids are not targets.
std::vector<uint8_t> leadingMasked(size_t n, int64_t masked) {
  std::vector<uint8_t> tg(n, 1);
  std::fill(tg.begin(), tg.begin() + std::min<int64_t>(masked, int64_t(n)), 0);
  return tg;
}

// k when `tg` is k zeros then ones (or empty: 0), else -1.
int64_t leadingMaskedCount(const std::vector<uint8_t>& tg) {
  const size_t k = size_t(std::find(tg.begin(), tg.end(), uint8_t(1)) - tg.begin());
  return std::find(tg.begin() + k, tg.end(), uint8_t(0)) == tg.end() ? int64_t(k) : -1;
}

// Turns the records of the dataset into ids and target flags; the chat template is
// resolved at the first conversation.
class RecordTokenizer {
 public:
  explicit RecordTokenizer(const TrainConfig& c) : c_(c) {
    tok_ = loadTextTokenizer(c.data.tokenizer, "data.tokenizer");
    if (tok_->vocabSize() > c.model.vocab_size)
      throw ConfigError("data.tokenizer", c.data.tokenizer,
                        "the tokenizer has " + std::to_string(tok_->vocabSize()) +
                            " token ids, more than model.vocab_size(" +
                            std::to_string(c.model.vocab_size) + ")",
                        "use the model's own tokenizer or a model with a larger vocabulary");
  }

  // One record (a JSON object) of line `where`.
  void add(const nlohmann::json& j, const std::string& where, TokenizedDocs& d) {
    if (!promptMode(c_) && !j.contains(c_.data.text_field) && j.contains("messages")) {
      if (!chat_) chat_ = resolveChatTemplate(c_.data.chat_template, c_.data.tokenizer);
      ChatDoc doc = encodeChat(*tok_, c_.data.tokenizer, *chat_, parseMessages(j, where));
      d.ids.push_back(std::move(doc.ids));
      d.targets.push_back(std::move(doc.targets));
      return;
    }
    std::vector<int32_t> ids;
    if (tok_->bos() >= 0) ids.push_back(tok_->bos());
    int64_t prompt = -1;
    std::string text;
    if (promptMode(c_)) {
      std::string p = field(j, c_.data.prompt_field, "data.prompt_field", where);
      text = p + field(j, c_.data.completion_field, "data.completion_field", where);
      prompt = int64_t(ids.size()) + int64_t(tok_->encode(p).size());
    } else {
      text = field(j, c_.data.text_field, "data.text_field", where);
    }
    std::vector<int32_t> body = tok_->encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    if (tok_->eos() >= 0) ids.push_back(tok_->eos());
    d.targets.push_back(prompt < 0 ? std::vector<uint8_t>{} : leadingMasked(ids.size(), prompt));
    d.ids.push_back(std::move(ids));
  }

 private:
  const TrainConfig& c_;
  std::unique_ptr<TextTokenizer> tok_;
  std::optional<ChatTemplate> chat_;
};

// Parses and tokenizes every line of the dataset.
TokenizedDocs tokenize(const TrainConfig& c) {
  RecordTokenizer records(c);
  std::ifstream in(c.data.data_source);
  if (!in) throw ConfigError("data.source", c.data.data_source, "cannot open data file");
  TokenizedDocs d;
  std::string line;
  for (int64_t lineno = 1; readJsonlLine(in, line, c.data.data_source, lineno); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = c.data.data_source + ":" + std::to_string(lineno);
    nlohmann::json j =
        parseJsonInput(line, "data.source", where, "one JSON object per line: {\"text\": \"...\"}");
    if (!j.is_object()) throw ConfigError("data.source", where, "expected a JSON object");
    records.add(j, where, d);
  }
  if (d.ids.empty())
    throw ConfigError("data.source", c.data.data_source, "empty file: no JSON line to train on",
                      "one JSON object per line, e.g. {\"" +
                          (promptMode(c) ? c.data.prompt_field : c.data.text_field) +
                          "\": \"...\"}");
  return d;
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Per document: uint64 length, int64 k (>= 0: the first k ids are not targets, the others
// are; -1: a flag byte per id follows the ids), the int32 ids.
std::string serialize(const TokenizedDocs& d) {
  std::string out(kCacheMagic, sizeof(kCacheMagic));
  put<uint64_t>(out, d.ids.size());
  for (size_t i = 0; i < d.ids.size(); ++i) {
    const int64_t k = leadingMaskedCount(d.targets[i]);
    put<uint64_t>(out, d.ids[i].size());
    put<int64_t>(out, k);
    out.append(reinterpret_cast<const char*>(d.ids[i].data()), d.ids[i].size() * sizeof(int32_t));
    if (k < 0) out.append(reinterpret_cast<const char*>(d.targets[i].data()), d.targets[i].size());
  }
  return out;
}

// Reads a cache file; false when it is missing or not a complete cache file.
bool readCache(const std::string& path, TokenizedDocs& d) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  char magic[sizeof(kCacheMagic)];
  uint64_t n = 0;
  if (!in.read(magic, sizeof(magic)) || std::memcmp(magic, kCacheMagic, sizeof(magic)) != 0 ||
      !in.read(reinterpret_cast<char*>(&n), sizeof(n)))
    return false;
  const auto bytes = fs::file_size(path);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t len = 0;
    int64_t prompt = 0;
    if (!in.read(reinterpret_cast<char*>(&len), sizeof(len)) ||
        !in.read(reinterpret_cast<char*>(&prompt), sizeof(prompt)) || len > bytes / 4)
      return false;
    std::vector<int32_t> ids(len);
    if (!in.read(reinterpret_cast<char*>(ids.data()), std::streamsize(len * sizeof(int32_t))))
      return false;
    std::vector<uint8_t> tg(prompt < 0 ? len : 0);
    if (prompt < 0 && !in.read(reinterpret_cast<char*>(tg.data()), std::streamsize(len)))
      return false;
    d.targets.push_back(prompt > 0 ? leadingMasked(len, prompt) : std::move(tg));
    d.ids.push_back(std::move(ids));
  }
  return in.peek() == std::char_traits<char>::eof();
}

// Holds an exclusive flock on the dataset file itself (no lock file to leave behind;
// a read-only descriptor can hold one) until destroyed.
class DataLock {
 public:
  DataLock(const std::string& path, double timeout_s) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
      throw ConfigError("data.source", path,
                        "cannot open data file: " + std::string(std::strerror(errno)));
    const auto t0 = std::chrono::steady_clock::now();
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited > timeout_s) {
        ::close(fd_);
        throw IoError(logPrefix() + " waited " + std::to_string(int(waited)) +
                      " s for the lock on " + path +
                      " (another trainer process is tokenizing it); raise "
                      "parallel.timeout_seconds, or end the process holding it");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~DataLock() { ::close(fd_); }  // releases the lock
  DataLock(const DataLock&) = delete;
  DataLock& operator=(const DataLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

// A tokenizer.json takes its EOS (and maybe BOS) from the tokenizer_config.json beside it
// (trainer/data/tokenizer_json.h), and a chat template from it or chat_template.jinja
// (trainer/data/chat_template.h): their bytes are part of the tokenizer; "" when none.
std::string tokenizerConfigSha256(const std::string& tokenizer) {
  if (!isTokenizerJson(tokenizer)) return "";
  std::string out;
  for (const char* name : {"tokenizer_config.json", "chat_template.jinja"}) {
    const fs::path p = fs::path(tokenizer).parent_path() / name;
    if (fs::is_regular_file(p)) out += fileSha256(p.string(), "data.tokenizer");
  }
  return out;
}

std::string tokenCachePath(const TrainConfig& c) {
  const std::string key = fileSha256(c.data.tokenizer, "data.tokenizer") +
                          tokenizerConfigSha256(c.data.tokenizer) + "\n" +
                          fileSha256(c.data.data_source, "data.source") + "\n" + fieldsKey(c) +
                          "\n" + std::string(kCacheMagic, sizeof(kCacheMagic));
  return c.data.data_source + ".tok-" + sha256HexPrefix(key, 8) + ".bin";
}

namespace {

int64_t tokenCount(const TokenizedDocs& d) {
  int64_t tokens = 0;
  for (const auto& ids : d.ids) tokens += int64_t(ids.size());
  return tokens;
}

// readCache(), logged when it hits (the start-up cost a cached dataset still has).
bool readCacheLogged(const TrainConfig& c, const std::string& cache, TokenizedDocs& d) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!readCache(cache, d)) return false;
  d.cache_path = cache;
  d.cache_hit = true;
  FTB_INFO("read the token ids of " << d.ids.size() << " documents of " << c.data.data_source
                                    << " (" << tokenCount(d) << " tokens) from the cache " << cache
                                    << " in " << secondsSince(t0) << " s");
  return true;
}

}  // namespace

bool readJsonlLine(std::istream& in, std::string& line, const std::string& path, int64_t lineno) {
  line.clear();
  if (in.peek() == std::char_traits<char>::eof()) return false;
  char buf[1 << 16];
  while (true) {
    in.get(buf, sizeof buf, '\n');  // up to the newline, which stays in the stream
    line.append(buf, size_t(in.gcount()));
    if (line.size() > kMaxJsonlLineBytes)
      throw ConfigError("data.source", path + ":" + std::to_string(lineno),
                        "line longer than " + std::to_string(kMaxJsonlLineBytes >> 20) +
                            " MiB (the bound on one JSONL record)",
                        "split the document into several records");
    if (in.eof()) return true;
    in.clear();  // get() extracting nothing (an empty line) sets failbit
    const int c = in.peek();
    if (c == '\n') {
      in.ignore();
      return true;
    }
    if (c == std::char_traits<char>::eof()) return true;
  }
}

TokenizedDocs loadTextJsonl(const TrainConfig& c) {
  const std::string cache = tokenCachePath(c);
  TokenizedDocs d;
  if (readCacheLogged(c, cache, d)) return d;
  DataLock lock(c.data.data_source, c.comm.timeout_seconds);
  d = TokenizedDocs{};
  if (readCacheLogged(c, cache, d)) return d;  // written while this process waited for the lock
  const auto t0 = std::chrono::steady_clock::now();
  d = tokenize(c);
  const int64_t tokens = tokenCount(d);
  const double s = secondsSince(t0);
  try {
    writeFileDurably(cache, serialize(d));
    d.cache_path = cache;
  } catch (const IoError& e) {
    FTB_WARN("no token cache for " << c.data.data_source
                                   << " (every start tokenizes again): " << e.what());
  }
  FTB_INFO("tokenized " << d.ids.size() << " documents of " << c.data.data_source << " (" << tokens
                        << " tokens) in " << s << " s with " << c.data.tokenizer
                        << (d.cache_path.empty() ? "" : "; cached in " + d.cache_path));
  return d;
}

}  // namespace ftb
