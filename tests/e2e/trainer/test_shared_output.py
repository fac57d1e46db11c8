"""A results directory other users may write (mode 1777), and `launcher ctl` from another
user. The run refuses a run, control or checkpoint directory another user made (or their
symlink), control/ is 0700, and ctl says why it cannot post a request (exit 4).

Needs root (it adds a second user with useradd and acts as it with runuser); skips otherwise.
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from trainer_util import BUILD, QUICK_START, TINY, TRAINER, base_env

LAUNCHER = BUILD / "launcher" / "launcher"
GUEST = "ftbguest"
ARGS = ("training.max_steps=2", "data.seq_len=32", "training.micro_batch_size=1",
        "metrics.peak_tflops=1.0", *QUICK_START)


@pytest.fixture(scope="module")
def guest():
    """A second, unprivileged user."""
    if os.geteuid() != 0:
        pytest.skip("needs root: adds a second user (useradd) and runs as it (runuser)")
    if not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.skip("useradd/runuser not installed")
    if subprocess.run(["id", "-u", GUEST], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", GUEST],
                       check=True)
    return GUEST


@pytest.fixture
def shared():
    """A directory every user may create entries in, like /tmp (mode 1777)."""
    d = Path(tempfile.mkdtemp(prefix="ftb-shared-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def as_guest(*cmd, timeout=60):
    return subprocess.run(["runuser", "-u", GUEST, "--", *map(str, cmd)], capture_output=True,
                          text=True, timeout=timeout, env=base_env())


def uid(name):
    return int(subprocess.run(["id", "-u", name], capture_output=True, text=True).stdout)


def train(out, *extra, timeout=180):
    cmd = [TRAINER, "--config", TINY, "--output-dir", out, *ARGS, *extra]
    return subprocess.run(list(map(str, cmd)), env=base_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def tag(tmp_path_factory):
    """The tag (run directory name) of this test's config, from a run in a private dir."""
    if not TRAINER.exists():
        pytest.skip(f"{TRAINER} not built")
    out = tmp_path_factory.mktemp("tagprobe")
    p = train(out)
    assert p.returncode == 0, p.stderr
    (run,) = [d for d in out.iterdir() if (d / "run.toml").exists()]
    assert stat.S_IMODE((run / "control").stat().st_mode) == 0o700
    return run.name


def hold_lock(run):
    """A process holding RUN/run.lock as a live run's rank 0 does."""
    code = ("import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX);"
            " f.write('host=h pid=1 since=now'); f.flush(); print('held', flush=True);"
            " time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, str(run / "run.lock")],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def fake_run(shared, owner, control_mode):
    run = shared / "run"
    run.mkdir()
    (run / "run.toml").write_text("# a run directory\n")
    (run / "control").mkdir(mode=control_mode)
    (run / "control").chmod(control_mode)
    for p in (run, run / "control", run / "run.toml"):
        os.chown(p, uid(owner), -1)
    return run


def test_ctl_from_another_user_says_whose_run_it_is(guest, shared):
    run = fake_run(shared, "root", 0o700)
    holder = hold_lock(run)
    try:
        p = as_guest(LAUNCHER, "ctl", "stop", run, "--timeout", "2")
    finally:
        holder.kill()
        holder.wait()
    assert p.returncode == 4, p.stderr
    assert (f"the control directory {run}/control is owned by uid 0 (root), not by this user "
            f"(uid {uid(GUEST)} ({GUEST})): only the user who started the run can control it"
            in p.stderr), p.stderr
    assert not (run / "control" / "request").exists()


def test_ctl_names_the_os_error_when_it_cannot_write(guest, shared):
    run = fake_run(shared, GUEST, 0o500)
    holder = hold_lock(run)
    try:
        p = as_guest(LAUNCHER, "ctl", "status", run, "--timeout", "2")
    finally:
        holder.kill()
        holder.wait()
    assert p.returncode == 4, p.stderr
    assert f"cannot write {run}/control/request.tmp." in p.stderr
    assert ": Permission denied" in p.stderr, p.stderr


def test_run_refuses_a_run_directory_another_user_made(guest, shared, tag):
    """Another user creates OUT/<tag>/control/ before the run: the run refuses it, so that
    user's `launcher ctl stop` has nothing to stop."""
    assert as_guest("mkdir", "-p", "-m", "777", shared / tag / "control").returncode == 0
    p = train(shared)
    assert p.returncode == 2, p.stderr
    assert (f"the run directory {shared / tag} is owned by uid {uid(GUEST)} ({GUEST}), not by "
            "this user (uid 0 (root))" in p.stderr), p.stderr
    assert not (shared / tag / "run.toml").exists()


def test_run_refuses_a_checkpoint_symlink_another_user_made(guest, shared, tag):
    """The run's own directory, left writable by others: another user's checkpoints
    symlink is refused before anything is read or written through it."""
    run = shared / tag
    run.mkdir(mode=0o777)
    run.chmod(0o777)
    trap = shared / "elsewhere"
    assert as_guest("mkdir", "-m", "777", trap).returncode == 0
    assert as_guest("ln", "-s", trap, run / "checkpoints").returncode == 0
    p = train(shared)
    assert p.returncode == 2, p.stderr
    assert (f"the checkpoint directory {run}/checkpoints is a symlink owned by uid {uid(GUEST)} "
            f"({GUEST})" in p.stderr), p.stderr
    assert list(trap.iterdir()) == []


def test_run_refuses_a_control_directory_another_user_made(guest, shared, tag):
    run = shared / tag
    run.mkdir(mode=0o777)
    run.chmod(0o777)
    assert as_guest("mkdir", "-m", "777", run / "control").returncode == 0
    p = train(shared)
    assert p.returncode == 2, p.stderr
    assert (f"the control directory {run}/control is owned by uid {uid(GUEST)} ({GUEST})"
            in p.stderr), p.stderr
