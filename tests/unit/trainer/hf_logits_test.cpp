// Logits of a Hugging Face model directory loaded by the HF importer (hf/pretrained.h)
// into the ftbench Llama, for the independent PyTorch reference in
// tests/e2e/trainer/test_hf_model.py. Reads FTB_HF_DIR (the model), FTB_HF_TOKENS (raw
// int64 [B, T], B from FTB_HF_BATCH) and writes FTB_HF_OUT (raw fp32 logits [B, T, V]).
// Runs only when those are set (the pytest sets them); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/config.h"
#include "common/run_config.h"
#include "trainer/hf/pretrained.h"
#include "trainer/model/llama.h"
#include "tests/unit/trainer/tensor_util.h"

namespace ftb {
namespace {

TEST(HfImport, WriteLogitsForPythonReference) {
  const char* dir = std::getenv("FTB_HF_DIR");
  const char* tokens = std::getenv("FTB_HF_TOKENS");
  const char* out = std::getenv("FTB_HF_OUT");
  const char* batch = std::getenv("FTB_HF_BATCH");
  if (!dir || !tokens || !out || !batch) GTEST_SKIP() << "set FTB_HF_DIR/TOKENS/OUT/BATCH (pytest)";
  // The model shape comes from config.json through the config loader, as in a run.
  Config cfg =
      Config::fromString("", "hf_logits_test", {std::string("model.from_pretrained=") + dir});
  ModelArgs a = modelArgsFromConfig(cfg);
  Transformer model(a, TpContext{}, ModelOptions{torch::kFloat32, 0, /*seed=*/7, {}});
  std::vector<ckpt::StatePiece> pieces;  // every parameter, whole (world 1)
  for (const ModelParam& p : model->paramsInForwardOrder()) {
    std::vector<int64_t> shape = p.tensor.sizes().vec();
    pieces.push_back({"model." + p.name,
                      shape,
                      {std::vector<int64_t>(shape.size(), 0), shape},
                      p.tensor.data()});
  }
  hf::PretrainedModel::open(dir, a).load(pieces);
  torch::NoGradGuard no_grad;
  torch::Tensor logits = model->forward(readTokens(tokens, std::atoll(batch))).contiguous();
  std::ofstream o(out, std::ios::binary);
  o.write(static_cast<const char*>(logits.data_ptr()), logits.numel() * 4);
  ASSERT_TRUE(o.good()) << out;
}

}  // namespace
}  // namespace ftb
