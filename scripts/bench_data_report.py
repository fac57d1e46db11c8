#!/usr/bin/env python3
"""Per-rank data time against the world size: one run dir per argument.

Every figure is read from the runs' per-rank HDF5 metrics files (the measured,
post-warmup steps): data_s is the time a rank spends building its own micro-batches
for a step; the loss normaliser's one-scalar all-reduce is counted in comm_s.
"""
import os
import sys
from pathlib import Path

import h5py
import numpy as np
import tomllib

from bench_common import cpu_model, skip_first_steps


def summarise(run_dir):
    per_rank, comm = [], []
    for path in sorted((Path(run_dir) / "metrics").glob("rank_*.h5")):
        with h5py.File(path, "r") as f:
            cfg = tomllib.loads(f["config"].asstr()[()])
            warm = skip_first_steps(cfg)
            keep = f["steps"]["step"][:] >= warm
            per_rank.append(np.median(f["steps"]["data_s"][:][keep]))
            comm.append(np.median(f["steps"]["comm_s"][:][keep]))
            world = int(f.attrs["world_size"])
    mb = cfg["training"]["micro_batch_size"]
    return {"world": world, "global": mb * world, "mb": mb, "seq": cfg["data"]["seq_len"],
            "lo": min(per_rank), "hi": max(per_rank), "comm": float(np.median(comm)),
            "steps": int(keep.sum())}


rows = [summarise(d) for d in sys.argv[1:]]
base = rows[0]["hi"]
print("# Per-rank data time against the world size\n")
print(f"Machine: {cpu_model()}, {os.cpu_count()} cores, `scripts/bench.sh data`: the tiny model through `launcher "
      f"--nproc-per-node N`, synthetic data, seq {rows[0]['seq']}, micro-batch {rows[0]['mb']} "
      "per rank (the global batch grows with the world). data = median over the measured "
      "steps of each rank's `data_s` (building its own micro-batches); the range is over "
      "ranks. Ratio = slowest rank against world 1. Target: flat.\n")
print("| world | global batch | measured steps | data ms/step per rank (min–max) "
      "| vs world 1 | comm ms/step p50 |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['world']} | {r['global']} | {r['steps']} | {1e3*r['lo']:.3f}–{1e3*r['hi']:.3f} "
          f"| {r['hi']/base:.2f}× | {1e3*r['comm']:.2f} |")
