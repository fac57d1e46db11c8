"""How a run that does not complete ends.

- SIGUSR2 is a stop signal like TERM/INT/HUP/USR1: status preempted, a checkpoint of the
  stop step, exit 75 (the requeue code; 128+signal when no checkpoint could be saved).
- A stopped run still prints the summary of the steps it did.
- A non-finite loss ends the run as failed (exit 6) naming the step, never completed.
"""
import signal
import subprocess
import time

import h5py
import pytest

from trainer_util import (QUICK_START, REQUEUE_EXIT, TINY, TRAINER, base_env, metrics, run_trainer,
                          wait_for_steps)


@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGTERM])
def test_stop_signal_records_preempted_and_prints_summary(tmp_path, sig):
    cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path), "--no-sweep-dir",
           *QUICK_START, "training.max_steps=100000", "metrics.log_every=1",
           "metrics.skip_first_steps=1"]
    p = subprocess.Popen(cmd, env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    wait_for_steps(tmp_path / "metrics" / "rank_00000.h5", 3)
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == REQUEUE_EXIT, err
    assert "== ftbench summary" in out, out
    with metrics(tmp_path) as f:
        st = f["status"].attrs
        assert st["state"] == "preempted" and st["exit_code"] == REQUEUE_EXIT
        assert signal.strsignal(sig) in st["message"] and "; checkpoint " in st["message"]
        n = len(f["steps/loss"])
        assert st["steps_done"] == n >= 3
    assert f"({n - 1} measured steps after 1 warmup)" in out


def test_non_finite_loss_fails_with_step(tmp_path):
    p = run_trainer(tmp_path, "training.lr=1e30", check=False)
    assert p.returncode == 6, p.stdout + p.stderr
    assert "diverged at step 1" in p.stderr
    with metrics(tmp_path) as f:
        st = f["status"].attrs
        assert st["state"] == "failed" and st["exit_code"] == 6
        assert "diverged at step 1" in st["message"]
        assert st["steps_done"] == 2  # the diverged step's row is kept
