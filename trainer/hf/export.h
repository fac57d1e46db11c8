// `trainer export`: a checkpoint (trainer/checkpoint, any layout) -> a Hugging Face
// LlamaForCausalLM directory (trainer/README.md "Hugging Face models").
//
// Contract: exportCheckpoint(opts) takes a step_N directory (or a checkpoint directory:
// its newest usable step_N), verifies every file of it (size, crc32), and writes into a
// new directory `out` (which must not exist): config.json from the checkpoint's model.*
// keys (torch_dtype = the exported dtype; architectures LlamaForCausalLM, or
// MistralForCausalLM with its sliding_window when the run started from one and its
// config.json is still there), and the master weights under their HF names,
// converted to `dtype` (fp32 | bf16 | fp16, round to nearest even; "run" = the
// training.dtype of the run the checkpoint belongs to, read from <run>/run.toml when the
// checkpoint sits in its default place <run>/checkpoints/step_N and the directory's name is
// the manifest's tag, else fp32, which is also the master weights' own dtype): one
// model.safetensors, or, when they exceed max_shard_bytes, model-0000K-of-0000N.safetensors shards
// plus model.safetensors.index.json. Each global tensor is assembled from the checkpoint's slices
// (Checkpointer::load, resharding to one whole tensor) one at a time. Everything is written into
// out.tmp and renamed to `out` only when complete. Bad input (missing or damaged checkpoint,
// existing out) -> ConfigError (exit 2); write failures -> IoError. With `adapter` (a LoRA run's
// checkpoint, which holds only the adapters): writeAdapter (peft_adapter.h) of its tensors instead,
// rank and targets read from the tensors, alpha and dropout from the manifest's lora.* record (else
// the run.toml beside it), the base model from model.from_pretrained; a checkpoint without adapters
// -> ConfigError. A full export of a LoRA checkpoint is refused (ConfigError) with a hint to
// --adapter.
//
// openCheckpointModel(path) resolves and verifies a full model's checkpoint as
// exportCheckpoint does (the same ConfigErrors, on --checkpoint; a LoRA checkpoint is refused
// with a hint to export its adapter) without writing anything; loadCheckpointModel fills a
// whole model's "model.<name>" pieces with its fp32 master weights, the values
// `trainer export --dtype fp32` writes (LoRA adapter pieces are left alone, as
// PretrainedModel::load leaves them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/run_config.h"
#include "trainer/checkpoint/checkpointer.h"
#include "trainer/checkpoint/state.h"

namespace ftb::hf {

struct ExportOptions {
  std::string checkpoint, out;
  std::string dtype = "run";                   // "run" | "fp32" | "bf16" | "fp16"
  int64_t max_shard_bytes = int64_t{5} << 30;  // HF save_pretrained's default is 5 GB
  bool adapter = false;  // --adapter: a LoRA checkpoint's adapters as a PEFT directory
};

struct CheckpointModel {
  ResumePoint rp;          // the step_N directory and its verified manifest
  ModelArgs args;          // from the manifest's model.* keys
  int64_t sliding_window;  // the Mistral's the run started from (its config.json), else 0
};
CheckpointModel openCheckpointModel(const std::string& path);
void loadCheckpointModel(const CheckpointModel& c, std::vector<ckpt::StatePiece>& pieces);

// Returns the number of files written (safetensors shards).
int exportCheckpoint(const ExportOptions& opts);

// `trainer export ...`: parses argv (after "export"), runs, returns the exit code.
int exportMain(const std::vector<std::string>& args);

}  // namespace ftb::hf
