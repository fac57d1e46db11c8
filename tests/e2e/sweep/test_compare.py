"""Comparisons a user can trust, end to end with real trainer runs of the tiny model.

- repeats = 3 runs every point three times round-robin; `aggregate` shows each
  configuration's median, min-max and step spread; `--best` says "within noise" for two
  configurations that differ only in the seed, and "beyond noise" for a model several
  times smaller (clearly faster).
- a layout sweep ([layout.NAME] variants as one axis) with a fixed global batch: every run
  trains the same sequences per optimizer step (checked in the HDF5 steps), aggregate says
  "equal work", and the charts draw one series per variant.
- every chart of the demo sweep and the layout sweep names each of its series in its key,
  and gnuplot printed nothing; a gnuplot warning makes aggregate exit 1 (0 with
  --plot-best-effort).
- expand --memory-budget marks the points over the budget invalid, with the estimate.
Binaries: $FTB_BUILD_DIR/{launcher,trainer,sweep_tagger}.
"""
import json
import os
import pathlib
import re
import subprocess

import h5py
import pandas as pd
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release")).resolve()
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
SWEEP_SH = REPO / "scripts" / "sweep.sh"
TINY = REPO / "configs" / "runs" / "tiny.toml"
# Few steps, a given hardware peak (no peak measurement), no checkpoint, one BLAS ("auto"
# times a 2048^3 GEMM on both at every start) and no start-up GEMM: seconds per run.
FAST = ["training.max_steps=6", "metrics.peak_tflops=1.0", "checkpoint.save_final=false",
        "training.fp32_gemm=aten", "metrics.gemm_probe=false"]
# Four times the tiny model's width and twice its depth: several times slower per token.
BIG = ["model.dim=128", "model.n_layers=4", "model.ffn_dim=384"]


def sweep(sweep_file, results, *overrides):
    env = dict(os.environ, FTB_BUILD_DIR=str(BUILD), OMP_NUM_THREADS="1")
    p = subprocess.run(["bash", str(SWEEP_SH), str(sweep_file), str(results), *overrides],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def tagger(*args, check=True, env=None):
    p = subprocess.run([str(SWEEP_TAGGER), *map(str, args)], capture_output=True, text=True,
                       timeout=120, env=env)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def chart_problems(plots):
    """Every chart's series (the .dat blocks) titled in its .gp, no gnuplot output, images."""
    problems = []
    charts = sorted(plots.glob("*.gp"))
    assert charts, f"no charts in {plots}"
    for gp in charts:
        series = re.findall(r"^# (.*)  \(x, median, min, max, noisy\)$",
                            gp.with_suffix(".dat").read_text(), re.M)
        plot = next(line for line in gp.read_text().splitlines() if line.startswith("plot "))
        titles = [t for t in re.findall(r'title "((?:[^"\\]|\\.)*)"', plot)
                  if not t.startswith("noisy run (")]  # the rings around noisy points
        if not series or titles != series:
            problems.append(f"{gp.name}: series {series} but titles {titles}")
        if "notitle" in plot:
            problems.append(f"{gp.name}: a series without a title")
        log = gp.with_name(gp.name + ".log")
        if log.exists():
            problems.append(f"{gp.name}: gnuplot said {log.read_text()!r}")
        for ext in (".png", ".svg"):
            img = gp.with_suffix(ext)
            if not img.is_file() or img.stat().st_size < 1000:
                problems.append(f"{img.name} missing or empty")
    return problems


@pytest.fixture(scope="module")
def repeats(tmp_path_factory):
    """Two configurations that differ only in the seed, 3 repeats each; then a much smaller
    model, 2 repeats, in the same results directory."""
    d = tmp_path_factory.mktemp("repeats")
    same = d / "same.toml"
    same.write_text(f'base = "{TINY}"\nnproc_per_node = 1\nrepeats = 3\n'
                    '[grid]\n"training.seed" = [1, 2]\n')
    out = sweep(same, d / "res", *FAST, *BIG, "data.seq_len=128")
    rerun = sweep(same, d / "res", *FAST, *BIG, "data.seq_len=128")  # resume: all completed
    within = tagger("aggregate", d / "res", "--best", "tokens_per_s").stdout
    table = tagger("aggregate", d / "res", "--format", "md").stdout
    small = d / "small.toml"
    small.write_text(f'base = "{TINY}"\nnproc_per_node = 1\nrepeats = 2\n')
    sweep(small, d / "res", *FAST, "data.seq_len=128")
    return {"dir": d / "res", "out": out, "rerun": rerun, "within": within, "table": table,
            "beyond": tagger("aggregate", d / "res", "--best", "tokens_per_s").stdout}


@pytest.mark.timing  # measured speeds against the noise of repeats: runs alone (tests/conftest.py)
def test_repeats_run_round_robin_each_in_its_own_directory(repeats):
    order = re.findall(r"^sweep: point (\d+): (\S+)", repeats["out"], re.M)
    tags = [t for _, t in order]
    assert [int(i) for i, _ in order] == list(range(6))
    # seed 1, seed 2, seed 1 again, ...: never the same configuration back to back
    assert tags[2] == tags[0] + ".r1" and tags[4] == tags[0] + ".r2"
    assert tags[3] == tags[1] + ".r1" and tags[5] == tags[1] + ".r2"
    hashes = {t: re.search(r"^# config_hash = (\w+)$",
                           (repeats["dir"] / t / "run.toml").read_text(), re.M)[1] for t in tags}
    assert hashes[tags[0]] == hashes[tags[2]] == hashes[tags[4]] != hashes[tags[1]]
    # Each repeat is a run of its own for --pending: a second sweep finds nothing to do.
    assert "sweep: 0 pending point(s)" in repeats["rerun"], repeats["rerun"]


@pytest.mark.timing
def test_aggregate_shows_median_and_spread_per_configuration(repeats):
    csv = pd.read_csv(pd.io.common.StringIO(tagger("aggregate", repeats["dir"]).stdout))
    first = csv[csv["repeats"] == 3].iloc[0]
    seed1 = csv[csv["config_hash"] == first["config_hash"]]
    assert len(seed1) == 3 and set(seed1["repeats"]) == {3}
    tps = sorted(seed1["tokens_per_s_dataset"])
    assert seed1.iloc[0]["tokens_per_s_median"] == pytest.approx(tps[1])
    assert seed1.iloc[0]["tokens_per_s_min"] == pytest.approx(tps[0])
    assert seed1.iloc[0]["tokens_per_s_max"] == pytest.approx(tps[2])
    # The step spread recomputed from one run's HDF5 steps (nearest rank, measured steps).
    row = seed1.iloc[0]
    with h5py.File(repeats["dir"] / row["tag"] / "metrics" / "rank_00000.h5", "r") as f:
        s = f["steps"]
        rates = sorted(p / t for st, p, t in zip(s["step"][()], s["tokens_padded"][()],
                                                 s["step_time_s"][()]) if st >= 2)
    assert row["step_tokens_per_s_padded_p50"] == pytest.approx(
        rates[int(0.5 * (len(rates) - 1) + 0.5)])
    table = repeats["table"]
    assert "Repeats (runs of one configuration" in table
    assert re.search(r"\| 3 / 3 \| [\d.]+ \| [\d.]+-[\d.]+ \| [\d.]+ \| [\d.]+/[\d.]+/[\d.]+ \|",
                     table), table


@pytest.mark.timing
def test_best_is_within_noise_for_identical_configurations(repeats):
    r = repeats["within"]
    # Named by the axis that differs between them (not by tag hashes).
    assert re.search(r"^training\.seed=\d+ beats training\.seed=\d+ by [\d.]+ %, within noise: ",
                     r, re.M), r
    assert "beyond noise" not in r


@pytest.mark.timing
def test_best_is_beyond_noise_for_a_clearly_faster_configuration(repeats):
    r = repeats["beyond"]
    first = re.search(r"^  1\. (.+?): ([\d.]+) tokens/s \(2 runs", r, re.M)
    assert first, r
    small = tagger("aggregate", repeats["dir"], "--format", "json").stdout
    runs = json.loads(small)["runs"]
    small_dims = {x["model.dim"] for x in runs if x["repeats"] == 2}
    assert len(small_dims) == 1, small_dims
    assert f"model.dim={small_dims.pop()}" in first[1].split()  # the small model wins
    assert re.search(r"beats .+ by [\d.]+ %, beyond noise: no overlap of the repeats' ranges", r), r
    assert len(re.findall(r"^  \d\. ", r, re.M)) == 3  # every configuration, in order


@pytest.mark.timing
def test_a_run_that_does_not_count_is_excluded_with_its_reason(repeats, tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    for d in repeats["dir"].iterdir():
        if d.is_dir() and not d.name.startswith("."):
            (res / d.name).symlink_to(d)
    victim = sorted(p.name for p in res.iterdir())[0]
    (res / victim).unlink()
    (res / victim).mkdir()
    (res / victim / "run.toml").write_text((repeats["dir"] / victim / "run.toml").read_text())
    r = tagger("aggregate", res, "--best", "tokens_per_s").stdout
    assert f"Excluded from the ranking (1):\n  - {victim}: missing: no metrics files" in r, r


LAYOUTS = """nproc_per_node = 2
global_batch_size = 4
[grid]
layout = ["ddp", "zero3", "tp2"]
"data.seq_len" = [32, 64]

[layout.ddp]
"parallel.dp_shard" = 1

[layout.zero3]
"parallel.dp_shard" = 2
"parallel.zero_stage" = 3

[layout.tp2]
"parallel.tp" = 2
"""


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    d = tmp_path_factory.mktemp("layouts")
    (d / "layouts.toml").write_text(f'base = "{TINY}"\n' + LAYOUTS)
    sweep(d / "layouts.toml", d / "res", *FAST, "training.micro_batch_size=1")
    p = tagger("aggregate", d / "res", "--format", "md", "--plot", d / "plots")
    return {"dir": d / "res", "plots": d / "plots", "md": p.stdout, "stderr": p.stderr}


def test_layout_sweep_trains_the_same_global_batch_in_every_layout(layouts):
    csv = pd.read_csv(pd.io.common.StringIO(tagger("aggregate", layouts["dir"]).stdout))
    assert sorted(csv["layout"]) == ["ddp"] * 2 + ["tp2"] * 2 + ["zero3"] * 2
    # A derived grad_accum_steps is no contradiction: valid ("noisy" is valid too: other work
    # on the machine held the run's CPUs, which says nothing of the config).
    assert {str(v).lower() for v in csv["is_valid"]} <= {"true", "noisy"}, csv["is_valid"]
    assert set(csv["global_batch_seqs"]) == {4}
    assert set(csv["batch_mode"]) == {"fixed global batch"}
    assert "4 in every run: equal work. Mode: fixed global batch" in layouts["md"]
    for _, row in csv.iterrows():  # measured: padded tokens per optimizer step
        with h5py.File(layouts["dir"] / row["tag"] / "metrics" / "rank_00000.h5", "r") as f:
            per_step = set(f["steps"]["tokens_padded"][()])
        assert per_step == {4 * row["data.seq_len"]}, (row["tag"], per_step)


def test_layout_charts_draw_one_series_per_variant(layouts):
    plots = layouts["plots"]
    names = sorted(p.name for p in plots.glob("*.png"))
    # The keys the variants set (parallel.tp, dp_shard, zero_stage) get no charts of their own.
    assert names == ["tokens_per_s_vs_data.seq_len.png", "tokens_per_s_vs_layout.png"], names
    dat = (plots / "tokens_per_s_vs_data.seq_len.dat").read_text()
    assert re.findall(r"^# (.*)  \(", dat, re.M) == ["layout=ddp", "layout=tp2", "layout=zero3"]
    assert chart_problems(plots) == []


FOUR_LAYOUTS = """nproc_per_node = 2
global_batch_size = 4
repeats = 3
[grid]
layout = ["ddp", "zero2", "zero3", "tp2"]

[layout.ddp]
"parallel.dp_shard" = 1

[layout.zero2]
"parallel.dp_shard" = 2
"parallel.zero_stage" = 2

[layout.zero3]
"parallel.dp_shard" = 2
"parallel.zero_stage" = 3

[layout.tp2]
"parallel.tp" = 2
"""


def test_best_ranks_four_layouts_of_three_repeats_by_name_with_spreads_and_verdicts(tmp_path):
    """A 4-layout sweep with repeats = 3 (12 real runs): `--best` lists every layout once,
    named by its layout (not a hash), with its 3 runs' min-max and step band, a verdict on
    each neighbour (within or beyond the noise, with the test that decided), and the winner's
    line; noisy runs are ranked and marked, not dropped."""
    (tmp_path / "layouts.toml").write_text(f'base = "{TINY}"\n' + FOUR_LAYOUTS)
    sweep(tmp_path / "layouts.toml", tmp_path / "res", *FAST, "training.micro_batch_size=1",
          "data.seq_len=64")
    out = tagger("aggregate", tmp_path / "res", "--best", "tokens_per_s").stdout
    ranked = re.findall(r"^  (\d)\. layout=(\w+): [\d.]+ tokens/s \(3 runs, min-max "
                        r"[\d.]+-[\d.]+; steps p10-p90 [\d.]+-[\d.]+\)", out, re.M)
    assert [r[0] for r in ranked] == ["1", "2", "3", "4"], out
    assert sorted(r[1] for r in ranked) == ["ddp", "tp2", "zero2", "zero3"], out
    verdicts = re.findall(r"^     vs (\d)\.: [\d.]+ % higher, (within|beyond) noise \((.+?)\)",
                          out, re.M)
    assert [v[0] for v in verdicts] == ["2", "3", "4"], out
    assert all("repeats' ranges" in v[2] or "step bands" in v[2] for v in verdicts), verdicts
    assert re.search(rf"^layout={ranked[0][1]} beats layout={ranked[1][1]} by [\d.]+ %, "
                     r"(within|beyond) noise", out, re.M), out
    noisy = len(re.findall(r"\[noisy: \d of 3 runs?\]", out))
    assert noisy == 0 or "The ranking includes" in out, out


def test_demo_sweep_charts_name_every_series(tmp_path):
    """configs/sweeps/demo.toml (what scripts/demo.sh runs), on the tiny model for speed: the
    same axes, so the same charts."""
    sweep(REPO / "configs" / "sweeps" / "demo.toml", tmp_path / "res", *FAST,
          'model.name="tiny"', "model.max_seq_len=1024", "training.stop_after_seconds=0",
          "training.max_steps=3", "metrics.skip_first_steps=1")
    tagger("aggregate", tmp_path / "res", "--format", "md", "--plot", tmp_path / "plots")
    assert sorted(p.name for p in (tmp_path / "plots").glob("*.png")) == [
        "tokens_per_s_vs_data.seq_len.png", "tokens_per_s_vs_training.micro_batch_size.png"]
    assert chart_problems(tmp_path / "plots") == []


def test_a_gnuplot_warning_fails_aggregate_unless_best_effort(layouts, tmp_path):
    real = subprocess.run(["sh", "-c", "command -v gnuplot"], capture_output=True,
                          text=True).stdout.strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gnuplot").write_text(
        f'#!/bin/sh\n"{real}" "$@" || exit $?\n'
        'echo "warning: Warning - difficulty fitting plot titles into key" >&2\n')
    (bin_dir / "gnuplot").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    p = tagger("aggregate", layouts["dir"], "--plot", tmp_path / "plots", check=False, env=env)
    assert p.returncode == 1, p.stderr
    assert "gnuplot warned on " in p.stderr and "difficulty fitting plot titles" in p.stderr
    assert "chart(s) missing or unreadable" in p.stderr
    p = tagger("aggregate", layouts["dir"], "--plot", tmp_path / "plots2", "--plot-best-effort",
               check=False, env=env)
    assert p.returncode == 0 and "gnuplot warned on " in p.stderr


def test_memory_budget_marks_over_budget_points_invalid_with_the_estimate(tmp_path):
    s = tmp_path / "s.toml"
    s.write_text(f'base = "{TINY}"\n[grid]\n"data.seq_len" = [64, 256]\n'
                 '"training.micro_batch_size" = [1, 64]\n')
    free = [json.loads(x) for x in tagger("expand", s, "--json").stdout.splitlines()]
    assert all(p["valid"] for p in free)
    capped = [json.loads(x) for x in
              tagger("expand", s, "--json", "--memory-budget", "600MiB").stdout.splitlines()]
    over = [p for p in capped if not p["valid"]]
    assert over and len(over) < len(capped)
    for p in over:
        m = re.match(r"over the memory budget: estimated memory per rank ([\d.]+) GiB exceeds "
                     r"0\.586 GiB \(--memory-budget 600MiB\); largest term: ", p["reason"])
        assert m and float(m[1]) > 0.586, p["reason"]
    assert [p["tag"] for p in capped] == [p["tag"] for p in free]
