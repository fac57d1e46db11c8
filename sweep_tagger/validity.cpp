#include "sweep_tagger/validity.h"

#include <optional>

namespace ftb {
namespace {

std::optional<int64_t> intKey(const Config& cfg, const std::string& key) {
  auto it = cfg.entries().find(key);
  if (it == cfg.entries().end()) return std::nullopt;
  if (const auto* v = std::get_if<int64_t>(&it->second.value)) return *v;
  return std::nullopt;
}

std::string par(const char* name, int64_t v) {
  return std::string(name) + "(" + std::to_string(v) + ")";
}

}  // namespace

std::vector<std::string> pointProblems(const Config& cfg, int world_size) {
  std::vector<std::string> out;
  if (world_size < 1) {
    out.push_back("world_size(" + std::to_string(world_size) + ") must be >= 1");
    return out;
  }
  const int64_t ws = world_size;
  auto tp = intKey(cfg, "parallel.tp"), shard = intKey(cfg, "parallel.dp_shard"),
       rep = intKey(cfg, "parallel.dp_replicate");
  bool layout_ok = true;
  if (tp && *tp < 1) out.push_back(par("tp", *tp) + " must be >= 1"), layout_ok = false;
  if (shard && *shard < 1)
    out.push_back(par("dp_shard", *shard) + " must be >= 1"), layout_ok = false;
  if (rep && *rep < 0)
    out.push_back(par("dp_replicate", *rep) + " must be >= 0"), layout_ok = false;
  if (layout_ok) {
    int64_t t = tp.value_or(1), s = shard.value_or(1), r = rep.value_or(0);
    if (r == 0 && ws % (s * t) != 0)
      out.push_back(par("dp_shard", s) + " * " + par("tp", t) + " does not divide " +
                    par("world_size", ws));
    if (r > 0 && r * s * t != ws)
      out.push_back(par("dp_replicate", r) + " * " + par("dp_shard", s) + " * " + par("tp", t) +
                    " = " + std::to_string(r * s * t) + " does not equal " + par("world_size", ws));
    for (const char* heads : {"n_heads", "n_kv_heads"}) {
      auto h = intKey(cfg, std::string("model.") + heads);
      if (h && *h % t != 0) out.push_back(par("tp", t) + " does not divide " + par(heads, *h));
    }
  }
  auto seq = intKey(cfg, "data.seq_len"), max_seq = intKey(cfg, "model.max_seq_len");
  if (seq && max_seq && *seq > *max_seq)
    out.push_back(par("seq_len", *seq) + " exceeds " + par("model.max_seq_len", *max_seq));
  auto mbs = intKey(cfg, "training.micro_batch_size");
  if (mbs && *mbs < 1) out.push_back(par("micro_batch_size", *mbs) + " must be >= 1");
  return out;
}

}  // namespace ftb
