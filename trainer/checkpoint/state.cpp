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

// Box of this tp rank's slice (`local` shape) inside the full tensor of `init`.
Box tpBox(const ParamInit& init, const std::vector<int64_t>& local, int64_t tp_rank) {
  Box b{std::vector<int64_t>(local.size(), 0), local};
  if (init.shard_dim >= 0 && local != init.full_shape)
    b.offset[init.shard_dim] = tp_rank * local[init.shard_dim];
  return b;
}

// Entries of each ZeRO unit's shard: the part of every parameter inside the shard.
std::vector<std::vector<Entry>> zeroEntries(const ZeroEngine& zero,
                                            const std::map<std::string, ParamInit>& inits,
                                            int64_t tp_rank) {
  std::vector<std::vector<Entry>> out;
  for (const UnitLayout& u : zero.unitLayouts()) {
    std::vector<Entry> es;
    const int64_t lo = u.shard_begin, hi = u.shard_begin + u.shard_numel;
    for (size_t i = 0; i < u.names.size(); ++i) {
      const std::string key = u.layer >= 0 ? "layers_" + std::to_string(u.layer) + "." + u.names[i]
                                           : u.names[i];
      const ParamInit& init = inits.at(key);
      int64_t numel = 1;
      for (int64_t d : u.shapes[i]) numel *= d;
      const int64_t b = std::max(lo, u.offsets[i]), e = std::min(hi, u.offsets[i] + numel);
      if (b >= e) continue;
      const Box tp = tpBox(init, u.shapes[i], tp_rank);
      for (const FlatBox& fb : flatRangeBoxes(u.shapes[i], b - u.offsets[i], e - u.offsets[i])) {
        Box g = fb.box;
        for (size_t d = 0; d < g.offset.size(); ++d) g.offset[d] += tp.offset[d];
        es.push_back({init.name, init.full_shape, g, u.offsets[i] + fb.flat_begin - lo});
      }
    }
    out.push_back(std::move(es));
  }
  return out;
}

std::vector<std::vector<Entry>> plainEntries(TransformerImpl& model, int64_t tp_rank) {
  std::map<std::string, ParamInit> inits = model.paramInits();
  std::vector<std::vector<Entry>> out;
  for (const auto& np : model.named_parameters()) {
    const ParamInit& init = inits.at(np.key());
    std::vector<int64_t> local = np.value().sizes().vec();
    out.push_back({{init.name, init.full_shape, tpBox(init, local, tp_rank), 0}});
  }
  return out;
}

torch::Tensor viewOf(const torch::Tensor& t, const Entry& e) {
  return t.view(-1).narrow(0, e.flat_begin, e.box.numel()).view(e.box.size);
}

}  // namespace

std::string dtypeName(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return "float32";
    case torch::kFloat64: return "float64";
    case torch::kInt64: return "int64";
    case torch::kUInt8: return "uint8";
    default: return std::string("unsupported:") + c10::toString(t);
  }
}

std::vector<StatePiece> collectState(TransformerImpl& model, ZeroEngine* zero, Optimizer& opt,
                                     int64_t tp_rank, int rank) {
  std::vector<torch::Tensor> params = zero ? zero->masterShards() : model.parameters();
  std::vector<std::vector<Entry>> entries =
      zero ? zeroEntries(*zero, model.paramInits(), tp_rank) : plainEntries(model, tp_rank);
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
