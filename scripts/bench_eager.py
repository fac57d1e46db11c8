#!/usr/bin/env python3
"""Plain Python PyTorch eager baseline for `scripts/bench.sh eager`.

The same Llama as ftbench's trainer (RMSNorm, rotary embeddings, causal attention as
matmul + masked softmax + matmul with grouped KV heads, SwiGLU MLP, untied output
projection), the same training step (forward, mean cross-entropy, backward, global-norm
clipping at 1.0, AdamW beta 0.9/0.95), fp32, synthetic tokens, written the way a user
would in eager PyTorch: no torch.compile, no fused kernels.

Usage: bench_eager.py --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 384 --vocab 512
                      --seq 128 --batch 2 --threads 1 --steps 60 --warmup 10 --out FILE.json
Writes {"tokens_per_s": ..., "step_time_p50_s": ..., "measured_steps": ..., "threads": ...,
"torch_version": ...}: tokens/s = sum of B*T over the measured steps / their wall time.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, seq, theta):
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    ang = torch.outer(torch.arange(seq).float(), inv)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):  # x: B, H, T, hd (pairs interleaved)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.h, self.kv, self.hd = a.heads, a.kv_heads, a.dim // a.heads
        self.wq = nn.Linear(a.dim, a.heads * self.hd, bias=False)
        self.wk = nn.Linear(a.dim, a.kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(a.dim, a.kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(a.heads * self.hd, a.dim, bias=False)
        self.w1 = nn.Linear(a.dim, a.ffn, bias=False)
        self.w2 = nn.Linear(a.ffn, a.dim, bias=False)
        self.w3 = nn.Linear(a.dim, a.ffn, bias=False)
        self.attn_norm = RMSNorm(a.dim, 1e-5)
        self.ffn_norm = RMSNorm(a.dim, 1e-5)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.h // self.kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.hd) + mask
        attn = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.wo(attn)
        g = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(g)) * self.w3(g))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = nn.Embedding(a.vocab, a.dim)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.dim, 1e-5)
        self.out = nn.Linear(a.dim, a.vocab, bias=False)
        cos, sin = rope_tables(a.dim // a.heads, a.seq, 10000.0)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.register_buffer("mask", torch.full((a.seq, a.seq), float("-inf")).triu(1))

    def forward(self, tokens):
        x = self.emb(tokens)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        return self.out(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    for k, d in [("dim", 128), ("layers", 2), ("heads", 4), ("kv-heads", 2), ("ffn", 384),
                 ("vocab", 512), ("seq", 128), ("batch", 2), ("threads", 1), ("steps", 60),
                 ("warmup", 10)]:
        p.add_argument(f"--{k}", type=int, default=d)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Llama(a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    gen = torch.Generator().manual_seed(1)
    times = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
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
