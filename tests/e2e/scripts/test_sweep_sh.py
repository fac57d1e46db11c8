"""scripts/sweep.sh as a user runs it: from another directory with relative paths, with
key=value overrides, and with a point that fails.

- Relative SWEEP and RESULTS resolve against the caller's directory (nothing is created in
  the repository); a missing sweep file or a bad override exits 2 and creates nothing.
- Overrides are part of every point's hash: the tag printed is the directory written, and a
  re-run with the same overrides skips the completed point.
- A failing point (memory limit below libtorch's baseline: status "oom") makes the sweep
  exit 1, and the summary names it.
Binaries: $FTB_BUILD_DIR/{launcher,trainer,sweep_tagger}.
"""
import os
import pathlib
import re
import subprocess

import h5py

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release")).resolve()
SWEEP_SH = REPO / "scripts" / "sweep.sh"
TINY = REPO / "configs" / "runs" / "tiny.toml"
# 3 steps and a given hardware peak: each point takes a few seconds (the GEMM timed at start).
OVERRIDES = ["training.max_steps=3", "metrics.peak_tflops=1.0"]


def write_sweep(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / "sweep.toml").write_text(
        f'base = "{TINY}"\n'
        'fmt = "{model.name}.mem{parallel.memory_limit_gb}.{hash}"\n'
        "nproc_per_node = 1\n"
        "[grid]\n"
        '"parallel.memory_limit_gb" = [0.0, 0.1]  # 0.1 GiB: below the libtorch baseline\n')


def sweep(cwd, *args):
    env = dict(os.environ, FTB_BUILD_DIR=str(BUILD), OMP_NUM_THREADS="1")
    return subprocess.run(["bash", str(SWEEP_SH), *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def status(run_dir):
    with h5py.File(run_dir / "metrics" / "rank_00000.h5", "r") as f:
        # A run refused before its first step (e.g. oom by the estimate) has no step rows.
        return dict(f["status"].attrs), len(f["steps/loss"]) if "steps/loss" in f else 0


def printed_tags(out):
    return dict(re.findall(r"^sweep: point (\d+): (\S+)", out, re.M))


def test_relative_paths_overrides_and_a_failing_point(tmp_path):
    cwd = tmp_path / "elsewhere"
    write_sweep(cwd / "sweeps")
    p = sweep(cwd, "sweeps/sweep.toml", "res", *OVERRIDES)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "2 pending point(s)" in out and not (REPO / "res").exists()
    tags = printed_tags(p.stdout)
    assert set(tags) == {"0", "1"}, out
    # The printed tag is the directory the trainer wrote, with the overrides applied.
    st, steps = status(cwd / "res" / tags["0"])
    assert st["state"] == "completed" and steps == 3, st
    st, _ = status(cwd / "res" / tags["1"])
    assert st["state"] == "oom", st
    assert "1 point(s) completed, 1 failed" in p.stdout
    assert re.search(rf"FAILED 1 \({re.escape(tags['1'])}\): exit 5", p.stderr), p.stderr
    # Logs per point, named in the output.
    assert list((cwd / "res" / ".logs").glob("*/attempt_0/rank_0.out")), out

    # Re-run with the same overrides: the completed point is not redone.
    again = sweep(cwd, "sweeps/sweep.toml", "res", *OVERRIDES)
    assert again.returncode == 1 and "1 pending point(s)" in again.stdout, again.stdout
    assert printed_tags(again.stdout) == {"1": tags["1"]}
    # Without the overrides it is another experiment (another hash): both points pend.
    listing = subprocess.run(
        [BUILD / "sweep_tagger" / "sweep_tagger", "expand", cwd / "sweeps" / "sweep.toml",
         "--pending", cwd / "res", "--field", "tag"], capture_output=True, text=True)
    assert listing.returncode == 0 and tags["0"] not in listing.stdout.split(), listing


def test_bad_input_exits_2_and_creates_nothing(tmp_path):
    p = sweep(tmp_path, "no/such.toml", "res")
    assert p.returncode == 2 and "no/such.toml" in p.stderr and "not found" in p.stderr
    write_sweep(tmp_path)
    p = sweep(tmp_path, "sweep.toml", "res", "training.lrr=1")
    assert p.returncode == 2 and "training.lrr" in p.stderr, p.stderr
    assert "did you mean 'training.lr'" in p.stderr
    assert not (tmp_path / "res").exists()


def test_runners_started_in_the_same_second_keep_their_own_logs(tmp_path):
    """Two runners of one sweep started at once, with a `date` that gives both the same
    second: each point of each runner gets its own launcher run id and log directory."""
    bin_dir, build = tmp_path / "bin", tmp_path / "build"
    bin_dir.mkdir()
    (bin_dir / "date").write_text("#!/bin/sh\necho 20260101-000000\n")
    for sub in ("launcher", "sweep_tagger", "trainer"):
        (build / sub).mkdir(parents=True)
    for sub in ("launcher", "sweep_tagger"):
        (build / sub / sub).symlink_to(BUILD / sub / sub)
    # A trainer that writes nothing: both runners run every point.
    (build / "trainer" / "trainer").write_text("#!/bin/sh\necho trainer pid $$\nsleep 0.5\n")
    for f in (bin_dir / "date", build / "trainer" / "trainer"):
        f.chmod(0o755)
    write_sweep(tmp_path / "sweeps")
    env = dict(os.environ, FTB_BUILD_DIR=str(build), PATH=f"{bin_dir}:{os.environ['PATH']}")
    cmd = ["bash", str(SWEEP_SH), str(tmp_path / "sweeps" / "sweep.toml"), str(tmp_path / "res")]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    logs = sorted((tmp_path / "res" / ".logs").glob("*/attempt_0/rank_0.out"))
    assert len(logs) == 4, (logs, outs)  # 2 runners x 2 points
    for log in logs:
        assert len(re.findall(r"^trainer pid \d+$", log.read_text(), re.M)) == 1, log
