// Logits of the ftbench Llama with LoRA adapters, the base loaded from an HF directory
// (hf/pretrained.h) and the adapters from a PEFT adapter directory (hf/peft_adapter.h), for
// tests/e2e/trainer/test_lora_adapter.py, which compares them with PEFT's. Reads FTB_HF_DIR,
// FTB_PEFT_ADAPTER, FTB_PEFT_RANK, FTB_PEFT_ALPHA, FTB_PEFT_TARGETS (lora.targets spelling),
// FTB_HF_TOKENS (raw int64 [B, T], B from FTB_HF_BATCH) and writes FTB_HF_OUT (raw fp32
// logits [B, T, V]). Runs only when those are set (the pytest sets them); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/config.h"
#include "common/run_config.h"
#include "common/run_keys.h"
#include "trainer/hf/peft_adapter.h"
#include "trainer/hf/pretrained.h"
#include "trainer/model/llama.h"
#include "tests/unit/trainer/tensor_util.h"

namespace ftb {
namespace {

TEST(PeftImport, WriteLoraLogitsForPythonReference) {
  for (const char* v : {"FTB_HF_DIR", "FTB_PEFT_ADAPTER", "FTB_PEFT_RANK", "FTB_PEFT_ALPHA",
                        "FTB_PEFT_TARGETS", "FTB_HF_TOKENS", "FTB_HF_OUT", "FTB_HF_BATCH"})
    if (!std::getenv(v)) GTEST_SKIP() << "set " << v << " (pytest)";
  const std::string dir = std::getenv("FTB_HF_DIR"), adapter = std::getenv("FTB_PEFT_ADAPTER");
  // Shape and LoRA keys through the config loader, as in a run.
  Config cfg = Config::fromString(
      "", "peft_logits_test",
      {"model.from_pretrained=" + dir, std::string("lora.rank=") + std::getenv("FTB_PEFT_RANK"),
       std::string("lora.alpha=") + std::getenv("FTB_PEFT_ALPHA"),
       std::string("lora.targets=") + std::getenv("FTB_PEFT_TARGETS"),
       "lora.from_pretrained=" + adapter});
  const ModelArgs a = modelArgsFromConfig(cfg);
  TrainConfig lora_keys;  // the [lora] keys alone, as their rows read them
  fillMembers(cfg, lora_keys, "lora.");
  ModelOptions opt;
  opt.lora = lora_keys.lora;
  opt.seed = 7;
  Transformer model(a, TpContext{}, opt);
  std::vector<ckpt::StatePiece> pieces;  // every parameter, whole (world 1)
  int adapters = 0;
  for (const ModelParam& p : model->paramsInForwardOrder()) {
    std::vector<int64_t> shape = p.tensor.sizes().vec();
    pieces.push_back({"model." + p.name,
                      shape,
                      {std::vector<int64_t>(shape.size(), 0), shape},
                      p.tensor.data()});
    adapters += p.name.find(".lora_") != std::string::npos;
  }
  ASSERT_GT(adapters, 0);
  hf::PretrainedModel::open(dir, a).load(pieces);
  ASSERT_EQ(hf::PeftAdapter::open(adapter, a, opt.lora).load(pieces), adapters);
  torch::NoGradGuard no_grad;
  torch::Tensor logits = model
                             ->forward(readTokens(std::getenv("FTB_HF_TOKENS"),
                                                  std::atoll(std::getenv("FTB_HF_BATCH"))))
                             .contiguous();
  std::ofstream o(std::getenv("FTB_HF_OUT"), std::ios::binary);
  o.write(static_cast<const char*>(logits.data_ptr()), logits.numel() * 4);
  ASSERT_TRUE(o.good());
}

}  // namespace
}  // namespace ftb
