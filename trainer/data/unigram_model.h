// The Unigram model of a tokenizer.json ("model": {"type": "Unigram", ...}), as HF
// `tokenizers` (models/unigram/model.rs, encode_optimized) applies it to one pre-token.
//
// Contract: tokenize(word) appends the ids of the best-scoring segmentation of `word` into
// vocabulary pieces (Viterbi over byte positions; every piece of the vocabulary is a
// candidate; a character no piece starts with costs min_score - 10 as <unk>); consecutive
// unknown characters become one <unk> (HF always fuses them). With byte_fallback an unknown
// stretch becomes its <0xXX> byte tokens when all exist. Ties keep the first candidate found
// (shorter pieces first), as HF. Safe to call from several threads at once (no cache).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainer/data/token_model.h"

namespace ftb {

class UnigramModel : public TokenModel {
 public:
  // REQUIRES: vocab[i] is the piece and score of id i. unk_id: -1 = none. Throws
  // std::invalid_argument when unk_id is out of range.
  UnigramModel(std::vector<std::pair<std::string, double>> vocab, int32_t unk_id,
               bool byte_fallback);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  int32_t id(std::string_view token) const override;
  std::string_view piece(int32_t id) const override {
    return id >= 0 && size_t(id) < strings_.size() ? std::string_view(strings_[size_t(id)])
                                                   : std::string_view();
  }
  int32_t maxId() const override { return int32_t(scores_.size()) - 1; }

 private:
  // The trie's child of `node` by byte b, -1 when none.
  int32_t child(int32_t node, uint8_t b) const;
  // The pieces (by id) of the best path over `word`, unknown stretches as -1.
  void bestPath(std::string_view word, std::vector<std::pair<size_t, int32_t>>& pieces) const;

  std::deque<std::string> strings_;
  std::unordered_map<std::string_view, int32_t> ids_;
  std::vector<double> scores_;
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::vector<int32_t> node_id_{-1};             // the piece ending at a node, -1 if none
  int32_t unk_id_ = -1;
  double unk_score_ = 0;
  bool byte_fallback_ = false;
};

}  // namespace ftb
