"""slurm/submit_sweep.sh against stand-ins for sbatch, squeue and scontrol (no cluster, no
root): the MaxArraySize split, the %N throttle, the snapshot and its hash, and the points it
leaves out (queued, requeued or running per squeue; submitted --max-tries times).

Run:  .venv/bin/python -m pytest -q tests/cluster/test_sweep_array_submit.py
FTB_BUILD_DIR = build dir with sweep_tagger/ (default build/release).
"""
import hashlib
import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
if not BUILD.is_absolute():
    BUILD = REPO / BUILD
TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
SUBMIT = REPO / "slurm" / "submit_sweep.sh"
SWEEP = REPO / "configs" / "sweeps" / "tiny_scaling.toml"  # 10 valid 1-node points, 1 2-node

FAKES = {
    # Each sbatch call: its arguments, one per line, then a blank line; job ids 100, 101, ...
    "sbatch": '#!/bin/bash\nn=$(cat "$FAKE_DIR/next" 2>/dev/null || echo 100)\n'
              'printf "%s\\n" "$@" "" >> "$FAKE_DIR/sbatch.calls"\n'
              'echo $((n + 1)) > "$FAKE_DIR/next"\necho "$n"\n',
    "squeue": '#!/bin/bash\ncat "$FAKE_DIR/queue" 2>/dev/null\n',
    "scontrol": '#!/bin/bash\n[[ "$1 $2" == "show config" ]] && echo "MaxArraySize            = 3"\n',
}


@pytest.fixture
def fake(tmp_path):
    if not TAGGER.exists():
        pytest.fail(f"{TAGGER} not built (set FTB_BUILD_DIR)", pytrace=False)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in FAKES.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", FAKE_DIR=str(tmp_path),
               FTB_BUILD_DIR=str(BUILD))
    return tmp_path, env


def submit(env, results, *extra):
    return subprocess.run([str(SUBMIT), str(SWEEP), str(results), *extra], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def calls(tmp):
    f = tmp / "sbatch.calls"
    if not f.exists():
        return []
    return [c.split("\n") for c in f.read_text().split("\n\n") if c.strip()]


def test_large_group_is_split_at_max_array_size_with_throttle_and_hashed_snapshots(fake):
    tmp, env = fake
    results = tmp / "res"
    p = submit(env, results, "--throttle", "2", "-t", "5")
    assert p.returncode == 0, p.stderr
    # 10 one-node points in arrays of at most 3 (MaxArraySize), then the two-node point
    assert p.stdout.split() == ["100", "101", "102", "103", "104"], p.stderr
    cs = calls(tmp)
    assert [next(a for a in c if a.startswith("--array=")) for c in cs] == \
        ["--array=0-2%2"] * 3 + ["--array=0-0%2"] * 2
    assert [next(a for a in c if a.startswith("--nodes=")) for c in cs] == \
        ["--nodes=1"] * 4 + ["--nodes=2"]
    tags = []
    for c in cs:
        assert "-t" in c and "5" in c, c  # sbatch options passed on
        i = c.index("--snapshot")
        snap, sha = pathlib.Path(c[i + 1]), c[i + 2]
        assert hashlib.sha256(snap.read_bytes()).hexdigest() == sha
        tags += [json.loads(line)["tag"] for line in snap.read_text().splitlines()]
    valid = [json.loads(l) for l in subprocess.run([TAGGER, "expand", SWEEP, "--json"],
                                                   capture_output=True, text=True).stdout.splitlines()]
    valid = sorted((q for q in valid if q["valid"]), key=lambda q: (q["nodes"], q["index"]))
    assert tags == [q["tag"] for q in valid]  # every valid point once
    ledger = (results / "sweeps" / "submitted.tsv").read_text().splitlines()
    assert [l.split("\t")[:2] for l in ledger][:4] == \
        [[tags[0], "100_0"], [tags[1], "100_1"], [tags[2], "100_2"], [tags[3], "101_0"]]


def test_queued_and_requeued_points_are_not_submitted_again(fake):
    tmp, env = fake
    results = tmp / "res"
    assert submit(env, results).returncode == 0
    first = len(calls(tmp))
    # squeue -r: two tasks pending (one of them requeued and waiting), one running; the
    # other points' tasks have left the queue without completing.
    (tmp / "queue").write_text("100_0 PENDING\n100_1 RUNNING\n101_0 PENDING\n")
    p = submit(env, results)
    assert p.returncode == 0, p.stderr
    assert "already queued as job 100_0 (PENDING): skipped" in p.stderr
    assert "already queued as job 100_1 (RUNNING): skipped" in p.stderr
    new = calls(tmp)[first:]
    snaps = [pathlib.Path(c[c.index("--snapshot") + 1]) for c in new]
    resubmitted = sum(len(s.read_text().splitlines()) for s in snaps)
    assert resubmitted == 11 - 3, p.stderr  # every valid point but the three queued ones


def test_retry_cap_skips_points_submitted_max_tries_times(fake):
    tmp, env = fake
    results = tmp / "res"
    for _ in range(2):
        assert submit(env, results, "--max-tries", "2").returncode == 0
    n = len(calls(tmp))
    p = submit(env, results, "--max-tries", "2")
    assert p.returncode == 0, p.stderr
    assert len(calls(tmp)) == n and p.stdout.strip() == ""
    assert "was submitted 2 time(s) (jobs 100_0, 105_0) without completing: skipped " \
           "(--max-tries 2; raise it to retry)" in p.stderr
    assert "nothing to submit: every valid point is completed, queued, or at --max-tries" in p.stderr
    assert submit(env, results, "--max-tries", "3").stdout.strip() != ""


def test_dry_run_submits_and_writes_nothing(fake):
    tmp, env = fake
    results = tmp / "res"
    p = submit(env, results, "--dry-run")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("sbatch --parsable --array=0-2 ") == 3 and not calls(tmp)
    assert not results.exists()
