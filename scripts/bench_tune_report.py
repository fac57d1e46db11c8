#!/usr/bin/env python3
"""Markdown report of `scripts/bench.sh tune`: `sweep_tagger tune` against the exhaustive sweep
of the same space, both run on this machine one after the other.

RUNS holds exhaustive/ (scripts/sweep.sh, every point once), exhaustive.csv and
exhaustive.best (`aggregate`, `aggregate --best tokens_per_s`), tune/ (the tune's run
directories and tune/tune/report.md), and the wall times, load averages and CPU model.

Targets: tune's winner is the exhaustive sweep's first, or within that sweep's noise of it
(the two configurations' step bands p10-p90 of the exhaustive runs overlap: the rule of
`aggregate --best`); tune's machine time <= 35 % of the exhaustive sweep's; the step-time
model's median error on the measured points <= 25 %.
Usage: bench_tune_report.py ROOT (a part per subdirectory: local/, net/)
"""
import csv
import re
import sys
from pathlib import Path

AXES = ("layout", "training.micro_batch_size", "training.activation_checkpointing")


def text(p):
    return Path(p).read_text().strip() if Path(p).exists() else ""


def point_of(row):
    return tuple(row.get(k, "") for k in AXES)


def point_of_name(name):
    """`layout=ddp training.micro_batch_size=4 training.activation_checkpointing="none"`."""
    kv = dict(re.findall(r'([\w.]+)=("[^"]*"|\S+)', name))
    return tuple(kv.get(k, "").strip('"') for k in AXES)


def band(row):
    tps, p50 = float(row["tokens_per_s_dataset"]), float(row["step_tokens_per_s_padded_p50"])
    return (tps * float(row["step_tokens_per_s_padded_p10"]) / p50,
            tps * float(row["step_tokens_per_s_padded_p90"]) / p50)


def stability(runs, ranked):
    """Each configuration of tune's final round against its exhaustive-sweep run: the same
    machine, the same day, another run. Where the exhaustive figure falls outside the range of
    tune's runs of it, one run's step band understates the run-to-run noise."""
    path = Path(runs) / "tune.csv"
    if not path.exists():
        return []
    # aggregate leaves a key every run shares out of the table, in tune.constants.csv
    const = {r["key"]: r["value"] for r in csv.DictReader(open(path.with_suffix(".constants.csv")))}
    rows = [{**const, **r} for r in csv.DictReader(open(path))
            if r["status"] == "completed" and r["tokens_per_s_dataset"]]
    # a configuration by the axes the exhaustive table has (it leaves out a key all its runs share)
    def key(r):
        return tuple(r.get(k, "") if ranked and k in ranked[0] else "" for k in AXES)

    final = max((int(r["steps_done"]) for r in rows), default=0)
    by_point = {}
    for r in rows:
        if int(r["steps_done"]) == final:
            by_point.setdefault(key(r), []).append(float(r["tokens_per_s_dataset"]))
    ex = {key(r): r for r in ranked}
    out = ["##### The same configurations run again",
           "",
           "Tune's final-round runs of a configuration against that configuration's run in the "
           "exhaustive sweep (the same machine, one after the other; tune's runs leave out "
           "[tune] skip_steps first steps, the exhaustive runs the base's "
           "metrics.skip_first_steps):",
           "",
           "| configuration | exhaustive: tokens/s (steps p10-p90) | tune's final runs: tokens/s | "
           "exhaustive figure within tune's runs' range |",
           "|---|---|---|---|"]
    outside = 0
    for p, tps in sorted(by_point.items(), key=lambda kv: -max(kv[1])):
        if p not in ex:
            continue
        e = float(ex[p]["tokens_per_s_dataset"])
        lo, hi = band(ex[p])
        inside = min(tps) <= e <= max(tps)
        outside += not inside
        out.append(f"| {label(p)} | {e:.1f} ({lo:.1f}-{hi:.1f}) | "
                   f"{', '.join(f'{t:.1f}' for t in tps)} | {'yes' if inside else 'no'} |")
    out += ["", f"{outside} of {len(out) - 6} exhaustive figures fall outside the range of "
            "tune's own runs of the same configuration."]
    return out


def winner_of(report):
    """The winning point of a tune report.md (its "## Winner" line), or None."""
    m = re.search(r"^## Winner\n\n(.*?) \(", report, re.M)
    return point_of_name(m.group(1)) if m else None


def label(p):
    return f"{p[0]} mb {p[1]}" + (f" ac {p[2]}" if p[2] else "")


def part(runs, title):
    runs = Path(runs)
    rows = [r for r in csv.DictReader(open(runs / "exhaustive.csv"))
            if r["status"] == "completed" and r["tokens_per_s_dataset"]]
    ranked = sorted(rows, key=lambda r: -float(r["tokens_per_s_dataset"]))
    report = text(runs / "tune" / "tune" / "report.md")
    winner = winner_of(report)
    by_point = {point_of(r): r for r in ranked}
    ex_wall, tune_wall = float(text(runs / "exhaustive.wall")), float(text(runs / "tune.wall"))
    err = re.search(r"Median \|predicted / measured - 1\| over (\d+) measured point\(s\): "
                    r"([\d.]+) % with the compute scale fitted on the other points \(leave one "
                    r"out\); ([\d.]+) % with compute at the GEMM rate", report)
    machine = re.search(r"^(\d+) run\(s\) started.*?([\d.]+) machine-minutes", report, re.M)

    out = [f"#### {title}", "",
           f"`scripts/bench.sh tune`, {text(runs / 'date')}. CPU: {text(runs / 'cpu')}, "
           f"{text(runs / 'nproc')} cores. Load average (1, 5, 15 min) before the exhaustive sweep "
           f"{text(runs / 'load.exhaustive')}, before the tune {text(runs / 'load.tune')}, after "
           f"{text(runs / 'load.after')}. Space: `{text(runs / 'space')}` "
           f"({len(rows)} points completed in the exhaustive sweep). Both ran alone on the "
           "machine, one after the other; the run directories are under "
           "results/bench/runs/tune/.", "",
           "##### The exhaustive sweep (scripts/sweep.sh: every point once)", "",
           "| rank | configuration | dataset tokens/s | steps p10-p90 tokens/s | noisy |",
           "|---|---|---|---|---|"]
    for i, r in enumerate(ranked, 1):
        lo, hi = band(r)
        out.append(f"| {i} | {label(point_of(r))} | {float(r['tokens_per_s_dataset']):.1f} | "
                   f"{lo:.1f}-{hi:.1f} | {'yes' if r['is_valid'] == 'noisy' else ''} |")
    first = point_of(ranked[0])
    out += ["", f"Machine time: {ex_wall / 60:.1f} min (wall time of scripts/sweep.sh on one "
            "machine).", "", "##### sweep_tagger tune", ""]
    if winner is None:
        out.append(f"No winner: see {runs}/tune/tune/report.md.")
    else:
        at = [point_of(r) for r in ranked].index(winner) + 1 if winner in by_point else None
        if winner == first:
            verdict = "the exhaustive sweep's first: met"
        elif at is None:
            verdict = "not measured by the exhaustive sweep: not met"
        else:
            (wlo, whi), (flo, fhi) = band(by_point[winner]), band(ranked[0])
            within = whi >= flo
            verdict = (f"the exhaustive sweep's #{at}; its step band {wlo:.1f}-{whi:.1f} and the "
                       f"first's {flo:.1f}-{fhi:.1f} " +
                       ("overlap: within that sweep's noise, met" if within
                        else "do not overlap: beyond noise, not met"))
        out.append(f"Winner: {label(winner)}: {verdict}.")
    same = stability(runs, ranked)
    out += [""] + same if same else []
    if text(runs / "tune.rerun"):
        out += ["", text(runs / "tune.rerun")]
    ratio = tune_wall / ex_wall
    out += ["", f"Machine time: {tune_wall / 60:.1f} min (wall time of `sweep_tagger tune`, the "
            f"probe included; its own count: {machine.group(2) if machine else '?'} "
            f"machine-minutes over {machine.group(1) if machine else '?'} runs) = "
            f"**{100 * ratio:.0f} %** of the exhaustive sweep's (target <= 35 %: "
            f"{'met' if ratio <= 0.35 else 'not met'})."]
    if err:
        e = float(err.group(2))
        out += ["", f"The step-time model's median error over {err.group(1)} measured points: "
                f"**{e:.1f} %** with its compute scale fitted on the other points (target <= 25 %: "
                f"{'met' if e <= 25 else 'not met'}); {err.group(3)} % with compute at the "
                "measured GEMM rate."]
    out += ["", "The tune's own report (results/bench/runs/tune/*/tune/tune/report.md):", "",
            "<details><summary>report.md</summary>", "",
            # indented: its '#' lines are no headings of this page (readme_splice.py)
            "\n".join("    " + line if line else "" for line in report.splitlines()), "",
            "</details>"]
    return "\n".join(out)


PIPELINE_NAMES = {"pp 2": "pp2", "DDP": "ddp", "ZeRO-3": "zero3", "tp 2": "tp2"}


def model_order(report):
    """Layouts in the tune report's prediction order (its table of every point, before any run)."""
    order = []
    for name in re.findall(r"^\| \d+ \| (layout=\S+[^|]*) \|", report, re.M):
        layout = point_of_name(name)[0]
        if layout not in order:
            order.append(layout)
    return order


def pipeline_order():
    """results/bench/pipeline.md's ranking at 100 Mbit/s (fastest first), as layout names."""
    m = re.search(r"^\| 100 Mbit/s \| [^|]+ \| [^|]+ \| ([^|]+) \|$", text("results/bench/pipeline.md"),
                  re.M)
    if not m:
        return []
    return [PIPELINE_NAMES.get(re.sub(r" \(.*", "", w.strip()), w.strip())
            for w in m.group(1).split("),")]


def winner_layout(runs):
    w = winner_of(text(Path(runs) / "tune" / "tune" / "report.md"))
    return w[0] if w else None


def net_verdict(root):
    """Acceptance 2: over the shaped link the winner changes as the pipeline benchmark predicts,
    and the model's ordering says so before any run."""
    net, local = winner_layout(root / "net"), winner_layout(root / "local")
    order = model_order(text(root / "net" / "tune" / "tune" / "report.md"))
    expected = pipeline_order()
    if not net or not expected:
        return "No verdict: the net part's winner or results/bench/pipeline.md's 100 Mbit/s row is missing."
    met = net == expected[0] and net != local and order[:1] == [net]
    return (f"Across the shaped link the winner's layout is {net} (two local ranks: {local}); "
            f"results/bench/pipeline.md's 100 Mbit/s ranking puts {', '.join(expected)} in that order; "
            f"the model's order before any run (layouts by their best prediction): "
            f"{', '.join(order)}. The winner changes as the pipeline benchmark predicts and the "
            f"model put it first: {'met' if met else 'not met'}.")


PARTS = {"local": "Two ranks of this machine",
         "net": "Two netns hosts, one rank each, link shaped to 100 Mbit/s"}


def main(root):
    root = Path(root)
    out = ["# Autotune against the exhaustive sweep", "",
           "`sweep_tagger tune` and the exhaustive sweep of the same space, each alone on the "
           "machine, one after the other (sweep_tagger/docs/tune.md)."]
    for name, title in PARTS.items():
        if (root / name / "skipped").exists():
            out += ["", f"#### {title}", "", "Skipped: " + text(root / name / "skipped")]
        elif (root / name / "exhaustive.csv").exists():
            out += ["", part(root / name, title)]
            if name == "net":
                out += ["", net_verdict(root)]
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
