"""`sweep_tagger aggregate` end to end.

A results tree with completed, failed, OOM, killed-mid-run, truncated-file and
not-started runs, written by ftb_synth_runs (the trainer's MetricsFile and run.toml
code, synthetic numbers). The aggregator must exit 0, give each run its status, write
a CSV that pandas loads with the documented columns, and agree with tokens/s
recomputed from the HDF5 steps with h5py.
Binaries: $FTB_BUILD_DIR/sweep_tagger/{sweep_tagger,ftb_synth_runs}.
Run with the project venv: .venv/bin/python -m pytest tests/e2e/sweep
"""
import json
import os
import pathlib
import shutil
import subprocess
import time
import tomllib

import h5py
import numpy as np
import pandas as pd
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
SYNTH = BUILD / "sweep_tagger" / "ftb_synth_runs"

# sweep_tagger/README.md, "aggregate" columns (varying config keys come after status).
DOCUMENTED = ["tag", "status", "world_size", "nodes", "ranks", "steps_done", "resumes",
              "measured_steps",
              "train_runtime_s", "tokens_per_s_dataset", "tokens_per_s_padded",
              "tokens_per_s_dataset_per_device", "tokens_per_s_padded_per_device", "mfu", "mfu_causal", "hfu",
              "gemm_efficiency", "step_time_p50_s", "step_time_p90_s", "data_frac", "forward_frac",
              "backward_frac", "optimizer_frac", "comm_frac", "peak_mem_mib", "first_loss",
              "last_loss", "mt_per_hour", "usd_per_mt", "is_valid", "interference", "tokens_per_cpu_s", "noisy",
              "env_warnings", "peak_flops", "peak_source",
              "gemm_flops", "gemm_source", "link_busbw_GBps", "traces", "message"]

# ftb_synth_runs run i: seq_len 256 << (i % 4), micro batch 1 << (i // 4 % 4).
EXPECTED = {"sl256.mb1": "completed", "sl512.mb1": "failed", "sl1024.mb1": "oom",
            "sl2048.mb1": "killed", "sl256.mb2": "completed", "sl512.mb2": "corrupt",
            "not_started": "missing"}


def run_dir(results, key):
    (d,) = [p for p in results.iterdir() if f".{key}." in p.name or p.name == key]
    return d


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    for exe in (SWEEP_TAGGER, SYNTH):
        if not exe.is_file():
            pytest.fail(f"{exe} not found: build it or set FTB_BUILD_DIR")
    root = tmp_path_factory.mktemp("agg") / "results"
    subprocess.run([str(SYNTH), str(root), "--runs", "6", "--steps", "40", "--states",
                    "completed,failed,oom,running,completed,completed"], check=True)
    # Killed mid-run: says running, nothing written for an hour.
    old = time.time() - 3600
    for f in (run_dir(root, "sl2048.mb1") / "metrics").iterdir():
        os.utime(f, (old, old))
    # Truncated file: rank 1 of a completed run cut in half.
    f = run_dir(root, "sl512.mb2") / "metrics" / "rank_00001.h5"
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size // 2)
    # Not started: run.toml only.
    (root / "not_started").mkdir()
    shutil.copy(run_dir(root, "sl256.mb1") / "run.toml", root / "not_started" / "run.toml")
    return root


def aggregate(results, *args):
    p = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(results), *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def table(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "runs.csv"
    aggregate(results, "--format", "csv", "--out", str(out))
    assert (out.parent / "runs.constants.csv").is_file()
    return pd.read_csv(out)


@pytest.mark.quick  # scripts/test.sh --quick: sweep_tagger's end-to-end test
def test_every_run_has_its_status(table):
    assert list(table.columns[:2]) == ["tag", "status"]
    assert set(DOCUMENTED) <= set(table.columns)
    assert "data.seq_len" in table.columns and "training.micro_batch_size" in table.columns
    got = {}
    for tag, status in zip(table["tag"], table["status"]):
        (key,) = [k for k in EXPECTED if f".{k}." in tag or tag == k]
        got[key] = status
    assert got == EXPECTED
    assert table["tokens_per_s_dataset"].dtype == np.float64
    done = table[table["status"] == "completed"]
    assert (done["steps_done"] == 40).all() and (done["measured_steps"] == 38).all()
    assert done["is_valid"].all()


def test_tokens_per_s_recomputed_with_h5py(results, table):
    d = run_dir(results, "sl256.mb2")
    warmup = tomllib.loads((d / "run.toml").read_text())["metrics"]["skip_first_steps"]
    with h5py.File(d / "metrics" / "rank_00000.h5", "r") as f:
        s = f["steps"]
        m = s["step"][()] >= warmup
        dataset = s["tokens_dataset"][()][m].sum() / s["step_time_s"][()][m].sum()
        padded = s["tokens_padded"][()][m].sum() / s["step_time_s"][()][m].sum()
        world = int(f.attrs["world_size"])
    row = table[table["tag"] == d.name].iloc[0]
    assert row["tokens_per_s_dataset"] == pytest.approx(dataset, rel=1e-12)
    assert row["tokens_per_s_padded"] == pytest.approx(padded, rel=1e-12)
    assert row["tokens_per_s_padded_per_device"] == pytest.approx(padded / world, rel=1e-12)


def test_markdown_json_and_plots(results, tmp_path):
    md = aggregate(results, "--format", "md").stdout
    assert "| tag | status |" in md and "killed" in md
    doc = json.loads(aggregate(results, "--format", "json").stdout)
    assert len(doc["runs"]) == len(EXPECTED)
    assert doc["varying"] == ["data.seq_len", "training.micro_batch_size"]
    aggregate(results, "--plot", str(tmp_path / "plots"))
    # Only completed runs are plotted: sl256 with micro batch 1 and 2.
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs == ["tokens_per_s_vs_training.micro_batch_size.png"]
    assert (tmp_path / "plots" / "tokens_per_s_vs_training.micro_batch_size.svg").is_file()


def test_bad_results_dir_is_bad_input(tmp_path):
    p = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(tmp_path / "nope")],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "key 'RESULTS_DIR'" in p.stderr and "does not exist" in p.stderr
    assert "hint: pass the directory the runs were written to" in p.stderr
    p = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(tmp_path), "--format", "xml"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "key '--format': expected csv, md or json, got 'xml'" in p.stderr
    assert "hint: --format md" in p.stderr
    p = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(tmp_path), "--jobs", "two"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "key '--jobs': expected a number, got 'two'" in p.stderr and "hint: --jobs:" in p.stderr
