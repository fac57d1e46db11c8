// Exports the tiny model (configs/models/tiny.toml, seed 0) for the
// independent Python reference in tests/e2e/reference/test_llama_reference.py:
// every named parameter, a fixed padded token batch, the logits, the masked mean
// cross-entropy, every gradient, and the parameters after one AdamW step, as raw
// little-endian float32 / int64 .bin files plus index.json (names, shapes, files).
// Runs only when FTB_EXPORT_DIR is set (the pytest sets it); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/run_config.h"
#include "trainer/model/llama.h"
#include "trainer/optim/optimizer.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;

ModelArgs tinyArgs() {
  return modelArgsFromConfig(Config::load(FTB_SOURCE_DIR "/configs/runs/tiny.toml", {}));
}

// The registered parameters add up to ModelArgs::numParams(), tied or not.
TEST(ExportModel, ParameterCountMatchesModelArgs) {
  for (bool tied : {false, true}) {
    ModelArgs a = tinyArgs();
    a.tie_embeddings = tied;
    Transformer model(a, TpContext{}, ModelOptions{torch::kFloat32, 0, /*seed=*/0, {}});
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    EXPECT_EQ(n, a.numParams()) << "tied=" << tied;
  }
}

// Writes `t` (contiguous, little-endian host order) to dir/name and returns its entry.
nlohmann::json writeBin(const fs::path& dir, const std::string& name, const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous();
  std::ofstream out(dir / name, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  EXPECT_TRUE(out.good()) << name;
  nlohmann::json j;
  j["file"] = name;
  j["shape"] = c.sizes().vec();
  j["dtype"] = c.scalar_type() == torch::kInt64 ? "int64" : "float32";
  return j;
}

TEST(ExportModel, WriteTinyModelForPythonReference) {
  const char* dir_env = std::getenv("FTB_EXPORT_DIR");
  if (dir_env == nullptr) GTEST_SKIP() << "set FTB_EXPORT_DIR to export (used by pytest)";
  fs::path dir(dir_env);
  fs::create_directories(dir);
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "files are little-endian");

  ModelArgs a = tinyArgs();
  ASSERT_FALSE(a.tie_embeddings);
  torch::manual_seed(0);
  Transformer model(a, TpContext{},
                    ModelOptions{torch::kFloat32, /*recompute_every=*/0, /*seed=*/0, {}});

  // Two rows of 16 positions; row 1 has 11 real positions then right padding (id 0).
  const int64_t B = 2, T = 16, real1 = 11;
  torch::Tensor seq = torch::empty({B, T + 1}, torch::kInt64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t <= T; ++t) seq[b][t] = (b * 131 + t * 37 + 5) % a.vocab_size;
  torch::Tensor tokens = seq.narrow(1, 0, T).clone();
  torch::Tensor targets = seq.narrow(1, 1, T).clone();
  torch::Tensor mask = torch::ones({B, T}, torch::kBool);
  mask[1].narrow(0, real1, T - real1).fill_(false);
  tokens[1].narrow(0, real1, T - real1).fill_(0);
  targets[1].narrow(0, real1, T - real1).fill_(0);

  torch::Tensor logits = model->forward(tokens);
  torch::Tensor loss_sum = model->lossSum(logits, targets, mask);
  double count = mask.sum().item<double>();
  torch::Tensor loss = loss_sum / count;
  loss.backward();

  nlohmann::json index;
  index["args"] = {{"dim", a.dim},
                   {"n_layers", a.n_layers},
                   {"n_heads", a.n_heads},
                   {"n_kv_heads", a.n_kv_heads},
                   {"ffn_dim", a.ffn_dim},
                   {"vocab_size", a.vocab_size},
                   {"max_seq_len", a.max_seq_len},
                   {"rope_theta", a.rope_theta},
                   {"norm_eps", a.norm_eps},
                   {"tie_embeddings", a.tie_embeddings}};
  index["tokens"] = writeBin(dir, "tokens.bin", tokens);
  index["targets"] = writeBin(dir, "targets.bin", targets);
  index["mask"] = writeBin(dir, "mask.bin", mask.to(torch::kInt64));
  index["logits"] = writeBin(dir, "logits.bin", logits);
  index["loss"] = loss.item<double>();
  index["count"] = count;

  // Torchtitan names from the model's members (registered names are libtorch-safe
  // spellings); every registered parameter must be among them.
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (size_t l = 0; l < model->layers.size(); ++l) {
    auto& blk = *model->layers[l];
    const std::string pre = "layers." + std::to_string(l) + ".";
    named.push_back({pre + "attention_norm.weight", blk.attention_norm});
    named.push_back({pre + "attention.wq.weight", blk.wq});
    named.push_back({pre + "attention.wk.weight", blk.wk});
    named.push_back({pre + "attention.wv.weight", blk.wv});
    named.push_back({pre + "attention.wo.weight", blk.wo});
    named.push_back({pre + "ffn_norm.weight", blk.ffn_norm});
    named.push_back({pre + "feed_forward.w1.weight", blk.w1});
    named.push_back({pre + "feed_forward.w2.weight", blk.w2});
    named.push_back({pre + "feed_forward.w3.weight", blk.w3});
  }
  named.push_back({"tok_embeddings.weight", model->tok_embeddings});
  named.push_back({"norm.weight", model->norm});
  named.push_back({"output.weight", model->output});
  auto registered = model->parameters();
  ASSERT_EQ(registered.size(), named.size());
  for (const auto& r : registered) {
    bool found = false;
    for (const auto& n : named) found = found || n.second.is_same(r);
    EXPECT_TRUE(found) << "a registered parameter is not exported";
  }

  std::vector<torch::Tensor> params, grads;
  nlohmann::json plist = nlohmann::json::array();
  for (size_t i = 0; i < named.size(); ++i) {
    const torch::Tensor& p = named[i].second;
    ASSERT_TRUE(p.grad().defined()) << named[i].first;
    nlohmann::json e = writeBin(dir, "param_" + std::to_string(i) + ".bin", p);
    e["name"] = named[i].first;
    e["grad_file"] = writeBin(dir, "grad_" + std::to_string(i) + ".bin", p.grad())["file"];
    plist.push_back(e);
    params.push_back(p);
    grads.push_back(p.grad());
  }

  OptimizerOptions o;
  o.kind = "adamw";
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  const double lr = 1e-3;
  auto opt = makeOptimizer(params, o);
  opt->step(grads, lr);
  for (size_t i = 0; i < named.size(); ++i)
    plist[i]["updated_file"] =
        writeBin(dir, "updated_" + std::to_string(i) + ".bin", named[i].second)["file"];
  index["params"] = plist;
  index["adamw"] = {{"lr", lr},
                    {"beta1", o.beta1},
                    {"beta2", o.beta2},
                    {"eps", o.eps},
                    {"weight_decay", o.weight_decay}};
  std::ofstream(dir / "index.json") << index.dump(2) << "\n";
  EXPECT_TRUE(fs::exists(dir / "index.json"));
}

}  // namespace
}  // namespace ftb
