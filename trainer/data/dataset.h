// Token datasets and padded batches.
//
// Contracts:
// - A document is a token sequence of length n >= 2; it yields n-1 training
//   positions (inputs = ids[:-1], targets = ids[1:]), at most seq_len of them.
// - Data order is a pure function of the global sample index: document(i) wraps
//   modulo size(), so every parallel layout sees the same global batch per step.
// - SyntheticDataset: document i is drawn from a generator seeded by (seed, i), with
//   n-1 uniform in [min_doc_len, seq_len]; each id is, with probability 1/2, a fixed
//   function of the previous id (so there is something to learn), else uniform in
//   [1, vocab_size).
// - Token files: `.bin` is a flat stream of uint16/uint32 ids cut into windows of
//   seq_len+1 tokens (stride seq_len), read window by window (memory does not grow with
//   the file; every id is checked at open in one streaming pass); `.jsonl` holds one
//   {"input_ids": [...]} per line, each truncated to seq_len+1, with optional "labels"
//   (HF's convention: labels[k] is the target of the position that predicts ids[k], -100 =
//   not a target) and "attention_mask" (0 = padding: those ids are removed, so they are
//   neither targets nor counted; zeros only before and after the ones). Bad files throw
//   ConfigError with file:line.
// - Text files (c.tokenizer set, and the first record is not one of token ids): a `.jsonl`
//   of texts, prompt/completion pairs or conversations, tokenized with data.tokenizer
//   (trainer/data/text_dataset.h); prompt tokens and non-assistant turns are not loss targets.
// - A document with no loss target within seq_len is dropped (a warning counts them).
// - Packing (data.padding = "packing"): the documents, in order, are concatenated into
//   one stream cut like a `.bin` file; a window with no loss target is dropped.
//   Attention is not reset at document boundaries (as in the .bin source).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/run_config.h"

namespace ftb {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual std::vector<int32_t> document(int64_t index) const = 0;
  // Which ids of document(index) are loss targets: empty = all; else one flag per id
  // (flag k for ids[k]; flag 0 is unused, ids[0] is never a target).
  virtual std::vector<uint8_t> targets(int64_t index) const {
    (void)index;
    return {};
  }
  // What each id's position learns to predict where it is not the id itself: empty = the
  // ids; else one per id (labels[k] is the target where flag k of targets() is set).
  virtual std::vector<int32_t> labels(int64_t index) const {
    (void)index;
    return {};
  }
  // Training positions and loss positions of all documents at `seq_len`, when known
  // without reading every document (a .bin file's windows); nullopt: count them.
  struct PositionCounts {
    int64_t positions = 0, loss = 0;
  };
  virtual std::optional<PositionCounts> positionCounts(int64_t seq_len) const {
    (void)seq_len;
    return std::nullopt;
  }
};

// `announce`: log the dataset's size and masked positions (rank 0).
std::unique_ptr<Dataset> makeDataset(const TrainConfig& c, bool announce = false);

struct Batch {
  torch::Tensor inputs;        // [B,T] int64, pad_id on padding
  torch::Tensor targets;       // [B,T] int64 (the labels where a document has them)
  torch::Tensor mask;          // [B,T] bool, true where the target counts in the loss
  int64_t padded_tokens = 0;   // B*T
  int64_t dataset_tokens = 0;  // real (non-padding) positions
  int64_t loss_tokens = 0;     // mask.sum(): dataset_tokens less the masked targets
};

// Builds the batch for global sample indices [first, first+count). T is seq_len
// (max_length) or the longest document in the batch (longest).
Batch makeBatch(const Dataset& ds, int64_t first, int64_t count, int64_t seq_len, bool pad_longest,
                int64_t pad_id);

// Counts the non-padding positions of samples [first, first+count) without
// building tensors.
int64_t countPositions(const Dataset& ds, int64_t first, int64_t count, int64_t seq_len);

// The samples data-parallel rank `dp_rank` trains on at step `step` (trainer/loop/train.h):
// the contiguous slice [step·G + dp_rank·G/dp, +G/dp) of the global batch, cut into
// grad_accum_steps micro-batches of micro_batch_size. Tensor-parallel ranks of one
// data-parallel rank share it. REQUIRES: 0 <= dp_rank < tc.dpSize().
struct RankSamples {
  int64_t first = 0;          // global index of the rank's first sample at this step
  int64_t micro_batch = 0;    // samples per micro-batch
  int64_t micro_batches = 0;  // micro-batches per step
  int64_t microFirst(int64_t m) const { return first + m * micro_batch; }
};
RankSamples rankSamples(const TrainConfig& tc, int64_t step, int64_t dp_rank);

// One rank's micro-batches of one step. Only this rank's samples are read: the cost
// does not grow with the world size. The loss normaliser (the global batch's loss
// positions) is the sum of `positions` over the data-parallel ranks.
struct StepBatches {
  std::vector<Batch> micro;
  int64_t positions = 0;  // Σ loss_tokens of `micro`
};
StepBatches rankBatches(const Dataset& ds, const TrainConfig& tc, int64_t step, int64_t dp_rank);

// Writes `num_samples` synthetic documents (exactly SyntheticDataset's) to `path`:
// .jsonl (one {"input_ids": [...]} per line) or .bin (flat stream, bin_dtype). Any other
// name is a ConfigError before the file is created (data.source could not read it back).
void writeSyntheticDataset(const TrainConfig& c, const std::string& path);

}  // namespace ftb
