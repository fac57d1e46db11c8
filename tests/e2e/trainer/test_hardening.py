"""Hardening, end to end: overrides (torchtitan spellings too), value domains, config paths,
huge sizes, one run per run directory.

Each test asserts the exit code, that the message names the key, file or holder, and
that nothing already written is lost or changed.
"""
import os
import resource
import signal
import socket
import subprocess
import time

import h5py
import pytest

from trainer_util import QUICK_START, ROOT, TINY, TRAINER, base_env, metrics

SWEEP_TAGGER = TRAINER.parents[1] / "sweep_tagger" / "sweep_tagger"


def trainer(*args, timeout=60, env=None):
    return subprocess.run([str(TRAINER), *map(str, args)], env=env or base_env(),
                          capture_output=True, text=True, timeout=timeout)


# ---- overrides arrive whole, torchtitan spellings --------------------------------

def test_override_values_with_commas_arrive_whole():
    p = trainer("--config", TINY, "output.dir=/tmp/x,y", "--print-config")
    assert p.returncode == 0, p.stderr
    assert 'dir = "/tmp/x,y"' in p.stdout
    fmt = 'output.sweep_fmt="{model.name},{hash}"'
    h = subprocess.run([str(SWEEP_TAGGER), "tag", "--config", str(TINY), fmt, "--hash"],
                       capture_output=True, text=True, timeout=30)
    t = subprocess.run([str(SWEEP_TAGGER), "tag", "--config", str(TINY), fmt],
                       capture_output=True, text=True, timeout=30)
    assert h.returncode == 0 and t.returncode == 0, h.stderr + t.stderr
    assert t.stdout.strip() == "tiny," + h.stdout.strip()


def test_torchtitan_override_spellings():
    p = trainer("--config", TINY, "--training.lr", "0.25", "--training.max_steps=7",
                "--output.no_sweep_dir", "data.seq_len=32", "--print-config")
    assert p.returncode == 0, p.stderr
    assert "lr = 0.25" in p.stdout and "max_steps = 7" in p.stdout
    assert "no_sweep_dir = true" in p.stdout and "seq_len = 32" in p.stdout
    # The same override, spelled three ways, gives the same tag.
    tags = set()
    for spelling in (["training.lr=0.25"], ["--training.lr", "0.25"], ["--training.lr=0.25"]):
        t = subprocess.run([str(SWEEP_TAGGER), "tag", "--config", str(TINY), *spelling],
                           capture_output=True, text=True, timeout=30)
        assert t.returncode == 0, t.stderr
        tags.add(t.stdout)
    assert len(tags) == 1
    p = trainer("--config", TINY, "--print-config", "--training.lr")
    assert p.returncode == 2 and "'--training.lr' has no value" in p.stderr
    p = trainer("--config", TINY, "--print-config", "--training.lrr", "1")
    assert p.returncode == 2 and "training.lrr" in p.stderr and "did you mean 'training.lr'" in p.stderr


# ---- values outside their domain; the key the user set is blamed ------------------

@pytest.mark.parametrize("override, shown, allowed", [
    ("training.lr=nan", "nan", "a finite number >= 0"),
    ("training.lr=inf", "inf", "a finite number >= 0"),
    ("training.lr=-1", "-1.0", "a finite number >= 0"),
    ("training.beta1=1.5", "1.5", "a finite number in [0, 1)"),
    ("training.beta2=1", "1.0", "a finite number in [0, 1)"),
    ("training.threads=-4", "-4", "an integer >= 0"),
    ("training.stop_after_seconds=-1", "-1.0", "a finite number >= 0"),
    ("parallel.zero_stage=7", "7", "an integer in [0, 3]"),
])
def test_value_outside_its_domain_is_refused(override, shown, allowed):
    p = trainer("--config", TINY, override, "--print-config")
    assert p.returncode == 2, p.stdout
    key = override.split("=")[0]
    assert (f"override '{override}': key '{key}': {shown} is out of range: expected {allowed}"
            in p.stderr), p.stderr
    assert p.stdout == ""


def test_domain_error_names_file_and_line(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(TINY.read_text().replace("lr = 1e-3", "lr = nan"))
    line = 1 + cfg.read_text().split("\n").index("lr = nan")
    p = trainer("--config", cfg, "--print-config")
    assert p.returncode == 2
    assert f"{cfg}:{line}: key 'training.lr': nan is out of range" in p.stderr, p.stderr


@pytest.mark.parametrize("override", ["training.lr=0", "training.beta1=0", "training.threads=0",
                                      "training.stop_after_seconds=0", "training.beta2=0.999"])
def test_boundary_values_are_accepted(override):
    p = trainer("--config", TINY, override, "--print-config")
    assert p.returncode == 0, p.stderr


def test_the_key_the_user_set_is_blamed():
    p = trainer("--config", TINY, "model.dim=66", "--print-config")
    assert p.returncode == 2
    assert "override 'model.dim=66': key 'model.dim': n_heads(4) does not divide dim(66)" in p.stderr
    assert "model.n_heads = 4 comes from preset " in p.stderr and "tiny.toml:5" in p.stderr
    p = trainer("--config", TINY, "parallel.tp=3", "--print-config")
    assert p.returncode == 2
    assert ("override 'parallel.tp=3': key 'parallel.tp': dp_shard(1) * tp(3) does not divide "
            "world_size(1); parallel.dp_shard = 1 is the default") in p.stderr, p.stderr


# ---- config paths that are not regular files --------------------------------------

def test_config_that_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "cfg.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    for path, needle in [("/dev/zero", "is a character device, expected a regular file"),
                         (fifo, "is a FIFO, expected a regular file"),
                         (tmp_path, "is a directory, expected a regular file"),
                         (big, "more than the limit of 1048576 bytes")]:
        t0 = time.monotonic()
        p = trainer("--config", path, "--output-dir", tmp_path / "out", timeout=20)
        assert p.returncode == 2, (path, p.stderr)
        assert f"{path}: " in p.stderr and needle in p.stderr, p.stderr
        assert time.monotonic() - t0 < 10
    assert not (tmp_path / "out").exists()


# ---- huge sizes are refused at once -----------------------------------------------

@pytest.mark.parametrize("overrides,code,key,needle", [
    (["training.grad_accum_steps=4611686018427387904", "training.micro_batch_size=2"], 2,
     "training.grad_accum_steps", "overflows a 64-bit integer"),
    (["training.grad_accum_steps=4611686018427387904"], 2,
     "training.grad_accum_steps", "overflows a 64-bit integer"),
    (["model.dim=4000000000", "model.n_layers=1000"], 2, "model.", "overflows a 64-bit integer"),
    (["training.micro_batch_size=1000000000"], 5, None, "largest term: activations"),
    (["model.dim=1000000000"], 5, None, "largest term: "),
    (["model.n_layers=1000000"], 5, None, "largest term: "),
    (["data.seq_len=1000000000", "model.max_seq_len=1000000000"], 5, None,
     "largest term: activations"),
])
def test_huge_sizes_are_refused_fast(tmp_path, overrides, code, key, needle):
    out = tmp_path / "out"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = trainer("--config", TINY, "--output-dir", out, "--no-sweep-dir", *overrides, timeout=30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time, not wall time: on a loaded machine loading libtorch alone can take seconds.
    elapsed = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert p.returncode == code, p.stderr
    assert needle in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "libtorch" not in p.stderr.lower()
    assert elapsed < 2, f"took {elapsed:.1f} s of CPU"  # ~0.4 s measured
    if code == 2:
        assert key in p.stderr and "override '" in p.stderr
        assert not out.exists()
    else:  # recorded as oom before anything was allocated
        assert "estimated memory per rank" in p.stderr
        with metrics(out) as f:
            st = f["status"].attrs
            assert st["state"] == "oom" and st["exit_code"] == 5 and st["steps_done"] == 0
            assert "largest term" in st["message"]


def test_memory_limit_refuses_before_allocating(tmp_path):
    p = trainer("--config", TINY, "--output-dir", tmp_path, "--no-sweep-dir",
                "parallel.memory_limit_gb=0.05")
    assert p.returncode == 5
    assert "(parallel.memory_limit_gb)" in p.stderr
    with metrics(tmp_path) as f:
        assert f["status"].attrs["state"] == "oom"


def test_sigterm_during_setup_is_honoured(tmp_path):
    # SIGTERM a few ms into set-up: the run must end promptly as preempted, wherever the
    # signal lands. Before a checkpoint can be saved the exit code is 128+15; once a step
    # has run, the stop saves one and exits 75 (requeue), as documented. On a fast
    # machine the 0.8 s signal lands after the first steps.
    for delay in (0.05, 0.3, 0.8):
        out = tmp_path / f"d{delay}"
        p = subprocess.Popen([str(TRAINER), "--config", str(TINY), "--output-dir", str(out),
                              "--no-sweep-dir", "training.max_steps=100000"],
                             env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        time.sleep(delay)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=20)
        if p.returncode == -signal.SIGTERM:  # still loading libtorch: default action
            assert not out.exists(), err
            continue
        if p.returncode == 75:
            assert "(exit code 75)" in err, err
            assert sorted((out / "checkpoints").glob("step_*")), err
        else:
            assert p.returncode == 128 + signal.SIGTERM, err
        assert "stopped by signal Terminated" in err, err
        if (out / "metrics" / "rank_00000.h5").exists():
            with metrics(out) as f:
                assert f["status"].attrs["state"] == "preempted"


# ---- one run per run directory ----------------------------------------------------

def lock_text(run_dir):
    p = run_dir / "run.lock"
    return p.read_text() if p.exists() else ""


def test_two_concurrent_runs_one_refused_nothing_lost(tmp_path):
    cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path), *QUICK_START,
           "training.max_steps=200"]
    procs = [subprocess.Popen(cmd, env=base_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    loser = [o for p, o in zip(procs, outs) if p.returncode == 2][0]
    winner = [p for p in procs if p.returncode == 0][0]
    (run_dir,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert f"{run_dir}: run directory is in use by another run" in loser[1], loser[1]
    assert f"pid={winner.pid}" in loser[1] and f"host={socket.gethostname()}" in loser[1]
    # Nothing lost: one metrics dir, the winner's, complete; no attempt was moved aside.
    # checkpoints/ holds the winner's end-of-run checkpoint (checkpoint.interval = 0);
    # control/ is the winner's (empty) `launcher ctl` channel.
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "control", "metrics",
                                                          "run.lock", "run.toml"]
    assert list((run_dir / "control").iterdir()) == []
    with metrics(run_dir) as f:
        assert f["status"].attrs["state"] == "completed"
        assert len(f["steps/loss"]) == 200
    assert lock_text(run_dir) == ""  # released


def test_held_directory_is_refused_and_untouched(tmp_path):
    first = subprocess.run([str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path),
                            "--no-sweep-dir", *QUICK_START, "training.max_steps=3"], env=base_env(),
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    import fcntl
    with open(tmp_path / "run.lock", "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(f"host=elsewhere pid=4242 since=2026-01-01T00:00:00Z\n")
        fh.flush()
        p = trainer("--config", TINY, "--output-dir", tmp_path, "--no-sweep-dir",
                    "training.max_steps=3")
        assert p.returncode == 2
        assert "in use by another run (host=elsewhere pid=4242" in p.stderr, p.stderr
        assert "run.lock" in p.stderr
        fh.seek(0)
        fh.truncate()
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # the refused run changed nothing (metrics not moved aside)


def test_stale_lock_of_dead_process_is_taken_over(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "run.lock").write_text(
        f"host={socket.gethostname()} pid={dead.pid} since=2026-01-01T00:00:00Z\n")
    p = trainer("--config", TINY, "--output-dir", tmp_path, "--no-sweep-dir",
                "training.max_steps=2")
    assert p.returncode == 0, p.stderr
    assert f"taking over the stale lock of pid {dead.pid} on host {socket.gethostname()} " \
           "(process gone)" in p.stderr
    with metrics(tmp_path) as f:
        assert f["status"].attrs["state"] == "completed"
