#include "trainer/hf/pretrained.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/hf_config.h"
#include "common/input_path.h"
#include "common/json_input.h"
#include "common/log.h"
#include "common/proc_memory.h"
#include "trainer/metrics/perf.h"

namespace ftb::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what,
                       const std::string& hint = "") {
  throw ConfigError("model.from_pretrained", where, what, hint);
}

bool ignoredBuffer(const std::string& name) {
  const std::string suffix = ".rotary_emb.inv_freq";  // recomputed, never trained
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The shard file names of an index.json, validated: tensor -> file.
std::map<std::string, std::string> readIndex(const std::string& dir) {
  const std::string path = (fs::path(dir) / kIndexFile).string();
  const json j = parseJsonInput(readInputFile(path, "safetensors index", size_t{64} << 20),
                                "model.from_pretrained", path);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(path, "expected an object with a \"weight_map\" object {tensor: file}");
  std::map<std::string, std::string> m;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos ||
        file.get<std::string>().size() > 255)  // NAME_MAX
      fail(path, "tensor '" + shortText(name) +
                     "': expected a file name in this directory, found " + shortJson(file));
    m[name] = file.get<std::string>();
  }
  return m;
}

}  // namespace

std::vector<HfParam> hfParams(const ModelArgs& a) {
  const int64_t D = a.dim, hd = a.headDim(), F = a.ffn_dim;
  std::vector<HfParam> v{{"model.embed_tokens.weight", "tok_embeddings.weight", {a.vocab_size, D}}};
  for (int64_t l = 0; l < a.n_layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".",
                      t = "layers." + std::to_string(l) + ".";
    v.push_back({h + "input_layernorm.weight", t + "attention_norm.weight", {D}});
    v.push_back({h + "self_attn.q_proj.weight", t + "attention.wq.weight", {a.n_heads * hd, D}});
    v.push_back({h + "self_attn.k_proj.weight", t + "attention.wk.weight", {a.n_kv_heads * hd, D}});
    v.push_back({h + "self_attn.v_proj.weight", t + "attention.wv.weight", {a.n_kv_heads * hd, D}});
    v.push_back({h + "self_attn.o_proj.weight", t + "attention.wo.weight", {D, a.n_heads * hd}});
    v.push_back({h + "post_attention_layernorm.weight", t + "ffn_norm.weight", {D}});
    v.push_back({h + "mlp.gate_proj.weight", t + "feed_forward.w1.weight", {F, D}});
    v.push_back({h + "mlp.down_proj.weight", t + "feed_forward.w2.weight", {D, F}});
    v.push_back({h + "mlp.up_proj.weight", t + "feed_forward.w3.weight", {F, D}});
  }
  v.push_back({"model.norm.weight", "norm.weight", {D}});
  if (!a.tie_embeddings) v.push_back({"lm_head.weight", "output.weight", {a.vocab_size, D}});
  return v;
}

int64_t hfParamCount(const ModelArgs& a) {
  constexpr int64_t kPerLayer = 9, kMax = std::numeric_limits<int64_t>::max();
  if (a.n_layers < 0 || a.n_layers > (kMax - 3) / kPerLayer) return kMax;
  return kPerLayer * a.n_layers + 2 + (a.tie_embeddings ? 0 : 1);
}

int64_t layersNamed(const std::vector<std::string>& names) {
  int64_t layers = 0;
  for (const std::string& n : names)
    for (size_t at = n.find("layers."); at != std::string::npos; at = n.find("layers.", at + 1)) {
      const size_t b = at + 7, e = n.find_first_not_of("0123456789", b);
      if (e == b || e == std::string::npos || n[e] != '.' || e - b > 18) continue;
      layers = std::max<int64_t>(layers, std::stoll(n.substr(b, e - b)) + 1);
    }
  return layers;
}

PretrainedModel PretrainedModel::open(const std::string& dir, const ModelArgs& a) {
  PretrainedModel pm;
  pm.dir_ = dir;
  const auto present = [&dir](const char* name, const std::string& expected) {
    return inputPathKind((fs::path(dir) / name).string(), "model.from_pretrained", expected) !=
           PathKind::kMissing;
  };
  const bool sharded = present(kIndexFile, "the safetensors index (a JSON file)");
  std::map<std::string, std::string> index;
  std::vector<std::string> names{kSingleFile};
  if (sharded) {
    index = readIndex(dir);
    names.clear();
    for (const auto& [t, f] : index)
      if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
    std::sort(names.begin(), names.end());
  } else if (!present(kSingleFile, "the model's weights (a safetensors file)")) {
    fail(dir, std::string("no ") + kSingleFile + " and no " + kIndexFile,
         "a Hugging Face model directory holds config.json plus its safetensors weights");
  }
  std::map<std::string, const SafetensorsFile*> holder;  // HF name -> file
  for (const std::string& n : names) {
    pm.files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / n).string()));
    const SafetensorsFile* f = pm.files_.back().get();
    for (const auto& [t, st] : f->tensors()) {
      if (ignoredBuffer(t)) continue;
      if (holder.count(t))
        fail(f->path(), "tensor '" + shortText(t) + "' is also in " + holder[t]->path());
      if (sharded && index.count(t) && index[t] != n)
        fail(f->path(), "tensor '" + shortText(t) + "' is here, but " + kIndexFile +
                            " places it in " + shortText(index[t]));
      holder[t] = f;
    }
  }
  for (const auto& [t, f] : index)
    if (!holder.count(t))
      fail((fs::path(dir) / shortText(f)).string(),
           "tensor '" + shortText(t) + "' listed in " + kIndexFile + " is missing");
  pm.checkTensors(a, holder);
  return pm;
}

}  // namespace ftb::hf

namespace ftb::hf {

void PretrainedModel::checkTensors(const ModelArgs& a,
                                   const std::map<std::string, const SafetensorsFile*>& holder) {
  std::vector<std::string> names;
  for (const auto& [t, f] : holder) names.push_back(t);
  if (const int64_t held = layersNamed(names); a.n_layers > held)  // before a per-layer list
    fail((fs::path(dir_) / kHfConfigName).string(),
         "num_hidden_layers is " + std::to_string(a.n_layers) +
             ", but the safetensors files hold " +
             (held == 0 ? std::string("no layer") : "layers 0.." + std::to_string(held - 1)),
         "the weights must match config.json: correct num_hidden_layers");
  const std::vector<HfParam> params = hfParams(a);
  std::set<std::string> expected;
  for (const HfParam& p : params) {
    expected.insert(p.hf_name);
    auto it = holder.find(p.hf_name);
    if (it == holder.end())
      fail(dir_,
           "tensor '" + p.hf_name + "' (shape " + shapeString(p.shape) +
               ") is missing from the safetensors files",
           "the weights must match config.json (" + std::to_string(a.n_layers) +
               " layers, tie_word_embeddings=" + (a.tie_embeddings ? "true" : "false") + ")");
    const StTensor& st = it->second->tensors().at(p.hf_name);
    if (st.shape != p.shape)
      fail(it->second->path(), "tensor '" + p.hf_name + "': shape " + shapeString(st.shape) +
                                   ", expected " + shapeString(p.shape) + " from config.json");
    by_name_[p.name] = {it->second, p};
  }
  for (const auto& [t, f] : holder)
    if (!expected.count(t))
      fail(f->path(),
           "unexpected tensor '" + shortText(t) + "': not a parameter of this " +
               std::to_string(a.n_layers) +
               "-layer Llama with tie_word_embeddings=" + (a.tie_embeddings ? "true" : "false"),
           "ftbench loads exactly the parameters of LlamaForCausalLM / MistralForCausalLM");
}

PretrainedModel::LoadStats PretrainedModel::load(std::vector<ckpt::StatePiece>& pieces) const {
  torch::NoGradGuard no_grad;
  LoadStats st{0, currentRssBytes()};
  for (ckpt::StatePiece& p : pieces) {
    if (p.name.rfind("model.", 0) != 0) continue;
    auto found = by_name_.find(p.name.substr(6));
    if (found == by_name_.end()) {  // LoRA adapters: not in an HF model (lora.from_pretrained)
      TORCH_CHECK(p.name.find(".lora_") != std::string::npos, "internal: ", p.name,
                  " is not a parameter of the HF model");
      continue;
    }
    const auto& [file, hp] = found->second;
    TORCH_CHECK(p.global_shape == hp.shape, "internal: ", p.name, " global shape differs from ",
                hp.hf_name);
    torch::Tensor src = file->view(hp.hf_name);
    for (size_t d = 0; d < p.box.offset.size(); ++d)
      src = src.narrow(int64_t(d), p.box.offset[d], p.box.size[d]);
    if (p.store)
      p.store(src);  // an NF4 base matrix, quantized as it is read
    else
      p.view.copy_(src);  // converts bf16 / fp16 to the master dtype
    st.bytes += src.numel() * src.element_size();
    st.peak_rss = std::max(st.peak_rss, currentRssBytes());  // the file's pages still resident
    file->release(hp.hf_name);
  }
  return st;
}

std::string PretrainedModel::firstNonFinite(int64_t share, int64_t shares) const {
  int64_t index = 0;
  for (const auto& [name, held] : by_name_) {
    if (index++ % shares != share) continue;
    const auto& [file, hp] = held;
    if (std::string bad = file->nonFinite(hp.hf_name); !bad.empty()) return bad;
  }
  return "";
}

void loadPretrained(const TrainConfig& tc, const Mesh& mesh, GradSync& sync) {
  const double t0 = nowSeconds();
  const int64_t rss0 = currentRssBytes();
  std::vector<ckpt::StatePiece> pieces = ckpt::collectModelState(sync, mesh.tp_rank, mesh.tp);
  const PretrainedModel::LoadStats st =
      PretrainedModel::open(tc.from_pretrained, tc.model).load(pieces);
  sync.paramsLoaded();
  FTB_INFO("loaded " << tc.from_pretrained << ": " << st.bytes << " bytes read by this rank in "
                     << nowSeconds() - t0 << " s; RSS " << (rss0 >> 20) << " MiB before loading, "
                     << (st.peak_rss >> 20) << " MiB peak while loading");
}

namespace {

void checkOnThisRank(const TrainConfig& tc, const DistEnv& env) {
  const int64_t window = hfSlidingWindow(tc.from_pretrained);
  if (window > 0 && window < tc.data.seq_len)
    throw ConfigError("data.seq_len", tc.from_pretrained + "/" + kHfConfigName,
                      "sliding_window " + std::to_string(window) +
                          " is shorter than data.seq_len " + std::to_string(tc.data.seq_len) +
                          "; ftbench attends over the whole sequence",
                      "set data.seq_len <= " + std::to_string(window));
  const PretrainedModel pm = PretrainedModel::open(tc.from_pretrained, tc.model);
  // A NaN weight would train as "diverged, lower the learning rate": refused here instead.
  if (std::string bad = pm.firstNonFinite(env.rank, env.world_size); !bad.empty())
    throw ConfigError("model.from_pretrained", tc.from_pretrained, bad,
                      "the model's weights are damaged: download or convert them again");
}

}  // namespace

void checkPretrained(const TrainConfig& tc, Distributed& dist) {
  if (tc.from_pretrained.empty()) return;
  std::string problem;
  try {
    checkOnThisRank(tc, dist.env);
  } catch (const ConfigError& e) {
    problem = e.what();
  }
  for (const std::string& p : dist.allGatherString("hf/check", problem))
    if (!p.empty()) throw ConfigError(p);
}

}  // namespace ftb::hf
