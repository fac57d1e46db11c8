#include "trainer/checkpoint/state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>

namespace ftb::ckpt {
namespace {

// One part of an optimizer parameter (a full tensor or a flat ZeRO shard) that
// belongs to one global tensor.
struct Entry {
  std::string name;  // torchtitan name
  std::vector<int64_t> global_shape;
  Box box;
  int64_t flat_begin = 0;  // into the optimizer parameter, flattened
};

// Entries of each optimizer parameter: the part of every model parameter inside this
// rank's flat range, as boxes of the global (all tp ranks) tensor.
std::vector<std::vector<Entry>> entriesOf(const std::vector<FlatLayout>& layouts, int64_t tp_rank,
                                          int64_t tp) {
  std::vector<std::vector<Entry>> out;
  for (const FlatLayout& u : layouts) {
    std::vector<Entry> es;
    const int64_t lo = u.begin, hi = u.begin + u.numel;
    for (size_t i = 0; i < u.params.size(); ++i) {
      const ModelParam& p = u.params[i];
      std::vector<int64_t> local = u.shapes[i], global = local;
      std::vector<int64_t> tp_off(local.size(), 0);
      if (p.shard_dim >= 0 && tp > 1) {
        global[p.shard_dim] *= tp;
        tp_off[p.shard_dim] = tp_rank * local[p.shard_dim];
      }
      int64_t numel = 1;
      for (int64_t d : local) numel *= d;
      const int64_t b = std::max(lo, u.offsets[i]), e = std::min(hi, u.offsets[i] + numel);
      if (b >= e) continue;
      for (const FlatBox& fb : flatRangeBoxes(local, b - u.offsets[i], e - u.offsets[i])) {
        Box g = fb.box;
        for (size_t d = 0; d < g.offset.size(); ++d) g.offset[d] += tp_off[d];
        es.push_back({p.name, global, g, u.offsets[i] + fb.flat_begin - lo});
      }
    }
    out.push_back(std::move(es));
  }
  return out;
}

torch::Tensor viewOf(const torch::Tensor& t, const Entry& e) {
  return t.view(-1).narrow(0, e.flat_begin, e.box.numel()).view(e.box.size);
}

}  // namespace

std::string dtypeName(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
      return "float32";
    case torch::kFloat64:
      return "float64";
    case torch::kBFloat16:
      return "bfloat16";
    case torch::kInt64:
      return "int64";
    case torch::kUInt8:
      return "uint8";
    default:
      return std::string("unsupported:") + c10::toString(t);
  }
}

std::vector<StatePiece> collectModelState(const GradSync& sync, int64_t tp_rank, int64_t tp) {
  std::vector<StatePiece> out;
  auto add = [&](const std::vector<torch::Tensor>& params, const std::vector<FlatLayout>& lay) {
    std::vector<std::vector<Entry>> entries = entriesOf(lay, tp_rank, tp);
    for (size_t i = 0; i < params.size(); ++i) {
      if (lay[i].params.size() == 1 && lay[i].params[0].nf4.defined()) {  // quantized on store
        TORCH_CHECK(tp == 1, "internal: an NF4 base under tensor parallelism");
        Nf4Tensor q = lay[i].params[0].nf4;  // shares the model's storage
        const Box whole{std::vector<int64_t>(q.shape.size(), 0), q.shape};
        out.push_back({"model." + lay[i].params[0].name, q.shape, whole, torch::Tensor(), false,
                       [q](const torch::Tensor& src) mutable { nf4Requantize(q, src); }});
        continue;
      }
      for (const Entry& e : entries[i])
        out.push_back({"model." + e.name, e.global_shape, e.box, viewOf(params[i].data(), e)});
    }
  };
  add(sync.optimizerParams(), sync.optimizerLayout());
  add(sync.frozenParams(), sync.frozenLayout());
  return out;
}

std::vector<StatePiece> collectState(const GradSync& sync, Optimizer& opt, int64_t tp_rank,
                                     int64_t tp, int rank) {
  std::vector<torch::Tensor> params = sync.optimizerParams();
  std::vector<std::vector<Entry>> entries = entriesOf(sync.optimizerLayout(), tp_rank, tp);
  std::vector<StatePiece> out;
  for (size_t i = 0; i < params.size(); ++i) {
    for (const Entry& e : entries[i])
      out.push_back({"model." + e.name, e.global_shape, e.box, viewOf(params[i].data(), e)});
    for (const auto& [sname, st] : opt.state(i)) {
      if (st.numel() == params[i].numel()) {
        for (const Entry& e : entries[i])
          out.push_back({"optim." + sname + "." + e.name, e.global_shape, e.box, viewOf(st, e)});
      } else {  // factored state (Adafactor): only for unsharded parameters
        TORCH_CHECK(entries[i].size() == 1 && entries[i][0].box.size == entries[i][0].global_shape,
                    "factored optimizer state of a sharded parameter");
        std::vector<int64_t> shape = st.sizes().vec();
        out.push_back({"optim." + sname + "." + entries[i][0].name, shape,
                       Box{std::vector<int64_t>(shape.size(), 0), shape}, st});
      }
    }
  }
  // The generator state is a byte tensor we own: copy into it, then set_state on load.
  torch::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  char name[64];
  std::snprintf(name, sizeof name, "rng.torch_cpu.rank_%05d", rank);
  out.push_back({name, {rng.numel()}, Box{{0}, {rng.numel()}}, rng, true});
  return out;
}

}  // namespace ftb::ckpt
