"""slurm/submit_sweep.sh without a cluster: a fake `sbatch` first on PATH records every call.

--dry-run anywhere on the command line (before, between or after SWEEP and RESULTS, or
among the sbatch options) submits nothing and creates nothing; without it the same command
line submits one array per node count with the sbatch options passed through.
Binary: $FTB_BUILD_DIR/sweep_tagger/sweep_tagger.
"""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release")).resolve()
SUBMIT = REPO / "slurm" / "submit_sweep.sh"
SWEEP = "configs/sweeps/slurm_test.toml"  # one 1-node point, one 2-node point

FAKE_SBATCH = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$SBATCH_CALLS"
n=$(wc -l < "$SBATCH_CALLS")
echo "$((100 + n));cluster"
"""


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    calls = tmp_path / "calls"

    def submit(*args):
        env = dict(os.environ, FTB_BUILD_DIR=str(BUILD), SBATCH_CALLS=str(calls),
                   PATH=f"{bin_dir}:{os.environ['PATH']}")
        p = subprocess.run(["bash", str(SUBMIT), *args], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=60)
        return p, calls.read_text().splitlines() if calls.exists() else []
    return submit


@pytest.mark.parametrize("order", [
    ["--dry-run", SWEEP, "RES"],
    [SWEEP, "--dry-run", "RES"],
    [SWEEP, "RES", "--dry-run"],           # the order the README shows
    [SWEEP, "RES", "-t", "10", "--dry-run", "--exclusive"],
    [SWEEP, "RES", "--all", "--dry-run"],
])
def test_dry_run_anywhere_submits_nothing(fake, tmp_path, order):
    res = tmp_path / "res"
    p, calls = fake(*[str(res) if a == "RES" else a for a in order])
    assert p.returncode == 0, p.stderr
    assert calls == [], "--dry-run called sbatch"
    assert not res.exists()
    printed = [l for l in p.stdout.splitlines() if l.startswith("sbatch ")]
    assert len(printed) == (1 if "--all" in order else 2), p.stdout
    for line in printed:
        assert "--dry-run" not in line and "slurm/sweep.sbatch" in line
        if "-t" in order:
            assert " -t 10 --exclusive " in line, line


def test_without_dry_run_submits_one_array_per_node_count(fake, tmp_path):
    res = tmp_path / "res"
    p, calls = fake(SWEEP, str(res), "-t", "10")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["101", "102"]
    assert len(calls) == 2
    # Each array indexes its own snapshot of the expanded sweep (slurm/README.md), from 0.
    assert "--array=0-0 --nodes=1" in calls[0] and "--array=0-0 --nodes=2" in calls[1], calls
    assert all(" -t 10 " in c and c.endswith(f"{SWEEP.split('/')[-1]} {res}") for c in calls)


def test_sbatch_option_before_the_positionals_is_refused(fake, tmp_path):
    p, calls = fake("-t", "10", SWEEP, str(tmp_path / "res"))
    assert p.returncode == 2 and "put sbatch options last" in p.stderr, p.stderr
    assert calls == []
