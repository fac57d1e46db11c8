#!/usr/bin/env python3
"""Writes the pipeline report (results/bench/pipeline.md) from `scripts/bench.sh pipeline`'s
runs: the bubble on one host and the two-host slow-network comparison.

    bench_pipeline_report.py RUNS    # RUNS = results/bench/runs/pipeline

Every figure is read from the runs' HDF5 metrics, logs, interface counters and link checks.
"""
import json
import sys
import tomllib
from pathlib import Path

import h5py
import numpy as np

from bench_common import cpu_model

LAYOUTS = {"ddp": "DDP (dp 2)", "zero3": "ZeRO-3 (dp_shard 2)", "pp": "pp 2 (1F1B, m 8)"}


def load(path):
    return Path(path).read_text().split()[0]


def rank_files(run):
    return sorted((Path(run) / "metrics").glob("rank_*.h5"))


def steps_of(run, skip):
    """Per rank: {metric: array over the measured steps} and the root attributes (with
    `steps_run`: every step's count, warm-up included)."""
    out = []
    for p in rank_files(run):
        with h5py.File(p, "r") as f:
            attrs = dict(f.attrs, steps_run=len(f["steps"]["step"]))
            out.append(({k: np.array(f["steps"][k][skip:]) for k in f["steps"]}, attrs))
    return out


def makespans(ranks):
    """Per measured step, the pipeline's makespan: the trainer's pp_makespan_s (the longest
    stage's forward-backward phase; ranks start the phase together); runs older than that
    column: each stage's phase from pp_bubble_s / pp_bubble_fraction, which then was the
    receive waits over the stage's own phase."""
    if all("pp_makespan_s" in s for s, _ in ranks):
        return np.max(np.stack([s["pp_makespan_s"] for s, _ in ranks]), axis=0)
    phase = [np.where(s["pp_bubble_fraction"] > 0,
                      s["pp_bubble_s"] / np.maximum(s["pp_bubble_fraction"], 1e-12),
                      s["forward_s"] + s["backward_s"]) for s, _ in ranks]
    return np.max(np.stack(phase), axis=0)


def pipeline_bubble(ranks):
    """Idle time of each stage over the pipeline's makespan, per measured step, summed: the
    quantity the theory (p-1)/(m+p-1) describes. A stage's compute is its forward_s +
    backward_s."""
    makespan = np.sum(makespans(ranks))
    return [1 - np.sum(s["forward_s"] + s["backward_s"]) / makespan for s, _ in ranks]


def blocked(ranks):
    """Each stage's receive waits (pp_bubble_s) over the same makespans."""
    makespan = np.sum(makespans(ranks))
    return [float(np.sum(s["pp_bubble_s"]) / makespan) for s, _ in ranks]


def bubble_section(runs):
    bub = runs / "bubble"
    print("#### Bubble: pp 2 on one host, m = 8\n")
    print("D512/L8/T512 fp32, pp 2 on one host (2 ranks through the launcher, 1 thread each), "
          "m = 8 micro-batches of 1 sample, 6 steps (the first 2 warm-up), the default layer "
          "split (balanced by FLOPs). Two vocabularies: 512 (the output layer costs 0.07 of "
          "a block, so the chunks are nearly equal, as the theory assumes) and Llama-2's 32000 "
          "(the output layer and loss cost as much as 4.5 blocks and sit on the last chunk).\n")
    print("Two measures per stage, both over the pipeline's makespan (the longest stage's "
          "forward-backward phase in the same step, `pp_makespan_s`). *Blocked*: time blocked "
          "receiving from the neighbour stage (`pp_bubble_s`). *Idle* is the theory's "
          "quantity: the stage's idle time (makespan minus its forward and backward compute), "
          "from the per-step HDF5 times; the trainer's `pp_bubble_fraction` is the same idle "
          "time, counting its phase's other host work as busy. They differ on the last stage: "
          "its wait for the first stage's drain falls after its own phase ends, so *blocked* "
          "leaves it out. The target (within 5 points of the "
          "theory) is judged on *idle*. *Compute* is the stage's forward + backward time per "
          "step: the theory assumes equal stages and equal chunks, and a stage with less "
          "compute than its neighbour idles at least the difference. zb_h1's theory (p-1)/(3m+p-1) "
          "also assumes its three passes equally long; here the input-gradient pass holds the "
          "attention's backward and the output layer's whole backward, the weight pass only the "
          "blocks' projection weight GEMMs.\n")
    print("| vocabulary | schedule | stage | blocked | idle | theory | "
          "idle within 5 points | compute s/step | step p50 s | interference | load before |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    misses = []
    for vocab in (512, 32000):
        for sched in ("1f1b", "interleaved_1f1b", "zb_h1"):
            run = bub / f"{sched}.v{vocab}"
            if not rank_files(run):
                print(f"| {vocab} | {sched} | run missing: see {run}.log | | | | | | | |")
                continue
            ranks = steps_of(run, 2)
            if any("pp_bubble_theory" not in a for _, a in ranks):
                print(f"| {vocab} | {sched} | run incomplete: see {run}.log | | | | | | | |")
                continue
            idle, block = pipeline_bubble(ranks), blocked(ranks)
            busy_all = [float(np.mean(st["forward_s"] + st["backward_s"])) for st, _ in ranks]
            for r, ((s, a), i) in enumerate(zip(ranks, idle)):
                theory = a["pp_bubble_theory"]
                ok = "yes" if abs(i - theory) <= 0.05 else "no"
                if ok == "no":
                    misses.append(f"- vocabulary {vocab}, {sched}, stage {r}: idle {100 * i:.1f} % "
                                  f"against {100 * theory:.1f} %; its compute per step is "
                                  f"{100 * (busy_all[r] / np.mean(busy_all) - 1):+.0f} % of the "
                                  f"stages' mean ({' / '.join(f'{b:.2f}' for b in busy_all)} s)")
                p50 = float(np.median(s["step_time_s"]))
                busy = float(np.mean(s["forward_s"] + s["backward_s"]))
                print(f"| {vocab} | {sched} | {r} | {100 * block[r]:.1f} % "
                      f"| {100 * i:.1f} % | {100 * theory:.1f} % | {ok} | {busy:.2f} | {p50:.2f} | "
                      f"{100 * a['interference']:.0f} % | {load(f'{run}.loadavg')} |")
    print()
    if misses:
        print("Misses, beside how unequal the stages' compute was (a stage that computes more "
              "than the other idles less than the theory, and the other more):\n")
        print("\n".join(misses) + "\n")


def link_section(runs):
    """The link benchmark's lines (ftb_p2p_bench prints them from its own timings)."""
    print("#### Link: one transfer between two ranks of this host\n")
    log = runs / "link.log"
    lines = [l for l in log.read_text().splitlines()
             if l.startswith(("link ", "local memory:", "Gloo:"))] if log.exists() else []
    if len(lines) < 4:
        print(f"Not measured (see {log}).\n")
        return
    print("A 1 MiB fp32 tensor (one micro-batch of D512 x T512 activations) sent to the other "
          "rank and echoed back, rounds alternating between the two links "
          "(trainer/bench/p2p_cost.cpp); GB/s counts both directions.\n")
    print("\n".join(f"- {l}" for l in lines) + "\n")


def rate_label(rate):
    return "unshaped" if rate == "off" else rate.replace("gbit", " Gbit/s").replace("mbit", " Mbit/s")


def net_rows(net, rates):
    """(rate, measured link bits/s, layout, step p50, tokens/s per host, bytes/step/host,
    trainer's figure, interference, load) per run."""
    rows = []
    for rate in rates:
        link = json.loads((net / f"link.{rate}.json").read_text())["bits_per_s"]
        for lay in LAYOUTS:
            run = net / f"{rate}.{lay}"
            ranks = steps_of(run, 1)
            s, a = ranks[0]
            nsteps = a["steps_run"]
            tps = float(np.sum(s["tokens_padded"]) / np.sum(s["step_time_s"])) / a["world_size"]
            before = [int(x) for x in Path(f"{run}.tx_before").read_text().split()]
            after = [int(x) for x in Path(f"{run}.tx_after").read_text().split()]
            sent = [(b - a0) / nsteps for a0, b in zip(before, after)]
            if lay == "pp":
                own = [r[1]["pp_p2p_bytes_per_step"] for r in ranks]
                own_txt = " / ".join(f"{x / 1e6:.1f}" for x in own) + " (pp_p2p_bytes)"
            else:  # no collective byte counter in the trainer: the closed form
                own = [collective_bytes(run, a, lay)] * 2
                own_txt = f"{own[0] / 1e6:.1f} (closed form)"
            rows.append(dict(rate=rate, link=link, layout=lay,
                             p50=float(np.median(s["step_time_s"])),
                             comm=float(np.median(s["comm_s"])), tps=tps, sent=sent,
                             own=own, own_txt=own_txt, interference=a["interference"],
                             load=load(f"{run}.loadavg")))
    return rows


def collective_bytes(run, attrs, layout):
    """What one of 2 hosts sends per step, fp32: DDP's ring all-reduce of the gradients,
    4 x params; ZeRO-3's all-gather of each block in forward and again in backward (half of
    the blocks' bytes each), the root unit (embedding, output, final norm) gathered once,
    and the reduce-scatter of every gradient (half of all bytes)."""
    with h5py.File(rank_files(run)[0], "r") as f:
        text = f["config"][()]
    model = tomllib.loads(text.decode() if isinstance(text, bytes) else str(text))["model"]
    total = attrs["trainable_params"]
    root = model["vocab_size"] * model["dim"] * (1 if model["tie_embeddings"] else 2) + model["dim"]
    if layout == "ddp":
        return 4 * total
    return 4 * ((total - root) + root / 2 + total / 2)


def fit(rows, lay):
    """Least squares t = a + b / bandwidth over every rate of one layout (bandwidth: the
    measured link rate); also the largest residual."""
    pts = [(1 / r["link"], r["p50"]) for r in rows if r["layout"] == lay]
    if len(pts) < 3:
        return None
    x, y = np.array(pts).T
    b, a = np.polyfit(x, y, 1)
    return a, b, float(np.max(np.abs(a + b * x - y)))


def net_section(runs):
    net = runs / "net"
    print("#### A slow network: two hosts, DDP, ZeRO-3 and pp 2\n")
    if (net / "skipped").exists():
        print(f"Skipped: {(net / 'skipped').read_text().strip()}\n")
        return
    links = {p.name[len("link."):-len(".json")]: json.loads(p.read_text())["bits_per_s"]
             for p in net.glob("link.*.json")}
    rates = sorted(links, key=links.get)  # slowest measured link first
    rows = net_rows(net, rates)
    print("Two `ip netns` hosts on one bridge, each host's egress (eth0) shaped with `tc` tbf "
          "(tests/cluster/netns.sh shape); one rank per host, started the way users start "
          "them: `mpirun` runs one `launcher --nproc-per-node 1` per host. D512/L8/T512 fp32, "
          "global batch 8 sequences (DDP and ZeRO-3: micro-batch 4 per rank; pp: micro-batch "
          "1, m = 8), 4 steps (the first one warm-up). *Comm* is rank 0's `comm_s`: time "
          "blocked in collectives, or on pp in receives and sends (the bubble included). *Link* is a 3-second TCP transfer "
          "between the hosts timed at the receiver (payload bits/s). *Sent/step* is each "
          "host's eth0 tx_bytes over the run divided by its steps (headers and the start-up "
          "rendezvous included); the trainer's own figure is `pp_p2p_bytes_per_step` for pp; "
          "it has no byte counter for collectives, so DDP and ZeRO-3 show the closed form "
          "for 2 hosts (DDP: ring all-reduce of the fp32 gradients, their bytes once per host; "
          "ZeRO-3: each block all-gathered in forward and again in backward, the root unit of "
          "embedding and output once, every gradient reduce-scattered: half the bytes each).\n")
    print("| link (nominal) | link measured | layout | step p50 s | comm p50 s | tokens/s per host | "
          "sent/step per host MB (host 1 / host 2) | trainer's figure MB | interference | load before |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sent = " / ".join(f"{x / 1e6:.1f}" for x in r["sent"])
        print(f"| {rate_label(r['rate'])} | {r['link'] / 1e6:.0f} Mbit/s | {LAYOUTS[r['layout']]} "
              f"| {r['p50']:.2f} | {r['comm']:.2f} | {r['tps']:.1f} | {sent} | {r['own_txt']} | "
              f"{100 * r['interference']:.0f} % | {r['load']} |")
    print()
    speedups(rows, rates)
    crossover(rows)


def speedups(rows, rates):
    by = {(r["rate"], r["layout"]): r for r in rows}
    print("| link | pp 2 over ZeRO-3 (tokens/s) | pp 2 over DDP | ranking (fastest first) |")
    print("|---|---|---|---|")
    for rate in rates:
        pp, z, d = (by[(rate, k)]["tps"] for k in ("pp", "zero3", "ddp"))
        order = sorted(LAYOUTS, key=lambda k: -by[(rate, k)]["tps"])
        print(f"| {rate_label(rate)} | {pp / z:.2f}x | {pp / d:.2f}x | "
              f"{', '.join(LAYOUTS[k] for k in order)} |")
    print()
    if "100mbit" in rates:
        x = by[("100mbit", "pp")]["tps"] / by[("100mbit", "zero3")]["tps"]
        print(f"Target pp 2 >= 2x ZeRO-3 at 100 Mbit/s: {x:.2f}x, "
              f"{'met' if x >= 2 else 'not met'}.\n")


def crossover(rows):
    fits = {lay: fit(rows, lay) for lay in LAYOUTS}
    if any(f is None for f in fits.values()):
        print("Crossover: needs at least three rates per layout.\n")
        return
    print("Where the ranking changes: each layout's step time p50 fitted by least squares "
          "to t = a + b / bandwidth over every rate above (bandwidth = the measured link "
          "rate): a is the step time on an infinitely fast link, b the bytes it moves that "
          "compute does not hide; the largest residual says how well the model fits:\n")
    for lay, (a, b, res) in fits.items():
        print(f"- {LAYOUTS[lay]}: a = {a:.2f} s, b = {b / 8e6:.1f} MB, largest residual {res:.2f} s")
    for other in ("zero3", "ddp"):
        (ap, bp, _), (ao, bo, _) = fits["pp"], fits[other]
        if ap > ao and bo > bp:
            bw = (bo - bp) / (ap - ao)
            print(f"- pp 2 and {LAYOUTS[other]} are equally fast at {bw / 1e6:.0f} Mbit/s by the "
                  f"fit: below it pp 2 is faster, above it {LAYOUTS[other]}")
        elif ap <= ao and bp <= bo:
            print(f"- pp 2 is faster than {LAYOUTS[other]} at every bandwidth by the fit")
        else:
            print(f"- pp 2 is slower than {LAYOUTS[other]} at every bandwidth by the fit")
    print()


def main(runs):
    runs = Path(runs)
    print("# Pipeline parallelism: bubble and a slow network\n")
    def text(name):
        return (runs / name).read_text().strip() if (runs / name).exists() else "not recorded"
    loads = "; ".join(f"{part} {text(f'loadavg.{part}.before')} / {text(f'loadavg.{part}.after')}"
                      for part in ("bubble", "link", "net"))
    print(f"`scripts/bench.sh pipeline`. CPU: {cpu_model()}, 2 cores, both ranks on them. "
          f"Load average (1, 5, 15 min) before / after each part: {loads}. Each row gives "
          f"the 1-minute load before its run and the trainer's interference measure (the "
          f"rank's threads' run-queue wait and steal over the step: 0 % on an idle "
          f"machine); the timings are only as good as those figures.\n")
    bubble_section(runs)
    link_section(runs)
    net_section(runs)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
