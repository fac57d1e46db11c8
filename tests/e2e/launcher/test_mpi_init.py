"""The launcher's MPI_Init has a deadline: a peer that never starts cannot hang it."""
import shutil
import subprocess
import time

import pytest


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_mpi_init_without_its_peer_times_out_with_exit_3(launcher):
    """mpirun starts a launcher and, as the job's second process, a program that never
    calls MPI_Init: MPI_Init's fence would wait for ever; --rdzv-timeout 3 ends the launcher
    with exit 3 and a line naming its host and the wait, and mpirun with it."""
    t0 = time.monotonic()
    p = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "1",
                        launcher, "--rdzv-timeout", "3", "--nproc-per-node", "1", "--",
                        "true", ":", "-np", "1", "sleep", "60"],
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
    assert "timed out after 3 s in MPI_Init waiting for every launcher of the job" in \
        p.stderr + p.stdout, p.stderr
    assert took < 30, took
