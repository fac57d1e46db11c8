// `trainer logits`: the logits and per-token loss of a Hugging Face Llama directory or a
// trainer checkpoint (with or without a PEFT LoRA adapter) for given token ids or a text, as
// safetensors, so they can be compared with transformers (trainer/docs/hf.md "Logits a user
// can check").
//
// Contract: logitsMain(args) loads the model as model.from_pretrained does (--model: config.json
// -> ModelArgs by hfModelKeys, weights by PretrainedModel) or as `trainer export` reads a full
// model's checkpoint (--checkpoint: openCheckpointModel / loadCheckpointModel, the fp32 master
// weights, any saved layout; exactly one of the two), world size 1, tp 1, CPU; the adapter as
// lora.from_pretrained does (PeftAdapter; r, lora_alpha and target_modules read from its
// adapter_config.json, dropout off); computes in --dtype (fp32, the default, or bf16: the
// compute dtype of a training run's training.dtype, weights kept in fp32 and cast at use);
// runs forward without gradient, each input row alone (batch 1, its own length), and writes
// OUT with the tensors input_ids [B,T] int64, attention_mask [B,T] int64 (1 at a row's tokens,
// 0 at its padding), logits [B,T,V] in the compute dtype (F32 or BF16: the file records the
// dtype there) and loss [B,T-1] fp32 (the cross-entropy of predicting token t+1 from position
// t, computed from the logits in fp32). T is the longest row's length; shorter rows are padded
// on the right with id 0, and their padded positions hold logits 0 and loss 0 (loss also 0 at
// the last real position, which predicts padding). A row's logits are thus bit for bit those
// of --ids with that row alone. The input is --ids "1,2,3" (B = 1), --ids-file F.jsonl (one
// {"input_ids": [...]} per line, at least one id each), or --text with --tokenizer (encode()
// without BOS/EOS). OUT is written to OUT.tmp.<pid> and renamed only when complete. Bad input
// (missing directory, a checkpoint given as --model, a LoRA checkpoint as --checkpoint, both or
// neither of them, empty ids, ids outside [0, vocab), a row longer than max_seq_len or than a
// Mistral's sliding_window, an unknown --dtype, unreadable file, unknown flag) is a ConfigError
// naming the flag or file (exit 2) and nothing is written.
#pragma once

#include <string>
#include <vector>

namespace ftb::hf {

// `trainer logits ...`: parses argv (after "logits"), runs, returns the exit code.
int logitsMain(const std::vector<std::string>& args);

}  // namespace ftb::hf
