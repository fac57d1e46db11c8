#!/usr/bin/env python3
"""The plain PyTorch training loop that `scripts/bench.sh gpu` measures ftbench against.

The trainer's model (scripts/bench_llama.py) with SDPA causal attention (GQA by
repeat_interleave, as the trainer), torch.optim.AdamW(fused=True) with the trainer's defaults
(common/run_keys.cpp: lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0, no LR warm-up) and its
clipping (global L2 norm 1.0, torch.nn.utils.clip_grad_norm_); bf16 as the trainer does it: fp32
parameters (the master weights AdamW updates) cast to bf16 where used, a bf16 residual stream,
norm statistics, SwiGLU and the cross-entropy in fp32.

Usage: bench_gpu_reference.py (--model KEY=VALUE ... | --model-dir HF_DIR) --tokens FILE.bin
           [--bin-dtype uint16|uint32] --seq 2048 --batch 1 2 4 8 [--warmup 2] [--steps 4]
           [--rounds 3] [--device cuda|cpu] [--dtype bf16|fp32] [--compile] [--threads N]
           [--seed 0] [--lr 3e-4] [--beta1 0.9] [--beta2 0.95] [--eps 1e-8]
           [--weight-decay 0] [--max-grad-norm 1.0] --out FILE.json

The model: --model takes the trainer's model.* overrides (model.dim=2048 model.n_layers=16 ...)
and draws its weights as the trainer does (every matrix N(0, 0.02) from --seed, norms ones: the
same distribution, not the trainer's values); --model-dir takes the shape and the weights of an
HF LlamaForCausalLM directory (config.json + safetensors), as the trainer's
model.from_pretrained does, so both train the same weights.

The tokens are the trainer's: the .bin cut into windows of seq+1 ids that start seq apart, step s
taking windows s*B .. s*B+B-1 (trainer/docs/data.md). Each micro-batch B is a new run (the
initial weights again, a new AdamW): `warmup` steps, then `rounds` rounds of `steps` measured
steps. --compile compiles each transformer block (regional compilation, as torchtitan does: the
blocks share one compiled graph per micro-batch) and the head (final norm, output projection,
cross-entropy) with torch.compile(dynamic=False), backward through AOTAutograd; the embedding and
the optimizer step (fused AdamW) stay eager. Each step ends with a device synchronisation; its
wall time includes building the batch.

Writes FILE.json: {"torch_version", "device_name", "dtype", "compile", "params", "seq", "warmup",
"steps", "rounds", "runs": [{"micro_batch", "fits", "error", "losses", "grad_norms" (before
clipping), "step_times_s", "rounds": [{"tokens_per_s", "step_time_median_s"}], "warmup_s",
"compile_s", "peak_allocated_bytes"}]}: tokens/s of a round = B*seq*steps / the round's summed
step times; compile_s (with --compile) = the warm-up's wall time less warm-up steps x the median
measured step; a micro-batch out of device memory has "fits": false.
"""
import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bench_llama import Llama, Shape, load_weights


class Tokens:
    """The .bin token stream in the trainer's windows (trainer/docs/data.md)."""

    def __init__(self, path, dtype, seq):
        self.ids = np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
        self.seq = seq
        self.windows = (len(self.ids) - 1) // seq
        if self.windows < 1:
            raise SystemExit(f"{path}: {len(self.ids)} tokens, fewer than seq + 1 ({seq + 1})")

    def batch(self, step, micro_batch, device):
        first = [(step * micro_batch + b) % self.windows * self.seq for b in range(micro_batch)]
        rows = np.stack([self.ids[i:i + self.seq + 1] for i in first]).astype(np.int64)
        t = torch.from_numpy(rows).to(device)
        return t[:, :-1], t[:, 1:]


def build(a, device):
    """The model on `device`, its weights not set yet (reset sets them)."""
    shape = (Shape.from_hf(json.loads((Path(a.model_dir) / "config.json").read_text()))
             if a.model_dir else Shape.from_keys(a.model))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    with torch.device(device):
        model = Llama(shape, "sdpa", dtype)
    if a.compile:
        for block in model.layers:
            block.compile(dynamic=False)
        model.head_loss = torch.compile(model.head_loss, dynamic=False)
    return model


def reset(a, model, device):
    """The initial weights, the same in every run: the HF directory's, or drawn from --seed."""
    if a.model_dir:
        load_weights(model, a.model_dir)
    else:
        model.init_weights(torch.Generator(device=device).manual_seed(a.seed))


def train_step(model, opt, x, y, max_grad_norm):
    """The loss and the gradients' global L2 norm before clipping (max_grad_norm 0: none)."""
    loss = model(x, y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm or float("inf"))
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach(), norm


def run(a, model, tokens, micro_batch, device, sync):
    """One micro-batch as a new run: the initial weights, a new optimizer, warm-up and measured
    steps."""
    reset(a, model, device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                            weight_decay=a.weight_decay, fused=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses, norms, times = [], [], []
    for step in range(a.warmup + a.rounds * a.steps):
        t0 = time.perf_counter()
        x, y = tokens.batch(step, micro_batch, device)
        loss, norm = train_step(model, opt, x, y, a.max_grad_norm)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        norms.append(norm.item())
    return summary(a, micro_batch, losses, norms, times, device)


def summary(a, micro_batch, losses, norms, times, device):
    measured = times[a.warmup:]
    rounds = [measured[r * a.steps:(r + 1) * a.steps] for r in range(a.rounds)]
    warmup_s = sum(times[:a.warmup])
    return {"micro_batch": micro_batch, "fits": True, "error": "", "losses": losses,
            "grad_norms": norms, "step_times_s": times,
            "rounds": [{"tokens_per_s": micro_batch * a.seq * len(r) / sum(r),
                        "step_time_median_s": statistics.median(r)} for r in rounds],
            "warmup_s": warmup_s,
            "compile_s": (warmup_s - a.warmup * statistics.median(measured)) if a.compile else None,
            "peak_allocated_bytes": (torch.cuda.max_memory_allocated(device)
                                     if device.type == "cuda" else None)}


def out_of_memory(e):
    """True when e, or an exception it came from (torch.compile wraps what its kernels raise),
    is the device's out-of-memory error."""
    while e is not None:
        if isinstance(e, torch.OutOfMemoryError):
            return True
        e = e.__cause__ or e.__context__
    return False


def train(a):
    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    tokens = Tokens(a.tokens, a.bin_dtype, a.seq)
    model = build(a, device)
    runs = []
    for micro_batch in a.batch:
        print(f"reference: micro-batch {micro_batch}, {'compiled' if a.compile else 'eager'}",
              flush=True)
        try:
            runs.append(run(a, model, tokens, micro_batch, device, sync))
        except Exception as e:  # noqa: BLE001 (out of memory is a result; anything else is not)
            if not out_of_memory(e):
                raise
            runs.append({"micro_batch": micro_batch, "fits": False, "error": str(e).split("\n")[0]})
        model.zero_grad(set_to_none=True)  # a failed step's gradients
        gc.collect()  # and its other tensors, before the next micro-batch
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(json.dumps({k: v for k, v in runs[-1].items()
                          if k not in ("losses", "grad_norms", "step_times_s")}), flush=True)
    result = {"torch_version": torch.__version__,
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "dtype": a.dtype, "compile": a.compile,
              "params": sum(p.numel() for p in model.parameters()), "seq": a.seq,
              "warmup": a.warmup, "steps": a.steps, "rounds": a.rounds, "runs": runs}
    Path(a.out).write_text(json.dumps(result, indent=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    model = ap.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", nargs="+", metavar="KEY=VALUE")
    model.add_argument("--model-dir")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--bin-dtype", default="uint16", choices=["uint16", "uint32"])
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, nargs="+", required=True)
    for k, d in [("warmup", 2), ("steps", 4), ("rounds", 3), ("threads", 0), ("seed", 0)]:
        ap.add_argument(f"--{k}", type=int, default=d)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--compile", action="store_true")
    for k, d in [("lr", 3e-4), ("beta1", 0.9), ("beta2", 0.95), ("eps", 1e-8),
                 ("weight-decay", 0.0), ("max-grad-norm", 1.0)]:
        ap.add_argument(f"--{k}", type=float, default=d)
    ap.add_argument("--out", required=True)
    train(ap.parse_args(argv))


if __name__ == "__main__":
    main()
