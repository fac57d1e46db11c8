#!/usr/bin/env python3
"""A large TCP transfer between two namespace hosts, timed at the receiver: the rate a
shaped link really delivers (scripts/bench.sh pipeline checks tc's token bucket with it).

    bench_link_rate.py recv PORT OUT.json     # in the receiving host: accept one sender
    bench_link_rate.py send HOST PORT BYTES   # in the sending host

The receiver writes {"bytes": N, "seconds": S, "bits_per_s": ...}, timed from the first
byte received to the last (TCP slow start included, connection set-up not).
"""
import json
import socket
import sys
import time


def recv(port, out):
    with socket.create_server(("0.0.0.0", port)) as srv:
        srv.settimeout(60)
        conn, _ = srv.accept()
        conn.settimeout(120)
        total, t0 = 0, None
        with conn:
            while True:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                t0 = t0 or time.monotonic()
                total += len(chunk)
        secs = time.monotonic() - t0
    with open(out, "w") as f:
        json.dump({"bytes": total, "seconds": secs, "bits_per_s": 8 * total / secs}, f)


def send(host, port, nbytes):
    block = b"\0" * (1 << 20)
    deadline = time.monotonic() + 30
    while True:  # the receiver may not listen yet
        try:
            sock = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with sock:
        left = nbytes
        while left > 0:
            n = min(left, len(block))
            sock.sendall(block[:n])
            left -= n


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "recv":
        recv(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
