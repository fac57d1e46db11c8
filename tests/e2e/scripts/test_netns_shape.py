"""tests/cluster/netns.sh shape: a tc token bucket on every namespace host's egress limits the
rate between hosts to the one asked for, as scripts/bench_link_rate.py (the pipeline
benchmark's link check) measures it; `shape off` lifts it. Skips unless root with netns.

The hosts get their own prefix, bridge and subnet, so hosts other tests use stay unshaped.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
NETNS = REPO / "tests" / "cluster" / "netns.sh"
RATE = REPO / "scripts" / "bench_link_rate.py"
ENV = dict(os.environ, FTB_NETNS_PREFIX="ftbshp", FTB_NETNS_BRIDGE="ftbshp0",
           FTB_NETNS_NET="10.81.0")
# The hosts ftbshp1, ftbshp2 are made and removed by every test: one test at a time.
pytestmark = pytest.mark.xdist_group("netns_ftbshp")


def netns(*args):
    return subprocess.run([str(NETNS), *args], env=ENV, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def hosts():
    chk = netns("check")
    if chk.returncode != 0:
        pytest.skip(f"network namespaces unavailable: {chk.stderr.strip()}")
    up = netns("up", "2")
    assert up.returncode == 0, up.stderr
    yield
    netns("down")


def transfer_bits_per_s(tmp_path, nbytes):
    out = tmp_path / "rate.json"
    recv = subprocess.Popen(["ip", "netns", "exec", "ftbshp2", sys.executable, str(RATE), "recv",
                             "5998", str(out)])
    try:
        subprocess.run(["ip", "netns", "exec", "ftbshp1", sys.executable, str(RATE), "send",
                        "10.81.0.12", "5998", str(nbytes)], check=True, timeout=60)
        assert recv.wait(timeout=60) == 0
    finally:
        if recv.poll() is None:
            recv.kill()
    return json.loads(out.read_text())["bits_per_s"]


@pytest.mark.timing  # a measured transfer rate: runs alone (tests/conftest.py)
def test_shape_limits_the_rate_between_hosts(hosts, tmp_path):
    assert netns("shape", "40mbit").returncode == 0
    qdisc = subprocess.run(["ip", "netns", "exec", "ftbshp1", "tc", "qdisc", "show", "dev", "eth0"],
                           capture_output=True, text=True).stdout
    assert "tbf" in qdisc and "40Mbit" in qdisc, qdisc
    shaped = transfer_bits_per_s(tmp_path, 10_000_000)  # 2 s at 40 Mbit/s
    assert 0.8 * 40e6 <= shaped <= 1.02 * 40e6, shaped  # payload below the wire rate
    assert netns("shape", "off").returncode == 0
    assert transfer_bits_per_s(tmp_path, 10_000_000) > 4 * 40e6


def test_shape_refuses_a_rate_without_unit(hosts):
    p = netns("shape", "100")
    assert p.returncode != 0
    assert "expected a number with kbit, mbit or gbit" in p.stderr
