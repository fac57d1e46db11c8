#!/usr/bin/python3
"""Markdown report of `scripts/bench.sh ckpt` (issue 10 benchmarks), from RUNS_DIR.

Save and load per rank: the trainer's own log lines (trainer/checkpoint/hook.cpp)
  checkpoint save: rank R wrote B bytes in S s (serialize, write, fsync, checksum); whole save W s
  checkpoint load: rank R read B bytes in S s
of run 1 (saves after steps 1 and 2) and the load of run 2 (resumes from step 1), against dd
conv=fsync of each rank's step-2 file, all ranks at once, to the same directory (dd's own
"copied, S s").
Target: whole save <= 2x dd.

Stop agreement: the per-step `agree_s` (the step's agreement all-reduce, which carries the
stop flag) against `step_time_s`, from the tiny run's HDF5 files, steps >= warmup.
Target: <= 0.5 % of the step time.
"""
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import h5py
import numpy as np

from bench_common import cpu_model

runs = Path(sys.argv[1])
SAVE = re.compile(r"checkpoint save: rank (\d+) wrote (\d+) bytes in ([\d.e+-]+) s .*; whole save ([\d.e+-]+) s")
LOAD = re.compile(r"checkpoint load: rank (\d+) read (\d+) bytes in ([\d.e+-]+) s")
PARAMS = re.compile(r"model (\S+): ([\d.]+) M params")
DD = re.compile(r"^(\d+) bytes .* copied, ([\d.e+-]+) s", re.M)
CASES = [("d512", "D512/L8"), ("270m", "274 M (mem-270m)")]
LAYOUTS = [("ddp", "DDP"), ("zero3", "ZeRO-3")]


def saves(log):
    """[{rank: (bytes, write_s, whole_s)}] of each save in a run's log, in order."""
    out = []
    for m in SAVE.finditer(log):
        r = int(m[1])
        k = sum(r in s for s in out)  # this rank's k-th save
        if k == len(out):
            out.append({})
        out[k][r] = (int(m[2]), float(m[3]), float(m[4]))
    return out


def case(prefix):
    save_log = Path(f"{prefix}.save.log").read_text()
    load_log = Path(f"{prefix}.load.log").read_text()
    s1, s2 = saves(save_log)
    loads = {int(m[1]): (int(m[2]), float(m[3])) for m in LOAD.finditer(load_log)}
    dd = {}
    for f in Path(prefix).parent.glob(Path(prefix).name + ".dd.rank_*.log"):
        m = DD.search(f.read_text())
        dd[int(f.name.rsplit("rank_", 1)[1].split(".")[0])] = (int(m[1]), float(m[2]))
    params = PARAMS.search(save_log)
    assert s1 and s2 and loads and dd, f"{prefix}: missing save, load or dd figures"
    return s1, s2, loads, dd, f"{float(params[2]):.1f}" if params else "?"


def mib(b):
    return f"{b / 2**20:.0f} MiB"


def save_table():
    print("| model | layout | rank | file (bytes written) | save step 1: file / whole | "
          "save step 2: file / whole | dd conv=fsync, same bytes | whole save / dd | "
          "load: bytes read | load time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for key, name in CASES:
        for lkey, lname in LAYOUTS:
            prefix = runs / f"{key}.{lkey}"
            if not Path(f"{prefix}.save.log").exists():
                continue
            s1, s2, loads, dd, params = case(prefix)
            for r in sorted(s2):
                b2, w2, t2 = s2[r]
                _, w1, t1 = s1[r]
                dbytes, dsec = dd[r]
                assert dbytes == b2, f"{prefix}: dd copied {dbytes} bytes, rank {r} wrote {b2}"
                ratio = t2 / dsec
                worst = max(worst, ratio)
                lb, lt = loads[r]
                print(f"| {name}, {params} M params | {lname} | {r} | {mib(b2)} | "
                      f"{w1:.2f} / {t1:.2f} s | {w2:.2f} / {t2:.2f} s | {dsec:.2f} s | "
                      f"{ratio:.2f} | {mib(lb)} | {lt:.2f} s |")
    return worst


def agreement():
    rows = []
    for path in sorted((runs / "agree" / "metrics").glob("rank_*.h5")):
        with h5py.File(path, "r") as f:
            warm = tomllib.loads(f["config"].asstr()[()])["training"]["warmup_steps"]
            keep = f["steps/step"][:] >= warm
            agree = f["steps/agree_s"][:][keep]
            step = f["steps/step_time_s"][:][keep]
            rows.append((int(f.attrs["rank"]), int(keep.sum()), np.median(step), agree.min(),
                         np.median(agree), agree.sum() / step.sum()))
    return rows


def disk():
    out = subprocess.run(["df", "-T", str(runs)], capture_output=True, text=True).stdout
    dev, fstype = out.splitlines()[1].split()[:2]
    return f"{dev} ({fstype})"


def main():
    before = (runs / "loadavg.before").read_text().split()[:3]
    after = (runs / "loadavg.after").read_text().split()[:3]
    print("# Checkpoints: save and load per rank, and the per-step stop agreement\n")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; disk {disk()}; load average (1/5/15 min) "
          f"{' / '.join(before)} before the runs, {' / '.join(after)} after. "
          "`scripts/bench.sh ckpt`: world 2 through `launcher --nproc-per-node 2`, fp32, AdamW, "
          "micro-batch 1 x 64 tokens; run 1 saves after steps 1 and 2, run 2 resumes from "
          "step 1 (load). Times are what the trainer measures and logs per rank: "
          "file = serialize, write, fsync and checksum this rank's shard; whole = the "
          "collective save (rank agreement, manifest, directory fsync and rename included); "
          "load = read and place this rank's slices. dd = `dd bs=4M conv=fsync` of the same "
          "rank's step-2 file (from /dev/shm) to the same directory, the ranks' dd at once as "
          "in a save. DDP ranks split the replicated state between them (each slice is written "
          "once); ZeRO-3 ranks write their own shards.\n")
    worst = save_table()
    print(f"\n- Target (issue 10): whole save <= 2x dd of the same bytes: "
          f"{'yes' if worst <= 2 else 'NO'} (worst ratio {worst:.2f}).\n")
    rows = agreement()
    print("Stop agreement: tiny model (configs/runs/tiny.toml), world 2, 300 steps; `agree_s` = "
          "the step's agreement all-reduce (8 doubles: loss sum, token counts, grad norm², stop "
          "flag, memory flag, control request), timed around the collective, from the HDF5 "
          "files, steps >= warmup. The stop flag rides in this all-reduce, which the loss needs "
          "anyway, so its share is an upper bound on the stop agreement's cost.\n")
    print("| rank | measured steps | step time p50 | agree_s min / p50 | sum agree_s / sum step time |")
    print("|---|---|---|---|---|")
    for r, n, step, amin, agree, share in rows:
        print(f"| {r} | {n} | {step * 1e3:.2f} ms | {amin * 1e6:.0f} / {agree * 1e6:.0f} us | "
              f"{share * 100:.2f} % |")
    top = max(share for *_, share in rows)
    print(f"\n- Target (issue 10): stop agreement <= 0.5 % of the step time: "
          f"{'yes' if top <= 0.005 else 'NO'} ({top * 100:.2f} % max over ranks).")


main()
