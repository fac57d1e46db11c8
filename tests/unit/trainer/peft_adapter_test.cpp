// PEFT adapter directories (trainer/hf/peft_adapter.h): the writer's names, shapes and
// config; the reader gives back what the writer wrote, fills TP slices, and refuses every
// malformed directory with exit 2 naming the file and the tensor or field.
//
// Two env-gated helpers serve tests/e2e/trainer/test_peft_adapter.py (skipped otherwise):
// PeftAdapter.WriteForPython writes an adapter of random tensors for the HF model in
// FTB_PEFT_MODEL (config.json) to FTB_PEFT_OUT; PeftAdapter.ReadForPython reads the
// adapter FTB_PEFT_ADAPTER and writes each tensor (ftbench names) as raw fp32 plus
// index.json into FTB_PEFT_OUT.
#include "trainer/hf/peft_adapter.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "common/run_config.h"

namespace ftb::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ModelArgs gqa() {
  ModelArgs a;
  a.dim = 64, a.n_layers = 2, a.n_heads = 4, a.n_kv_heads = 2, a.ffn_dim = 96;
  a.vocab_size = 256, a.max_seq_len = 128, a.rope_theta = 10000.0, a.norm_eps = 1e-5;
  return a;
}

LoraConfig spec(int64_t rank, std::vector<std::string> targets) {
  LoraConfig s;
  s.rank = rank, s.alpha = 16, s.dropout = 0.05, s.targets = std::move(targets);
  return s;
}

// Deterministic, distinct values per tensor.
torch::Tensor synthetic(const AdapterParam& p) {
  torch::Generator g = at::detail::createCPUGenerator(std::hash<std::string>{}(p.name) % 100000);
  return torch::randn(p.shape, g, torch::kFloat32);
}

class PeftAdapterDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("peft_adapter_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const LoraConfig& s, torch::ScalarType t = torch::kFloat32) {
    writeAdapter((dir_ / "a").string(), gqa(), s, "/models/base", t, synthetic);
    return dir_ / "a";
  }
  fs::path dir_;
};

TEST(PeftAdapterNames, PeftNamesAndShapesFollowTheBaseWeights) {
  const std::vector<AdapterParam> ps = adapterParams(gqa(), spec(8, kLoraTargets));
  ASSERT_EQ(ps.size(), 2u * 7 * 2);
  auto find = [&](const std::string& name) {
    for (const AdapterParam& p : ps)
      if (p.name == name) return p;
    ADD_FAILURE() << "no " << name;
    return AdapterParam{};
  };
  AdapterParam q = find("layers.0.attention.wq.lora_A.weight");
  EXPECT_EQ(q.peft_name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{8, 64}));
  AdapterParam kb = find("layers.1.attention.wk.lora_B.weight");
  EXPECT_EQ(kb.peft_name, "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight");
  EXPECT_EQ(kb.shape, (std::vector<int64_t>{32, 8}));  // n_kv_heads * head_dim rows
  AdapterParam down = find("layers.1.feed_forward.w2.lora_A.weight");
  EXPECT_EQ(down.peft_name, "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight");
  EXPECT_EQ(down.shape, (std::vector<int64_t>{8, 96}));
  EXPECT_EQ(find("layers.0.feed_forward.w3.lora_B.weight").peft_name,
            "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight");
  EXPECT_EQ(find("layers.0.feed_forward.w1.lora_B.weight").shape, (std::vector<int64_t>{96, 8}));
  EXPECT_EQ(adapterParams(gqa(), spec(4, {"q", "v"})).size(), 2u * 2 * 2);
}

TEST(PeftAdapterNames, EveryLoraTargetKeyHasItsModules) {
  ASSERT_EQ(loraTargets().size(), kLoraTargets.size());
  for (const std::string& k : kLoraTargets) EXPECT_NE(loraTargetByKey(k), nullptr) << k;
  EXPECT_EQ(loraTargetByKey("qkv"), nullptr);
}

TEST_F(PeftAdapterDir, WrittenConfigIsPeftsLoraConfig) {
  const fs::path d = write(spec(4, {"v", "q", "down"}));
  std::ifstream in(d / kAdapterConfigName);
  const json j = json::parse(in);
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], 4);
  EXPECT_EQ(j["lora_alpha"], 16);
  EXPECT_TRUE(j["lora_alpha"].is_number_integer());
  EXPECT_DOUBLE_EQ(j["lora_dropout"].get<double>(), 0.05);
  EXPECT_EQ(j["target_modules"], json({"down_proj", "q_proj", "v_proj"}));
  EXPECT_EQ(j["bias"], "none");
  EXPECT_EQ(j["fan_in_fan_out"], false);
  EXPECT_EQ(j["use_rslora"], false);
  EXPECT_EQ(j["base_model_name_or_path"], "/models/base");
  EXPECT_FALSE(fs::exists(dir_ / "a.tmp"));
}

TEST_F(PeftAdapterDir, ReaderGivesBackWhatTheWriterWrote) {
  for (torch::ScalarType t : {torch::kFloat32, torch::kBFloat16}) {
    fs::remove_all(dir_ / "a");
    const LoraConfig s = spec(4, {"q", "k", "v", "o", "gate", "up", "down"});
    const fs::path d = write(s, t);
    const std::map<std::string, torch::Tensor> got =
        PeftAdapter::open(d.string(), gqa(), s).tensors();
    ASSERT_EQ(got.size(), 2u * 7 * 2);
    for (const AdapterParam& p : adapterParams(gqa(), s)) {
      const torch::Tensor want = synthetic(p).to(t).to(torch::kFloat32);
      ASSERT_TRUE(got.count(p.name)) << p.name;
      EXPECT_TRUE(torch::equal(got.at(p.name), want)) << p.name << " " << t;
    }
  }
}

TEST_F(PeftAdapterDir, LoadFillsTensorParallelSlices) {
  const LoraConfig s = spec(4, {"q", "o"});
  const fs::path d = write(s);
  const PeftAdapter pa = PeftAdapter::open(d.string(), gqa(), s);
  // Megatron's split: q is column-parallel (lora_B split by rows), o row-parallel (lora_A by
  // columns); here TP rank 1 of 2.
  std::vector<ckpt::StatePiece> pieces{
      {"model.layers.1.attention.wq.lora_B.weight",
       {64, 4},
       {{32, 0}, {32, 4}},
       torch::zeros({32, 4})},
      {"model.layers.1.attention.wo.lora_A.weight",
       {4, 64},
       {{0, 32}, {4, 32}},
       torch::zeros({4, 32})},
      {"model.layers.1.attention.wo.weight", {64, 64}, {{0, 0}, {64, 64}}, torch::zeros({64, 64})},
      {"optim.exp_avg.x", {4}, {{0}, {4}}, torch::zeros({4})}};
  EXPECT_EQ(pa.load(pieces), 2);
  const std::map<std::string, torch::Tensor> all = pa.tensors();
  EXPECT_TRUE(torch::equal(pieces[0].view,
                           all.at("layers.1.attention.wq.lora_B.weight").narrow(0, 32, 32)));
  EXPECT_TRUE(torch::equal(pieces[1].view,
                           all.at("layers.1.attention.wo.lora_A.weight").narrow(1, 32, 32)));
  EXPECT_EQ(pieces[2].view.abs().sum().item<double>(), 0.0);  // not an adapter: untouched
}

TEST_F(PeftAdapterDir, ExistingOutputIsRefused) {
  fs::create_directories(dir_ / "a");
  try {
    write(spec(4, {"q"}));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- malformed adapters

void editConfig(const fs::path& d, const std::function<void(json&)>& edit) {
  json j;
  {
    std::ifstream in(d / kAdapterConfigName);
    j = json::parse(in);
  }
  edit(j);
  std::ofstream(d / kAdapterConfigName) << j.dump();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Rewrites the safetensors file through edit(header, data).
void editWeights(const fs::path& d, const std::function<void(json&, std::string&)>& edit) {
  const fs::path f = d / kAdapterWeightsName;
  const std::string raw = slurp(f);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  json h = json::parse(raw.substr(8, n));
  std::string data = raw.substr(8 + n);
  edit(h, data);
  const std::string text = h.dump();
  const uint64_t m = text.size();
  std::ofstream out(f, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&m), 8);
  out << text << data;
}

const std::string kQ0A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";

struct Malformed {
  const char* name;
  std::function<void(const fs::path&)> edit;
  std::vector<std::string> needles;  // besides the key and the file
  const char* file;                  // the file the message must name
};

std::vector<Malformed> malformedCases() {
  auto header = [](std::function<void(json&, std::string&)> e) {
    return [e](const fs::path& d) { editWeights(d, e); };
  };
  auto config = [](std::function<void(json&)> e) {
    return [e](const fs::path& d) { editConfig(d, e); };
  };
  return {
      {"bad_json",
       [](const fs::path& d) { std::ofstream(d / kAdapterConfigName) << "{\"r\": 4,"; },
       {"invalid JSON"},
       kAdapterConfigName},
      {"no_config",
       [](const fs::path& d) { fs::remove(d / kAdapterConfigName); },
       {"no adapter_config.json"},
       ""},
      {"r_mismatch",
       config([](json& j) { j["r"] = 8; }),
       {"field \"r\" is 8, lora.rank is 4", "set lora.rank"},
       kAdapterConfigName},
      {"alpha_mismatch",
       config([](json& j) { j["lora_alpha"] = 32; }),
       {"field \"lora_alpha\" is 32, lora.alpha is 16"},
       kAdapterConfigName},
      {"targets_mismatch",
       config([](json& j) {
         j["target_modules"] = {"q_proj", "k_proj"};
       }),
       {"target_modules", "[\"q_proj\",\"k_proj\"]", "[q_proj, v_proj]"},
       kAdapterConfigName},
      {"regex_targets",
       config([](json& j) { j["target_modules"] = ".*proj"; }),
       {"target_modules", "regular expression"},
       kAdapterConfigName},
      {"not_lora",
       config([](json& j) { j["peft_type"] = "IA3"; }),
       {"peft_type", "\"IA3\""},
       kAdapterConfigName},
      {"rslora",
       config([](json& j) { j["use_rslora"] = true; }),
       {"use_rslora", "is true, expected false"},
       kAdapterConfigName},
      {"dora", config([](json& j) { j["use_dora"] = true; }), {"use_dora"}, kAdapterConfigName},
      {"rank_pattern",
       config([](json& j) {
         j["rank_pattern"] = {{"q_proj", 8}};
       }),
       {"rank_pattern", "not supported"},
       kAdapterConfigName},
      {"no_weights",
       [](const fs::path& d) { fs::remove(d / kAdapterWeightsName); },
       {"no adapter_model.safetensors"},
       ""},
      {"pickle_weights",
       [](const fs::path& d) { fs::rename(d / kAdapterWeightsName, d / "adapter_model.bin"); },
       {"adapter_model.bin (pickle) is not read", "safe_serialization=True"},
       ""},
      {"missing_tensor",
       header([](json& h, std::string&) { h.erase(kQ0A); }),
       {kQ0A, "is missing", "[4, 64]"},
       kAdapterWeightsName},
      {"wrong_shape",
       header([](json& h, std::string&) {
         h[kQ0A]["shape"] = {8, 32};
       }),
       {kQ0A, "shape [8, 32], expected [4, 64]"},
       kAdapterWeightsName},
      {"unknown_name",
       header([](json& h, std::string&) {
         h["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"] = h[kQ0A];
         h.erase(kQ0A);
       }),
       {"unexpected tensor "
        "'base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight'",
        "PeftModel.save_pretrained"},
       kAdapterWeightsName},
      {"extra_target",
       header([](json& h, std::string&) {
         h["base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"] = h[kQ0A];
       }),
       {"base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"},
       kAdapterWeightsName},
      {"int_dtype",
       header([](json& h, std::string&) { h[kQ0A]["dtype"] = "I32"; }),
       {kQ0A, "dtype I32"},
       kAdapterWeightsName},
      {"truncated",
       [](const fs::path& d) {
         const std::string raw = slurp(d / kAdapterWeightsName);
         std::ofstream(d / kAdapterWeightsName, std::ios::binary | std::ios::trunc)
             << raw.substr(0, raw.size() - 100);
       },
       {"past the end of the data section", "truncated"},
       kAdapterWeightsName},
  };
}

TEST_F(PeftAdapterDir, MalformedAdaptersExit2NamingFileAndTensor) {
  const LoraConfig s = spec(4, {"q", "v"});
  for (const Malformed& m : malformedCases()) {
    SCOPED_TRACE(m.name);
    fs::remove_all(dir_ / "a");
    const fs::path d = write(s);
    m.edit(d);
    try {
      PeftAdapter::open(d.string(), gqa(), s);
      ADD_FAILURE() << m.name << ": accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.exitCode(), 2);
      EXPECT_NE(msg.find("lora.from_pretrained"), std::string::npos) << msg;
      const std::string file = *m.file ? (d / m.file).string() : d.string();
      EXPECT_NE(msg.find(file), std::string::npos) << file << " in " << msg;
      for (const std::string& n : m.needles)
        EXPECT_NE(msg.find(n), std::string::npos) << n << " in " << msg;
    }
  }
}

TEST_F(PeftAdapterDir, AdapterForAnotherModelIsRefused) {
  const LoraConfig s = spec(4, {"q", "v"});
  const fs::path d = write(s);
  ModelArgs deeper = gqa();
  deeper.n_layers = 3;
  ModelArgs wider = gqa();
  wider.dim = 128;
  for (const auto& [a, needle] :
       {std::pair{deeper,
                  std::string("holds the adapters of layers 0..1, but the model has 3 layers")},
        std::pair{wider, std::string("shape [4, 64], expected [4, 128]")}}) {
    try {
      PeftAdapter::open(d.string(), a, s);
      ADD_FAILURE() << needle << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

// ---------------------------------------------------------------- helpers for pytest

std::vector<std::string> splitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string w; std::getline(in, w, ',');) out.push_back(w);
  return out;
}

// The spec of FTB_PEFT_RANK, FTB_PEFT_ALPHA, FTB_PEFT_TARGETS (comma-separated keys).
LoraConfig envSpec() {
  LoraConfig s;
  s.rank = std::atoll(std::getenv("FTB_PEFT_RANK"));
  s.alpha = std::atof(std::getenv("FTB_PEFT_ALPHA"));
  s.targets = splitCommas(std::getenv("FTB_PEFT_TARGETS"));
  return s;
}

bool envSet(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (!std::getenv(n)) return false;
  return true;
}

ModelArgs envModel() {
  return modelArgsFromConfig(
      Config::fromString("", "peft_adapter_test",
                         {std::string("model.from_pretrained=") + std::getenv("FTB_PEFT_MODEL")}));
}

TEST(PeftAdapter, WriteForPython) {
  if (!envSet({"FTB_PEFT_MODEL", "FTB_PEFT_OUT", "FTB_PEFT_RANK", "FTB_PEFT_ALPHA",
               "FTB_PEFT_TARGETS"}))
    GTEST_SKIP() << "set FTB_PEFT_MODEL/OUT/RANK/ALPHA/TARGETS (pytest)";
  LoraConfig s = envSpec();
  s.dropout = 0.1;
  // A ~ N(0, 1/in), B ~ N(0, 1/r): the adapter changes the logits as much as the base does.
  writeAdapter(std::getenv("FTB_PEFT_OUT"), envModel(), s, std::getenv("FTB_PEFT_MODEL"),
               torch::kFloat32,
               [](const AdapterParam& p) { return synthetic(p) / std::sqrt(double(p.shape[1])); });
}

TEST(PeftAdapter, ReadForPython) {
  if (!envSet({"FTB_PEFT_MODEL", "FTB_PEFT_ADAPTER", "FTB_PEFT_OUT", "FTB_PEFT_RANK",
               "FTB_PEFT_ALPHA", "FTB_PEFT_TARGETS"}))
    GTEST_SKIP() << "set FTB_PEFT_MODEL/ADAPTER/OUT/RANK/ALPHA/TARGETS (pytest)";
  const fs::path out = std::getenv("FTB_PEFT_OUT");
  fs::create_directories(out);
  json index = json::object();
  for (const auto& [name, t] :
       PeftAdapter::open(std::getenv("FTB_PEFT_ADAPTER"), envModel(), envSpec()).tensors()) {
    const std::string file = name + ".bin";
    std::ofstream o(out / file, std::ios::binary);
    o.write(static_cast<const char*>(t.data_ptr()), t.numel() * 4);
    ASSERT_TRUE(o.good()) << file;
    index[name] = {{"file", file}, {"shape", t.sizes().vec()}};
  }
  std::ofstream(out / "index.json") << index.dump(2);
}

}  // namespace
}  // namespace ftb::hf
