#!/usr/bin/env python3
"""Test worker for launcher e2e tests (stdlib only).

Records what the launcher gave it, then acts:
  --record DIR        write DIR/rank_<RANK>.attempt_<k>.json: env, pid, ppid, pgid, argv,
                      cwd, stdin target, CPU affinity, this host's IP towards --peer
  --peer IP           address used to find "my IP" (UDP connect, no packet); default 10.77.0.1
  --stdout TEXT / --stderr TEXT   print a line first
  --barrier N         after recording, wait (<= 20 s) until N workers of this attempt recorded
  --sleep S           sleep S seconds (after recording)
  --exit CODE         exit with CODE
  --kill SIG          kill itself with signal SIG (number or name)
  --ranks R,R         apply --exit/--kill/--sleep only on these global ranks (others exit 0
                      right away unless --sleep-others is given)
  --sleep-others S    sleep S on ranks not in --ranks
  --until-restart N   apply --exit/--kill only while TORCHELASTIC_RESTART_COUNT < N
  --on-term CODE      exit CODE on SIGTERM (graceful worker); --ignore-term ignores it
  --signals           append every received USR1/USR2/HUP/INT/TERM name to the record dir
  --grandchild        start `sleep 600` (same process group) before recording; its pid is
                      recorded as "grandchild"
  --on-usr1 CODE      exit CODE on SIGUSR1 (a trainer that saves and asks to be requeued)
"""
import argparse
import json
import os
import signal
import socket
import sys
import time


def my_ip(peer):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((peer, 9))
        ip = s.getsockname()[0]
        s.close()
        return ip
    except OSError:
        return ""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--record")
    p.add_argument("--peer", default="10.77.0.1")
    p.add_argument("--stdout")
    p.add_argument("--stderr")
    p.add_argument("--barrier", type=int)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--sleep-others", type=float, default=0.0)
    p.add_argument("--exit", type=int)
    p.add_argument("--kill")
    p.add_argument("--ranks")
    p.add_argument("--until-restart", type=int)
    p.add_argument("--on-term", type=int)
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--signals", action="store_true")
    p.add_argument("--grandchild", action="store_true")
    p.add_argument("--on-usr1", type=int)
    a = p.parse_args()

    rank = int(os.environ.get("RANK", "-1"))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    selected = a.ranks is None or rank in [int(r) for r in a.ranks.split(",")]
    active = a.until_restart is None or attempt < a.until_restart
    tag = f"rank_{rank}.attempt_{attempt}"

    def on_signal(sig, _frame):
        name = signal.Signals(sig).name
        if a.signals and a.record:
            with open(os.path.join(a.record, tag + ".signals"), "a") as f:
                f.write(name + "\n")
        if sig == signal.SIGTERM and a.on_term is not None:
            sys.exit(a.on_term)
        if sig == signal.SIGUSR1 and a.on_usr1 is not None:
            sys.exit(a.on_usr1)
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    if a.signals or a.on_term is not None or a.on_usr1 is not None:
        for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
            signal.signal(s, on_signal)
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    grandchild = None
    if a.grandchild:
        import subprocess
        grandchild = subprocess.Popen(["sleep", "600"]).pid
    if a.record:
        info = {
            "grandchild": grandchild,
            "env": dict(os.environ),
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "pgid": os.getpgid(0),
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "stdin": os.readlink("/proc/self/fd/0"),
            "affinity": sorted(os.sched_getaffinity(0)),
            "ip": my_ip(a.peer),
            "time": time.time(),
        }
        tmp = os.path.join(a.record, tag + ".json.tmp")
        with open(tmp, "w") as f:
            json.dump(info, f)
        os.rename(tmp, os.path.join(a.record, tag + ".json"))

    if a.barrier and a.record:
        deadline = time.time() + 20
        while time.time() < deadline and len(
                [f for f in os.listdir(a.record) if f.endswith(f".attempt_{attempt}.json")]) < a.barrier:
            time.sleep(0.01)

    if a.stdout:
        print(a.stdout, flush=True)
    if a.stderr:
        print(a.stderr, file=sys.stderr, flush=True)
    if not selected:
        time.sleep(a.sleep_others)
        return 0
    time.sleep(a.sleep)
    if active and a.kill:
        sig = int(a.kill) if a.kill.isdigit() else signal.Signals["SIG" + a.kill.upper().removeprefix("SIG")]
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(5)
    if active and a.exit is not None:
        return a.exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
