#!/usr/bin/env python3
"""Markdown report of `scripts/bench.sh textdata`: JSONL + sentencepiece against a
pre-tokenized .bin of the same token stream, D512/L8, 1 rank.

Usage: bench_textdata_report.py RUNS_DIR   (RUNS_DIR holds bin{1,2}/, jsonl{1,2}/, their
logs, data/ and loadavg.before/after, as bench.sh wrote them)

Every figure is read from the runs' HDF5 metrics files (rank 0, measured = post-warmup
steps): tokens/s = sum of padded tokens / sum of step times; data = `data_s`, the time the
rank spends building its micro-batches in a step. The start-up cost of the text source is
the trainer's own log line (tokenizing, or reading the token cache). Checks:
- the token cache the trainer wrote beside the JSONL (trainer/data/text_dataset.h), its
  documents concatenated, equals the .bin stream (spm_encode's ids with bos/eos);
- the per-step losses of the two sources are equal (same windows, same seed, 1 thread).
"""
import re
import struct
import sys
from pathlib import Path

import h5py
import numpy as np
import tomllib

from bench_common import cpu_model, skip_first_steps

TARGET_GAP = 0.02


def summarise(run_dir):
    with h5py.File(Path(run_dir) / "metrics" / "rank_00000.h5", "r") as f:
        assert f["status"].attrs["state"] == "completed", run_dir
        cfg = tomllib.loads(f["config"].asstr()[()])
        s = {k: np.asarray(f["steps"][k][:]) for k in f["steps"]}
        threads = int(f.attrs.get("env_intra_threads", 0))
    keep = s["step"] >= skip_first_steps(cfg)
    t = s["step_time_s"][keep].sum()
    return {"steps": int(keep.sum()), "tok_s": s["tokens_padded"][keep].sum() / t,
            "data_p50": float(np.median(s["data_s"][keep])), "data_max": float(s["data_s"][keep].max()),
            "data_share": s["data_s"][keep].sum() / t, "step_p50": float(np.median(s["step_time_s"][keep])),
            "loss": s["loss"], "cfg": cfg, "threads": threads}


def startup(log):
    """The text source's start-up line in a trainer log, shortened."""
    text = Path(log).read_text(errors="replace")
    m = re.search(r"tokenized (\d+) documents of \S+ \((\d+) tokens\) in ([0-9.e+-]+) s", text)
    if m:
        return f"tokenized {m[1]} documents ({m[2]} tokens) in {float(m[3]):.2f} s, cache written"
    m = re.search(r"read the token ids of (\d+) documents of \S+ \((\d+) tokens\) from the cache "
                  r"\S+ in ([0-9.e+-]+) s", text)
    if m:
        return f"read {m[1]} documents ({m[2]} tokens) from the token cache in {float(m[3]):.3f} s"
    return "no tokenizer line in the log"


def cache_stream(jsonl):
    caches = sorted(jsonl.parent.glob(jsonl.name + ".tok-*.bin"))
    assert len(caches) == 1, caches
    raw = caches[0].read_bytes()
    assert raw[:8] == b"FTBTOK01", caches[0]
    (n,), off, out = struct.unpack_from("<Q", raw, 8), 16, []
    for _ in range(n):
        length, _prompt = struct.unpack_from("<Qq", raw, off)
        off += 16
        out.append(np.frombuffer(raw, dtype="<i4", count=length, offset=off))
        off += 4 * length
    return np.concatenate(out)


def main(runs):
    runs = Path(runs)
    rows = {(src, r): summarise(runs / f"{src}{r}") for r in (1, 2) for src in ("bin", "jsonl")}
    data = runs / "data"
    bin_stream = np.fromfile(data / "corpus.bin", dtype="<u2").astype(np.int64)
    cached = cache_stream(data / "corpus.jsonl")
    same_stream = len(cached) == len(bin_stream) and bool(np.all(cached == bin_stream))
    cfg = rows["bin", 1]["cfg"]
    seq, mb = cfg["data"]["seq_len"], cfg["training"]["micro_batch_size"]
    used = cfg["training"]["max_steps"] * mb * seq + 1
    load = [(runs / f"loadavg.{w}").read_text().strip() for w in ("before", "after")]
    print("# Text data: JSONL + sentencepiece against a pre-tokenized .bin, D512/L8, 1 rank\n")
    print(f"Machine: {cpu_model()}, {rows['bin', 1]['threads']} intra-op thread(s), load average "
          f"{load[0]} before and {load[1]} after the runs. `scripts/bench.sh textdata`: a "
          f"deterministic corpus of {len(cached)} tokens (data/corpus.jsonl, one {{\"text\": ...}} "
          "a line), a 4000-piece unigram sentencepiece model trained on it with `spm_train`, and "
          "a .bin of the same text encoded by `spm_encode` with bos/eos around each document. "
          f"configs/runs/bench-d512.toml (seq {seq}, micro-batch {mb}) through `launcher "
          "--nproc-per-node 1`; the JSONL with `data.padding = \"packing\"`, so both sources "
          "give the same windows. Two alternating rounds; round 1's JSONL run tokenizes at "
          "start and writes the token cache, round 2's reads it. tokens/s = padded tokens over "
          "step time of the measured (post-warm-up) steps; data = the step's `data_s`. "
          f"Target: the JSONL run's tokens/s within {100 * TARGET_GAP:.0f} % of the "
          ".bin run's.\n")
    print("| round | source | measured steps | tokens/s | data ms/step p50 (max) | data share "
          "| step p50 s | start-up of the text source |")
    print("|---|---|---|---|---|---|---|---|")
    for (src, r), x in rows.items():
        start = startup(runs / f"{src}{r}.log") if src == "jsonl" else "(reads the .bin)"
        print(f"| {r} | {'.bin' if src == 'bin' else 'JSONL + sentencepiece'} | {x['steps']} | "
              f"{x['tok_s']:.1f} | {1e3 * x['data_p50']:.3f} ({1e3 * x['data_max']:.3f}) | "
              f"{100 * x['data_share']:.3f} % | {x['step_p50']:.2f} | {start} |")
    print()
    for r in (1, 2):
        b, j = rows["bin", r], rows["jsonl", r]
        print(f"- round {r}: JSONL / .bin tokens/s = {j['tok_s'] / b['tok_s']:.4f} "
              f"(gap {100 * (1 - j['tok_s'] / b['tok_s']):+.2f} %); data time per step "
              f"{1e3 * (j['data_p50'] - b['data_p50']):+.3f} ms (p50, JSONL − .bin)")
    best_b = max(rows["bin", r]["tok_s"] for r in (1, 2))
    best_j = max(rows["jsonl", r]["tok_s"] for r in (1, 2))
    gap = 1 - best_j / best_b
    print(f"- best rounds: gap **{100 * gap:+.2f} %** (gap = 1 − JSONL/.bin tokens/s; negative = "
          f"the JSONL run was faster; target ≤ {100 * TARGET_GAP:.0f} %: "
          f"{'met' if gap <= TARGET_GAP else 'NOT met'})")
    print(f"- same tokens: the trainer's token cache of the JSONL equals the .bin stream: "
          f"{'yes' if same_stream else 'NO'} ({len(cached)} vs {len(bin_stream)} tokens; the "
          f"runs train on the first {used} of them)")
    for r in (1, 2):
        lb, lj = rows["bin", r]["loss"], rows["jsonl", r]["loss"]
        diff = float(np.max(np.abs(lb - lj))) if len(lb) == len(lj) else float("nan")
        print(f"- same losses, round {r}: max |loss(JSONL) − loss(.bin)| over {len(lb)} steps = "
              f"{diff:.3g} (first step {lj[0]:.5f})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
