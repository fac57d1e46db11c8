#include "trainer/data/bpe_model.h"

#include <cstdio>
#include <queue>
#include <stdexcept>

#include "trainer/data/pcre2_regex.h"

namespace ftb {

BpeModel::BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt)
    : opt_(std::move(opt)) {
  vocab_.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    strings_.push_back(std::move(token));
    vocab_[strings_.back()] = id;
    if (id > max_id_) max_id_ = id;
  }
  pieces_.resize(size_t(max_id_ + 1));
  for (const auto& [token, id] : vocab_) pieces_[size_t(id)] = token;
  auto need = [&](const std::string& t, const std::string& what) {
    const int32_t i = id(t);
    if (i < 0) throw std::invalid_argument(what + " \"" + t + "\" is not in model.vocab");
    return i;
  };
  merges_.reserve(merges.size());
  const size_t prefix = opt_.continuing_subword_prefix.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const std::string what = "model.merges[" + std::to_string(rank) + "]";
    const int32_t ia = need(a, what + " part"), ib = need(b, what + " part");
    // With a continuing_subword_prefix, b carries it and the merged token does not repeat it.
    const std::string merged =
        a + (prefix > 0 && b.compare(0, prefix, opt_.continuing_subword_prefix) == 0
                 ? b.substr(prefix)
                 : b);
    merges_[uint64_t(uint32_t(ia)) << 32 | uint32_t(ib)] = {int32_t(rank), need(merged, what)};
  }
  if (!opt_.unk_token.empty()) unk_id_ = need(opt_.unk_token, "model.unk_token");
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[b] = id(name);
  }
}

int32_t BpeModel::id(std::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const BpeModel::Merge* BpeModel::findMerge(int32_t a, int32_t b) const {
  auto it = merges_.find(uint64_t(uint32_t(a)) << 32 | uint32_t(b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::initialSymbols(std::string_view word, std::vector<Symbol>& syms) const {
  const bool affixes = !opt_.continuing_subword_prefix.empty() || !opt_.end_of_word_suffix.empty();
  int32_t unk_len = 0;  // bytes of the pending unk symbol, 0 = none
  auto add = [&](int32_t id, int32_t len) {
    const int32_t at = int32_t(syms.size());
    syms.push_back({id, at - 1, -1, len});
    if (at > 0) syms[size_t(at) - 1].next = at;
  };
  std::string affixed;
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8Len(static_cast<unsigned char>(word[i]));
    std::string_view ch = word.substr(i, len);
    if (affixes) {
      affixed.assign(i > 0 ? opt_.continuing_subword_prefix : "").append(ch);
      if (i + len >= word.size()) affixed += opt_.end_of_word_suffix;
      ch = affixed;
    }
    i += len;
    if (const int32_t id = this->id(ch); id >= 0) {
      if (unk_len > 0) add(unk_id_, unk_len), unk_len = 0;
      add(id, int32_t(len));
      continue;
    }
    if (opt_.byte_fallback) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) add(byte_ids_[b], 1);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unk token: the character is dropped, as in HF
    if (unk_len > 0 && !opt_.fuse_unk) add(unk_id_, unk_len), unk_len = 0;
    unk_len += int32_t(len);
  }
  if (unk_len > 0) add(unk_id_, unk_len);
}

void BpeModel::mergeAll(std::vector<Symbol>& syms) const {
  struct Cand {
    int32_t rank, pos, new_id;
  };
  // Lowest rank first; among equal ranks the leftmost position (HF's Merge ordering).
  auto later = [](const Cand& x, const Cand& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  std::priority_queue<Cand, std::vector<Cand>, decltype(later)> queue(later);
  for (size_t i = 0; i + 1 < syms.size(); ++i)
    if (const Merge* m = findMerge(syms[i].id, syms[i + 1].id))
      queue.push({m->rank, int32_t(i), m->new_id});
  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    Symbol& cur = syms[size_t(top.pos)];
    if (cur.len == 0 || cur.next < 0) continue;
    Symbol& right = syms[size_t(cur.next)];
    const Merge* still = findMerge(cur.id, right.id);
    if (still == nullptr || still->new_id != top.new_id) continue;  // an expired entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    right.len = 0;
    if (cur.next >= 0) syms[size_t(cur.next)].prev = top.pos;
    if (cur.prev >= 0)
      if (const Merge* m = findMerge(syms[size_t(cur.prev)].id, cur.id))
        queue.push({m->rank, cur.prev, m->new_id});
    if (cur.next >= 0)
      if (const Merge* m = findMerge(cur.id, syms[size_t(cur.next)].id))
        queue.push({m->rank, top.pos, m->new_id});
  }
}

void BpeModel::tokenizeUncached(std::string_view word, std::vector<int32_t>& ids) const {
  if (opt_.ignore_merges)
    if (const int32_t whole = id(word); whole >= 0) {
      ids.push_back(whole);
      return;
    }
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  initialSymbols(word, syms);
  mergeAll(syms);
  for (const Symbol& s : syms)
    if (s.len > 0) ids.push_back(s.id);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      const int32_t* ids = cache_ids_.data() + it->second.first;
      out.insert(out.end(), ids, ids + it->second.second);
      return;
    }
  }
  std::vector<int32_t> ids;
  tokenizeUncached(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (word.size() > kCacheWordBytes || cache_.size() >= kCacheWords || cache_.count(word) > 0)
    return;
  if (cache_.empty()) cache_.reserve(kCacheWords);
  cache_keys_.emplace_back(word);
  cache_.emplace(cache_keys_.back(),
                 std::make_pair(uint32_t(cache_ids_.size()), uint32_t(ids.size())));
  cache_ids_.insert(cache_ids_.end(), ids.begin(), ids.end());
}

}  // namespace ftb
