"""The link figure (trainer/docs/metrics.md § Link bandwidth) and `trainer --probe`
(trainer/docs/run.md § Probe), tiny model.

A 2-rank run under the launcher records the all-reduce bus bandwidth of its collectives as
root attributes (link_busbw_Bps > 0, link_source naming the transport, ranks and nodes), and
`sweep_tagger aggregate` shows it as link_busbw_GBps; a world-1 run records NaN figures with
link_source "world 1: no link". `trainer --probe` prints one JSON line on rank 0 with the
documented fields (link fields null at world 1), every rank exits 0, no run directory is
written; --probe with another answer (--estimate-memory ...) exits 2.
"""
import json
import math
import subprocess

import pandas as pd
import pytest

from trainer_util import BUILD, QUICK_START, TINY, TRAINER, base_env, metrics, run_trainer

LAUNCHER = BUILD / "launcher" / "launcher"
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
SHORT = ("training.max_steps=4",)
PROBE_FIELDS = ["probe", "world", "nodes", "dtype", "threads", "gemm_flops", "gemm_flops_min",
                "gemm_n", "link_busbw_Bps", "link_algbw_Bps", "link_probe_bytes", "link_source"]


def launch(nproc, *args, timeout=180):
    cmd = [str(LAUNCHER), "--nproc-per-node", str(nproc), "--", str(TRAINER), "--config",
           str(TINY), *QUICK_START, *args]
    return subprocess.run(cmd, env=base_env(), capture_output=True, text=True, timeout=timeout)


def probe_lines(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"probe"')]


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("link") / "results"
    p = launch(2, "--output-dir", str(root), *SHORT)
    assert p.returncode == 0, p.stdout + p.stderr
    (run,) = [d for d in root.iterdir() if (d / "metrics").is_dir()]
    return root, run, p


def test_two_rank_run_records_its_link(two_rank_run):
    _, run, p = two_rank_run
    for rank in (0, 1):
        with metrics(run, rank) as f:
            a = f.attrs
            assert a["link_busbw_Bps"] > 0 and a["link_algbw_Bps"] > 0
            # 2 ranks: busbw = algbw x 2(n-1)/n = algbw; algbw = bytes / seconds
            assert a["link_busbw_Bps"] == pytest.approx(a["link_algbw_Bps"], rel=1e-12)
            assert a["link_algbw_Bps"] == pytest.approx(a["link_probe_bytes"] / a["link_probe_s"],
                                                        rel=1e-12)
            assert 0 < a["link_probe_bytes"] <= 16 << 20
            assert a["link_probe_s"] < a["link_probe_cost_s"] < 10
            assert a["link_source"].endswith(", 2 ranks, 1 node"), a["link_source"]
            assert "local memory" in a["link_source"], a["link_source"]
    with metrics(run, 0) as f0, metrics(run, 1) as f1:  # the slowest rank's times: one figure
        assert f0.attrs["link_busbw_Bps"] == f1.attrs["link_busbw_Bps"]
    assert "link: all-reduce busbw" in p.stderr


def test_aggregate_has_the_link_column(two_rank_run, tmp_path):
    root, run, _ = two_rank_run
    out = tmp_path / "runs.csv"
    p = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(root), "--format", "csv", "--out",
                        str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    table = pd.read_csv(out)
    row = table[table["tag"] == run.name].iloc[0]
    with metrics(run, 0) as f:
        assert row["link_busbw_GBps"] == pytest.approx(f.attrs["link_busbw_Bps"] / 1e9, rel=1e-12)
    md = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(root), "--format", "md"],
                        capture_output=True, text=True, timeout=60)
    assert "link busbw GB/s (all-reduce)" in md.stdout


def test_world_one_records_no_link(tmp_path):
    run_trainer(tmp_path, *SHORT)
    with metrics(tmp_path) as f:
        a = f.attrs
        assert a["link_source"] == "world 1: no link"
        assert math.isnan(a["link_busbw_Bps"]) and math.isnan(a["link_algbw_Bps"])
        assert math.isnan(a["link_probe_s"]) and a["link_probe_bytes"] == 0


def test_link_probe_off(tmp_path):
    p = launch(2, "--output-dir", str(tmp_path), "--no-sweep-dir", "metrics.link_probe=false",
               *SHORT)
    assert p.returncode == 0, p.stdout + p.stderr
    with metrics(tmp_path) as f:
        assert math.isnan(f.attrs["link_busbw_Bps"])
        assert "metrics.link_probe = false" in f.attrs["link_source"]


def test_probe_two_ranks(tmp_path):
    p = launch(2, "--output-dir", str(tmp_path / "out"), "--probe")
    assert p.returncode == 0, p.stdout + p.stderr
    (line,) = probe_lines(p.stdout)
    assert list(line) == PROBE_FIELDS
    assert line["probe"] == 1 and line["world"] == 2 and line["nodes"] == 1
    assert line["dtype"] == "fp32" and line["threads"] == 1 and line["gemm_n"] > 0
    assert line["gemm_flops"] > 1e8 and 0 < line["gemm_flops_min"] <= line["gemm_flops"]
    assert line["link_busbw_Bps"] > 0 and line["link_algbw_Bps"] > 0
    assert 0 < line["link_probe_bytes"] <= 16 << 20
    assert line["link_source"].endswith(", 2 ranks, 1 node")
    assert not (tmp_path / "out").exists(), "--probe writes no run directory"


def test_probe_world_one(tmp_path):
    p = subprocess.run([str(TRAINER), "--config", str(TINY), *QUICK_START, "--output-dir",
                        str(tmp_path / "out"), "--probe"], env=base_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 1, p.stdout
    line = json.loads(p.stdout)
    assert list(line) == PROBE_FIELDS and line["world"] == 1
    assert line["gemm_flops"] > 1e8 and line["gemm_flops_min"] == line["gemm_flops"]
    for k in ("link_busbw_Bps", "link_algbw_Bps", "link_probe_bytes", "link_source"):
        assert line[k] is None, k
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", [["--estimate-memory"], ["--print-config"],
                                  ["--max-micro-batch"], ["--generate-data", "x.jsonl"]])
def test_probe_refuses_other_answers(tmp_path, flag):
    flag = [str(tmp_path / f) if f.endswith(".jsonl") else f for f in flag]
    p = subprocess.run([str(TRAINER), "--config", str(TINY), "--probe", *flag], env=base_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"cannot be combined with {flag[0]}" in p.stderr and p.stdout == ""
    assert not list(tmp_path.iterdir()), "nothing is written"
