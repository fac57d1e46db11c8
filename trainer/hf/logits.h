// `trainer logits`: the logits and per-token loss of a Hugging Face Llama directory (with or
// without a PEFT LoRA adapter) for given token ids or a text, as safetensors, so they can be
// compared with transformers (trainer/docs/hf.md "Logits a user can check").
//
// Contract: logitsMain(args) loads the model as model.from_pretrained does (config.json ->
// ModelArgs by hfModelKeys, weights by PretrainedModel; world size 1, tp 1, CPU, fp32), the
// adapter as lora.from_pretrained does (PeftAdapter; r, lora_alpha and target_modules read from
// its adapter_config.json, dropout off), runs forward without gradient, and writes OUT with the
// tensors input_ids [B,T] int64, logits [B,T,V] fp32 and loss [B,T-1] fp32 (the cross-entropy of
// predicting token t+1 from position t). The input is --ids "1,2,3" (B = 1), --ids-file F.jsonl
// (one {"input_ids": [...]} per line, all of one length), or --text with --tokenizer (encode()
// without BOS/EOS). OUT is written to OUT.tmp.<pid> and renamed only when complete. Bad input
// (missing directory, empty ids, ids outside [0, vocab), T > max_seq_len or > a Mistral's
// sliding_window, unreadable file, unknown flag) is a ConfigError naming the flag or file (exit 2) and nothing is written.
// A trainer checkpoint is read after `trainer export` made it an HF directory.
#pragma once

#include <string>
#include <vector>

namespace ftb::hf {

// `trainer logits ...`: parses argv (after "logits"), runs, returns the exit code.
int logitsMain(const std::vector<std::string>& args);

}  // namespace ftb::hf
