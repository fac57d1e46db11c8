// Text tokenizers of JSONL datasets behind one interface (TextTokenizer): sentencepiece's
// tokenizer.model (SpmTokenizer, here) and HF's tokenizer.json (TokenizerJson,
// trainer/data/tokenizer_json.h).
//
// SpmTokenizer goes through libftb_spm.so (trainer/data/spm_shim.cpp says why
// libsentencepiece is not linked into the trainer).
//
// Contract: encode() returns exactly the ids of sentencepiece's own Encode() (what
// `spm_encode --output_format=id` prints for a one-line text), without BOS/EOS. Errors
// are ConfigError naming `key` and the model file (exit 2); a missing or unloadable
// shim is an IoError naming every path tried.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ftb {

// What a dataset needs of a tokenizer. encode() adds no BOS/EOS; every id it returns, and
// bos()/eos() when not -1, lies in [0, vocabSize()).
class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // encode(text) into `ids`, and into `ends` for each id the byte offset in `text` where the
  // text it stands for ends: token k stands for bytes [ends[k-1], ends[k]) (from 0 for the
  // first); non-decreasing, at most text.size(). Exact where the tokenizer's normalizer leaves
  // the text as it is. false, writing nothing, when this tokenizer cannot tell: only
  // tokenizer.json files whose pre-tokenizer is byte-level (PreTokenizer::byteLevelCover) can.
  virtual bool encodeWithEnds(std::string_view text, std::vector<int32_t>& ids,
                              std::vector<size_t>& ends) const {
    (void)text, (void)ids, (void)ends;
    return false;
  }
  virtual int32_t vocabSize() const = 0;
  virtual int32_t bos() const = 0;  // -1 when the tokenizer adds none
  virtual int32_t eos() const = 0;  // -1 when the tokenizer has none
};

// True when `path` names a tokenizer.json (HF `tokenizers`): its name ends in ".json", or
// its first non-blank byte is '{'. Otherwise it is taken for a sentencepiece model.
bool isTokenizerJson(const std::string& path);

// The tokenizer in `path`, by isTokenizerJson(). Errors as each implementation documents
// (ConfigError naming `key` and `path`, exit 2).
std::unique_ptr<TextTokenizer> loadTextTokenizer(const std::string& path, const std::string& key);

class SpmTokenizer : public TextTokenizer {
 public:
  // REQUIRES: `key` is the config key that named `model_path` (for messages).
  static std::unique_ptr<SpmTokenizer> load(const std::string& model_path, const std::string& key);
  ~SpmTokenizer() override;
  SpmTokenizer(const SpmTokenizer&) = delete;
  SpmTokenizer& operator=(const SpmTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text) const override;
  int32_t vocabSize() const override { return pieces_; }  // the model's piece count
  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return eos_; }

 private:
  SpmTokenizer() = default;
  void* handle_ = nullptr;
  std::string path_;
  int32_t pieces_ = 0, bos_ = -1, eos_ = -1;
};

// Path of libftb_spm.so this process loads (for messages and tests).
std::string spmShimPath();

}  // namespace ftb
