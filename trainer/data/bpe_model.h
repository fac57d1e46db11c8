// The BPE model of a tokenizer.json ("model": {"type": "BPE", ...}), as HF `tokenizers`
// (models/bpe/model.rs) applies it to one pre-token.
//
// Contracts:
// - tokenize(word) appends the ids HF's BPE::tokenize gives for `word`: each character looked
//   up in the vocabulary (with continuing_subword_prefix on all but the first, and
//   end_of_word_suffix on the last); a character not in it becomes its <0xXX> byte tokens
//   (byte_fallback, when all of them exist), else the unk token (consecutive unks fused into
//   one with fuse_unk), else nothing. Then the merges apply lowest rank first, the leftmost
//   pair among equal ranks (a priority queue, O(n log n) in the word's characters). With
//   ignore_merges a word that is itself in the vocabulary is that one token. An empty word
//   gives nothing. Dropout is not supported (the loader refuses a non-zero dropout).
// - Results are cached per word (at most kCacheWords words of at most kCacheWordBytes bytes);
//   tokenize() is safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainer/data/token_model.h"

namespace ftb {

struct BpeOptions {
  std::string unk_token;  // "" = none
  std::string continuing_subword_prefix, end_of_word_suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
};

class BpeModel : public TokenModel {
 public:
  static constexpr size_t kCacheWords = size_t(1) << 17, kCacheWordBytes = 256;

  // REQUIRES: `merges` in rank order (rank = index). Throws std::invalid_argument when a
  // merge's part or result, or the unk token, is not in `vocab`. A pair listed twice keeps
  // its last rank, as HF's HashMap does.
  BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  int32_t id(std::string_view token) const override;
  std::string_view piece(int32_t id) const override {
    return id >= 0 && size_t(id) < pieces_.size() ? pieces_[size_t(id)] : std::string_view();
  }
  int32_t maxId() const override { return max_id_; }

 private:
  struct Symbol {
    int32_t id, prev, next, len;
  };
  struct Merge {
    int32_t rank, new_id;
  };
  const Merge* findMerge(int32_t a, int32_t b) const;
  // The word's initial symbols (characters, byte fallback, unk) into syms.
  void initialSymbols(std::string_view word, std::vector<Symbol>& syms) const;
  void mergeAll(std::vector<Symbol>& syms) const;
  void tokenizeUncached(std::string_view word, std::vector<int32_t>& ids) const;

  std::deque<std::string> strings_;  // owns the keys of vocab_ and cache_ (stable addresses)
  std::unordered_map<std::string_view, int32_t> vocab_;
  std::vector<std::string_view> pieces_;  // by id ("" for an id the vocabulary skips)
  std::unordered_map<uint64_t, Merge> merges_;  // (a << 32 | b) -> rank, merged id
  BpeOptions opt_;
  int32_t unk_id_ = -1, max_id_ = -1;
  int32_t byte_ids_[256];  // <0xXX> ids for byte_fallback, -1 when absent

  mutable std::mutex cache_mu_;
  mutable std::deque<std::string> cache_keys_;
  // word -> (offset, count) of its ids in cache_ids_
  mutable std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache_;
  mutable std::vector<int32_t> cache_ids_;
};

}  // namespace ftb
