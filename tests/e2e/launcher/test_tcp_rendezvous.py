"""torchrun-style static rendezvous without MPI: --nnodes/--node-rank/--master-addr.

Local tests run two launchers on 127.0.0.1; the netns tests put them on two namespace hosts
(h1 = 10.77.0.11 node 0 with 2 workers, h2 = 10.77.0.12 node 1 with 1 worker) and skip
unless root with netns. Run the file under `flock /tmp/ftb-netns.lock`.
"""
import hashlib
import hmac
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from launcher_util import ALLREDUCE, alive, records, torch_python, wait_for, worker_cmd

H1, H2 = "10.77.0.11", "10.77.0.12"
SECRET = "tcp-rendezvous-test-secret-0123456789"
HELLO, BYE, ABORT, CHALLENGE, WELCOME = -1, -2, -3, -4, -5


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start(argv, netns=None, env=None):
    cmd = (["ip", "netns", "exec", netns] if netns else []) + list(map(str, argv))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FTB_RDZV_SECRET": SECRET, **(env or {})})


def pair(launcher, args0, args1, program, addr="127.0.0.1", netns=(None, None), extra=(),
         envs=(None, None)):
    """Node 0 and node 1 launchers; returns [(rc, out, err, seconds) x 2]."""
    port = free_port()
    common = ["--nnodes", "2", "--master-addr", addr, "--master-port", port, *extra]
    t0 = time.monotonic()
    p0 = start([launcher, *common, "--node-rank", "0", *args0, "--", *program], netns[0], envs[0])
    p1 = start([launcher, *common, "--node_rank", "1", *args1, "--", *program], netns[1], envs[1])
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


# --- who may talk to node 0 (launcher/rdzv_auth.h, tcp_transport.h) ---------------------


def frame(type_, src, dst, payload=b"", length=None):
    return struct.pack(">iiii", len(payload) if length is None else length, type_, src,
                       dst) + payload


def proof(label, nonce_s, nonce_c, node, rest, secret=SECRET):
    msg = b"ftbench rdzv " + label + b"\0" + nonce_s + nonce_c + str(node).encode() + b"\0" + rest
    return hmac.new(secret.encode(), msg, hashlib.sha256).digest()


def connect(port, timeout=20):
    """A TCP connection to node 0's rendezvous port, once it listens."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            return s
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.1)


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        assert chunk, "connection closed"
        b += chunk
    return b


def join_as(port, node, rest):
    """The handshake a launcher does, in Python: answers node 0's CHALLENGE with a HELLO and
    checks node 0's WELCOME. Returns the authenticated socket."""
    s = connect(port)
    length, type_, _, _ = struct.unpack(">iiii", recv_exact(s, 16))
    assert (type_, length) == (CHALLENGE, 32)
    nonce_s, nonce_c = recv_exact(s, 32), os.urandom(32)
    s.sendall(frame(HELLO, node, 0, nonce_c + proof(b"hello", nonce_s, nonce_c, node, rest) + rest))
    length, type_, _, _ = struct.unpack(">iiii", recv_exact(s, 16))
    assert (type_, length) == (WELCOME, 32)
    assert recv_exact(s, 32) == proof(b"welcome", nonce_s, nonce_c, node, rest)
    return s


def node_launcher(launcher, rank, port, program, env=None, args=()):
    return start([launcher, "--nnodes", "2", "--node-rank", rank, "--master-addr", "127.0.0.1",
                  "--master-port", port, *args, "--", *program], env=env)


def dropped(err):
    return re.findall(r"dropped the connection from 127\.0\.0\.1:\d+: (.*)", err)


def test_frames_from_strangers_are_dropped_and_the_job_runs(launcher, tmp_path):
    """An ABORT, random bytes and a HELLO without the secret's proof, from connections that
    never authenticated: each is dropped with a line naming its address; the job runs."""
    port = free_port()
    prog = ["sh", "-c", f"sleep 1; touch {tmp_path}/done.$RANK"]
    p0 = node_launcher(launcher, 0, port, prog)
    strangers = [connect(port) for _ in range(3)]
    strangers[0].sendall(frame(ABORT, 1, 0, b"0"))
    strangers[1].sendall(bytes(range(256)) * 16)
    strangers[2].sendall(frame(HELLO, 1, 0, os.urandom(64) + b"2 "))
    time.sleep(0.5)
    p1 = node_launcher(launcher, 1, port, prog)
    (_, e0), (_, e1) = p0.communicate(timeout=60), p1.communicate(timeout=60)
    assert (p0.returncode, p1.returncode) == (0, 0), (e0, e1)
    assert sorted(f.name for f in tmp_path.glob("done.*")) == ["done.0", "done.1"]
    why = dropped(e0)
    assert any(w.startswith("frame type -3 before authentication") for w in why), e0
    assert any("before authentication" in w or "limit" in w for w in why if "-3" not in w), e0
    assert any("HELLO (node rank 1) does not prove this job's rendezvous secret" in w
               for w in why), e0


def test_an_abort_never_exits_0(launcher):
    """A node of the job (it has the secret) that aborts with code 0: the job exits 3."""
    port = free_port()
    p0 = node_launcher(launcher, 0, port, ["sleep", "30"])
    s = join_as(port, 1, b"2 ")
    s.sendall(frame(ABORT, 1, 0, b"0"))
    _, err = p0.communicate(timeout=30)
    assert p0.returncode == 3, err
    assert re.search(r"node 1 \(via 127\.0\.0\.1:\d+\) aborted the job \(exit code 3\)", err), err


def test_launcher_with_another_secret_is_refused(launcher):
    r0, r1 = pair(launcher, ["--rdzv-timeout", "3"], ["--rdzv-timeout", "3"], ["true"],
                  envs=(None, {"FTB_RDZV_SECRET": "another-secret-0123456789"}))
    assert (r0[0], r1[0]) == (3, 3), (r0[2], r1[2])
    assert any("does not prove this job's rendezvous secret (FTB_RDZV_SECRET)" in w
               for w in dropped(r0[2])), r0[2]
    assert "it refused this launcher's proof" in r1[2], r1[2]
    assert "waiting for the placement plan from node 0" in r1[2], r1[2]


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1))


def test_large_frames_before_authentication_stay_bounded(launcher, tmp_path):
    """Ten strangers each sending a 30 MiB frame: node 0 reads no more than a HELLO's worth
    of each (before: every byte was buffered, ~300 MB)."""
    port = free_port()
    p0 = node_launcher(launcher, 0, port, ["true"])
    size = 30 << 20

    def flood():
        try:
            with connect(port) as s:
                s.sendall(frame(HELLO, 1, 0, length=size) + bytes(size))
        except OSError:
            pass  # node 0 closed it

    threads = [threading.Thread(target=flood) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert p0.poll() is None, f"node 0 ended on strangers' frames: {p0.communicate()}"
    hwm = vm_hwm_kib(p0.pid)
    p1 = node_launcher(launcher, 1, port, ["true"])
    (_, e0), (_, e1) = p0.communicate(timeout=60), p1.communicate(timeout=60)
    assert (p0.returncode, p1.returncode) == (0, 0), (e0, e1)
    assert hwm < 64 * 1024, f"node 0 grew to {hwm} KiB"
    assert any(w.startswith(f"frame of {size} bytes, type -1 (limit ") for w in dropped(e0)), e0


def test_idle_connections_are_bounded_and_do_not_block_the_rendezvous(launcher):
    port = free_port()
    p0 = node_launcher(launcher, 0, port, ["true"])
    idle = [connect(port) for _ in range(40)]
    time.sleep(0.5)
    p1 = node_launcher(launcher, 1, port, ["true"])
    (_, e0), (_, e1) = p0.communicate(timeout=60), p1.communicate(timeout=60)
    assert (p0.returncode, p1.returncode) == (0, 0), (e0, e1)
    assert any(w.startswith("too many unauthenticated connections from 127.0.0.1 (limit 8 per "
                            "address, 64 in all): the oldest is closed") for w in dropped(e0)), e0
    for s in idle:
        s.close()


def test_default_secret_is_a_private_file_in_home(launcher, tmp_path):
    env = {"HOME": str(tmp_path), "FTB_RDZV_SECRET": ""}
    r0, r1 = pair(launcher, [], [], ["true"], envs=(env, env))
    assert (r0[0], r1[0]) == (0, 0), (r0[2], r1[2])
    secret = tmp_path / ".ftbench" / "rdzv_secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    assert len(secret.read_text().strip()) == 64


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
