#!/usr/bin/env python3
"""Markdown report of `scripts/bench.sh lora`.

Part 1: ftbench LoRA (rank 16, alpha 32, all seven targets) against full finetuning, one rank,
D512/L8 and the 274 M model: dataset tokens/s, peak RSS, mean phase times per step.
Part 2: ftbench against HF TRL's SFTTrainer (peft for LoRA) on the same HF model directory and
prompt/completion documents (scripts/bench_trl.py), full and LoRA, alternating rounds; each
side's best round is compared, every round is listed. Both sides are checked to train on the
same tokens: equal dataset tokens at every step, and step-1 losses within 1e-4.

Usage: bench_lora_report.py RUNS_DIR
"""
import json
import re
import sys
import tomllib
from pathlib import Path

import h5py
import numpy as np

from bench_common import cpu_model, skip_first_steps

runs = Path(sys.argv[1])
PHASES = ("data_s", "forward_s", "backward_s", "optimizer_s", "comm_s")


def ftbench(run):
    """Steps of rank 0 and the run's config."""
    with h5py.File(run / "metrics" / "rank_00000.h5", "r") as f:
        cfg = tomllib.loads(f["config"].asstr()[()])
        steps = {k: np.array(f["steps"][k][:]) for k in f["steps"]}
    return steps, cfg


def params(run):
    """The model's parameter count, from the trainer's start-up line ("N M params")."""
    m = re.search(r"model \S+: ([\d.]+) M params", (run.parent / f"{run.name}.log").read_text())
    return float(m.group(1)) * 1e6 if m else float("nan")


def measured(steps, skip):
    return {k: v[skip:] for k, v in steps.items()}


def ft_summary(run):
    steps, cfg = ftbench(run)
    m = measured(steps, skip_first_steps(cfg))
    with h5py.File(run / "metrics" / "rank_00000.h5", "r") as f:
        route = f.attrs.get("fp32_gemm", "?")
        route = route.decode() if isinstance(route, bytes) else str(route)
    return {"tokens_s": m["tokens_dataset"].sum() / m["step_time_s"].sum(), "params": params(run),
            "gemm_eff": float(np.mean(m["gemm_efficiency"])), "route": route,
            "peak_rss": steps["peak_rss_bytes"].max(), "step_s": m["step_time_s"].mean(),
            **{p: m[p].mean() for p in PHASES}, "steps": steps, "cfg": cfg}


def part1():
    print("#### LoRA against full finetuning (ftbench, 1 rank)\n")
    print("Rank 16, alpha 32, on q, k, v, o, gate, up, down; AdamW; fp32; one thread. Dataset "
          "tokens/s over the measured steps (after `metrics.skip_first_steps`); peak RSS = max "
          "VmHWM; phases = mean seconds per measured step.\n")
    print("| model | method | tokens/s | peak RSS | step | data | forward | backward | optimizer "
          "| comm |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for name, label in (("d512", "D512/L8 T512 B4"), ("270m", "274 M, T64 B1")):
        full, lora = ft_summary(runs / f"{name}.full"), ft_summary(runs / f"{name}.lora")
        for method, s in (("full", full), ("LoRA", lora)):
            print(f"| {label} | {method} | {s['tokens_s']:.0f} | {s['peak_rss'] / 2**20:.0f} MiB | "
                  f"{s['step_s'] * 1e3:.0f} ms | " +
                  " | ".join(f"{s[p] * 1e3:.1f} ms" for p in PHASES) + " |")
        speed, mem = lora["tokens_s"] / full["tokens_s"], lora["peak_rss"] / full["peak_rss"]
        saved, state = (full["peak_rss"] - lora["peak_rss"]) / 2**20, full["params"] * 12 / 2**20
        verdicts.append(f"- {label}: LoRA tokens/s {speed:.2f}× full (target ≥ 1.25×: "
                        f"{'met' if speed >= 1.25 else '**missed**'}); peak RSS {mem:.2f}× full "
                        f"(target ≤ 0.6×: {'met' if mem <= 0.6 else '**missed**'}). LoRA saves "
                        f"{saved:.0f} MiB of peak; the base's fp32 gradients and two AdamW moments "
                        f"that LoRA does not keep are {state:.0f} MiB (12 bytes x "
                        f"{full['params'] / 1e6:.1f} M parameters); the rest, "
                        f"{lora['peak_rss'] / 2**20:.0f} MiB, is what both keep (weights, "
                        f"activations, runtime).")
    print()
    print("\n".join(verdicts))


def trl(path):
    d = json.loads(path.read_text())
    return d


def trl_tokens_s(d, skip):
    s = d["steps"][skip:]
    return sum(x["tokens"] for x in s) / sum(x["time_s"] for x in s)


def part2():
    rounds = sorted({re.search(r"\.r(\d+)\.json$", p.name).group(1)
                     for p in runs.glob("sft.trl.full.r*.json")})
    print("\n#### ftbench against HF TRL's SFTTrainer (peft for LoRA)\n")
    first = ftbench(runs / f"sft.ftbench.full.r{rounds[0]}")[1]
    t, b, n = first["data"]["seq_len"], first["training"]["micro_batch_size"], \
        first["training"]["max_steps"]
    skip = skip_first_steps(first)
    d = trl(runs / f"sft.trl.full.r{rounds[0]}.json")
    print(f"The same HF model directory (random fp32 D512/L8), the same {n * b} prompt/completion "
          f"documents of one JSONL (ftbench's token cache of it is TRL's input_ids, with its "
          f"completion mask), seq_len {t} (documents cut to {t + 1} ids), micro-batch {b}, each "
          f"micro-batch padded to its longest document (ftbench `data.padding = \"longest\"`, "
          f"TRL's collator), {n} steps of AdamW at a constant LR, loss on the completion only, "
          f"fp32, {d['threads']} thread, one process each, alternating in the same run. Dataset "
          f"tokens/s = non-padding input positions / step time over steps ≥ {skip}; TRL's step "
          f"time is on_step_begin → on_step_end (its batch is fetched before), ftbench's "
          f"step_time_s includes its data time. Versions: " +
          ", ".join(f"{k} {v}" for k, v in d["versions"].items()) + ".\n")
    print("| method | round | ftbench tokens/s | TRL tokens/s | ftbench / TRL |")
    print("|---|---|---|---|---|")
    best, checks, effs = {}, [], {}
    for method in [m for m in ("full", "lora") if (runs / f"sft.trl.{m}.r{rounds[0]}.json").exists()]:
        for r in rounds:
            ft = ft_summary(runs / f"sft.ftbench.{method}.r{r}")
            tr = trl(runs / f"sft.trl.{method}.r{r}.json")
            a, c = ft["tokens_s"], trl_tokens_s(tr, skip)
            print(f"| {method} | {r} | {a:.0f} | {c:.0f} | {a / c:.2f}× |")
            best.setdefault(method, [0, 0])
            if a > best[method][0]:
                effs[method] = (ft["gemm_eff"], ft["route"])
            best[method] = [max(best[method][0], a), max(best[method][1], c)]
            ft_tok = ft["steps"]["tokens_dataset"].tolist()
            tr_tok = [x["tokens"] for x in tr["steps"]]
            dl = abs(ft["steps"]["loss"][0] - tr["steps"][0]["loss"])
            checks.append((method, r, ft_tok == tr_tok, dl, ft_tok[:3], tr_tok[:3]))
    print()
    for method, (a, c) in best.items():
        print(f"- {method}: best rounds ftbench {a:.0f} vs TRL {c:.0f} dataset tokens/s = "
              f"{a / c:.2f}× (target ≥ 2×: {'met' if a / c >= 2 else '**missed**'}).")
        e, route = effs[method]
        print(f"  - ftbench's step ran its model FLOPs at {100 * e:.1f} % of the 2048³ GEMM it "
              f"measured (`gemm_efficiency`; fp32 GEMMs by {route}). Were every FLOP at that GEMM's "
              f"rate, ftbench would be {a / c / e:.2f}× TRL; 2× needs {200 * e / (a / c):.1f} % of "
              f"it.")
    if "lora" in best:
        print(f"- LoRA over full finetuning on each side (best rounds): ftbench "
              f"{best['lora'][0] / best['full'][0]:.2f}×, TRL {best['lora'][1] / best['full'][1]:.2f}×.")
    for method, r, same, dl, ft_tok, tr_tok in checks:
        print(f"- Same tokens, {method} round {r}: dataset tokens equal at every step: "
              f"{'yes' if same else '**no**'} (first steps {ft_tok} vs {tr_tok}); step-1 loss "
              f"|ftbench − TRL| = {dl:.2e} ({'within' if dl <= 1e-4 else '**not within**'} 1e-4).")


print("# LoRA: against full finetuning, and against HF TRL's SFTTrainer\n")
print(f"CPU: {cpu_model()}. Load average before / after: "
      f"{(runs / 'loadavg.before').read_text().strip()} / "
      f"{(runs / 'loadavg.after').read_text().strip()}. `scripts/bench.sh lora`.\n")
if (runs / "d512.full").exists():
    part1()
part2()
