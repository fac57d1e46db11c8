// A tokenizer.json (the serialisation of HF `tokenizers`, what Llama 3, Qwen 2/3, SmolLM2,
// Mistral Nemo and most models since 2024 ship), read and applied in C++.
//
// Contracts:
// - encode(text) returns the ids of HF's `Tokenizer.encode(text, add_special_tokens=False)`:
//   added tokens are split off the raw text first (those with "normalized": false), the
//   normalizer runs on the text between them, added tokens with "normalized": true are split
//   off the normalized text, the pre-tokenizer splits the rest, and the model (BPE) turns each
//   pre-token into ids. Which normalizers and pre-tokenizers are supported:
//   trainer/data/tokenizer_json_parts.h; the models: BPE (trainer/data/bpe_model.h) and
//   Unigram (trainer/data/unigram_model.h). encode() is
//   safe to call from several threads at once. Text that is not valid UTF-8 throws
//   ConfigError.
// - bos(): the special token the post_processor's TemplateProcessing puts before the text
//   ("single"; also inside a Sequence of processors), else tokenizer_config.json's bos_token
//   beside the file when its add_bos_token is true; -1 otherwise. eos(): the template's token
//   after the text, else tokenizer_config.json's eos_token; -1 otherwise.
// - encodeWithEnds() (the text each token stands for, as HF's offsets, for chat masks) works
//   for byte-level pre-tokenizers only (GPT-2, Llama 3, Qwen, SmolLM2 files); where the
//   normalizer changes a piece of text, the ends inside it are approximate, clamped to it.
// - vocabSize(): one past the largest id of the vocabulary and the added tokens.
// - load() throws ConfigError (exit 2) naming `key`, the file and the JSON path of what it
//   cannot use (a WordPiece or WordLevel model, an unsupported normalizer or pre-tokenizer type
//   such as Precompiled or Whitespace, a merge of tokens
//   not in the vocabulary, a regex PCRE2 does not compile), with a hint.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainer/data/bpe_model.h"
#include "trainer/data/tokenizer.h"
#include "trainer/data/tokenizer_json_parts.h"

namespace ftb {

// tokenizer_config.json's value for `key` (a string or {"content": ...}); "" when absent.
std::string tokenizerConfigToken(const nlohmann::json& cfg, const char* key);
// The JSON of the file at `path`; a discarded value (is_discarded()) when it cannot be read or
// parsed.
nlohmann::json readJsonFileOrDiscarded(const std::string& path);

class TokenizerJson : public TextTokenizer {
 public:
  // REQUIRES: `key` is the config key or flag that named `path` (for messages).
  static std::unique_ptr<TokenizerJson> load(const std::string& path, const std::string& key);

  std::vector<int32_t> encode(std::string_view text) const override;
  bool encodeWithEnds(std::string_view text, std::vector<int32_t>& ids,
                      std::vector<size_t>& ends) const override;
  int32_t vocabSize() const override { return vocab_size_; }
  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return eos_; }

 private:
  TokenizerJson() = default;
  void loadAddedTokens(const nlohmann::json& list);
  void loadBosEos(const nlohmann::json& post_processor);
  // Id of `token`: an added token's, else the vocabulary's; -1 when neither has it.
  int32_t tokenId(const std::string& token) const;
  // Appends the ids of one piece of text that holds no added token.
  void encodeText(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  // encode(), and when `ends` is not null the end of each id's text (encodeWithEnds).
  void encodeInto(std::string_view text, std::vector<int32_t>& out,
                  std::vector<size_t>* ends) const;
  // Appends the ends of the model's ids out[ends.size()...], whose text starts at byte `at`
  // and lies before byte `limit` (byte-level: one byte per character of each token).
  void modelEnds(const std::vector<int32_t>& out, size_t at, size_t limit,
                 std::vector<size_t>& ends) const;

  std::string path_;
  TextNormalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  AddedTokenSet raw_added_, normalized_added_;
  std::unordered_map<std::string, int32_t> added_ids_;
  std::unique_ptr<TokenModel> model_;
  int32_t vocab_size_ = 0, bos_ = -1, eos_ = -1;
};

}  // namespace ftb
