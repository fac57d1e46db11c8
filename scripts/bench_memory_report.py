#!/usr/bin/python3
"""Markdown report of the memory benchmark: measured peak RSS per rank (VmHWM, from
each rank's HDF5 peak_rss_bytes) against `trainer --estimate-memory`, for ZeRO 0-3.

Targets (issue 4): ZeRO-1 < DDP, ZeRO-3 <= 0.6 x DDP, estimate within 25 % of measured.
"""
import re
import sys
from pathlib import Path

import h5py

runs = Path(sys.argv[1])
rows = []
for stage in range(4):
    d = runs / f"zero{stage}"
    peaks = []
    for f in sorted((d / "metrics").glob("rank_*.h5")):
        with h5py.File(f, "r") as h:
            assert h["status"].attrs["state"] == "completed", f
            peaks.append(float(h["steps/peak_rss_bytes"][:].max()))
    est_text = (d / "estimate.txt").read_text()
    est = float(re.search(r"total \([^)]*\)\s+([\d.]+) GiB", est_text).group(1)) * 2**30
    params = int(re.search(r"parameters on this tp rank: (\d+)", est_text).group(1))
    rows.append((stage, max(peaks), min(peaks), est, params))

ddp = rows[0][1]
print("# Memory: peak RSS per rank, world 2 (DDP vs ZeRO), 274 M-parameter model\n")
print(f"Model mem-270m ({rows[0][4] / 1e6:.0f} M params), fp32, AdamW, micro-batch 1 x 64 "
      "tokens, 3 steps, dp_shard = 2, jemalloc. Measured = max over ranks of VmHWM. "
      "`scripts/bench.sh memory`.\n")
print("| zero_stage | measured peak RSS (max / min rank) | vs DDP | estimate | estimate error |")
print("|---|---|---|---|---|")
for stage, mx, mn, est, _ in rows:
    print(f"| {stage} | {mx / 2**20:.0f} / {mn / 2**20:.0f} MiB | {mx / ddp:.2f} | "
          f"{est / 2**20:.0f} MiB | {100 * (est - mx) / mx:+.1f} % |")
z1, z3 = rows[1][1], rows[3][1]
worst = max(abs(est - mx) / mx for _, mx, _, est, _ in rows)
print()
print(f"- ZeRO-1 < DDP: {'yes' if z1 < ddp else 'NO'} ({z1 / 2**20:.0f} < {ddp / 2**20:.0f} MiB)")
print(f"- ZeRO-3 <= 0.6 x DDP: {'yes' if z3 <= 0.6 * ddp else 'NO'} ({z3 / ddp:.2f})")
print(f"- estimator within 25 %: {'yes' if worst <= 0.25 else 'NO'} (worst {100 * worst:.1f} %)")
