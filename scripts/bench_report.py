#!/usr/bin/python3
"""Summarises trainer benchmark runs (one run dir per argument) as a markdown table.

Every number is read from the run's rank-0 HDF5 metrics file: tokens/s is the sum of
padded tokens over the sum of step times of the measured (post-warmup) steps, MFU is
flops/token x tokens/s/device / the GEMM peak the trainer measured at start.
"""
import platform
import sys
from pathlib import Path

import h5py
import numpy as np
import tomllib


def summarise(run_dir):
    with h5py.File(Path(run_dir) / "metrics" / "rank_00000.h5", "r") as f:
        cfg = tomllib.loads(f["config"].asstr()[()])
        warm = cfg["training"]["warmup_steps"]
        s = {k: np.asarray(f["steps"][k][:]) for k in f["steps"]}
        keep = s["step"] >= warm
        t = s["step_time_s"][keep].sum()
        tok = s["tokens_padded"][keep].sum()
        peak = float(f.attrs["peak_flops"])
        mfu_steps = s["mfu"][keep]
        flops_per_token = s["flops_per_token"][0]
        return {
            "dtype": cfg["training"]["dtype"],
            "steps": int(keep.sum()),
            "tok_s": tok / t,
            "mfu": flops_per_token * tok / t / f.attrs["world_size"] / peak,
            "mfu_best": mfu_steps.max(),
            "peak": peak,
            "peak_source": f.attrs["peak_source"],
            "step_s": np.median(s["step_time_s"][keep]),
            "fwd": s["forward_s"][keep].sum() / t,
            "bwd": s["backward_s"][keep].sum() / t,
            "opt": s["optimizer_s"][keep].sum() / t,
            "rss": s["peak_rss_bytes"].max() / 2**20,
        }


rows = [summarise(d) for d in sys.argv[1:]]
print("# Trainer throughput: D512/L8 (58 M params), seq 512, micro-batch 4, 1 thread\n")
print(f"Machine: {platform.processor() or platform.machine()}, `scripts/bench.sh trainer`. "
      "MFU = flops/token (6N + 12·L·H·hd·T) × tokens/s ÷ the GEMM peak measured by the trainer "
      "at start in the same dtype and thread count. Targets: ≥ 85 % fp32, ≥ 70 % bf16.\n")
print("| dtype | measured steps | tokens/s | MFU | best-step MFU | GEMM peak GFLOP/s | step p50 s "
      "| fwd / bwd / opt | peak RSS MiB |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['dtype']} | {r['steps']} | {r['tok_s']:.1f} | {100*r['mfu']:.1f} % | "
          f"{100*r['mfu_best']:.1f} % | {r['peak']/1e9:.1f} ({r['peak_source']}) | "
          f"{r['step_s']:.2f} | {100*r['fwd']:.0f} / {100*r['bwd']:.0f} / {100*r['opt']:.0f} % | "
          f"{r['rss']:.0f} |")
