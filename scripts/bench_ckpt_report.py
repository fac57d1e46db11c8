#!/usr/bin/env python3
"""Markdown report of `scripts/bench.sh ckpt`, from RUNS_DIR.

Save and load per rank: the trainer's own log lines (trainer/loop/checkpoint_hook.cpp)
  checkpoint save: rank R wrote B bytes in S s (serialize, write, fsync, checksum); whole save W s
  checkpoint load: rank R read B bytes in S s
of run 1 (saves after steps 1 and 2) and the load of run 2 (resumes from step 1), against dd
conv=fsync of each rank's step-2 file, all ranks at once, to the same directory (dd's own
"copied, S s").
Target: whole save <= 2x dd.

Stop agreement (target: <= 0.5 % of the step time, tiny model, world 2). The stop flag has
no collective of its own: it is one of the 8 doubles of the step's agreement all-reduce
(trainer/loop/train.cpp agree()), which runs every step anyway for the loss, token counts and
the clipping grad norm. Three figures, all against the tiny run's median step time
(`step_time_s`, HDF5, steps >= warmup, the smaller rank median):
- marginal cost of the stop flag: ftb_agree_bench (trainer/bench/agree_cost.cpp) times
  agree()'s operation with 7 and 8 doubles interleaved on one Gloo world-2 group; the
  median of the per-round differences (8 - 7) with its distribution-free 95 % confidence
  interval (order statistics of the median). The interval's upper end, max over ranks, is
  the figure compared with the target.
- upper bound for a design with an agreement collective of its own: the median latency of
  the 8-double all-reduce, back to back (peers aligned), from the same bench.
- the in-trainer `agree_s` (the whole 8-double all-reduce timed in the step): it includes
  waiting for the slower rank, so it measures skew more than the agreement.
"""
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import h5py
import numpy as np

from bench_common import cpu_model, skip_first_steps

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
            warm = skip_first_steps(tomllib.loads(f["config"].asstr()[()]))
            keep = f["steps/step"][:] >= warm
            agree = f["steps/agree_s"][:][keep]
            step = f["steps/step_time_s"][:][keep]
            rows.append((int(f.attrs["rank"]), int(keep.sum()), np.median(step), agree.min(),
                         np.median(agree), agree.sum() / step.sum()))
    return rows


def median_ci(d):
    """Median of d and its distribution-free 95 % confidence interval (order statistics:
    the ranks n/2 -+ 1.96 sqrt(n)/2 of the sorted sample)."""
    d = np.sort(d)
    n = len(d)
    k = max(0, int(np.floor((n - 1.96 * np.sqrt(n)) / 2)))
    return float(np.median(d)), float(d[k]), float(d[n - 1 - k])


def agreement_ab():
    """{rank: (rounds, {n: (p10, p50, p90)}, (8-7 median, lo, hi), (8-5 median, lo, hi))} in us,
    from ftb_agree_bench's agree_rank_R.csv."""
    out = {}
    for path in sorted((runs / "agree_ab").glob("agree_rank_*.csv")):
        t = np.genfromtxt(path, delimiter=",", names=True)
        us = {n: t[f"us_{n}"] for n in (5, 7, 8)}
        if "gloo_8" in t.dtype.names:
            us["gloo"] = t["gloo_8"]
        q = {n: tuple(np.percentile(v, [10, 50, 90])) for n, v in us.items()}
        out[int(path.stem.rsplit("_", 1)[1])] = (len(t), q, median_ci(us[8] - us[7]),
                                                 median_ci(us[8] - us[5]))
    assert out, f"{runs / 'agree_ab'}: no agree_rank_*.csv (ftb_agree_bench did not run)"
    return out


def pct(x):
    return f"{x * 100:.3f} %"


def ab_table(ab):
    print("| rank | rounds | 5 doubles p10 / p50 / p90 | 7 doubles p10 / p50 / p90 | "
          "8 doubles p10 / p50 / p90 | 8 - 7 (stop flag): median [95 % CI] | "
          "8 - 5 (stop + memory + control): median [95 % CI] |")
    print("|---|---|---|---|---|---|---|")
    for r, (n, q, d87, d85) in sorted(ab.items()):
        cols = " | ".join(" / ".join(f"{v:.0f}" for v in q[k]) + " us" for k in (5, 7, 8))
        print(f"| {r} | {n} | {cols} | {d87[0]:+.1f} us [{d87[1]:+.1f}, {d87[2]:+.1f}] | "
              f"{d85[0]:+.1f} us [{d85[1]:+.1f}, {d85[2]:+.1f}] |")


def trainer_table(rows):
    print("| rank | measured steps | step time p50 | agree_s min / p50 | sum agree_s / sum step time |")
    print("|---|---|---|---|---|")
    for r, n, st, amin, agree, share in rows:
        print(f"| {r} | {n} | {st * 1e3:.2f} ms | {amin * 1e6:.0f} / {agree * 1e6:.0f} us | "
              f"{share * 100:.2f} % |")


def agreement_report():
    rows = agreement()
    ab = agreement_ab()
    step = min(r[2] for r in rows)  # the smaller rank median: the larger share
    print("Stop agreement: tiny model (configs/runs/tiny.toml), world 2. The stop flag has no "
          "collective of its own: it is one of the 8 doubles of the step's agreement all-reduce "
          "(loss sum, padded and dataset tokens, stop flag, grad norm², memory flag, control "
          "command and id; trainer/loop/train.cpp `agree()`), which every step needs anyway for "
          "the loss and the clipping grad norm. What the stop agreement adds is therefore one "
          "double in that collective.\n")
    print(f"Step time (denominator): the tiny run, 300 steps, median `step_time_s` of the steps "
          f">= warmup, the smaller of the ranks' medians: {step * 1e3:.2f} ms.\n")
    tfile = runs / "agree_ab" / "transport.txt"
    transport = tfile.read_text().strip() if tfile.exists() else "world: Gloo"
    on_gloo = "local memory" not in transport
    print("A/B on one world-2 group with the trainer's default transport (" + transport + "; "
          "`ftb_agree_bench`, trainer/bench/agree_cost.cpp, "
          "through the launcher): `agree()`'s operation (tensor from N doubles, all-reduce, read "
          "back) with N = 5 (no stop, memory or control doubles), 7 (no stop flag) and 8 (as "
          "trained), interleaved in every round (all six orders in turn), back to back so the "
          "peers stay aligned. Each rank's own timings; the differences are per round, the "
          "confidence interval is the distribution-free one of the median.\n")
    ab_table(ab)
    if not on_gloo:
        print("\nBy local memory each rank posts its tensor's address, reads its peer's chunk "
              "and then the peer's reduced chunk (trainer/parallel/local_comm.h): the size "
              "differences here are a few bytes in the same reads.")
    gloo = [q["gloo"] for _, q, _, _ in ab.values() if "gloo" in q]
    if gloo:
        print("\nThe same 8-double all-reduce on a Gloo group of the same ranks (TCP loopback), "
              "timed in the same rounds: p10 / p50 / p90 "
              + "; ".join(" / ".join(f"{v:.0f}" for v in g) + " us" for g in gloo)
              + " (rank 0, rank 1).")
    if on_gloo:
        print("\nWhy 8 - 7 and 8 - 5 differ on Gloo: its ring all-reduce (gloo/allreduce.cc) splits the "
              "buffer (this small) into 2 x world segments of ceil(bytes / (2 x world)) bytes, rounded up to "
              "whole elements. At world 2, 7 and 8 doubles both travel as 4 segments of up to 2 "
              "doubles, so the stop flag adds 8 bytes to messages that are sent anyway; with 5 "
              "doubles the last segment is empty and its messages are skipped.")
    marginal_hi = max(d87[2] for _, _, d87, _ in ab.values()) * 1e-6
    marginal = max(d87[0] for _, _, d87, _ in ab.values()) * 1e-6
    aligned = max(q[8][1] for _, q, _, _ in ab.values()) * 1e-6
    print("\nIn the trainer: `agree_s` (HDF5, per step) times the whole 8-double all-reduce inside "
          "the step. A rank that arrives first waits there for the slower one, so it measures "
          "the ranks' skew more than the agreement; it is not the stop agreement's cost.\n")
    trainer_table(rows)
    in_trainer = max(share for *_, share in rows)
    print(f"\n| figure, as a share of the {step * 1e3:.2f} ms step | share |")
    print("|---|---|")
    print(f"| **stop flag's marginal cost (8 - 7 doubles), upper end of the 95 % CI, max over "
          f"ranks: compared with the target** | **{pct(marginal_hi / step)}** "
          f"(median {pct(marginal / step)}) |")
    print(f"| upper bound, an agreement collective of its own: aligned 8-double all-reduce p50 | "
          f"{pct(aligned / step)} |")
    print(f"| in-trainer `agree_s`, summed (the loss/norm all-reduce, waiting for the slower "
          f"rank included) | {pct(in_trainer)} |")
    print(f"\n- Target: stop agreement <= 0.5 % of the step time: "
          f"{'yes' if marginal_hi / step <= 0.005 else 'NO'} ({pct(marginal_hi / step)}: the "
          "stop flag's marginal cost, upper end of its 95 % CI). This is the figure compared "
          "because the flag is what the stop agreement adds: the all-reduce it rides in runs "
          "every step for the loss and grad norm whether or not stops are agreed. Were the "
          f"agreement a collective of its own, it would cost at most {pct(aligned / step)} "
          "(the aligned 8-double all-reduce).")


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
    print(f"\n- Target: whole save <= 2x dd of the same bytes: "
          f"{'yes' if worst <= 2 else 'NO'} (worst ratio {worst:.2f}).\n")
    agreement_report()


main()
