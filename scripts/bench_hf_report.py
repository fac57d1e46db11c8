#!/usr/bin/env python3
"""Markdown report of `scripts/bench.sh hfload`: time to load a 274 M-parameter model from
safetensors, RSS per rank before loading and its peak while loading (VmRSS sampled after
each tensor slice is copied, before its file pages are dropped; from each rank's "loaded ..."
log line), world 1 and ZeRO-3 world 2, against the full fp32 model size.

Usage: bench_hf_report.py RUNS_DIR MODEL_DIR
"""
import json
import re
import sys
from pathlib import Path

from bench_common import cpu_model

runs, model = Path(sys.argv[1]), Path(sys.argv[2])
LINE = re.compile(r"loaded \S+: (\d+) bytes read by this rank in ([\d.e-]+) s; RSS (\d+) MiB before "
                  r"loading, (\d+) MiB peak while loading")


def ranks(name):
    out = []
    for log in sorted(runs.glob(f"{name}.r*.log")):
        m = LINE.search(log.read_text())
        assert m, f"no 'loaded' line in {log}"
        out.append((int(m.group(1)), float(m.group(2)), int(m.group(3)), int(m.group(4))))
    return out


cfg = json.loads((model / "config.json").read_text())
file_bytes = (model / "model.safetensors").stat().st_size
full_mib = file_bytes / 2**20  # fp32 file: header + every parameter once
print("# Loading a Hugging Face model: time and peak RSS per rank\n")
print(f"Model: random fp32 LlamaForCausalLM with the mem-270m shape (D{cfg['hidden_size']}/"
      f"L{cfg['num_hidden_layers']}, vocab {cfg['vocab_size']}), one model.safetensors of "
      f"{file_bytes / 2**20:.0f} MiB = the full fp32 model. CPU: {cpu_model()}, 1 thread per "
      "rank, page cache warm (the file was just written). Time = the trainer's load (open, "
      "validate, copy this rank's boxes, refresh parameters). RSS before loading = the built "
      "layout (fp32 master weights, DDP's gradient buckets, runtime; ZeRO allocates its "
      "gradient shard in the first step), before the optimizer exists; "
      "peak while loading = VmRSS sampled after each copied slice, before its file pages are "
      "dropped. `scripts/bench.sh hfload`.\n")
print("| layout | rank | bytes read | load time | RSS before loading | peak while loading "
      "| added by loading | added / full fp32 model |")
print("|---|---|---|---|---|---|---|---|")
for name, label in (("w1", "world 1"), ("zero3_w2", "ZeRO-3 world 2")):
    for r, (b, t, rss0, peak) in enumerate(ranks(name)):
        print(f"| {label} | {r} | {b / 2**20:.0f} MiB | {t:.2f} s | {rss0} MiB | {peak} MiB | "
              f"{peak - rss0} MiB | {(peak - rss0) / full_mib:.3f} |")

z3 = max(peak for *_, peak in ranks("zero3_w2"))
ok = "yes" if z3 < full_mib else "**no**"
print(f"\n- Target: peak RSS per rank while loading at ZeRO-3 world 2 below the full "
      f"fp32 model: {ok} ({z3} MiB max over ranks vs {full_mib:.0f} MiB).")
print("\nWhat the loader itself adds per rank (its copies and the file pages of the slice being "
      "copied, dropped after each slice) is the \"added by loading\" column; under ZeRO-3 each "
      "rank reads half the bytes.")
