"""Shared fixtures for the launcher end-to-end tests.

Run:  FTB_BUILD_DIR=build/release python3 -m pytest -q tests/e2e/launcher
FTB_BUILD_DIR is the CMake build dir holding launcher/launcher (default: <repo>/build/release).
FTB_UPDATE_GOLDEN=1 rewrites golden/*.txt from the current output.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
if not BUILD.is_absolute():
    BUILD = REPO / BUILD
LAUNCHER = BUILD / "launcher" / "launcher"
WORKER = HERE / "worker.py"
ALLREDUCE = HERE / "allreduce.py"
NETNS = REPO / "tests" / "cluster" / "netns.sh"
RSH = REPO / "tests" / "cluster" / "netns_rsh.sh"


def torch_python():
    """An interpreter that can import torch: the project venv's (scripts/setup.sh)."""
    for exe in (sys.executable, str(REPO / ".venv" / "bin" / "python")):
        if exe and subprocess.run([exe, "-c", "import torch.distributed"],
                                  capture_output=True).returncode == 0:
            return exe
    return None


def _trainer():
    if os.environ.get("FTB_TRAINER"):
        return pathlib.Path(os.environ["FTB_TRAINER"])
    for p in (BUILD / "trainer" / "trainer", REPO / "build" / "release" / "trainer" / "trainer"):
        if p.exists():
            return p
    return REPO / "build" / "release" / "trainer" / "trainer"


TRAINER = _trainer()  # acceptance-1/2 tests skip when it does not exist


@pytest.fixture(scope="session")
def launcher():
    if not LAUNCHER.exists():
        pytest.fail(f"{LAUNCHER} not built (set FTB_BUILD_DIR to the build dir)", pytrace=False)
    return str(LAUNCHER)


def worker_cmd(*args):
    return [sys.executable, str(WORKER), *map(str, args)]


def run(cmd, env=None, timeout=60, **kw):
    """Runs cmd; returns CompletedProcess with .elapsed (seconds)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout, **kw)
    p.elapsed = time.monotonic() - t0
    return p


def records(dir_, attempt=0):
    """rank -> record written by worker.py --record."""
    out = {}
    for f in pathlib.Path(dir_).glob(f"rank_*.attempt_{attempt}.json"):
        rec = json.loads(f.read_text())
        out[int(rec["env"]["RANK"])] = rec
    return out


def wait_for(pred, timeout=20.0, what="condition"):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="session")
def netns_hosts():
    """Two namespace hosts h1 (10.77.0.11) and h2 (10.77.0.12); torn down at the end."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed")
    chk = subprocess.run([str(NETNS), "check"], capture_output=True, text=True)
    if chk.returncode != 0:
        pytest.skip(f"network namespaces unavailable: {chk.stderr.strip()}")
    # Hosts that were already up (someone else's session) are reused and left up.
    existed = subprocess.run(["ip", "link", "show", "ftbbr0"], capture_output=True).returncode == 0
    up = subprocess.run([str(NETNS), "up", "2"], capture_output=True, text=True)
    assert up.returncode == 0, up.stderr
    yield ["h1", "h2"]
    if not existed:
        subprocess.run([str(NETNS), "down"], capture_output=True, text=True)


# Hosts of their own for tests that cut a link (`ip link set eth0 down`), so that tests
# running beside them on h1/h2 keep their network: namespaces cut1, cut2 on bridge ftbcut0.
CUT_NET = "10.78.0"
CUT_ENV = {"FTB_NETNS_PREFIX": "cut", "FTB_NETNS_BRIDGE": "ftbcut0", "FTB_NETNS_NET": CUT_NET}


@pytest.fixture
def cut_hosts():
    """Two namespace hosts cut1 (10.78.0.11) and cut2 (10.78.0.12) whose links a test may cut;
    every process left in them is killed and the hosts removed at the end."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not installed")
    env = {**os.environ, **CUT_ENV}
    chk = subprocess.run([str(NETNS), "check"], capture_output=True, text=True)
    if chk.returncode != 0:
        pytest.skip(f"network namespaces unavailable: {chk.stderr.strip()}")
    up = subprocess.run([str(NETNS), "up", "2"], capture_output=True, text=True, env=env)
    assert up.returncode == 0, up.stderr
    yield ["cut1", "cut2"]
    subprocess.run([str(NETNS), "down"], capture_output=True, text=True, env=env)


def netns_pids(host):
    """Pids of the processes in network namespace `host`."""
    out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if alive(int(p))]


def mpirun_prefix(tmp_path, hosts, net="10.77.0.0/24"):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{h} slots=1\n" for h in hosts))
    return ["mpirun", "--allow-run-as-root", "--hostfile", str(hostfile), "--bind-to", "none",
            "--mca", "plm_rsh_agent", str(RSH),
            "--mca", "oob_tcp_if_include", net,
            "--mca", "btl_tcp_if_include", net, "--mca", "btl", "self,tcp",
            # report a non-zero exit right away instead of after a 1 s kill timer per daemon
            "--mca", "odls_base_sigkill_timeout", "0"]


def mpmd(prefix, per_host):
    """per_host: [(host, [launcher argv...]), ...] -> one launcher per host (MPMD)."""
    cmd = list(prefix)
    for i, (host, argv) in enumerate(per_host):
        if i:
            cmd.append(":")
        cmd += ["-np", "1", "--host", host, *argv]
    return cmd
