#!/usr/bin/env python3
"""Markdown report of `scripts/bench.sh tune`: `sweep_tagger tune` against the exhaustive sweep
of the same space, both run on this machine one after the other.

RUNS holds exhaustive/ (scripts/sweep.sh, every point `repeats` times, round-robin),
exhaustive.csv (`aggregate`), tune/ (the tune's run directories and tune/tune/report.md), and
the wall times, load averages and CPU model.

A configuration of the exhaustive sweep is ranked by the median of its runs' dataset tokens/s,
as `aggregate --best` ranks (sweep_tagger/compare.h). Targets: tune's winner is the exhaustive
sweep's first, or within that sweep's noise of it by `aggregate --best`'s rule: the winner is
within noise of the first unless every test that can be made separates them: (a) with two runs
or more each, the ranges of their runs' figures do not overlap; (b) their step bands (each
run's figure scaled by its steps' p10/p50 and p90/p50 padded tokens/s, spanned over its runs)
do not overlap. Tune's machine time <= 35 % of the exhaustive sweep's; the step-time model's
median error on the measured points <= 25 %.
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


def groups(rows, key):
    """Rows by configuration: each with its runs' figures, median, step band and noisy flag."""
    g = {}
    for r in rows:
        g.setdefault(key(r), []).append(r)
    out = {}
    for p, rs in g.items():
        tps = sorted(float(r["tokens_per_s_dataset"]) for r in rs)
        n = len(tps)
        bands = [band(r) for r in rs]
        out[p] = {"tps": tps, "median": (tps[(n - 1) // 2] + tps[n // 2]) / 2,
                  "lo": min(b[0] for b in bands), "hi": max(b[1] for b in bands),
                  "noisy": any(r.get("is_valid") == "noisy" for r in rs)}
    return out


def within_noise(a, b):
    """aggregate --best's rule (compare.h): a beats b beyond noise only when every test that
    can be made holds; the name of the test that fails, or None when a is beyond noise."""
    if len(a["tps"]) >= 2 and len(b["tps"]) >= 2 and min(a["tps"]) <= max(b["tps"]):
        return "their runs' ranges overlap"
    if a["lo"] <= b["hi"]:
        return "their step bands overlap"
    return None


def stability(runs, exhaustive):
    """Each configuration of tune's final round against its exhaustive-sweep runs (exhaustive:
    groups() of the exhaustive table): the same machine, the same day, other runs.
    Where the two ranges do not overlap, the exhaustive sweep's runs understate the run-to-run
    noise."""
    path = Path(runs) / "tune.csv"
    if not path.exists():
        return []
    # aggregate leaves a key every run shares out of the table, in tune.constants.csv
    const = {r["key"]: r["value"] for r in csv.DictReader(open(path.with_suffix(".constants.csv")))}
    rows = [{**const, **r} for r in csv.DictReader(open(path))
            if r["status"] == "completed" and r["tokens_per_s_dataset"]]
    # a configuration by the axes the exhaustive table has (it leaves out a key all its runs share)
    keys = {k for k in AXES if any(p[AXES.index(k)] for p in exhaustive)}

    def key(r):
        return tuple(r.get(k, "") if k in keys else "" for k in AXES)

    final = max((int(r["steps_done"]) for r in rows), default=0)
    by_point = groups([r for r in rows if int(r["steps_done"]) == final], key)
    out = ["##### The same configurations run again",
           "",
           "Tune's final-round runs of a configuration against that configuration's runs in the "
           "exhaustive sweep (the same machine, one after the other, the same steps measured):",
           "",
           "| configuration | exhaustive: tokens/s of its runs | tune's final runs: tokens/s | "
           "the two ranges overlap |",
           "|---|---|---|---|"]
    apart = 0
    for p, t in sorted(by_point.items(), key=lambda kv: -kv[1]["median"]):
        if p not in exhaustive:
            continue
        e = exhaustive[p]["tps"]
        overlap = min(t["tps"]) <= max(e) and min(e) <= max(t["tps"])
        apart += not overlap
        out.append(f"| {label(p)} | {', '.join(f'{x:.1f}' for x in e)} | "
                   f"{', '.join(f'{x:.1f}' for x in t['tps'])} | {'yes' if overlap else 'no'} |")
    out += ["", f"In {apart} of {len(out) - 6} configurations the exhaustive runs and tune's "
            "own runs do not overlap."]
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
    by_point = groups(rows, point_of)
    order = sorted(by_point, key=lambda p: -by_point[p]["median"])
    repeats = max(len(g["tps"]) for g in by_point.values())
    report = text(runs / "tune" / "tune" / "report.md")
    winner = winner_of(report)
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
           f"({len(by_point)} configurations, {len(rows)} runs completed in the exhaustive sweep). "
           "Both ran alone on the machine, one after the other; the run directories are under "
           "results/bench/runs/tune/.", "",
           f"##### The exhaustive sweep (scripts/sweep.sh: every point "
           f"{'once' if repeats == 1 else f'{repeats} times, round-robin'})", "",
           "| rank | configuration | median dataset tokens/s | its runs | steps p10-p90 tokens/s "
           "| noisy |",
           "|---|---|---|---|---|---|"]
    for i, p in enumerate(order, 1):
        g = by_point[p]
        out.append(f"| {i} | {label(p)} | {g['median']:.1f} | "
                   f"{', '.join(f'{x:.1f}' for x in g['tps'])} | {g['lo']:.1f}-{g['hi']:.1f} | "
                   f"{'yes' if g['noisy'] else ''} |")
    first = order[0]
    out += ["", f"Machine time: {ex_wall / 60:.1f} min (wall time of scripts/sweep.sh on one "
            "machine).", "", "##### sweep_tagger tune", ""]
    if winner is None:
        out.append(f"No winner: see {runs}/tune/tune/report.md.")
    else:
        at = order.index(winner) + 1 if winner in by_point else None
        if winner == first:
            verdict = "the exhaustive sweep's first: met"
        elif at is None:
            verdict = "not measured by the exhaustive sweep: not met"
        else:
            w, f = by_point[winner], by_point[first]
            why = within_noise(f, w)
            verdict = (f"the exhaustive sweep's #{at} (median {w['median']:.1f} against the "
                       f"first's {f['median']:.1f}; runs {', '.join(f'{x:.1f}' for x in w['tps'])} "
                       f"against {', '.join(f'{x:.1f}' for x in f['tps'])}; step bands "
                       f"{w['lo']:.1f}-{w['hi']:.1f} against {f['lo']:.1f}-{f['hi']:.1f}): " +
                       (f"{why}: within that sweep's noise, met" if why
                        else "beyond noise by every test: not met"))
        out.append(f"Winner: {label(winner)}: {verdict}.")
    same = stability(runs, by_point)
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
