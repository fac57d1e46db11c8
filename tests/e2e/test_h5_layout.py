"""HDF5 metrics layout as seen by h5py and h5dump (docs/architecture.md § HDF5 metrics schema).

The files are written by the C++ unit tests (common_tests, MetricsFileTest.RoundTrip and
MetricsFileTest.SigkillKeepsEveryFlushedStep) through FTB_H5_OUT / FTB_H5_KILLED_OUT.
Binary: $FTB_BUILD_DIR/tests/common_tests (default <repo>/build/release).
Run with the project venv, which has h5py: .venv/bin/python -m pytest tests/e2e/test_h5_layout.py
"""
import os
import pathlib
import shutil
import subprocess

import h5py
import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD_DIR = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
GTEST = BUILD_DIR / "tests" / "common_tests"

STRING_ATTRS = {"tag", "config_hash", "hostname", "start_utc", "ftbench_version",
                "torch_version", "device", "peak_source"}
INT_ATTRS = {"schema_version", "world_size", "rank", "local_rank", "node_rank"}
STATES = {"running", "completed", "failed", "oom", "preempted", "invalid"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    if not GTEST.is_file():
        pytest.fail(f"{GTEST} not found: build common_tests or set FTB_BUILD_DIR")
    tmp = tmp_path_factory.mktemp("h5")
    done = tmp / "run" / "metrics" / "rank_00001.h5"
    killed = tmp / "killed.h5"
    env = dict(os.environ, FTB_H5_OUT=str(done), FTB_H5_KILLED_OUT=str(killed))
    flt = "MetricsFileTest.RoundTrip:MetricsFileTest.SigkillKeepsEveryFlushedStep"
    proc = subprocess.run([str(GTEST), f"--gtest_filter={flt}"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 tests" in proc.stdout, proc.stdout
    return {"done": done, "killed": killed}


def check_layout(path, state, steps):
    with h5py.File(path, "r") as f:
        assert set(f.attrs) == STRING_ATTRS | INT_ATTRS | {"peak_flops"}
        for name in STRING_ATTRS:
            assert isinstance(f.attrs[name], str), name
        for name in INT_ATTRS:
            assert f.attrs[name].dtype == np.int64, name
        assert f.attrs["schema_version"] == 1
        assert f.attrs["peak_flops"].dtype == np.float64 and f.attrs["peak_flops"] > 0

        config = f["config"]
        assert config.shape == ()
        info = h5py.check_string_dtype(config.dtype)
        assert info is not None and info.length is None and info.encoding == "utf-8"
        assert "[model]" in config.asstr()[()]

        assert isinstance(f["steps"], h5py.Group)
        assert set(f["steps"]) >= {"step", "loss"}
        for name, ds in f["steps"].items():
            assert ds.ndim == 1 and ds.maxshape == (None,) and ds.chunks is not None, name
            assert ds.dtype in (np.float64, np.int64), (name, ds.dtype)
            assert ds.shape == (steps,), name
        assert f["steps/step"].dtype == np.int64
        assert f["steps/loss"].dtype == np.float64
        assert list(f["steps/step"][:]) == list(range(steps))

        status = f["status"]
        assert isinstance(status, h5py.Group)
        assert isinstance(status.attrs["state"], str) and status.attrs["state"] in STATES
        assert status.attrs["state"] == state
        assert isinstance(status.attrs["message"], str)
        assert status.attrs["exit_code"].dtype == np.int64
        assert status.attrs["steps_done"] == steps


def h5dump(*args):
    exe = shutil.which("h5dump")
    assert exe, "h5dump not found (apt-get install hdf5-tools)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def test_completed_file_layout(files):
    check_layout(files["done"], "completed", 25)
    with h5py.File(files["done"], "r") as f:
        assert f["status"].attrs["exit_code"] == 0
        assert f.attrs["rank"] == 1 and f.attrs["world_size"] == 2
        assert np.isnan(f["steps/loss"][3]) and f["steps/tokens"][4] == -1


def test_sigkilled_file_keeps_flushed_steps(files):
    check_layout(files["killed"], "running", 10)


@pytest.mark.parametrize("which", ["done", "killed"])
def test_h5dump_reads_file(files, which):
    header = h5dump("-H", str(files[which]))
    assert header.returncode == 0, header.stderr
    assert 'GROUP "steps"' in header.stdout and 'DATASET "config"' in header.stdout
    full = h5dump(str(files[which]))
    assert full.returncode == 0, full.stderr
