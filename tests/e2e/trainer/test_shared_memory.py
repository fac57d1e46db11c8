"""The local-memory transports' shared memory never outlives a job.

Ranks of one host set up their collectives and pipeline links through a control segment in
/dev/shm (trainer/parallel/local_memory.h), named /dev/shm/ftb-comm-<creator pid>-... A rank
killed during that set-up left it behind (14 of 15 kills of both ranks), as did the other
rank's timeout (exit 3) and the fallback when /dev/shm could not hold a pipeline link's
mailbox. Now the creator removes it once every member has opened it, on every way out, and
the next creator on the host removes those whose creator is gone.

Many short world-2 jobs (DDP and pp 2, whose link has a segment of its own) are killed: at
a random moment (start-up, set-up or steps) or the moment a control segment appears in
/dev/shm; both ranks at once, or rank 1 alone (rank 0 then times out and exits on its own,
and must have removed its segment itself). Then one job runs to the end, and /dev/shm
holds no segment any process of these jobs created. The count of killed jobs:
FTB_SHM_KILL_JOBS (default 6: 140 s for 12 at load 18 on 2 cores); FTB_SHM_KILL_SEED seeds the random moments.
"""
import os
import random
import signal
import subprocess
import time

from trainer_util import QUICK_START, TINY, TRAINER, base_env, free_port

JOBS = int(os.environ.get("FTB_SHM_KILL_JOBS", "6"))
LAYOUTS = [["parallel.dp_shard=2"], ["parallel.pp=2", "parallel.pp_microbatches=2"]]


def segments_of(pids):
    """Names in /dev/shm of segments created by any of `pids`."""
    prefixes = tuple(f"ftb-comm-{p}-" for p in pids)
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefixes))


def start_job(tmp_path, i, layout, *extra):
    port, procs = free_port(), []
    for r in range(2):
        env = base_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=2, LOCAL_WORLD_SIZE=2,
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path / f"run{i}"),
               "--no-sweep-dir", *QUICK_START, "training.max_steps=3", *layout, *extra]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def wait_all(procs, timeout=60):
    out = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append((p.returncode, err))
    return out


def wait_for_segment(procs, seconds):
    """True once a segment of one of `procs` is in /dev/shm (polled), False after `seconds`."""
    deadline = time.monotonic() + seconds
    pids = [p.pid for p in procs]
    while time.monotonic() < deadline:
        if segments_of(pids):
            return True
        if all(p.poll() is not None for p in procs):
            return False
    return False


# Where each job is killed: at a random moment (start-up, set-up, steps), or the moment its
# control segment appears, both ranks or rank 1 alone.
MODES = ["random", "at_segment", "rank1_at_segment"]


def test_killed_jobs_leave_no_shared_memory(tmp_path):
    rng = random.Random(int(os.environ.get("FTB_SHM_KILL_SEED", "7")))
    pids, hits = [], 0
    t0 = time.monotonic()
    calibration = start_job(tmp_path, "c", LAYOUTS[1])
    pids += [p.pid for p in calibration]
    for rc, err in wait_all(calibration):
        assert rc == 0, err
    whole = time.monotonic() - t0  # start-up, set-up and 3 steps
    assert segments_of(pids) == [], "a job that ran to the end left its segments"
    for i in range(JOBS):
        mode = MODES[i % len(MODES)]
        both = mode != "rank1_at_segment"
        procs = start_job(tmp_path, i, LAYOUTS[(i // len(MODES)) % 2],
                          *([] if both else ["parallel.timeout_seconds=3"]))
        pids += [p.pid for p in procs]
        if mode == "random":
            time.sleep(rng.uniform(0.0, whole))
        else:
            hits += wait_for_segment(procs, 2 * whole)
        for p in procs if both else procs[1:]:
            p.send_signal(signal.SIGKILL)
        results = wait_all(procs)
        if not both:
            rc, err = results[0]
            # Rank 0 outlived rank 1: it timed out waiting (3) or finished first (0), and left
            # no segment of its own behind either way.
            assert rc in (0, 3), f"job {i}: rank 0 exited {rc}:\n{err}"
            assert segments_of([procs[0].pid]) == [], f"job {i}: rank 0 exited {rc}:\n{err}"
    assert hits >= 1, "no kill landed while a segment existed: the test proved nothing"
    final = start_job(tmp_path, "final", LAYOUTS[1])
    for rc, err in wait_all(final):
        assert rc == 0, err
    assert segments_of(pids + [p.pid for p in final]) == []
