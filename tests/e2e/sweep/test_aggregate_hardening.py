"""Aggregate never passes corrupt or special
files off as results, and sweep runners can tell a run held by another runner.

Binaries: $FTB_BUILD_DIR/sweep_tagger/{sweep_tagger,ftb_synth_runs}.
"""
import fcntl
import json
import os
import pathlib
import random
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
SYNTH = BUILD / "sweep_tagger" / "ftb_synth_runs"
SWEEP = REPO / "tests" / "data" / "sweep_tagger" / "sweeps" / "three_axis.toml"


def rows(results, *args, timeout=60):
    p = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(results), "--format", "json", *args],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    runs = data["runs"] if isinstance(data, dict) else data
    return {r["tag"]: r for r in runs}


@pytest.fixture
def one_run(tmp_path):
    """A small completed single-rank run (the trainer's MetricsFile code)."""
    src = tmp_path / "src"
    subprocess.run([str(SYNTH), str(src), "--runs", "1", "--steps", "12", "--ranks-per-node",
                    "1", "--states", "completed"], check=True, capture_output=True)
    (run,) = [d for d in src.iterdir() if d.is_dir()]
    return run


def test_rank_file_that_is_a_fifo_is_corrupt_not_a_hang(one_run, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(one_run, results / "fifo_run")
    rank0 = results / "fifo_run" / "metrics" / "rank_00000.h5"
    original = {p.name: p.read_bytes() for p in (results / "fifo_run").iterdir() if p.is_file()}
    rank0.unlink()
    os.mkfifo(rank0)
    row = rows(results, timeout=30)["fifo_run"]
    assert row["status"] == "corrupt"
    assert "rank_00000.h5 is a FIFO, expected a regular file" in row["message"]
    assert {p.name: p.read_bytes() for p in (results / "fifo_run").iterdir()
            if p.is_file()} == original  # aggregate wrote nothing into the run


def test_block_corruption_never_yields_a_different_completed_row(one_run, tmp_path):
    """Overwrite one 4 KB block at every 4 KB offset of a completed rank file (random
    bytes, and zeros); no row may come out `completed` with values other than the
    original's. Fletcher-32 on the step chunks, checksummed metadata and the value
    sanity checks make a damaged file `corrupt` (or leave the values intact)."""
    rank0 = one_run / "metrics" / "rank_00000.h5"
    data = rank0.read_bytes()
    results = tmp_path / "results"
    shutil.copytree(one_run, results / "original")
    rng = random.Random(13)
    names = []
    for off in range(0, len(data), 4096):
        for kind in ("random", "zeros"):
            name = f"c{off:06d}_{kind}"
            shutil.copytree(one_run, results / name)
            block = bytes(rng.getrandbits(8) for _ in range(4096)) if kind == "random" \
                else bytes(4096)
            with open(results / name / "metrics" / "rank_00000.h5", "r+b") as fh:
                fh.seek(off)
                fh.write(block[:max(0, min(4096, len(data) - off))])
            names.append(name)
    # One block (zeros inside /config's heap) makes libhdf5 loop: the reader deadline
    # turns that into a corrupt row instead of a hang.
    table = rows(results, "--reader-timeout", "5", timeout=600)
    orig = table["original"]
    assert orig["status"] == "completed"
    skip = {"tag", "message"}
    survived, corrupt = 0, 0
    for name in names:
        r = table[name]
        if r["status"] == "completed":
            diff = {k: (orig.get(k), r.get(k)) for k in set(orig) | set(r)
                    if k not in skip and orig.get(k) != r.get(k)}
            assert not diff, f"{name}: completed with different values {diff}"
            survived += 1
        else:
            corrupt += 1
            assert r["message"], name
    assert corrupt > 0 and len(names) == survived + corrupt


def test_pending_skips_points_held_by_another_runner(tmp_path):
    results = tmp_path / "results"
    def pending():
        p = subprocess.run([str(SWEEP_TAGGER), "expand", str(SWEEP), "--pending", str(results),
                            "--field", "tag"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        return p.stdout.split()
    tags = pending()
    held = results / tags[0]
    held.mkdir(parents=True)
    with open(held / "run.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write("host=h pid=1 since=x\n")
        fh.flush()
        assert pending() == tags[1:]
        p = subprocess.run([str(SWEEP_TAGGER), "expand", str(SWEEP), "--pending", str(results),
                            "--json"], capture_output=True, text=True, timeout=30)
        assert tags[0] not in p.stdout
    assert pending() == tags  # released: pending again
