#!/usr/bin/env python3
"""The report of `scripts/bench.sh gpu` (results/bench/gpu.md): ftbench against the plain
PyTorch loop of scripts/bench_gpu_reference.py, eager and compiled, on one GPU.

Usage: bench_gpu_report.py RUNS_DIR > results/bench/gpu.md

RUNS_DIR (what bench.sh gpu writes): nvidia-smi.txt (`nvidia-smi -q` before the runs), date,
the plan: models, micro_batches, steps ("WARMUP STEPS ROUNDS"); elapsed.tsv (part, seconds),
and per model MODEL/model.keys (the trainer's model.* keys both ran), MODEL/ftbench.mbB/ (the
trainer's run) with MODEL/ftbench.mbB.rc (its exit code: 5 = out of memory),
MODEL/{eager,compiled}.json with .rc. Every figure is read from these files; a planned run
without its exit code is "not run" (bench.sh gpu rewrites the report after each part, so a
benchmark stopped by a time limit leaves what it measured). A round's tokens/s = its tokens
over its summed step times (the trainer's steps/step_time_s, the reference's wall times); each
variant's best round is compared, the median of its rounds shown beside it. MFU = ftbench's
flops_per_token x tokens/s / the peak_flops it recorded (the GPU table).
"""
import json
import statistics
import sys
from pathlib import Path

import h5py
import numpy as np

TITLE = "ftbench vs plain PyTorch (eager and torch.compile) on one GPU, bf16, seq 2048"
TARGET_EAGER, TARGET_COMPILED = 1.3, 1.0
LABELS = {"d2048": "the D2048/L16 GQA model of scripts/gpu_check.py (LARGE)",
          "llama1b": "the shape of Llama-3.2-1B (tied embeddings, no rope scaling)"}


def nvidia_smi(text):
    """`nvidia-smi -q` as {"Section/Key": value} (the nearest less-indented header line is the
    section; the first GPU's values win)."""
    out, sections = {}, []
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        depth = len(line) - len(line.lstrip())
        sections = [(d, s) for d, s in sections if d < depth]
        key, sep, value = line.strip().partition(" : ")
        if sep and value.strip():
            out.setdefault("/".join([s for _, s in sections] + [key.strip()]), value.strip())
        else:
            sections.append((depth, key.strip()))
    return out


def pick(q, *suffixes):
    """The first value whose key ends with one of the suffixes, in their order."""
    for suffix in suffixes:
        for key, value in q.items():
            if key.endswith(suffix):
                return value
    return "n/a"


def gpu_line(q):
    return (f"GPU **{pick(q, '/Product Name')}**, driver {pick(q, 'Driver Version')}, CUDA "
            f"{pick(q, 'CUDA Version')}; clocks: max graphics {pick(q, 'Max Clocks/Graphics')}, "
            f"max memory {pick(q, 'Max Clocks/Memory')}, applications graphics "
            f"{pick(q, 'Applications Clocks/Graphics')}, applications memory "
            f"{pick(q, 'Applications Clocks/Memory')}; power limit "
            f"{pick(q, 'Current Power Limit', 'Enforced Power Limit', '/Power Limit')} (max "
            f"{pick(q, 'Max Power Limit')}); `nvidia-smi -q` before the runs")


def log(model_dir, name):
    """Where a run's log is, relative to results/bench/ (bench.sh gpu writes runs/gpu/)."""
    return f"log runs/gpu/{model_dir.name}/{name}.log"


def rounds_of(times, tokens, warmup, steps, rounds):
    """tokens/s of each round: rows warmup + r*steps .. + steps."""
    out = []
    for r in range(rounds):
        sl = slice(warmup + r * steps, warmup + (r + 1) * steps)
        out.append(float(np.sum(tokens[sl]) / np.sum(times[sl])))
    return out


def ftbench(model_dir, mb, plan):
    """{"state": "ok"|"does not fit"|"failed"|"not run", ...} of one trainer run."""
    rc_file = model_dir / f"ftbench.mb{mb}.rc"
    if not rc_file.exists():
        return {"state": "not run"}
    rc = int(rc_file.read_text())
    if rc == 5:
        return {"state": "does not fit"}
    if rc != 0:
        return {"state": "failed", "why": f"exit {rc}, {log(model_dir, f'ftbench.mb{mb}')}"}
    with h5py.File(model_dir / f"ftbench.mb{mb}" / "metrics" / "rank_00000.h5", "r") as f:
        s = {k: np.asarray(f["steps"][k][:]) for k in
             ("step_time_s", "tokens_padded", "flops_per_token", "loss")}
        a = dict(f.attrs)
    tps = rounds_of(s["step_time_s"], s["tokens_padded"], *plan)
    ok = a.get("peak_check", "ok") == "ok" and a.get("peak_flops", 0) > 0
    return {"state": "ok", "rounds": tps, "first_loss": float(s["loss"][0]),
            "mfu": s["flops_per_token"][0] * max(tps) / a["peak_flops"] if ok else float("nan"),
            "peak_bytes": float(a.get("device_peak_allocated_bytes", -1)),
            "params": int(a.get("total_params", 0)), "torch": str(a.get("torch_version", "?")),
            "peak_source": str(a.get("peak_source", "?"))}


def reference(model_dir, variant):
    """One reference process: {"runs": {micro_batch: cell}, "failed": a cell when the process
    failed (else None), "torch": its torch version}."""
    rc_file, out = model_dir / f"{variant}.rc", model_dir / f"{variant}.json"
    if not rc_file.exists():
        return {"runs": {}, "torch": None, "params": None, "failed": {"state": "not run"}}
    rc = int(rc_file.read_text())
    if rc != 0 or not out.exists():
        return {"runs": {}, "torch": None, "params": None,
                "failed": {"state": "failed", "why": f"exit {rc}, {log(model_dir, variant)}"}}
    data = json.loads(out.read_text())
    runs = {}
    for r in data["runs"]:
        runs[r["micro_batch"]] = {"state": "does not fit"} if not r["fits"] else {
            "state": "ok", "rounds": [x["tokens_per_s"] for x in r["rounds"]],
            "first_loss": r["losses"][0], "compile_s": r["compile_s"],
            "peak_bytes": r["peak_allocated_bytes"]}
    return {"runs": runs, "failed": None, "torch": data["torch_version"],
            "params": data["params"]}


def cell(ref, mb):
    return ref["failed"] or ref["runs"].get(mb, {"state": "failed", "why": "no result"})


def tok_cell(v):
    if v["state"] != "ok":
        return v["state"]
    return f"{max(v['rounds']):.0f} ({statistics.median(v['rounds']):.0f})"


def verdict(ft, ref, target):
    """(cell, met) of ftbench over one reference against its target."""
    for state in ("not run", "failed"):
        if state in (ft["state"], ref["state"]):
            return state, False
    if ft["state"] != "ok":
        return (("n/a (neither fits)", True) if ref["state"] != "ok"
                else ("ftbench does not fit", False))
    if ref["state"] != "ok":
        return f"n/a ({ref['state']})", True
    best = max(ft["rounds"]) / max(ref["rounds"])
    med = statistics.median(ft["rounds"]) / statistics.median(ref["rounds"])
    met = best >= target
    return f"**{best:.2f}×** ({med:.2f}×) {'met' if met else 'NOT met'}", met


def mib(v):
    ok = v["state"] == "ok" and (v["peak_bytes"] or 0) > 0  # None on the CPU, -1 unrecorded
    return f"{v['peak_bytes'] / 2**20:.0f}" if ok else "-"


def row(name, mb, ft, eager, compiled):
    """A table row and whether both targets are met."""
    e, e_met = verdict(ft, eager, TARGET_EAGER)
    c, c_met = verdict(ft, compiled, TARGET_COMPILED)
    mfu = f"{100 * ft['mfu']:.1f} %" if ft["state"] == "ok" else "-"
    return (f"| {name} | {mb} | {tok_cell(ft)} | {tok_cell(eager)} | {tok_cell(compiled)} | "
            f"{mfu} | {e} | {c} | {mib(ft)} / {mib(eager)} / {mib(compiled)} |"), e_met and c_met


def note(name, mb, cells):
    """First-step losses (the same tokens, weights drawn alike: near each other), the compile
    time, and why a run failed."""
    losses = [f"{v} {x['first_loss']:.4f}" for v, x in cells.items() if x["state"] == "ok"]
    compile_s = cells["compiled"].get("compile_s")
    return (f"{name} micro-batch {mb}: first-step loss {', '.join(losses) or 'n/a'}"
            + (f"; compile {compile_s:.0f} s" if compile_s is not None else "")
            + "".join(f"; {v} failed: {x['why']}" for v, x in cells.items()
                      if x["state"] == "failed"))


def model_part(runs, name, mbs, plan):
    """One model's table rows and notes: {"rows", "notes", "met" (every target), "done" (every
    run ran), "ftbench" (its completed runs), "torch" (the reference's versions)}."""
    d = runs / name
    refs = {v: reference(d, v) for v in ("eager", "compiled")}
    part = {"rows": [], "notes": [], "met": True, "done": True, "ftbench": [], "torch": set()}
    for mb in mbs:
        cells = {"ftbench": ftbench(d, mb, plan), **{v: cell(r, mb) for v, r in refs.items()}}
        text, met = row(name, mb, *cells.values())
        part["rows"].append(text)
        part["notes"].append(note(name, mb, cells))
        part["met"] = part["met"] and met
        part["done"] = part["done"] and all(x["state"] != "not run" for x in cells.values())
        part["ftbench"] += [cells["ftbench"]] if cells["ftbench"]["state"] == "ok" else []
    if (d / "model.keys").exists():
        params = [f"ftbench {part['ftbench'][0]['params']:,}"] if part["ftbench"] else []
        params += [f"{v} {r['params']:,}" for v, r in refs.items() if r["params"]]
        keys = " ".join((d / "model.keys").read_text().split())
        part["notes"].insert(0, f"{name}: {LABELS.get(name, name)}, `{keys}`; parameters: "
                                f"{', '.join(params) or 'n/a'}")
    part["torch"] = {r["torch"] for r in refs.values() if r["torch"]}
    return part


def method(plan):
    warmup, steps, rounds = plan
    return ("`scripts/bench.sh gpu`: for each model, ftbench's trainer (`training.device = "
            "\"cuda\"`, bf16 with fp32 master weights, one process per micro-batch), then "
            "scripts/bench_gpu_reference.py eager (one process, every micro-batch), then compiled "
            "(one process: each block and the head under torch.compile(dynamic=False), "
            "recompiled per micro-batch; the embedding and fused AdamW eager). The same model "
            "keys, weights drawn alike (N(0, 0.02), norms ones; not the same values), the same "
            ".bin windows (`trainer --generate-data`), AdamW settings and clipping, world 1. Each "
            f"micro-batch is a new run: {warmup} warm-up steps, then {rounds} rounds of {steps} "
            "measured steps in the same process (the rounds are consecutive, not interleaved "
            "between the variants: a process per round would pay each start-up, and each "
            f"compile, once per round). Targets: ftbench ≥ {TARGET_EAGER}× eager and ≥ "
            f"{TARGET_COMPILED}× compiled at every micro-batch that fits, best rounds compared.")


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    runs = Path(argv[0])
    q = nvidia_smi((runs / "nvidia-smi.txt").read_text())
    plan = [int(x) for x in (runs / "steps").read_text().split()]
    mbs = [int(x) for x in (runs / "micro_batches").read_text().split()]
    parts = [model_part(runs, name, mbs, plan) for name in (runs / "models").read_text().split()]
    ftb = [r for p in parts for r in p["ftbench"]]
    torch = sorted(set().union(*(p["torch"] for p in parts)))
    met, done = all(p["met"] for p in parts), all(p["done"] for p in parts)
    elapsed = [line.split("\t") for line in (runs / "elapsed.tsv").read_text().splitlines()]
    lines = [f"# {TITLE}", "",
             f"{gpu_line(q)}. Measured {(runs / 'date').read_text().strip()}; "
             + (f"ftbench on libtorch {ftb[0]['torch']}, MFU against {ftb[0]['peak_source']}"
                if ftb else "no ftbench run completed")
             + f"; the reference loop on PyTorch {', '.join(torch) or 'n/a'}. {method(plan)}",
             "",
             "| model | micro-batch | ftbench tokens/s, best (median) | eager | compiled | "
             "ftbench MFU | ftbench / eager, best (median) | ftbench / compiled | "
             "peak allocated MiB ftbench / eager / compiled |",
             "|---|---|---|---|---|---|---|---|---|", *[r for p in parts for r in p["rows"]], "",
             "- every target: " + (f"**{'met' if met else 'NOT met'}**" if done else
                                   "not known: the benchmark stopped before every run"),
             *[f"- {n}" for p in parts for n in p["notes"]],
             "- elapsed: " + ", ".join(f"{part} {float(s):.0f} s" for part, s in elapsed)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
