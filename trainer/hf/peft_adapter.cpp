#include "trainer/hf/peft_adapter.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/input_path.h"
#include "common/json_input.h"
#include "common/log.h"
#include "trainer/hf/pretrained.h"

namespace ftb::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kKey = "lora.from_pretrained";
constexpr const char* kPeftPrefix = "base_model.model.model.";

[[noreturn]] void failAdapter(const std::string& where, const std::string& what,
                       const std::string& hint = "") {
  throw ConfigError(kKey, where, what, hint);
}

std::string joined(const std::set<std::string>& s) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : ", ") + x;
  return "[" + out + "]";
}

std::set<std::string> hfModules(const std::vector<std::string>& keys) {
  std::set<std::string> m;
  for (const std::string& k : keys) {
    const std::string hf = loraTargetByKey(k)->hf;
    m.insert(hf.substr(hf.find('.') + 1));  // "self_attn.q_proj" -> "q_proj"
  }
  return m;
}

json number(double v) {
  return v == std::floor(v) && std::abs(v) < 1e15 ? json(int64_t(v)) : json(v);
}

json adapterConfigJson(const LoraConfig& s, const std::string& base_model) {
  const std::set<std::string> mods = hfModules(s.targets);
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"r", s.rank},
          {"lora_alpha", number(s.alpha)},
          {"lora_dropout", s.dropout},
          {"target_modules", std::vector<std::string>(mods.begin(), mods.end())},
          {"bias", "none"},
          {"fan_in_fan_out", false},
          {"use_rslora", false},
          {"use_dora", false},
          {"init_lora_weights", true},
          {"inference_mode", true},
          {"modules_to_save", nullptr},
          {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},
          {"rank_pattern", json::object()},
          {"alpha_pattern", json::object()},
          {"revision", nullptr},
          {"base_model_name_or_path", base_model.empty() ? json() : json(base_model)}};
}

}  // namespace

const std::vector<LoraTarget>& loraTargets() {
  static const std::vector<LoraTarget> t{
      {"q", "attention.wq", "self_attn.q_proj"},    {"k", "attention.wk", "self_attn.k_proj"},
      {"v", "attention.wv", "self_attn.v_proj"},    {"o", "attention.wo", "self_attn.o_proj"},
      {"gate", "feed_forward.w1", "mlp.gate_proj"}, {"down", "feed_forward.w2", "mlp.down_proj"},
      {"up", "feed_forward.w3", "mlp.up_proj"}};
  return t;
}

const LoraTarget* loraTargetByKey(const std::string& key) {
  for (const LoraTarget& t : loraTargets())
    if (key == t.key) return &t;
  return nullptr;
}

std::vector<AdapterParam> adapterParams(const ModelArgs& a, const LoraConfig& lora) {
  const int64_t rank = lora.rank;
  std::vector<AdapterParam> v;
  for (int64_t l = 0; l < a.n_layers; ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    for (const LoraTarget& t : loraTargets()) {
      if (!lora.hasTarget(t.key)) continue;
      const LoraTargetShape w = loraTargetShape(a, t.key);
      for (const char* ab : {"lora_A", "lora_B"}) {
        const std::string tail = std::string(".") + ab + ".weight";
        v.push_back(
            {kPeftPrefix + layer + t.hf + tail, layer + t.module + tail,
             ab[5] == 'A' ? std::vector<int64_t>{rank, w.in} : std::vector<int64_t>{w.out, rank}});
      }
    }
  }
  return v;
}

void writeAdapter(const std::string& out, const ModelArgs& a, const LoraConfig& lora,
                  const std::string& base_model, torch::ScalarType dtype,
                  const std::function<torch::Tensor(const AdapterParam&)>& tensor) {
  if (fs::exists(out))
    throw ConfigError("--out", "command line", out + " already exists",
                      "export into a new directory (nothing is overwritten)");
  const std::vector<AdapterParam> params = adapterParams(a, lora);
  const fs::path tmp = out + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  writeFileDurably((tmp / kAdapterConfigName).string(),
                   adapterConfigJson(lora, base_model).dump(2) + "\n");
  std::vector<StTensor> decl;
  for (const AdapterParam& p : params)
    decl.push_back({p.peft_name, stDtypeOf(dtype), p.shape, 0, 0});
  SafetensorsWriter w((tmp / kAdapterWeightsName).string(), decl);
  for (const AdapterParam& p : params) w.write(tensor(p).to(dtype));
  w.close();
  fsyncPath(tmp.string());
  renameDurably(tmp.string(), out);
}

}  // namespace ftb::hf

// ---------------------------------------------------------------- reading

namespace ftb::hf {
namespace {

json readConfig(const std::string& dir) {
  const std::string path = (fs::path(dir) / kAdapterConfigName).string();
  if (inputPathKind(path, kKey, "the adapter's config (a JSON file)") == PathKind::kMissing)
    failAdapter(dir, std::string("no ") + kAdapterConfigName,
         "a PEFT adapter directory (peft's save_pretrained) holds adapter_config.json and "
         "adapter_model.safetensors");
  const json j = parseJsonInput(readInputFile(path, "PEFT adapter config"), kKey, path);
  if (!j.is_object()) failAdapter(path, "expected a JSON object, found " + std::string(j.type_name()));
  return j;
}

// A field that must hold `want` (or be absent / null when `absent_ok`).
void requireField(const json& j, const std::string& path, const char* field, const json& want,
                  bool absent_ok, const std::string& why) {
  if (!j.contains(field) || j[field].is_null()) {
    if (absent_ok) return;
    failAdapter(path, std::string("field \"") + field + "\" is missing, expected " + want.dump());
  }
  if (j[field] != want)
    failAdapter(path, std::string("field \"") + field + "\" is " + shortJson(j[field]) + ", expected " +
                   want.dump() + ": " + why);
}

// Options ftbench does not compute must be off (absent, null, false, empty).
void requireOff(const json& j, const std::string& path) {
  for (const char* f : {"use_rslora", "use_dora", "fan_in_fan_out", "lora_bias", "use_qalora"})
    requireField(j, path, f, false, true, "ftbench computes plain LoRA, y = Wx + (alpha/r) B A x");
  requireField(j, path, "bias", "none", true, "ftbench trains no bias");
  for (const char* f :
       {"modules_to_save", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern",
        "exclude_modules", "target_parameters", "layer_replication", "trainable_token_indices"}) {
    if (!j.contains(f) || j[f].is_null() || (j[f].is_object() && j[f].empty()) ||
        (j[f].is_array() && j[f].empty()))
      continue;
    failAdapter(path,
         std::string("field \"") + f + "\" is " + shortJson(j[f]) +
             ": not supported (ftbench adapts every layer with one rank and alpha)",
         "an adapter saved from get_peft_model(model, LoraConfig(r, lora_alpha, target_modules))");
  }
}

void checkConfig(const json& j, const std::string& path, const LoraConfig& l) {
  requireField(j, path, "peft_type", "LORA", false, "ftbench loads LoRA adapters");
  if (j.contains("task_type") && !j["task_type"].is_null() && j["task_type"] != "CAUSAL_LM")
    failAdapter(path, "field \"task_type\" is " + shortJson(j["task_type"]) + ", expected \"CAUSAL_LM\"");
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() != l.rank)
    failAdapter(path,
         "field \"r\" is " + (j.contains("r") ? shortJson(j["r"]) : std::string("missing")) +
             ", lora.rank is " + std::to_string(l.rank),
         "set lora.rank to the adapter's r");
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number() ||
      j["lora_alpha"].get<double>() != l.alpha)
    failAdapter(path,
         "field \"lora_alpha\" is " +
             (j.contains("lora_alpha") ? shortJson(j["lora_alpha"]) : std::string("missing")) +
             ", lora.alpha is " + number(l.alpha).dump(),
         "set lora.alpha to the adapter's lora_alpha");
  const json& tm = j.value("target_modules", json());
  std::set<std::string> got;
  bool ok = tm.is_array();
  for (const json& m : ok ? tm : json::array())
    ok = ok && m.is_string() && got.insert(m.get<std::string>()).second;
  const std::set<std::string> want = hfModules(l.targets);
  if (!ok || got != want)
    failAdapter(path,
         "field \"target_modules\" is " + shortJson(tm) +
             ", expected the modules of lora.targets " + joined(want),
         "set lora.targets to the adapter's modules (q k v o gate up down); a regular "
         "expression is not supported");
  requireOff(j, path);
}

}  // namespace

PeftAdapter PeftAdapter::open(const std::string& dir, const ModelArgs& a, const LoraConfig& l) {
  if (inputPathKind(dir, kKey, "a PEFT adapter directory") != PathKind::kDirectory)
    failAdapter(dir, "not a directory", "lora.from_pretrained names a PEFT adapter directory");
  checkConfig(readConfig(dir), (fs::path(dir) / kAdapterConfigName).string(), l);
  const std::string wpath = (fs::path(dir) / kAdapterWeightsName).string();
  if (inputPathKind(wpath, kKey, "the adapter's weights (a safetensors file)") ==
      PathKind::kMissing)
    failAdapter(dir, std::string("no ") + kAdapterWeightsName,
         inputPathKind((fs::path(dir) / "adapter_model.bin").string(), kKey, "a file") !=
                 PathKind::kMissing
             ? "adapter_model.bin (pickle) is not read: save it with safe_serialization=True"
             : "a PEFT adapter directory holds adapter_config.json and adapter_model.safetensors");
  PeftAdapter pa;
  pa.dir_ = dir;
  pa.file_ = std::make_unique<SafetensorsFile>(wpath, kKey);
  const std::map<std::string, StTensor>& have = pa.file_->tensors();
  std::vector<std::string> names;
  for (const auto& [name, st] : have) names.push_back(name);
  if (const int64_t held = layersNamed(names); a.n_layers > held)  // before a per-layer list
    failAdapter(wpath,
         "holds the adapters of " +
             (held == 0 ? std::string("no layer") : "layers 0.." + std::to_string(held - 1)) +
             ", but the model has " + std::to_string(a.n_layers) + " layers",
         "an adapter trained on this model holds lora_A and lora_B of each target of each layer");
  const std::vector<AdapterParam> params = adapterParams(a, l);
  std::set<std::string> expected;
  for (const AdapterParam& p : params) expected.insert(p.peft_name);
  for (const auto& [name, st] : have)
    if (!expected.count(name))
      failAdapter(wpath,
           "unexpected tensor '" + shortText(name) + "': not a LoRA adapter of lora.targets " +
               joined(hfModules(l.targets)) + " in this " + std::to_string(a.n_layers) +
               "-layer model",
           name.find(".default.") != std::string::npos
               ? "a model's state_dict names the adapter (\".default.\"); save it with "
                 "PeftModel.save_pretrained"
               : "ftbench loads lora_A / lora_B of the targeted projections only");
  for (const AdapterParam& p : params) {
    auto it = have.find(p.peft_name);
    if (it == have.end())
      failAdapter(wpath, "tensor '" + p.peft_name + "' (shape " + shapeString(p.shape) + ") is missing",
           "the adapter must cover lora.targets in all " + std::to_string(a.n_layers) + " layers");
    if (it->second.shape != p.shape)
      failAdapter(wpath, "tensor '" + p.peft_name + "': shape " + shapeString(it->second.shape) +
                      ", expected " + shapeString(p.shape) + " from r = " + std::to_string(l.rank) +
                      " and the model's shapes");
    pa.by_name_[p.name] = p;
  }
  return pa;
}

int PeftAdapter::load(std::vector<ckpt::StatePiece>& pieces) const {
  torch::NoGradGuard no_grad;
  int n = 0;
  for (ckpt::StatePiece& p : pieces) {
    if (p.name.rfind("model.", 0) != 0) continue;
    auto it = by_name_.find(p.name.substr(6));
    if (it == by_name_.end()) continue;
    TORCH_CHECK(p.global_shape == it->second.shape, "internal: ", p.name, " global shape ",
                shapeString(p.global_shape), " differs from the adapter's ", it->second.peft_name);
    torch::Tensor src = file_->view(it->second.peft_name);
    for (size_t d = 0; d < p.box.offset.size(); ++d)
      src = src.narrow(int64_t(d), p.box.offset[d], p.box.size[d]);
    p.view.copy_(src);  // converts bf16 / fp16 to the piece's dtype
    ++n;
  }
  return n;
}

std::map<std::string, torch::Tensor> PeftAdapter::tensors() const {
  std::map<std::string, torch::Tensor> m;
  for (const auto& [name, p] : by_name_)
    m[name] = file_->view(p.peft_name).to(torch::kFloat32).clone();
  return m;
}

std::string PeftAdapter::firstNonFinite(int64_t share, int64_t shares) const {
  int64_t index = 0;
  for (const auto& [name, p] : by_name_) {
    if (index++ % shares != share) continue;
    if (std::string bad = file_->nonFinite(p.peft_name); !bad.empty()) return bad;
  }
  return "";
}

void loadAdapter(const TrainConfig& tc, const Mesh& mesh, GradSync& sync) {
  std::vector<ckpt::StatePiece> pieces = ckpt::collectModelState(sync, mesh.tp_rank, mesh.tp);
  int adapters = 0;
  for (const ckpt::StatePiece& p : pieces) adapters += p.name.find(".lora_") != std::string::npos;
  const int filled = PeftAdapter::open(tc.lora.from_pretrained, tc.model, tc.lora).load(pieces);
  TORCH_CHECK(filled == adapters, "internal: ", adapters, " adapter pieces on this rank, ", filled,
              " filled from ", tc.lora.from_pretrained);
  sync.paramsLoaded();
  FTB_INFO("loaded the LoRA adapter " << tc.lora.from_pretrained << ": " << filled
                                      << " adapter tensors (slices) on this rank");
}

void checkAdapter(const TrainConfig& tc, Distributed& dist) {
  if (tc.lora.from_pretrained.empty()) return;
  std::string problem;
  try {
    const PeftAdapter pa = PeftAdapter::open(tc.lora.from_pretrained, tc.model, tc.lora);
    if (std::string bad = pa.firstNonFinite(dist.env.rank, dist.env.world_size); !bad.empty())
      throw ConfigError(kKey, tc.lora.from_pretrained, bad,
                        "the adapter's weights are damaged: export or save it again");
  } catch (const ConfigError& e) {
    problem = e.what();
  }
  for (const std::string& p : dist.allGatherString("hf/lora_check", problem))
    if (!p.empty()) throw ConfigError(p);
}

}  // namespace ftb::hf
