"""Sharded checkpoints, preemption and bit-identical resume (with resharding).

Every test runs real trainer processes on the tiny fp32 model (20 steps) and reads the
HDF5 metrics files and checkpoint manifests with h5py / json, as a user would.
"""
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from trainer_util import REQUEUE_EXIT, TINY, TRAINER, assert_close, base_env, finish, free_port

# seq 128 makes a step slow enough (~10-40 ms) that a signal sent at step ~8 lands mid-run.
# Runs compared bit for bit use one BLAS: "auto" picks the faster at start, which the load
# of a shared machine can flip between two runs (test_auto_gemm_route_survives_a_resume).
COMMON = ("metrics.log_every=1", "data.seq_len=128", "training.fp32_gemm=\"aten\"",
          "metrics.gemm_probe=false")  # no start-up GEMM: no test here reads it
LAYOUTS = {
    "dp2": (2, ("training.micro_batch_size=1",)),
    "dp2_optimizer_in_backward": (2, ("training.micro_batch_size=1", "training.max_grad_norm=0",
                                      "training.optimizer_in_backward=true")),
    # bf16 weights without masters: stochastic rounding's noise and Kahan's compensation
    # buffers are part of the state a resume restores
    "dp2_bf16_weights": (2, ("training.micro_batch_size=1", "training.dtype=\"bf16\"",
                             "training.master_weights=\"none\"")),
    "dp2_bf16_weights_kahan": (2, ("training.micro_batch_size=1", "training.dtype=\"bf16\"",
                                   "training.master_weights=\"none\"",
                                   "training.bf16_update=\"kahan\"")),
    "zero3_w2": (2, ("training.micro_batch_size=1", "parallel.dp_shard=2", "parallel.zero_stage=3")),
    "tp2": (2, ("training.micro_batch_size=2", "parallel.tp=2")),
    "pp2": (2, ("training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=2")),
    "pp2_tied": (2, ("training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=2",
                     "model.tie_embeddings=true")),
    # zero-bubble: the stop lands after a step's final weight pass
    "pp2_zb_h1": (2, ("training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=2",
                      "parallel.pp_schedule=zb_h1")),
}


def start(out, world, *overrides, env_extra=None):
    """Starts `world` ranks (torchrun variables) into out (no sweep dir); returns Popens."""
    port = free_port()
    procs = []
    for r in range(world):
        env = base_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=world, LOCAL_WORLD_SIZE=world,
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **(env_extra or {}))
        cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(out), "--no-sweep-dir",
               *COMMON, *overrides]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def run(out, world, *overrides, expect=0, env_extra=None):
    outs = finish(start(out, world, *overrides, env_extra=env_extra))
    for r, (rc, o, e) in enumerate(outs):
        assert rc == expect, f"rank {r} exited {rc}, expected {expect}:\n{o}\n{e}"
    return outs


def steps_done(out):
    try:
        with h5py.File(Path(out) / "metrics" / "rank_00000.h5", "r") as f:
            return int(f["status"].attrs["steps_done"])
    except (OSError, KeyError):
        return 0


def wait_until(cond, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def h5(out, rank=0):
    return h5py.File(Path(out) / "metrics" / f"rank_{rank:05d}.h5", "r")


def losses(out, rank=0):
    with h5(out, rank) as f:
        return np.array(f["steps/loss"][:])


def preempt(out, world, overrides, signal_ranks=None, sig=signal.SIGTERM, at_step=8):
    """Starts a run, sends `sig` to `signal_ranks` (default all) once step `at_step` is in
    the metrics file, and checks every rank stops as preempted with its checkpoint and the
    requeue exit code, the signalled ranks and those stopped by the agreement alone."""
    procs = start(out, world, *overrides)
    wait_until(lambda: steps_done(out) >= at_step or any(p.poll() is not None for p in procs),
               f"step {at_step}")
    signalled = list(signal_ranks if signal_ranks is not None else range(world))
    for r in signalled:
        procs[r].send_signal(sig)
    outs = finish(procs)
    for r, (rc, o, e) in enumerate(outs):
        assert rc == REQUEUE_EXIT, f"rank {r} exited {rc}, expected {REQUEUE_EXIT}:\n{o}\n{e}"
    for r in range(world):
        with h5(out, r) as f:
            st = dict(f["status"].attrs)
            assert st["state"] == "preempted" and "checkpoint" in st["message"], st
    return outs


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """uninterrupted(layout): every rank's losses of the LAYOUTS entry run start to end, the
    reference the resume tests compare with bit for bit; each layout is trained once per
    module (the runs are deterministic: one BLAS, fixed seeds)."""
    cache = {}

    def get(layout):
        if layout not in cache:
            world, ov = LAYOUTS[layout]
            out = tmp_path_factory.mktemp(f"uninterrupted_{layout}")
            run(out, world, *ov)
            cache[layout] = [losses(out, r) for r in range(world)]
        return cache[layout]
    return get


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_sigterm_then_resume_is_bit_identical(tmp_path, layout, uninterrupted):
    world, ov = LAYOUTS[layout]
    ref, cut = uninterrupted(layout), tmp_path / "cut"
    preempt(cut, world, ov + ("checkpoint.interval=4",))
    outs = run(cut, world, *ov, "checkpoint.interval=4")
    assert "resumed from" in outs[0][2] + outs[0][1]
    for r in range(world):
        with h5(cut, r) as f:
            assert list(f["steps/step"][:]) == list(range(20)), "every step exactly once"
            assert f["status"].attrs["state"] == "completed"
            assert f.attrs["resume_count"] == 1 and len(f.attrs["resume_steps"]) == 1
        a, b = ref[r], losses(cut, r)
        assert np.array_equal(a, b), f"rank {r} losses differ:\n{a}\n{b}"


def test_auto_gemm_route_survives_a_resume(tmp_path):
    """With training.fp32_gemm = "auto" the resumed attempt multiplies with the BLAS the
    checkpoint ran with (recorded in its manifest), whichever is faster now."""
    out = tmp_path / "run"
    preempt(out, 1, ("training.fp32_gemm=\"auto\"", "checkpoint.interval=4"))
    step = sorted((out / "checkpoints").glob("step_*"))[-1]
    recorded = json.loads((step / "manifest.json").read_text())["state"]["fp32_gemm_openblas"]
    outs = run(out, 1, "training.fp32_gemm=\"auto\"", "checkpoint.interval=4")
    assert "resumed with the checkpoint's" in outs[0][1] + outs[0][2]
    with h5(out) as f:
        assert f.attrs["fp32_gemm"].startswith("OpenBLAS" if recorded else "ATen")


def test_signal_to_one_rank_stops_all_and_resumes_bit_identically(tmp_path, uninterrupted):
    world, ov = LAYOUTS["dp2"]
    cut = tmp_path / "cut"
    preempt(cut, world, ov, signal_ranks=[1], sig=signal.SIGUSR1)  # interval 0: save on stop only
    run(cut, world, *ov)
    assert np.array_equal(uninterrupted("dp2")[0], losses(cut))


def test_manifest_describes_global_tensors_readable_with_h5py(tmp_path):
    world, ov = LAYOUTS["zero3_w2"]
    run(tmp_path, world, *ov, "training.max_steps=3")
    step_dir = tmp_path / "checkpoints" / "step_00000003"
    m = json.loads((step_dir / "manifest.json").read_text())
    assert m["layout"] == {"world": 2, "dp_replicate": 1, "dp_shard": 2, "tp": 1, "zero_stage": 3,
                           "nodes": 1}
    assert m["state"]["step"] == 3 and m["compat"]["model.dim"] == "64"
    assert {f["name"] for f in m["files"]} == {"shard_00000.h5", "shard_00001.h5"}
    metrics_like = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("**/rank_*.h5"))
    assert metrics_like == ["metrics/rank_00000.h5", "metrics/rank_00001.h5"], metrics_like
    t = m["tensors"]["model.layers.0.attention.wq.weight"]
    assert t["shape"] == [64, 64] and t["dtype"] == "float32"
    # Reassemble the full tensor from its slices with h5py alone; the shards cover it once.
    full = np.full(t["shape"], np.nan, dtype=np.float32)
    for s in t["slices"]:
        with h5py.File(step_dir / s["file"], "r") as f:
            idx = tuple(slice(o, o + n) for o, n in zip(s["offset"], s["size"]))
            assert np.all(np.isnan(full[idx]))
            full[idx] = f[s["dataset"]][...]
    assert not np.any(np.isnan(full))
    for name in ("optim.exp_avg.norm.weight", "optim.exp_avg_sq.output.weight",
                 "rng.torch_cpu.rank_00001"):
        assert name in m["tensors"]


@pytest.mark.parametrize("src,dst", [
    (("zero3_w2", 2, ("training.micro_batch_size=1", "parallel.dp_shard=2", "parallel.zero_stage=3")),
     ("w1", 1, ("training.micro_batch_size=2",))),
    (("tp2", 2, ("training.micro_batch_size=2", "parallel.tp=2")),
     ("zero2_w2", 2, ("training.micro_batch_size=1", "parallel.dp_shard=2", "parallel.zero_stage=2"))),
    (("pp2", 2, ("training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=2")),
     ("w1", 1, ("training.micro_batch_size=2",))),
    (("w1", 1, ("training.micro_batch_size=2",)),
     ("pp2", 2, ("training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=2"))),
], ids=["zero3w2_to_w1", "tp2_to_zero2w2", "pp2_to_w1", "w1_to_pp2"])
def test_resharding_matches_the_uninterrupted_run(tmp_path, src, dst):
    (_, sw, sov), (_, dw, dov) = src, dst
    ref, new = tmp_path / "ref", tmp_path / "new"
    run(ref, sw, *sov, "checkpoint.interval=8", "checkpoint.keep_last=0")
    step8 = ref / "checkpoints" / "step_00000008"
    run(new, dw, *dov, f"checkpoint.resume={step8}")
    with h5(new) as f:
        assert list(f["steps/step"][:]) == list(range(8, 20))
    assert_close(losses(new), losses(ref)[8:], 1e-5)


def saved_run(tmp_path, world=1):
    """A world-1 run of 12 steps with checkpoints at 4, 8, 12 (all kept)."""
    out = tmp_path / "run"
    run(out, world, "training.max_steps=12", "checkpoint.interval=4", "checkpoint.keep_last=0")
    return out


def tree(root):
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in Path(root).rglob("*") if p.is_file()}


def damage(step_dir, how):
    if how == "truncated":
        f = step_dir / "shard_00000.h5"
        os.truncate(f, f.stat().st_size // 2)
        return "shard_00000.h5", "truncated"
    if how == "flipped":
        f = step_dir / "shard_00000.h5"
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0x01
        f.write_bytes(bytes(data))
        return "shard_00000.h5", "crc32"
    (step_dir / "manifest.json").unlink()
    return "manifest.json", "manifest missing"


@pytest.mark.parametrize("how", ["truncated", "flipped", "deleted_manifest"])
def test_damaged_checkpoint_explicit_path_exits_2_and_writes_nothing(tmp_path, how):
    out = saved_run(tmp_path)
    step12 = out / "checkpoints" / "step_00000012"
    fname, needle = damage(step12, how)
    before = tree(out)
    outs = run(out, 1, "training.max_steps=12", f"checkpoint.resume={step12}", expect=2)
    err = outs[0][2]
    assert fname in err and needle in err and "checkpoint.resume" in err, err
    assert tree(out) == before, "a failed resume must not touch the run directory"


@pytest.mark.parametrize("how", ["truncated", "flipped", "deleted_manifest"])
def test_damaged_checkpoint_auto_falls_back_to_the_previous_one(tmp_path, how):
    out = saved_run(tmp_path)
    ref = losses(out)
    fname, needle = damage(out / "checkpoints" / "step_00000012", how)
    outs = run(out, 1, "training.max_steps=12", "checkpoint.interval=4", "checkpoint.keep_last=0")
    err = outs[0][2]
    assert "skipping checkpoint" in err and fname in err and needle in err, err
    assert "step_00000008" in err + outs[0][1]
    with h5(out) as f:
        assert list(f["steps/step"][:]) == list(range(12))
        assert list(f.attrs["resume_steps"]) == [8]
    assert np.array_equal(losses(out), ref)
    assert (out / "checkpoints" / "step_00000012.replaced_1").is_dir(), "the bad one is kept aside"


def test_sigkill_during_save_leaves_the_previous_checkpoint_usable(tmp_path, uninterrupted):
    world, ov = LAYOUTS["dp2"]
    cut = tmp_path / "cut"
    procs = start(cut, world, *ov, "checkpoint.interval=4",
                  env_extra={"FTB_TEST_CKPT_SAVE_DELAY": "8:60"})
    partial = cut / "checkpoints" / "step_00000008.tmp"
    wait_until(lambda: all((partial / f"shard_{r:05d}.h5").exists() for r in range(2)),
               "the save of step 8 to be under way")
    procs[1].send_signal(signal.SIGKILL)
    procs[0].send_signal(signal.SIGKILL)
    finish(procs)
    assert not (cut / "checkpoints" / "step_00000008").exists()
    outs = run(cut, world, *ov, "checkpoint.interval=4")
    assert "step_00000004" in outs[0][2] + outs[0][1]
    # The killed save's directory is removed at the start, whatever steps the rerun saves.
    assert f"removed the unfinished checkpoint {partial}" in outs[0][2], outs[0][2]
    assert not list((cut / "checkpoints").glob("*.tmp"))
    assert np.array_equal(uninterrupted("dp2")[0], losses(cut))
    with h5(cut) as f:
        assert list(f["steps/step"][:]) == list(range(20))


def edit_manifest(step_dir, edit):
    """Rewrites step_dir's manifest after edit(dict) (the shard files stay as they are)."""
    path = step_dir / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))


# Manifests whose files all verify but that cannot fill this model; each gave exit 4 at load
# (after part of the state was read), with resume = auto as with an explicit path.
def _drop_tensor(m):
    del m["tensors"]["model.norm.weight"]


def _other_shape(m):
    m["tensors"]["model.norm.weight"]["shape"][0] *= 2


def _short_slice(m):
    m["tensors"]["model.norm.weight"]["slices"][0]["size"][0] //= 2


MISFITS = {
    "missing_tensor": (_drop_tensor, "has no tensor 'model.norm.weight'"),
    "other_shape": (_other_shape, "tensor 'model.norm.weight' has shape"),
    "wrong_slice_size": (_short_slice, "/model.norm.weight/0"),
}


@pytest.mark.parametrize("how", sorted(MISFITS))
def test_checkpoint_that_does_not_fit_the_model_auto_falls_back(tmp_path, how):
    edit, needle = MISFITS[how]
    out = saved_run(tmp_path)
    ref = losses(out)
    edit_manifest(out / "checkpoints" / "step_00000012", edit)
    outs = run(out, 1, "training.max_steps=12", "checkpoint.interval=4", "checkpoint.keep_last=0")
    err = outs[0][2]
    assert "skipping checkpoint" in err and "step_00000012" in err and needle in err, err
    assert "resumed from" in err + outs[0][1] and "step_00000008" in err + outs[0][1]
    with h5(out) as f:
        assert list(f["steps/step"][:]) == list(range(12))
        assert list(f.attrs["resume_steps"]) == [8]
        assert f["status"].attrs["state"] == "completed"
    assert np.array_equal(losses(out), ref)


def test_checkpoint_that_does_not_fit_the_model_explicit_path_exits_2(tmp_path):
    out = saved_run(tmp_path)
    step12 = out / "checkpoints" / "step_00000012"
    edit_manifest(step12, _drop_tensor)
    outs = run(tmp_path / "new", 1, "training.max_steps=12", f"checkpoint.resume={step12}",
               expect=2)
    err = outs[0][2]
    assert "checkpoint.resume" in err and str(step12) in err, err
    assert "has no tensor 'model.norm.weight'" in err, err


def test_summary_of_a_resumed_attempt_says_so_and_gives_the_runs_step_count(tmp_path):
    """It said "(4 measured steps after 0 warmup)" as if that were the run, while aggregate
    counts every attempt's steps."""
    out = saved_run(tmp_path)
    shutil.rmtree(out / "checkpoints" / "step_00000012")
    outs = run(out, 1, "training.max_steps=12", "checkpoint.interval=4", "checkpoint.keep_last=0")
    assert ("== ftbench summary (this attempt, resumed at step 8: 4 measured steps after 0 warmup; "
            "the run has done 12 steps over all its attempts") in outs[0][1], outs[0][1]


def test_shared_checkpoint_dir_refuses_another_runs_checkpoint_naming_both(tmp_path):
    """Two runs of different configs given one checkpoint.dir: the second resumed the
    first's checkpoint and reported `completed` with 0 steps."""
    ck = tmp_path / "ck"
    run(tmp_path / "run_a", 1, "training.max_steps=4", f"checkpoint.dir={ck}")
    outs = run(tmp_path / "run_b", 1, "training.max_steps=4", "training.lr=0.001",
               f"checkpoint.dir={ck}", expect=2)
    err = outs[0][2]
    assert "checkpoint.dir" in err and "'run_a'" in err and "'run_b'" in err, err
    assert not (tmp_path / "run_b").exists(), "nothing may be written"
    # The run the checkpoints belong to still resumes from them.
    outs = run(tmp_path / "run_a", 1, "training.max_steps=4", f"checkpoint.dir={ck}")
    assert "resumed from" in outs[0][2] and "step_00000004" in outs[0][2], outs[0][2]


def test_changed_model_key_exits_2_naming_it_and_writes_nothing(tmp_path):
    out = saved_run(tmp_path)
    step8 = out / "checkpoints" / "step_00000008"
    new = tmp_path / "new"
    outs = run(new, 1, "model.dim=128", "model.ffn_dim=256", f"checkpoint.resume={step8}", expect=2)
    err = outs[0][2]
    assert "model.dim = 64 in the checkpoint, 128 now" in err, err
    assert "model.ffn_dim" in err
    assert not new.exists(), "nothing may be written"


def as_old_shard_names(step_dir):
    """Turns a checkpoint into what builds before the shard rename wrote: rank_NNNNN.h5 files,
    named so in the manifest's files and slices (crc32 and sizes are the files' own)."""
    manifest = step_dir / "manifest.json"
    m = json.loads(manifest.read_text())
    for f in m["files"]:
        old = f["name"].replace("shard_", "rank_")
        (step_dir / f["name"]).rename(step_dir / old)
        f["name"] = old
    for t in m["tensors"].values():
        for s in t["slices"]:
            s["file"] = s["file"].replace("shard_", "rank_")
    manifest.write_text(json.dumps(m, indent=1) + "\n")
    return sorted(f["name"] for f in m["files"])


@pytest.mark.parametrize("how", ["explicit", "auto"])
def test_checkpoint_with_rank_named_shards_still_resumes(tmp_path, how):
    """Checkpoints saved before shard files were named shard_NNNNN.h5 hold rank_NNNNN.h5 (the
    metrics files' names); they still load: by path under another layout (resharded), and by
    resume = "auto" in their own run directory (bit-identical)."""
    world, ov = LAYOUTS["dp2"]
    ref = tmp_path / "ref"
    run(ref, world, *ov, "checkpoint.interval=8", "checkpoint.keep_last=0")
    ckpts = ref / "checkpoints"
    assert sorted(p.name for p in (ckpts / "step_00000008").glob("*.h5")) == \
        ["shard_00000.h5", "shard_00001.h5"]
    new = tmp_path / "new"
    if how == "explicit":
        step8 = ckpts / "step_00000008"
        assert as_old_shard_names(step8) == ["rank_00000.h5", "rank_00001.h5"]
        outs = run(new, 1, "training.micro_batch_size=2", f"checkpoint.resume={step8}")
        first = 8
    else:
        shutil.copytree(ref, new)
        shutil.rmtree(new / "checkpoints" / "step_00000020")
        for d in (new / "checkpoints").glob("step_*"):
            assert as_old_shard_names(d) == ["rank_00000.h5", "rank_00001.h5"]
        outs = run(new, world, *ov, "checkpoint.interval=8", "checkpoint.keep_last=0")
        first = 16
    assert f"step_{first:08d}" in outs[0][2] + outs[0][1]
    with h5(new) as f:
        assert list(f["steps/step"][:])[-(20 - first):] == list(range(first, 20))
    if how == "explicit":  # world 1 from world 2's checkpoint: resharded, the same maths
        assert_close(losses(new), losses(ref)[first:], 1e-5)
    else:
        with h5(new) as f:
            assert list(f.attrs["resume_steps"]) == [16]
        assert np.array_equal(losses(new), losses(ref))


def test_manifest_with_the_old_float_spelling_resumes_and_a_changed_value_is_refused(tmp_path):
    """Manifests written before formatDouble became the one float spelling hold "%.17g"
    (model.norm_eps "1.0000000000000001e-05"; today "1e-5"): resume compares values, not text."""
    out = saved_run(tmp_path)
    step8 = out / "checkpoints" / "step_00000008"
    manifest = step8 / "manifest.json"
    m = json.loads(manifest.read_text())
    assert m["compat"]["model.norm_eps"] == "1e-5", m["compat"]
    m["compat"]["model.norm_eps"] = "%.17g" % 1e-5
    m["compat"]["model.rope_theta"] = "%.17g" % float(m["compat"]["model.rope_theta"])
    manifest.write_text(json.dumps(m, indent=1) + "\n")
    resumed = tmp_path / "resumed"
    outs = run(resumed, 1, "training.max_steps=12", f"checkpoint.resume={step8}")
    assert "step_00000008" in outs[0][2] + outs[0][1]
    assert np.array_equal(losses(out)[8:], losses(resumed))
    refused = tmp_path / "refused"
    err = run(refused, 1, "model.norm_eps=1e-6", f"checkpoint.resume={step8}", expect=2)[0][2]
    assert "model.norm_eps = 1.0000000000000001e-05 in the checkpoint, 1e-6 now" in err, err
    assert "model.rope_theta" not in err, err
    assert not refused.exists(), "nothing may be written"


def test_keep_last_prunes_older_complete_checkpoints(tmp_path):
    run(tmp_path, 1, "training.max_steps=12", "checkpoint.interval=2", "checkpoint.keep_last=2")
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step_00000010", "step_00000012"]


def test_failing_save_fails_clearly_and_keeps_the_previous_checkpoint(tmp_path):
    """A save that cannot write (an immutable step_N.tmp directory, chattr +i, stands in for
    a full or read-only disk; root ignores permission bits) ends the run as failed, exit 4,
    with a message naming the file and the OS error; the previous complete checkpoint stays
    (keep_last=1 prunes nothing) and the rerun resumes from it."""
    out, ck = tmp_path / "run", tmp_path / "ck"
    blocked = ck / "step_00000010.tmp"
    blocked.mkdir(parents=True)
    if subprocess.run(["chattr", "+i", str(blocked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this file system")
    try:
        ov = (f"checkpoint.dir={ck}", "checkpoint.interval=5", "checkpoint.keep_last=1")
        (rc, o, e), = run(out, 1, *ov, expect=4)
        with h5(out) as f:
            st = dict(f["status"].attrs)
        assert st["state"] == "failed" and st["exit_code"] == 4, st
        assert "checkpoint of step 10 failed" in st["message"] and str(blocked) in st["message"]
        assert "Operation not permitted" in st["message"], st["message"]
        assert (ck / "step_00000005" / "manifest.json").exists()
    finally:
        subprocess.run(["chattr", "-i", str(blocked)])
    (rc, o, e), = run(out, 1, *ov)
    assert f"resumed from {ck / 'step_00000005'}" in o + e


def test_rank0_unable_to_create_the_save_directory_fails_every_rank_at_once(tmp_path):
    """World 2: rank 0 cannot create step_10.tmp (an immutable regular file sits at that
    path, chattr +i; root ignores permission bits). Its error travels in the save's first
    gather, so both ranks end within seconds (not the 300 s store timeout) as failed, exit
    4, each naming rank 0's host, the path and the cause; the complete checkpoint of step
    5 stays and the rerun resumes from it."""
    out, ck = tmp_path / "run", tmp_path / "ck"
    ck.mkdir()
    blocked = ck / "step_00000010.tmp"
    blocked.write_text("not a directory\n")
    if subprocess.run(["chattr", "+i", str(blocked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this file system")
    world, ov = LAYOUTS["dp2"]
    ov = (*ov, f"checkpoint.dir={ck}", "checkpoint.interval=5")
    try:
        t0 = time.monotonic()
        outs = finish(start(out, world, *ov), timeout=90)
        elapsed = time.monotonic() - t0
        for r, (rc, o, e) in enumerate(outs):
            assert rc == 4, f"rank {r} exited {rc}, expected 4:\n{o}\n{e}"
            with h5(out, r) as f:
                st = dict(f["status"].attrs)
            assert st["state"] == "failed" and st["exit_code"] == 4, st
            msg = st["message"]
            assert msg.startswith("checkpoint of step 10 failed: [rank 0/2 "), msg
            assert f"cannot create checkpoint directory {blocked}" in msg, msg
            assert "Operation not permitted" in msg, msg
            assert msg in e, f"rank {r}'s log lacks the message:\n{e}"
        assert elapsed < 30, f"the ranks ended {elapsed:.1f} s after start"
        assert (ck / "step_00000005" / "manifest.json").exists()
    finally:
        subprocess.run(["chattr", "-i", str(blocked)])
    blocked.unlink()
    outs = run(out, world, *ov)
    assert f"resumed from {ck / 'step_00000005'}" in outs[0][1] + outs[0][2]


def stop_with_slow_save(out, world, ov, delay_s, *extra):
    """Starts a run that checkpoints every 4 steps and whose saves after a stop signal are
    held `delay_s` seconds (test hook); sends SIGTERM to every rank once the checkpoint of
    step 8 is complete. Returns (outputs, seconds from the signal to the last exit)."""
    procs = start(out, world, *ov, "checkpoint.interval=4", *extra,
                  env_extra={"FTB_TEST_CKPT_SAVE_DELAY": f"stop:{delay_s}"})
    wait_until(lambda: (out / "checkpoints" / "step_00000008" / "manifest.json").exists()
               or any(p.poll() is not None for p in procs), "the checkpoint of step 8")
    t0 = time.monotonic()
    for p in procs:
        p.send_signal(signal.SIGTERM)
    outs = finish(procs)
    return outs, time.monotonic() - t0


def test_preempt_grace_abandons_a_slow_save_without_a_partial_checkpoint(tmp_path, uninterrupted):
    """checkpoint.preempt_grace_s: a stop-time save that cannot finish in time (held 60 s)
    is abandoned at the deadline. Every rank ends `preempted` with the requeue code within
    the grace period, nothing partial is left in the checkpoint directory, and the rerun
    resumes from the previous complete checkpoint bit-identically."""
    world, ov = LAYOUTS["dp2"]
    cut = tmp_path / "cut"
    grace = 3.0
    outs, elapsed = stop_with_slow_save(cut, world, ov, 60, f"checkpoint.preempt_grace_s={grace}")
    for r, (rc, o, e) in enumerate(outs):
        assert rc == REQUEUE_EXIT, f"rank {r} exited {rc}:\n{o}\n{e}"
    assert grace - 0.1 <= elapsed < grace + 2.5, f"ended {elapsed:.2f} s after the signal"
    ck = cut / "checkpoints"
    left = sorted(p.name for p in ck.iterdir())
    assert not [n for n in left if not n.startswith("step_") or n.endswith(".tmp")], left
    assert all((ck / n / "manifest.json").exists() for n in left), left
    newest = ck / left[-1]
    for r in range(world):
        with h5(cut, r) as f:
            st = dict(f["status"].attrs)
        assert st["state"] == "preempted" and st["exit_code"] == REQUEUE_EXIT, st
        assert "preempt_grace_s = 3 s" in st["message"] and f"resume point {newest}" in st["message"], st
    outs = run(cut, world, *ov, "checkpoint.interval=4")
    assert f"resumed from {newest}" in outs[0][2] + outs[0][1]
    assert np.array_equal(uninterrupted("dp2")[0], losses(cut))
    with h5(cut) as f:
        assert list(f["steps/step"][:]) == list(range(20))


def test_without_grace_a_stop_save_longer_than_the_stop_watchdog_completes(tmp_path):
    """preempt_grace_s = 0 (no deadline): the stop watchdog's 10 s bound does not count time
    spent saving, so a stop-time save held 11 s still completes and the run ends preempted
    with that checkpoint and the requeue code."""
    world, ov = LAYOUTS["dp2"]
    outs, elapsed = stop_with_slow_save(tmp_path, world, ov, 11)
    for r, (rc, o, e) in enumerate(outs):
        assert rc == REQUEUE_EXIT, f"rank {r} exited {rc}:\n{o}\n{e}"
    assert elapsed >= 11
    with h5(tmp_path) as f:
        st = dict(f["status"].attrs)
        last = int(f["steps/step"][-1])
    assert st["state"] == "preempted", st
    assert (tmp_path / "checkpoints" / f"step_{last + 1:08d}" / "manifest.json").exists()


def test_changed_global_batch_names_the_key_where_it_was_set(tmp_path):
    """Before: "tiny.toml:12: key 'training.global_batch_size'", a key that file does not
    set, with the location of micro_batch_size and no factors."""
    out = saved_run(tmp_path)
    step8 = out / "checkpoints" / "step_00000008"
    new = tmp_path / "new"
    outs = run(new, 1, "training.micro_batch_size=1", f"checkpoint.resume={step8}", expect=2)
    err = outs[0][2]
    assert ("override 'training.micro_batch_size=1': key 'training.micro_batch_size': "
            "checkpoint ") in err, err
    assert ("saved with a global batch of 2 samples, this run has 1 = micro_batch_size(1) * "
            "grad_accum_steps(1) * data-parallel size(1)") in err, err
    assert "hint: keep micro_batch_size * grad_accum_steps * dp equal" in err
    assert not new.exists(), "nothing may be written"


def test_rerun_of_a_completed_run_prints_no_unmeasured_figures(tmp_path):
    """Re-running a completed command resumes at max_steps and runs no step. Before, its
    summary printed tokens/s 0.0, MFU 0.0 %, loss 0.00000 / 0.00000 as if measured, and
    /status said "completed 0 steps" beside steps_done 20."""
    out = tmp_path / "run"
    run(out, 1, "training.max_steps=4")
    outs = run(out, 1, "training.max_steps=4")
    text = outs[0][1]
    assert "throughput                  not measured: this process ran no step" in text, text
    for unmeasured in ("tokens/s", "MFU", "GEMM efficiency", "step time", "loss first"):
        assert unmeasured not in text, (unmeasured, text)
    with h5py.File(out / "metrics" / "rank_00000.h5") as f:
        status = dict(f["status"].attrs)
    assert status["state"] == "completed" and status["steps_done"] == 4
    assert status["message"] == ("completed: no step left to run (training.max_steps = 4 was "
                                 "reached before this process)")
