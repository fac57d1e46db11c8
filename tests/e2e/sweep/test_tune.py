"""`sweep_tagger tune` on the tiny model, two local ranks:

- --dry-run prunes what the trainer refuses and what the estimator says does not fit, with
  the reason, predicts every other point and runs nothing;
- a tune runs ordinary run directories (aggregate reads them), keeps the best by successive
  halving, writes a winner.toml the trainer takes as is and the winner's launch line, and
  reports the model's error on every measured point; a second tune reuses every run;
- --budget-minutes stops starting runs once spent and says so; the ranking uses what ran;
- bad [tune] / [machines] keys exit 2 naming the file, line and key.
The machine figures are given (--gemm-tflops, --link-GBps) except where the probe is tested.
Binaries: $FTB_BUILD_DIR/{sweep_tagger,launcher,trainer}.
"""
import csv
import io
import os
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
TRAINER = BUILD / "trainer" / "trainer"
FIGURES = ["--gemm-tflops", "0.02", "--link-GBps", "2"]

SPACE = """\
base = "{base}"
nproc_per_node = 2
global_batch_size = 4
[grid]
layout = ["ddp", "zero1"]
"training.micro_batch_size" = [1, 2]
"metrics.gemm_probe" = [false]  # runs without the start-up GEMM: tune's model takes FIGURES
[layout.ddp]
"parallel.dp_shard" = 1
[layout.zero1]
"parallel.dp_shard" = 2
"parallel.zero_stage" = 1
[machines]
{machines}
[tune]
first_steps = 3
final_steps = 5
max_repeats = 1
{tune}
{more}
"""


def space(tmp_path, machines="", tune="", more=""):
    for exe in (SWEEP_TAGGER, TRAINER):
        if not exe.is_file():
            pytest.fail(f"{exe} not found: build it or set FTB_BUILD_DIR")
    p = tmp_path / "space.toml"
    p.write_text(SPACE.format(base=REPO / "configs" / "runs" / "tiny.toml", machines=machines,
                              tune=tune, more=more))
    return p


def tune(*args, timeout=600):
    return subprocess.run([str(SWEEP_TAGGER), "tune", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "FTB_BUILD_DIR": str(BUILD)})


def run_dirs(results):
    return sorted(p.parent.name for p in results.glob("*/run.toml"))


def test_dry_run_prunes_with_reasons_and_runs_nothing(tmp_path):
    # tp 3 on 2 ranks: refused; 150 MiB per rank: below the estimator's host runtime baseline.
    sp = space(tmp_path, machines='memory = "150MiB"',
               more='[[include]]\nlayout = "ddp"\n"parallel.tp" = 3\n')
    p = tune(sp, tmp_path / "res", "--dry-run", *FIGURES)
    assert p.returncode == 0, p.stderr
    pruned = p.stdout.split("## Pruned before any run")[1].split("##")[0]
    assert re.search(r"^- layout=ddp parallel\.tp=3: .*tp", pruned, re.M), p.stdout
    assert pruned.count("over the memory budget") == 4, p.stdout
    assert run_dirs(tmp_path / "res") == []
    assert (tmp_path / "res" / "tune" / "report.md").read_text() == p.stdout


def test_dry_run_predicts_every_point_that_fits(tmp_path):
    p = tune(space(tmp_path), tmp_path / "res", "--dry-run", *FIGURES)
    assert p.returncode == 0, p.stderr
    table = re.findall(r"^\| \d+ \| (layout=\w+ training\.micro_batch_size=\d) \| ([\d.e-]+) \| "
                       r"([\d.e-]+) / ([\d.e-]+) / ([\d.e-]+) \|", p.stdout, re.M)
    assert len(table) == 4, p.stdout
    for name, total, compute, comm, bubble in table:
        assert float(total) == pytest.approx(float(compute) + float(comm) + float(bubble), rel=0.02)
        assert float(comm) > 0 and float(bubble) == 0
    # The same compute, ZeRO-1 moves 1.5x DDP's bytes: every DDP point predicted first.
    assert [n.split()[0] for n, *_ in table] == ["layout=ddp"] * 2 + ["layout=zero1"] * 2
    assert "dry run: not measured" in p.stdout


def test_tune_runs_ordinary_runs_writes_the_winner_and_resumes(tmp_path):
    sp, res = space(tmp_path), tmp_path / "res"
    p = tune(sp, res, *FIGURES)
    assert p.returncode == 0, p.stderr + p.stdout
    # Round 0: 4 points x 3 steps; round 1: the best 2 x 5 steps (max_repeats 1: no repeat).
    dirs = run_dirs(res)
    assert len(dirs) == 6, dirs
    agg = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(res)], capture_output=True,
                         text=True, timeout=120)
    assert agg.returncode == 0, agg.stderr
    rows = list(csv.DictReader(io.StringIO(agg.stdout)))
    assert sorted(r["steps_done"] for r in rows) == ["3"] * 4 + ["5"] * 2
    assert {r["status"] for r in rows} == {"completed"}
    # Rounds before the last skip [tune] skip_steps (1); the last round skips the base's
    # metrics.skip_first_steps (tiny.toml: the default 2), as an exhaustive sweep's runs.
    skips = {int(re.search(r"^max_steps = (\d+)", (res / d / "run.toml").read_text(), re.M)[1]):
             int(re.search(r"^skip_first_steps = (\d+)", (res / d / "run.toml").read_text(),
                           re.M)[1]) for d in dirs}
    assert skips == {3: 1, 5: 2}, skips
    # The winner is the best final-round run by dataset tokens/s.
    final = [r for r in rows if r["steps_done"] == "5"]
    best = max(final, key=lambda r: float(r["tokens_per_s_dataset"]))
    m = re.search(r"^## Winner\n\n(layout=(\w+) training\.micro_batch_size=(\d)) ", p.stdout, re.M)
    assert m, p.stdout
    assert (m.group(2), m.group(3)) == (best["layout"], best["training.micro_batch_size"])
    winner = res / "tune" / "winner.toml"
    # The world size comes from the launcher (winner.sh): a ZeRO or TP winner needs 2 ranks.
    world = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
    cfg = subprocess.run([str(TRAINER), "--config", str(winner), "--print-config"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, **world})
    assert cfg.returncode == 0, cfg.stderr
    assert f"micro_batch_size = {m.group(3)}" in cfg.stdout
    assert "--nproc-per-node 2" in (res / "tune" / "winner.sh").read_text()
    assert re.search(r"Median \|predicted / measured - 1\| over 4 measured point\(s\): [\d.]+ % "
                     r"with the compute scale fitted", p.stdout), p.stdout
    again = tune(sp, res, *FIGURES)
    assert again.returncode == 0, again.stderr
    assert "0 run(s) started, 6 reused" in again.stdout
    assert run_dirs(res) == dirs
    assert m.group(1) in again.stdout.split("## Winner")[1].splitlines()[2]


def test_budget_stops_starting_runs_and_ranks_what_ran(tmp_path):
    p = tune(space(tmp_path), tmp_path / "res", "--budget-minutes", "0.001", *FIGURES)
    assert p.returncode == 0, p.stderr + p.stdout
    assert len(run_dirs(tmp_path / "res")) == 1
    assert "the budget (--budget-minutes 0.001) was spent" in p.stdout
    assert "not measured: budget spent" in p.stdout
    assert "## Winner" in p.stdout


@pytest.mark.parametrize("machines, tune_keys, key, what", [
    ("", "eta = 1", "tune.eta", "must be an integer >= 2"),
    ("", "steps = 3", "tune.steps", "unknown key in [tune]"),
    ('launch = ["mpirun"]', "", "machines.launch", '"{node}"'),
    ('memory = "lots"', "", "machines.memory", "expected a size"),
])
def test_bad_tune_keys_exit_2_naming_the_key(tmp_path, machines, tune_keys, key, what):
    sp = space(tmp_path, machines=machines, tune=tune_keys)
    p = tune(sp, tmp_path / "res", "--dry-run", *FIGURES)
    assert p.returncode == 2, p.stdout + p.stderr
    assert key in p.stderr and what in p.stderr, p.stderr
    assert re.search(r"space\.toml:\d+", p.stderr), p.stderr
    assert not (tmp_path / "res").exists()


def test_a_last_round_the_bases_skipped_steps_leave_unmeasured_exits_2(tmp_path):
    p = tune(space(tmp_path), tmp_path / "res", "metrics.skip_first_steps=5", "--dry-run",
             *FIGURES)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "tune.final_steps" in p.stderr and "metrics.skip_first_steps = 5" in p.stderr, p.stderr
    assert not (tmp_path / "res").exists()
