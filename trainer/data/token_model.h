// The model stage of a tokenizer.json: one pre-token in, ids out (BpeModel, UnigramModel).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ftb {

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of `word` (a pre-token, valid UTF-8) to out; nothing for an empty word.
  // Safe to call from several threads at once.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  // Id of `token` in the vocabulary, -1 when absent.
  virtual int32_t id(std::string_view token) const = 0;
  // The vocabulary string of `id`; "" when the vocabulary has no such id.
  virtual std::string_view piece(int32_t id) const = 0;
  virtual int32_t maxId() const = 0;
};

}  // namespace ftb
