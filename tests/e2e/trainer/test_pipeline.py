"""Pipeline runs record their bubble beside the schedule's theory, and their p2p traffic.

Two stages of the tiny model (one block each), 8 micro-batches of 1 sample per step: every
rank's HDF5 file has the per-step receive waits, idle fraction of the pipeline's makespan
(the same makespan on both stages), the makespan and bytes sent, the root attributes
hold the theory (p-1)/(m+p-1) and the measured fractions, and the summary prints both. The
activation bytes per step are exact: 8 micro-batches x 64 tokens x dim 64 x 4 bytes each way.
Each rank also records its stage's peak RSS beside the memory estimator's figure for that
stage, the one `trainer --estimate-memory` prints.
"""
import re
import subprocess

import h5py
import numpy as np
import pytest

from trainer_util import QUICK_START, TINY, TRAINER, base_env, run_ranks

COMMON = ["training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=8",
          "training.max_steps=4", "metrics.skip_first_steps=1"]


@pytest.mark.parametrize("schedule,extra,theory", [
    ("1f1b", [], 1 / 9),
    ("interleaved_1f1b", ["model.n_layers=4", "parallel.pp_virtual_stages=2"], 1 / 18),
    ("zb_h1", [], 1 / 25),
])
def test_bubble_and_traffic_in_hdf5_and_summary(tmp_path, schedule, extra, theory):
    outs = run_ranks(tmp_path, 2, *COMMON, f"parallel.pp_schedule={schedule}", *extra)
    # Bytes each way per micro-batch crossing: B 1 x T 64 x dim 64 fp32 = 16384.
    crossings = 3 if schedule == "interleaved_1f1b" else 1  # model chunks - 1 boundaries
    sent = {0: 0, 1: 0}
    makespan = {}
    for rank in range(2):
        with h5py.File(tmp_path / "metrics" / f"rank_{rank:05d}.h5", "r") as f:
            assert f.attrs["pp_bubble_theory"] == pytest.approx(theory, rel=1e-12)
            frac = np.array(f["steps/pp_bubble_fraction"][:])
            bubble = np.array(f["steps/pp_bubble_s"][:])
            makespan[rank] = np.array(f["steps/pp_makespan_s"][:])
            assert np.all((frac >= 0) & (frac < 1)), frac
            assert np.all(bubble <= np.array(f["steps/comm_s"][:]) + 1e-9)
            # Idle over the makespan: the receive waits are part of it.
            assert np.all(frac * makespan[rank] >= bubble - 1e-9), (frac, bubble, makespan)
            assert 0 <= f.attrs["pp_bubble_fraction"] <= f.attrs["pp_bubble_fraction_max"] < 1
            sent[rank] = np.array(f["steps/pp_p2p_bytes"][:])
    # One window for every stage: the pipeline's makespan, agreed over the ranks (the
    # last stage's own phase ends before the first stage's drain, which its idle includes).
    assert np.array_equal(makespan[0], makespan[1]), makespan
    # Activations forward and gradients back: together 2 x crossings x 8 x 16384 per step.
    assert np.all(sent[0] + sent[1] == 2 * crossings * 8 * 16384), (sent[0], sent[1])
    summary = outs[0][1] + outs[0][2]
    assert "pipeline bubble" in summary and f"theory {100 * theory:.1f} %" in summary, summary
    estimates = stage_estimates(*COMMON, f"parallel.pp_schedule={schedule}", *extra)
    for rank in range(2):
        with h5py.File(tmp_path / "metrics" / f"rank_{rank:05d}.h5", "r") as f:
            assert f.attrs["pp_stage"] == rank
            est = f.attrs["pp_stage_memory_estimate_bytes"]
            assert est == pytest.approx(estimates[rank], abs=0.0006 * 2**30)
            assert f.attrs["pp_stage_peak_rss_bytes"] >= f["steps/peak_rss_bytes"][:].max()
        assert f"stage {rank} peak RSS" in summary and "% against the measured peak" in summary


def stage_estimates(*overrides):
    """Each stage's total from `trainer --estimate-memory` (GiB rows, 3 decimals)."""
    p = subprocess.run([str(TRAINER), "--config", str(TINY), *QUICK_START, *overrides,
                        "--estimate-memory", "--world-size", "2"], env=base_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = re.findall(r"stage (\d) total \([^)]*\)\s+([\d.]+) GiB", p.stdout)
    assert [int(s) for s, _ in rows] == [0, 1], p.stdout
    return [float(v) * 2**30 for _, v in rows]
