#!/usr/bin/env python3
"""The HF TRL side of `scripts/bench.sh lora`: SFTTrainer (with peft for LoRA) on the same HF
model directory and the same prompt/completion documents as the ftbench runs.

  bench_trl.py data OUT_DIR DOCS
      OUT_DIR/sft.jsonl ({"prompt", "completion"} per line) and OUT_DIR/sft.txt (the texts, one
      a line, to train the sentencepiece model on). Deterministic (seeded) pseudo-words with
      Zipf-distributed frequencies, as scripts/bench_text_corpus.py writes.
  bench_trl.py run --model HF_DIR --tokens CACHE --seq-len T --batch B --steps N --threads K
                   --lr LR [--dtype fp32|bf16] [--lora-rank R --lora-alpha A --lora-targets q,k,...]
                   --out OUT.json
      SFTTrainer for N steps. Its documents are ftbench's own token cache of the same JSONL
      (CACHE, trainer/README.md "Text datasets": [bos] + encode(prompt + completion) + [eos],
      the first `prompt` ids no loss target), cut to T + 1 ids as ftbench cuts them, passed to
      SFTTrainer as input_ids + completion_mask (its completion-only loss), in file order
      (a sequential sampler: ftbench's step s takes documents [s*B, (s+1)*B)). Everything else
      is SFTTrainer's: its collator pads each micro-batch to its longest document, as
      data.padding = "longest" does. OUT.json: per step the wall time (on_step_begin ->
      on_step_end; the batch is fetched before it), the loss
      (training_step's own, unrounded), and the dataset tokens (input positions that are not padding:
      sum over documents of len - 1), plus the versions of trl, transformers, peft, torch.
"""
import argparse
import json
import random
import struct
import sys
import time
from pathlib import Path

import numpy as np


def data(out_dir, docs):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(24)
    syl = ("ka to ri mu sel van dor pi lu ne bro sta quin fe zo ha ar el om ut gra ves li "
           "mon tar cu pe dra in os").split()
    words = sorted({"".join(rnd.choice(syl) for _ in range(rnd.randint(1, 4)))
                    for _ in range(6000)})
    rnd.shuffle(words)
    weights = [1.0 / (r + 1) for r in range(len(words))]  # Zipf

    def text(lo, hi):
        return " ".join(rnd.choices(words, weights, k=rnd.randint(lo, hi)))

    rows = [{"prompt": text(10, 60) + ":", "completion": " " + text(60, 300) + "."}
            for _ in range(docs)]
    (out / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "sft.txt").write_text("".join(r["prompt"] + r["completion"] + "\n" for r in rows))


def read_token_cache(path):
    """ftbench's token cache: b"FTBTOK01", uint64 count, then per document uint64 length,
    int64 prompt ids (not loss targets), length int32 ids; little-endian."""
    raw = Path(path).read_bytes()
    assert raw[:8] == b"FTBTOK01", f"{path}: not an ftbench token cache"
    (n,), off, docs = struct.unpack_from("<Q", raw, 8), 16, []
    for _ in range(n):
        length, prompt = struct.unpack_from("<Qq", raw, off)
        off += 16
        docs.append((np.frombuffer(raw, dtype="<i4", count=length, offset=off).tolist(), prompt))
        off += 4 * length
    assert off == len(raw), f"{path}: {len(raw) - off} trailing bytes"
    return docs


def sft_dataset(cache, seq_len, n_docs):
    import pyarrow as pa
    from datasets import Dataset
    ids, masks = [], []
    for doc, prompt in read_token_cache(cache)[:n_docs]:
        doc = doc[:seq_len + 1]
        ids.append(doc)
        masks.append([0] * min(prompt, len(doc)) + [1] * max(0, len(doc) - prompt))
    # A given fingerprint: datasets' own hash of an in-memory table fails to pickle a pyarrow type.
    return Dataset(pa.table({"input_ids": ids, "completion_mask": masks}), fingerprint="ftbench-sft")


def pad_tokenizer(vocab_size):
    """SFTTrainer needs a processing class for its pad id; the documents come tokenized."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    vocab = {"<pad>": 0, **{f"<id{i}>": i for i in range(1, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<id2>")


def run(a):
    import torch
    import peft
    import transformers
    import trl
    from torch.utils.data import SequentialSampler
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    ds = sft_dataset(a.tokens, a.seq_len, a.steps * a.batch)
    cfg = trl.SFTConfig(
        output_dir=str(Path(a.out).with_suffix(".trl")), per_device_train_batch_size=a.batch,
        max_steps=a.steps, learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=a.weight_decay, adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8,
        max_grad_norm=a.max_grad_norm, logging_steps=1, save_strategy="no", report_to="none",
        use_cpu=True, bf16=a.dtype == "bf16", fp16=False, gradient_checkpointing=False,
        max_length=a.seq_len + 1, packing=False, padding_free=False, completion_only_loss=True,
        dataloader_num_workers=0, seed=0, disable_tqdm=True)
    lora = None
    if a.lora_rank > 0:
        hf = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
              "up": "up_proj", "down": "down_proj"}
        lora = peft.LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=0.0,
                               target_modules=[hf[t] for t in a.lora_targets.split(",")],
                               task_type="CAUSAL_LM")
    steps = []

    class Sequential(trl.SFTTrainer):
        def _get_train_sampler(self, *args, **kwargs):
            return SequentialSampler(self.train_dataset)

        def training_step(self, model, inputs, *args, **kwargs):
            real = int(inputs["attention_mask"].sum()) - int(inputs["attention_mask"].shape[0])
            loss = super().training_step(model, inputs, *args, **kwargs)
            steps.append({"tokens": real, "loss": float(loss)})  # one micro-batch a step
            return loss

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            steps[state.global_step - 1]["time_s"] = time.perf_counter() - self.t0

    trainer = Sequential(model=model, args=cfg, train_dataset=ds,
                         processing_class=pad_tokenizer(model.config.vocab_size),
                         peft_config=lora, callbacks=[Clock()])
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    trainer.train()
    Path(a.out).write_text(json.dumps({
        "steps": steps, "trainable_params": trainable, "threads": torch.get_num_threads(),
        "versions": {m.__name__: m.__version__ for m in (trl, transformers, peft, torch)},
        "args": vars(a)}, indent=1))


def main(argv):
    if len(argv) == 3 and argv[0] == "data":
        return data(argv[1], int(argv[2]))
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("cmd", choices=["run"])
    for k in ("model", "tokens", "out"):
        p.add_argument("--" + k, required=True)
    for k in ("seq-len", "batch", "steps", "threads"):
        p.add_argument("--" + k, type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--lora-rank", type=int, default=0)
    p.add_argument("--lora-alpha", type=float, default=0)
    p.add_argument("--lora-targets", default="q,v")
    run(p.parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
