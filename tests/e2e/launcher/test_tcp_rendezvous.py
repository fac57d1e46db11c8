"""torchrun-style static rendezvous without MPI: --nnodes/--node-rank/--master-addr.

Local tests run two launchers on 127.0.0.1; the netns tests put them on two namespace hosts
(h1 = 10.77.0.11 node 0 with 2 workers, h2 = 10.77.0.12 node 1 with 1 worker) and skip
unless root with netns. Run the file under `flock /tmp/ftb-netns.lock`.
"""
import os
import signal
import socket
import subprocess
import time

import pytest

from launcher_util import ALLREDUCE, alive, records, torch_python, wait_for, worker_cmd

H1, H2 = "10.77.0.11", "10.77.0.12"


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start(argv, netns=None, env=None):
    cmd = (["ip", "netns", "exec", netns] if netns else []) + list(map(str, argv))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def pair(launcher, args0, args1, program, addr="127.0.0.1", netns=(None, None), extra=()):
    """Node 0 and node 1 launchers; returns [(rc, out, err, seconds) x 2]."""
    port = free_port()
    common = ["--nnodes", "2", "--master-addr", addr, "--master-port", port, *extra]
    t0 = time.monotonic()
    p0 = start([launcher, *common, "--node-rank", "0", *args0, "--", *program], netns[0])
    p1 = start([launcher, *common, "--node_rank", "1", *args1, "--", *program], netns[1])
    out = []
    for p in (p0, p1):
        o, e = p.communicate(timeout=90)
        out.append((p.returncode, o, e, time.monotonic() - t0))
    return out


def test_two_launchers_place_like_mpi(launcher, tmp_path):
    r0, r1 = pair(launcher, ["--nproc-per-node", "2", "--run-id", "tcp"],
                  ["--nproc_per_node", "1", "--run-id", "tcp"], worker_cmd("--record", tmp_path))
    assert r0[0] == 0 and r1[0] == 0, (r0[2], r1[2])
    recs = records(tmp_path)
    assert sorted(recs) == [0, 1, 2]
    for rank, (group, local) in {0: ("0", "0"), 1: ("0", "1"), 2: ("1", "0")}.items():
        e = recs[rank]["env"]
        assert (e["GROUP_RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"]) == (group, local, "3")
        assert e["TORCHELASTIC_RUN_ID"] == "tcp"
    assert len({r["env"]["MASTER_PORT"] for r in recs.values()}) == 1
    assert "TCP rendezvous, node 0 of 2" in r0[2]


def test_fail_fast_across_launchers(launcher, tmp_path):
    r0, r1 = pair(launcher, [], [], worker_cmd("--ranks", "1", "--sleep", "0.5", "--exit", "3",
                                               "--sleep-others", "60"))
    assert r1[0] == 3 and "job failed" in r0[2] and "rank 1 on node 1" in r0[2], r0[2]
    assert r0[3] < 10, "node 0 must stop its workers on node 1's failure, not wait 60 s"


def test_killed_peer_launcher_aborts_the_job(launcher, tmp_path):
    port = free_port()
    common = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port]
    prog = worker_cmd("--record", tmp_path, "--sleep", "60")
    p0 = start([launcher, *common, "--node-rank", "0", "--", *prog])
    p1 = start([launcher, *common, "--node-rank", "1", "--", *prog])
    recs = wait_for(lambda: len(records(tmp_path)) == 2 and records(tmp_path), 30, "workers")
    p1.kill()
    p1.communicate(timeout=10)
    _, err = p0.communicate(timeout=15)
    assert p0.returncode == 3, err
    assert "lost the connection to node 1" in err, err
    wait_for(lambda: not any(alive(r["pid"]) for r in recs.values()), 5, "workers to be gone")


def test_missing_node_0_times_out_naming_it(launcher):
    p = subprocess.run([launcher, "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint",
                        f"127.0.0.1:{free_port()}", "--rdzv-timeout", "1", "--", "true"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 3, p.stderr
    assert "waiting for the placement plan from node 0" in p.stderr
    assert "not reached yet: Connection refused" in p.stderr


def test_mismatched_node_count_exits_2(launcher):
    port = free_port()
    p0 = start([launcher, "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                "--master-port", port, "--rdzv-timeout", "20", "--", "true"])
    p1 = start([launcher, "--nnodes", "3", "--node-rank", "1", "--master-addr", "127.0.0.1",
                "--master-port", port, "--rdzv-timeout", "20", "--", "true"])
    _, e0 = p0.communicate(timeout=30)
    _, e1 = p1.communicate(timeout=30)
    assert (p0.returncode, p1.returncode) == (2, 2), (e0, e1)
    assert "node 0 has --nnodes 2" in e0


def test_dry_run_does_the_rendezvous(launcher, tmp_path):
    marker = tmp_path / "started"
    r0, r1 = pair(launcher, ["--nproc-per-node", "2"], [], ["/usr/bin/touch", marker],
                  extra=["--dry-run", "--run-id", "d"])
    assert r0[0] == 0 and r1[0] == 0, (r0[2], r1[2])
    assert "2 node(s), 3 worker(s), nodes from TCP rendezvous (--nnodes)" in r0[1]
    assert "RANK=2" in r0[1]
    assert r1[1] == "" and not marker.exists()


# --- two network-namespace hosts -------------------------------------------------------


def test_netns_two_hosts_static_rendezvous(launcher, netns_hosts, tmp_path):
    r0, r1 = pair(launcher, ["--nproc-per-node", "2"], ["--nproc-per-node", "1"],
                  worker_cmd("--record", tmp_path), addr=H1, netns=("h1", "h2"))
    assert r0[0] == 0 and r1[0] == 0, (r0[2], r1[2])
    recs = records(tmp_path)
    for rank, ip in {0: H1, 1: H1, 2: H2}.items():
        assert recs[rank]["ip"] == ip
        assert recs[rank]["env"]["MASTER_ADDR"] == H1
        assert recs[rank]["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
    rows = [l.split() for l in r0[2].splitlines() if l[:2] in ("0 ", "1 ")]
    assert [(r[0], r[2], r[5], r[6]) for r in rows] == [("0", H1, "2", "0-1"),
                                                        ("1", H2, "1", "2")], rows


def test_netns_torch_allreduce_and_fail_fast(launcher, netns_hosts, tmp_path):
    py = torch_python()
    if py is None:
        pytest.skip("no python with torch")
    r0, r1 = pair(launcher, ["--nproc-per-node", "2"], ["--nproc-per-node", "1"],
                  [py, ALLREDUCE], addr=H1, netns=("h1", "h2"))
    assert r0[0] == 0 and r1[0] == 0, (r0[2], r1[2])
    lines = sorted(l for l in r0[1].splitlines() + r1[1].splitlines() if l.startswith("ALLREDUCE"))
    assert len(lines) == 3 and all("sum=6.0" in l and f"master={H1}:" in l for l in lines), lines
    r0, r1 = pair(launcher, [], [], worker_cmd("--ranks", "1", "--sleep", "0.3", "--exit", "5",
                                               "--sleep-others", "60"),
                  addr=H1, netns=("h1", "h2"))
    assert r1[0] == 5 and "rank 1 on node 1" in r0[2] and r0[3] < 10, r0[2]
