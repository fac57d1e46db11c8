#include "trainer/data/unigram_model.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "trainer/data/pcre2_regex.h"

namespace ftb {
namespace {

constexpr double kUnkPenalty = 10.0;  // HF's K_UNK_PENALTY
constexpr int32_t kUnknown = -2;      // a path node for an unknown character when no unk id

}  // namespace

UnigramModel::UnigramModel(std::vector<std::pair<std::string, double>> vocab, int32_t unk_id,
                           bool byte_fallback)
    : unk_id_(unk_id), byte_fallback_(byte_fallback) {
  if (unk_id < -1 || unk_id >= int32_t(vocab.size()))
    throw std::invalid_argument("model.unk_id: " + std::to_string(unk_id) +
                                " is not an id of model.vocab (" + std::to_string(vocab.size()) +
                                " pieces)");
  double min_score = 0;
  scores_.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    strings_.push_back(std::move(vocab[i].first));
    ids_[strings_.back()] = int32_t(i);  // a piece listed twice keeps its last id, as HF
    scores_.push_back(vocab[i].second);
    min_score = std::min(min_score, vocab[i].second);
  }
  unk_score_ = min_score - kUnkPenalty;
  for (const std::string& piece : strings_) {
    int32_t node = 0;
    for (unsigned char b : piece) {
      int32_t next = child(node, b);
      if (next < 0) {
        next = int32_t(node_id_.size());
        node_id_.push_back(-1);
        edges_[uint64_t(node) << 8 | b] = next;
      }
      node = next;
    }
    node_id_[size_t(node)] = ids_.at(piece);
  }
}

int32_t UnigramModel::id(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

int32_t UnigramModel::child(int32_t node, uint8_t b) const {
  auto it = edges_.find(uint64_t(node) << 8 | b);
  return it == edges_.end() ? -1 : it->second;
}

void UnigramModel::bestPath(std::string_view word,
                            std::vector<std::pair<size_t, int32_t>>& pieces) const {
  struct Node {
    double score = 0;
    int64_t start = -1;  // -1: no path ends here yet
    int32_t id = -1;
  };
  const size_t n = word.size();
  std::vector<Node> best(n + 1);
  for (size_t s = 0; s < n;) {
    const double here = best[s].score;
    const size_t mblen = utf8Len(uint8_t(word[s]));
    bool single = false;  // a piece covers exactly the character at s
    auto offer = [&](size_t end, double score, int32_t id) {
      Node& t = best[end];
      if (t.start < 0 || score > t.score) t = {score, int64_t(s), id};
    };
    for (size_t k = s, node = 0; k < n; ++k) {
      const int32_t next = child(int32_t(node), uint8_t(word[k]));
      if (next < 0) break;
      node = size_t(next);
      const int32_t id = node_id_[node];
      if (id < 0) continue;
      offer(k + 1, scores_[size_t(id)] + here, id);
      single = single || k + 1 - s == mblen;
    }
    if (!single) offer(s + mblen, unk_score_ + here, unk_id_ >= 0 ? unk_id_ : kUnknown);
    s += mblen;
  }
  for (size_t e = n; e > 0; e = size_t(best[e].start)) pieces.emplace_back(e, best[e].id);
  std::reverse(pieces.begin(), pieces.end());  // (end, id) in text order
}

void UnigramModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  std::vector<std::pair<size_t, int32_t>> path;
  bestPath(word, path);
  size_t start = 0;
  for (size_t i = 0; i < path.size(); ++i) {
    // Consecutive unk nodes are one token (HF fuses them), then looked up as a string.
    const bool unk = unk_id_ >= 0 && path[i].second == unk_id_;
    if (unk && i + 1 < path.size() && path[i + 1].second == unk_id_) continue;
    const std::string_view piece = word.substr(start, path[i].first - start);
    start = path[i].first;
    if (const int32_t known = id(piece); known >= 0) {
      out.push_back(known);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      char name[8];
      for (unsigned char b : piece) {
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        if (const int32_t bid = id(name); bid >= 0)
          bytes.push_back(bid);
        else
          break;
      }
      if (bytes.size() == piece.size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_id_ < 0)
      throw std::runtime_error("the Unigram model has no unk_id for a piece not in its vocabulary");
    out.push_back(unk_id_);
  }
}

}  // namespace ftb
