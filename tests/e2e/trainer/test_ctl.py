"""`launcher ctl status|save|stop RUN_DIR` on a running 2-rank job
(launcher --nproc-per-node 2, tiny model). status answers per rank; save checkpoints at the
next step boundary and the run goes on; stop checkpoints and ends the run as preempted with
the requeue code; the rerun resumes and its losses equal an uninterrupted run's (==).
"""
import re
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from trainer_util import BUILD, QUICK_START, REQUEUE_EXIT, TINY, TRAINER, base_env, finish

LAUNCHER = BUILD / "launcher" / "launcher"
STEPS = 200
ARGS = (f"training.max_steps={STEPS}", "data.seq_len=128", "training.micro_batch_size=1",
        "metrics.log_every=1")


def start(out):
    cmd = [str(LAUNCHER), "--nproc-per-node", "2", "--", str(TRAINER), "--config", str(TINY),
           "--output-dir", str(out), "--no-sweep-dir", *QUICK_START, *ARGS]
    return subprocess.Popen(cmd, env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def ctl(*args, timeout=60):
    return subprocess.run([str(LAUNCHER), "ctl", *map(str, args)], env=base_env(),
                          capture_output=True, text=True, timeout=timeout)


def h5(out, rank):
    return h5py.File(out / "metrics" / f"rank_{rank:05d}.h5", "r")


def steps_done(out):
    try:
        with h5(out, 0) as f:
            return int(f["status"].attrs["steps_done"])
    except (OSError, KeyError):
        return 0


def wait_steps(out, proc, n, timeout=60):
    t0 = time.monotonic()
    while steps_done(out) < n:
        assert proc.poll() is None, f"run ended early ({proc.returncode}): {proc.communicate()}"
        assert time.monotonic() - t0 < timeout, f"timed out waiting for step {n} in {out}"
        time.sleep(0.02)


def rows(stdout):
    """The per-rank lines of a ctl answer: {rank: [fields]}."""
    return {int(l.split()[0]): l.split() for l in stdout.splitlines() if re.match(r"^\d+\s", l)}


def test_ctl_status_save_stop_then_resume_is_bit_identical(tmp_path):
    ref, run = tmp_path / "ref", tmp_path / "run"
    (rc, o, e), = finish([start(ref)])
    assert rc == 0, o + e
    p = start(run)
    wait_steps(run, p, 3)

    st = ctl("status", run)
    assert st.returncode == 0, st.stderr
    r = rows(st.stdout)
    assert sorted(r) == [0, 1], st.stdout
    step0 = int(r[0][4].split("/")[0])
    assert r[0][4] == r[1][4] and r[0][4].endswith(f"/{STEPS}"), st.stdout  # same step boundary
    assert r[0][3] == "running" and r[0][5] == r[1][5], st.stdout  # one loss: the global one
    assert r[0][-1] == "-", st.stdout  # no checkpoint yet

    sv = ctl("save", run)
    assert sv.returncode == 0, sv.stderr
    r = rows(sv.stdout)
    saved = int(r[0][4].split("/")[0])
    assert saved >= step0 and r[0][-1] == r[1][-1] == str(run / "checkpoints" / f"step_{saved:08d}")
    assert (run / "checkpoints" / f"step_{saved:08d}" / "manifest.json").exists()
    assert p.poll() is None, "save goes on"

    sp = ctl("stop", run)
    assert sp.returncode == 0, sp.stderr
    assert "the run stops (status preempted)" in sp.stdout, sp.stdout
    r = rows(sp.stdout)
    stopped = int(r[0][4].split("/")[0])
    assert stopped > saved and r[0][3] == "stopping", sp.stdout
    (rc, o, e), = finish([p])
    assert rc == REQUEUE_EXIT, f"launcher exit {rc}\n{o}\n{e}"
    # A deliberate stop, reported as one (it printed ERROR, a failure table and "job failed").
    assert "ERROR" not in e and "job failed" not in e and "root cause" not in e, e
    assert "workers stopped with exit code 75 (preempted with a checkpoint" in e, e
    for rank in (0, 1):
        with h5(run, rank) as f:
            s = dict(f["status"].attrs)
            assert s["state"] == "preempted" and s["exit_code"] == REQUEUE_EXIT, s
            assert "stopped by `launcher ctl stop`" in s["message"] and s["steps_done"] == stopped

    gone = ctl("status", run)  # nothing runs there now
    assert gone.returncode == 1 and "no run is active" in gone.stderr, gone.stderr

    (rc, o, e), = finish([start(run)])  # the same command resumes
    assert rc == 0, o + e
    assert f"step {stopped}" in o + e
    for rank in (0, 1):
        with h5(ref, rank) as a, h5(run, rank) as b:
            assert list(b["steps/step"][:]) == list(range(STEPS))
            assert b.attrs["resume_count"] == 1 and list(b.attrs["resume_steps"]) == [stopped]
            assert np.array_equal(a["steps/loss"][:], b["steps/loss"][:]), f"rank {rank}"


def test_ctl_bad_input(tmp_path):
    p = ctl("pause", tmp_path)
    assert p.returncode == 2 and "unknown command 'pause'" in p.stderr, p.stderr
    p = ctl("status", tmp_path / "nope")
    assert p.returncode == 2 and "is not a run directory" in p.stderr, p.stderr
    p = ctl("status", tmp_path, "--timeout", "0")
    assert p.returncode == 2 and "--timeout" in p.stderr, p.stderr
    assert "expected seconds in (0, 86400], got '0'" in p.stderr
    assert "hint: --timeout SECONDS bounds every wait of ctl" in p.stderr, p.stderr
    p = ctl("status", tmp_path, "--timeout")
    assert p.returncode == 2 and "hint: --timeout SECONDS" in p.stderr, p.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_usr1_to_mpirun_stops_with_a_checkpoint(tmp_path):
    """launcher/README.md's way to stop a job started with mpirun --mca
    odls_base_sigkill_timeout 0: USR1 to mpirun (forwarded to the launchers) checkpoints and
    ends as preempted with the requeue code. (TERM to that mpirun kills every rank at once:
    no checkpoint, status left `running`, exit 1.)"""
    run = tmp_path / "run"
    cmd = ["mpirun", "--allow-run-as-root", "-np", "1", "--map-by", "ppr:1:node", "--bind-to",
           "none", "--mca", "odls_base_sigkill_timeout", "0", str(LAUNCHER), "--nproc-per-node",
           "1", "--", str(TRAINER), "--config", str(TINY), "--output-dir", str(run),
           "--no-sweep-dir", *ARGS]
    p = subprocess.Popen(cmd, env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    wait_steps(run, p, 3)
    p.send_signal(signal.SIGUSR1)
    (rc, o, e), = finish([p])
    assert rc == REQUEUE_EXIT, f"mpirun exit {rc}\n{o}\n{e}"
    with h5(run, 0) as f:
        s = dict(f["status"].attrs)
    assert s["state"] == "preempted" and s["exit_code"] == REQUEUE_EXIT, s
    assert (run / "checkpoints" / f"step_{s['steps_done']:08d}" / "manifest.json").exists(), s
