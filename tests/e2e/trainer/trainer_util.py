"""Helpers for trainer end-to-end tests: run real trainer processes, read their HDF5."""
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("FTB_BUILD_DIR", ROOT / "build" / "release"))
TRAINER = BUILD / "trainer" / "trainer"
TINY = ROOT / "configs" / "runs" / "tiny.toml"
# One BLAS for the model's fp32 projections in the runs started here: "auto" (the default)
# times a 2048^3 GEMM on ATen and on OpenBLAS at every start, twice the start-up GEMM of a
# fixed route, and a busy machine can make it pick differently in two runs a test compares
# (the two round differently). Overrides apply in order, so a test of the choice itself passes
# training.fp32_gemm="auto" after it (test_checkpoint.py test_auto_gemm_route_survives_a_resume).
ONE_BLAS = "training.fp32_gemm=\"aten\""
# No start-up GEMM in the runs started here (metrics.gemm_probe): it is about a second of CPU
# per rank, most of a tiny run's start, and only gemm_efficiency divides by it. A test of
# that figure passes metrics.gemm_probe=true after it, or starts the trainer itself.
NO_GEMM_PROBE = "metrics.gemm_probe=false"
QUICK_START = (ONE_BLAS, NO_GEMM_PROBE)
# A run stopped by a signal after saving its checkpoint exits with this (common/error.h
# kExitRequeue, trainer/README "Exit codes"); without a checkpoint, 128 + signal.
REQUEUE_EXIT = 75


def gpus_visible():
    """True when nvidia-smi lists a GPU: the tests of a machine without one skip."""
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_trainer(out_dir, *overrides, config=TINY, timeout=120, check=True):
    """Single-process run with --no-sweep-dir into out_dir, with QUICK_START unless the
    overrides say otherwise; returns CompletedProcess."""
    cmd = [str(TRAINER), "--config", str(config), "--output-dir", str(out_dir), "--no-sweep-dir",
           *QUICK_START, *overrides]
    p = subprocess.run(cmd, env=base_env(), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"trainer failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def run_ranks(out_dir, world, *overrides, config=TINY, timeout=180):
    """Starts `world` trainer processes by hand with the torchrun variables (with
    QUICK_START unless the overrides say otherwise)."""
    port = free_port()
    procs = []
    for r in range(world):
        env = base_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=world, LOCAL_WORLD_SIZE=world,
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [str(TRAINER), "--config", str(config), "--output-dir", str(out_dir),
               "--no-sweep-dir", *QUICK_START, *overrides]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = finish(procs, timeout)
    for r, (rc, o, e) in enumerate(outs):
        assert rc == 0, f"rank {r} exited {rc}:\n{o}\n{e}"
    return outs


def steps(out_dir, key, rank=0):
    with metrics(out_dir, rank) as f:
        return np.array(f["steps"][key][:])


def metrics(out_dir, rank=0):
    return h5py.File(Path(out_dir) / "metrics" / f"rank_{rank:05d}.h5", "r")


def losses(out_dir, rank=0):
    with metrics(out_dir, rank) as f:
        return np.array(f["steps/loss"][:])


def read_token_cache(jsonl):
    """The trainer's token cache beside a JSONL text dataset (trainer/docs/data.md): one
    (ids, masked, flags) per document: masked = k >= 0 when the first k ids are not loss
    targets and the others are (flags None), else -1 and flags[i] = 1 where ids[i] is one."""
    caches = list(Path(jsonl).parent.glob(Path(jsonl).name + ".tok-*.bin"))
    assert len(caches) == 1, caches
    raw = caches[0].read_bytes()
    assert raw[:8] == b"FTBTOK01"
    (n,), off, docs = struct.unpack_from("<Q", raw, 8), 16, []
    for _ in range(n):
        length, masked = struct.unpack_from("<Qq", raw, off)
        off += 16
        ids = list(struct.unpack_from(f"<{length}i", raw, off))
        off += 4 * length
        flags = None
        if masked < 0:
            flags = list(raw[off:off + length])
            off += length
        docs.append((ids, masked, flags))
    assert off == len(raw)
    return docs


def read_token_targets(jsonl):
    """(ids, flags) of each document of the token cache: flags[i] = 1 where ids[i] is a loss
    target (flags[0] is never used: the first id has nothing before it)."""
    return [(ids, flags if masked < 0 else [0] * masked + [1] * (len(ids) - masked))
            for ids, masked, flags in read_token_cache(jsonl)]


def assert_close(a, b, rel):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    err = np.max(np.abs(a - b) / np.abs(b))
    assert err <= rel, f"max relative difference {err:.3g} > {rel}:\n{a}\n{b}"


if not TRAINER.exists():
    raise RuntimeError(f"{TRAINER} not built: run scripts/build.sh")


def finish(procs, timeout=120):
    """(returncode, stdout, stderr) of each process; all are killed if one times out."""
    outs = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, o, e))
    return outs


def wait_for_steps(path, n, timeout=60):
    """Waits until the metrics file at `path` has flushed at least n steps."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with h5py.File(path, "r") as f:
                if f["status"].attrs["steps_done"] >= n:
                    return
        except (OSError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{path} never reached {n} flushed steps")


def help_metrics():
    """`trainer --help-metrics` as {column: (units, type, meaning)}, in its order."""
    p = subprocess.run([str(TRAINER), "--help-metrics"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    table = {}
    for line in p.stdout.splitlines()[2:]:  # after the header and separator
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 4 and cells[0].startswith("`"), line
        table[cells[0].strip("`")] = tuple(cells[1:])
    return table
