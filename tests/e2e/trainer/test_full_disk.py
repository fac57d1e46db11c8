"""Full and unwritable disks: a failing write ends the run with exit 4 and a message that
names the file, never a crash; an unwritable checkpoint.dir is refused at start (exit 2).

The full disk is a small tmpfs filled by the checkpoints themselves; mounting one needs
root (CAP_SYS_ADMIN), and those tests skip, saying so, where it cannot be mounted. A
metrics file on a full disk: tests/unit/common/hdf5_full_disk_test.cpp.
"""
import contextlib
import re
import subprocess

import numpy as np
import pytest

from trainer_util import metrics, run_trainer


@contextlib.contextmanager
def tmpfs(path, size, readonly=False):
    path.mkdir()
    opts = f"size={size}" + (",ro" if readonly else "")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs on {path} (needs root or CAP_SYS_ADMIN): "
                    f"{p.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_checkpoint_save_on_a_full_disk_exits_4_naming_the_file(tmp_path):
    """The tiny model's checkpoint is about 2 MB: the save of step 5 fits a 3 MiB tmpfs,
    the save of step 10 does not. It crashed at exit (SIGSEGV in H5F__close_cb, 139)."""
    out = tmp_path / "out"
    with tmpfs(tmp_path / "small", "3m") as fs:
        p = run_trainer(out, f"checkpoint.dir={fs}/ck", "checkpoint.interval=5",
                        "training.max_steps=10", check=False)
    assert p.returncode == 4, f"exit {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert "No space left on device" in p.stderr, p.stderr[-3000:]
    assert f"{fs}/ck/step_00000010.tmp/shard_00000.h5" in p.stderr, p.stderr[-3000:]
    with metrics(out) as f:  # on another disk: readable, the failure recorded, rows whole
        status = dict(f["status"].attrs)
        steps = np.array(f["steps/step"][:])
    assert status["state"] == "failed" and status["exit_code"] == 4, status
    assert "No space left on device" in status["message"], status
    assert list(steps) == list(range(10)), steps


@pytest.mark.parametrize("where", ["under_a_file", "read_only_mount"])
def test_unwritable_checkpoint_dir_is_refused_at_start(tmp_path, where):
    if where == "under_a_file":
        (tmp_path / "file").write_text("x")
        ckdir = tmp_path / "file" / "ck"
        ctx = contextlib.nullcontext()
    else:
        ckdir = tmp_path / "ro" / "ck"
        ctx = tmpfs(tmp_path / "ro", "1m", readonly=True)
    with ctx:
        p = run_trainer(tmp_path / "out", f"checkpoint.dir={ckdir}", check=False)
    assert p.returncode == 2, f"exit {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert "checkpoint.dir" in p.stderr and str(ckdir) in p.stderr, p.stderr[-3000:]
    assert not re.search(r"\] step \d+/\d+ \|", p.stdout + p.stderr), "refused after training"
