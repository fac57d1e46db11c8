#!/usr/bin/env python3
"""Plain Python PyTorch eager baseline for `scripts/bench.sh eager`.

The same Llama as ftbench's trainer (scripts/bench_llama.py: RMSNorm, rotate_half rotary
embeddings, causal attention as matmul + masked softmax + matmul with grouped KV heads, SwiGLU
MLP, untied output projection), the same training step (forward, mean cross-entropy, backward,
global-norm clipping at 1.0, AdamW beta 0.9/0.95), fp32, synthetic tokens, written the way a
user would in eager PyTorch: no torch.compile, no fused kernels.

Usage: bench_eager.py --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 384 --vocab 512
                      --seq 128 --batch 2 --threads 1 --steps 60 --warmup 10 --out FILE.json
Writes {"tokens_per_s": ..., "step_time_p50_s": ..., "measured_steps": ..., "threads": ...,
"torch_version": ...}: tokens/s = sum of B*T over the measured steps / their wall time.
"""
import argparse
import json
import time

import torch

from bench_llama import Llama, Shape


def main():
    p = argparse.ArgumentParser()
    for k, d in [("dim", 128), ("layers", 2), ("heads", 4), ("kv-heads", 2), ("ffn", 384),
                 ("vocab", 512), ("seq", 128), ("batch", 2), ("threads", 1), ("steps", 60),
                 ("warmup", 10)]:
        p.add_argument(f"--{k}", type=int, default=d)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model = Llama(Shape(a.dim, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab, a.seq),
                  attention="matmul")
    model.init_weights(torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    gen = torch.Generator().manual_seed(1)
    times = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
        loss = model(tokens[:, :-1], tokens[:, 1:])
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    measured = times[a.warmup:]
    result = {"tokens_per_s": a.batch * a.seq * len(measured) / sum(measured),
              "step_time_p50_s": sorted(measured)[len(measured) // 2],
              "measured_steps": len(measured), "threads": torch.get_num_threads(),
              "torch_version": torch.__version__,
              "params": sum(p.numel() for p in model.parameters()),
              "last_loss": float(loss)}
    with open(a.out, "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
