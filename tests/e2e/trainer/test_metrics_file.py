"""Metrics files hold the documented layout and survive SIGKILL."""
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from trainer_util import (QUICK_START, REQUEUE_EXIT, TINY, TRAINER, base_env, help_metrics, metrics,
                          run_trainer, wait_for_steps)

ROOT_ATTRS = {"schema_version", "tag", "config_hash", "world_size", "rank", "local_rank",
              "node_rank", "hostname", "start_utc", "ftbench_version", "torch_version", "device",
              "peak_flops", "peak_source", "cpu_model", "peak_unit", "peak_cores", "peak_clock_hz",
              "peak_flops_per_cycle", "peak_check", "cpu_isa", "gemm_flops", "gemm_source"}
# trainer/README.md "HDF5 metrics files": the environment check
ENV_ATTRS = {"env_blas", "env_blas_core", "env_blas_isa", "env_cpu_isa_best",
             "env_openblas_coretype", "env_intra_threads", "env_blas_threads",
             "env_blas_threads_source", "env_omp_num_threads", "env_bound_cpus",
             "env_bound_physical_cores", "env_online_cpus", "env_core_binding", "env_allocator",
             "env_warnings"}



def test_layout_in_h5py_and_h5dump(tmp_path):
    run_trainer(tmp_path, "metrics.price_per_hour=2.0", "metrics.gemm_probe=true")
    path = tmp_path / "metrics" / "rank_00000.h5"
    with h5py.File(path, "r") as f:
        assert ROOT_ATTRS <= set(f.attrs)
        assert f.attrs["schema_version"] == 1 and f.attrs["world_size"] == 1
        assert f.attrs["peak_flops"] > 1e9, "the hardware peak is at least 1 GFLOP/s"
        assert f.attrs["gemm_flops"] > 1e8, "the measured GEMM is at least 0.1 GFLOP/s"
        assert "GEMM" in f.attrs["gemm_source"]
        assert "[training]" in f["config"].asstr()[()]
        assert set(f["steps"]) == set(help_metrics())  # every column, nothing else
        steps = f["steps"]
        assert list(steps["step"][:]) == list(range(20))
        assert steps["step"].dtype == np.int64 and steps["loss"].dtype == np.float64
        assert steps["step"].maxshape == (None,) and steps["step"].chunks is not None
        # tokens/s is tokens over the measured step time, per row
        np.testing.assert_allclose(steps["tokens_per_s_padded"][:],
                                   steps["tokens_padded"][:] / steps["step_time_s"][:], rtol=1e-9)
        assert np.all(steps["tokens_dataset"][:] <= steps["tokens_padded"][:])
        assert np.all(steps["tokens_padded"][:] == 2 * 64)
        assert np.all((steps["gemm_efficiency"][:] > 0) & (steps["gemm_efficiency"][:] < 1.5))
        st = f["status"].attrs
        assert st["state"] == "completed" and st["exit_code"] == 0 and st["steps_done"] == 20
    dump = subprocess.run(["h5dump", "-A", str(path)], capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    assert "schema_version" in dump.stdout and "completed" in dump.stdout


def test_mfu_is_against_the_hardware_peak_and_env_is_recorded(tmp_path):
    """mfu uses the CPU's peak (cores x measured clock x FLOP/cycle), gemm_efficiency the GEMM
    measured at start; the environment check is in the attributes. 3 intra-op threads on a
    process bound to fewer CPUs must warn, naming the fix."""
    import os
    threads = len(os.sched_getaffinity(0)) + 1
    p = run_trainer(tmp_path, "training.max_steps=4", f"training.threads={threads}",
                    "metrics.gemm_probe=true")
    with metrics(tmp_path) as f:
        a = f.attrs
        assert ROOT_ATTRS | ENV_ATTRS <= set(a)
        per_device = f["steps/flops_per_token"][:] * f["steps/tokens_per_s_per_device"][:]
        if a["peak_check"] == "ok":
            np.testing.assert_allclose(f["steps/mfu"][:], per_device / a["peak_flops"], rtol=1e-12)
            assert np.all((f["steps/mfu"][:] > 0) & (f["steps/mfu"][:] <= 1))
        else:  # the GEMM beat the computed peak: not reported, never > 100 %
            assert np.all(np.isnan(f["steps/mfu"][:])) and "peak error" in a["peak_check"]
        np.testing.assert_allclose(f["steps/gemm_efficiency"][:], per_device / a["gemm_flops"],
                                   rtol=1e-12)
        if a["peak_unit"] != "config":  # the CPU peak formula, as recorded
            assert a["peak_cores"] == min(threads, a["env_bound_physical_cores"])
            assert a["peak_flops"] == pytest.approx(
                a["peak_cores"] * a["peak_clock_hz"] * a["peak_flops_per_cycle"], rel=1e-12)
            assert a["cpu_model"] in a["peak_source"] and a["peak_unit"] in a["peak_source"]
        assert a["env_intra_threads"] == threads
        assert a["env_online_cpus"] >= len(os.sched_getaffinity(0))
        assert "time-share cores" in a["env_warnings"]
        assert f"training.threads={len(os.sched_getaffinity(0))}" in a["env_warnings"]
    assert "time-share cores" in p.stderr + p.stdout
    summary = p.stdout[p.stdout.index("== ftbench summary"):]
    assert "MFU (hardware peak)" in summary and "GEMM efficiency" in summary


def _start_long_run(tmp_path, *extra):
    cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path), "--no-sweep-dir",
           *QUICK_START, "training.max_steps=100000", "metrics.log_every=1", *extra]
    return subprocess.Popen(cmd, env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_sigkill_leaves_a_readable_file(tmp_path):
    p = _start_long_run(tmp_path)
    path = tmp_path / "metrics" / "rank_00000.h5"
    wait_for_steps(path, 5)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    with h5py.File(path, "r") as f:
        n = f["status"].attrs["steps_done"]
        assert n >= 5
        assert f["status"].attrs["state"] == "running"
        # A kill inside a flush may leave that flush's row (log_every=1) in some columns
        # beyond steps_done, never fewer rows than it counts.
        for name in f["steps"]:
            assert n <= len(f["steps"][name]) <= n + 1, name
        assert list(f["steps/step"][:n]) == list(range(n))
        assert np.all(np.isfinite(f["steps/loss"][:n]))
    assert subprocess.run(["h5dump", "-H", str(path)], capture_output=True).returncode == 0


def test_sigterm_records_preempted(tmp_path):
    p = _start_long_run(tmp_path)
    path = tmp_path / "metrics" / "rank_00000.h5"
    wait_for_steps(path, 3)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == REQUEUE_EXIT  # stopped with a checkpoint
    with metrics(tmp_path) as f:
        st = f["status"].attrs
        assert st["state"] == "preempted"
        assert "Terminated" in st["message"]
        assert st["steps_done"] == len(f["steps/loss"]) >= 3


def test_memory_limit_ends_every_rank_as_oom(tmp_path):
    # 0.1 GiB is below the ~200 MiB libtorch baseline: the memory estimate refuses the
    # run on both ranks before anything is allocated (status oom, exit 5, no step), and
    # neither hangs in a collective.
    from trainer_util import free_port
    port = free_port()
    procs = [subprocess.Popen(
        [str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path), "--no-sweep-dir",
         "parallel.memory_limit_gb=0.1"],
        env=base_env(RANK=r, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [5, 5]
    for r in range(2):
        with metrics(tmp_path, r) as f:
            st = f["status"].attrs
            assert st["state"] == "oom" and st["exit_code"] == 5
            assert "memory_limit_gb" in st["message"] and st["steps_done"] == 0
            assert "estimated memory per rank" in st["message"]
