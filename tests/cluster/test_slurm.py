"""SLURM end-to-end: a real slurmctld + two slurmd on network-namespace hosts s1, s2
(tests/cluster/slurm_cluster.sh with NODES_ENV: hosts of their own, so that the launcher
tests on netns.sh's default hosts h1, h2 run beside these), driving slurm/train.sbatch,
slurm/sweep.sbatch and slurm/submit_sweep.sh with the real launcher and trainer.

Run:  .venv/bin/python -m pytest -q tests/cluster/test_slurm.py
FTB_BUILD_DIR = build dir with launcher/, trainer/, sweep_tagger/ (default build/release).
Skips only when not root or when network namespaces cannot be created here; anything else
that is missing (slurm, munge, binaries) is a failure.
"""
import fcntl
import json
import os
import pathlib
import re
import subprocess
import time

import h5py
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
if not BUILD.is_absolute():
    BUILD = REPO / BUILD
CLUSTER = REPO / "tests" / "cluster" / "slurm_cluster.sh"
NETNS = REPO / "tests" / "cluster" / "netns.sh"
TRAINER = BUILD / "trainer" / "trainer"
TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
TINY = REPO / "configs" / "runs" / "tiny.toml"
SWEEP = REPO / "configs" / "sweeps" / "slurm_test.toml"
SLURM_CONF = "/run/ftb-slurm/slurm.conf"
# The cluster's nodes (netns.sh's variables): s1 = 10.82.0.11, s2 = 10.82.0.12 on bridge ftbslurm0.
NODES_ENV = {"FTB_NETNS_PREFIX": "s", "FTB_NETNS_BRIDGE": "ftbslurm0", "FTB_NETNS_NET": "10.82.0"}
NODE = ["s1", "s2"]
ADDR = ["10.82.0.11", "10.82.0.12"]
REQUEUE_EXIT = 75  # trainer and launcher: stopped after saving a checkpoint (trainer/README)
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def _skip_reason():
    if os.geteuid() != 0:
        return f"needs root for network namespaces and slurmd (uid {os.geteuid()})"
    chk = subprocess.run([str(NETNS), "check"], capture_output=True, text=True)
    if chk.returncode == 77:
        return f"network namespaces unavailable: {chk.stderr.strip()}"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def clean_env(**extra):
    """The test's environment minus anything that would make a job or the reference run
    think it is part of another distributed job."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_", "PMIX_", "PMI_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                         "MASTER_ADDR", "MASTER_PORT", "CONFIG", "OVERRIDES", "NPROC",
                         "RESULTS")}
    env.update(SLURM_CONF=SLURM_CONF, FTB_BUILD_DIR=str(BUILD), OMP_NUM_THREADS="1", **NODES_ENV)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd, timeout=60, **kw):
    kw.setdefault("env", clean_env())
    kw.setdefault("cwd", REPO)
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, **kw)


SESSION_LOCK = "/run/ftb-slurm.session.lock"
SESSION_LOCK_WAIT = 300  # seconds


@pytest.fixture(scope="module")
def cluster():
    for exe in (BUILD / "launcher" / "launcher", TRAINER, TAGGER):
        if not exe.exists():
            pytest.fail(f"{exe} not built (set FTB_BUILD_DIR)", pytrace=False)
    # One test session at a time on the machine's single test cluster: another session's
    # `down` would otherwise stop this one's daemons mid-test.
    with open(SESSION_LOCK, "a+") as lock:
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 > SESSION_LOCK_WAIT:
                    lock.seek(0)
                    pytest.fail(f"another test session (pid {lock.read().strip() or '?'}) has held "
                                f"the SLURM test cluster ({SESSION_LOCK}) for "
                                f"{SESSION_LOCK_WAIT} s", pytrace=False)
                time.sleep(1)
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        up = run([CLUSTER, "up", "2"], timeout=150)
        if up.returncode != 0:
            run([CLUSTER, "down"], timeout=90)
            pytest.fail(f"slurm_cluster.sh up failed ({up.returncode}):\n{up.stderr}",
                        pytrace=False)
        try:
            yield
        finally:
            down = run([CLUSTER, "down"], timeout=90)
            assert down.returncode == 0, down.stderr


def cluster_diag():
    """The cluster's side of a failure: node states, namespaces, last daemon log lines."""
    out = [run(["sinfo", "-N", "-o", "%N %T %E"], timeout=20).stdout,
           "netns: " + run(["ip", "netns", "list"]).stdout.replace("\n", " ")]
    for f in sorted(pathlib.Path("/run/ftb-slurm/log").glob("*.log")):
        out.append(f"--- {f} (last lines)\n" + "".join(f.read_text(errors="replace")
                                                      .splitlines(True)[-15:]))
    return "\n".join(out)


def job_records(job, tries=5):
    """scontrol's records of a job (an array job: one per task) as dicts. Retries an
    RPC error a few times: slurmctld is on a machine shared with other test runs."""
    for i in range(tries):
        p = run(["scontrol", "show", "job", "-o", job], timeout=20)
        if p.returncode == 0:
            break
        time.sleep(0.5)
    assert p.returncode == 0, f"scontrol show job {job}: {p.stderr}\n{cluster_diag()}"
    recs = []
    for line in p.stdout.splitlines():
        rec = dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", line))
        if rec:
            recs.append(rec)
    return recs


def wait_until(pred, timeout, what, poll=0.25):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_job(job, timeout, log=None):
    """Waits until every record of job is in a terminal state; returns the records."""
    try:
        return wait_until(lambda: (lambda r: r if r and all(x["JobState"] in TERMINAL for x in r)
                                   else None)(job_records(job)), timeout, f"job {job} to end")
    except AssertionError as e:
        states = [(r.get("JobId"), r.get("JobState"), r.get("Reason")) for r in job_records(job)]
        raise AssertionError(f"{e}; states {states}\n{tail(log)}\n{cluster_diag()}") from None


def tail(path, n=60):
    if path is None:
        return ""
    files = sorted(pathlib.Path(path).parent.glob(pathlib.Path(path).name))
    return "".join(f"--- {f}\n" + "".join(f.read_text(errors="replace").splitlines(True)[-n:])
                   for f in files)


# One BLAS for the projections: "auto" (the default) times a GEMM on ATen and on OpenBLAS at
# every trainer start and can pick differently in two runs a test compares (a busy machine
# decides); none of these tests is about that choice (tests/e2e/trainer/test_checkpoint.py
# tests it across a resume). No start-up GEMM either (metrics.gemm_probe): a second of CPU
# per rank, and none of these tests reads gemm_efficiency.
QUICK_START = ("training.fp32_gemm=aten", "metrics.gemm_probe=false")


def sbatch(args, env, results):
    """Submits args (options, then slurm/train.sbatch and its overrides; QUICK_START added)."""
    (results / "logs").mkdir(parents=True, exist_ok=True)
    p = run(["sbatch", "--parsable", "-o", results / "logs" / "%x-%j.out", *args, *QUICK_START],
            env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().split(";")[0]


def status(h5file):
    with h5py.File(h5file, "r") as f:
        return dict(f["status"].attrs)


def steps(h5file):
    with h5py.File(h5file, "r") as f:
        return f["steps/step"][:].tolist(), f["steps/loss"][:].tolist(), dict(f.attrs)


def test_srun_runs_a_task_on_each_node(cluster):
    """srun -N2: one task in each namespace host, each with its own address."""
    p = run(["srun", "-N2", "--ntasks-per-node=1", "sh", "-c",
             'echo "$SLURM_PROCID $SLURMD_NODENAME $(ip -4 -o addr show dev eth0 | '
             "awk '{print $4}')\""], timeout=60)
    assert p.returncode == 0, p.stderr
    lines = sorted(p.stdout.split("\n"))
    lines = [l.split() for l in lines if l.strip()]
    assert lines == [["0", NODE[0], f"{ADDR[0]}/24"], ["1", NODE[1], f"{ADDR[1]}/24"]], p.stdout


def test_train_sbatch_two_nodes_matches_single_process(cluster, tmp_path):
    """sbatch -N2 train.sbatch (2 nodes x 1 worker, srun --mpi=pmix launchers) completes;
    both rank files say completed; the losses equal one process with the doubled micro
    batch (data-parallel equivalence). NPROC unset on CPU nodes: one worker per node. An
    override argument containing a space reaches the trainers whole; OVERRIDES still works."""
    results = tmp_path / "res"
    out_dir = tmp_path / "runs with spaces"
    env = clean_env(CONFIG=TINY, RESULTS=results, OVERRIDES="training.max_steps=12")
    job = sbatch(["-N2", "slurm/train.sbatch", f"output.dir={out_dir}"], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    rec = wait_job(job, 120, log)[0]
    assert rec["JobState"] == "COMPLETED" and rec["ExitCode"] == "0:0", tail(log)
    out = log.read_text()
    assert "(2 node(s) x 1)" in out, out
    # one launcher per namespace host: the placement table shows both addresses
    assert re.search(rf"^0\s+\S+\s+{re.escape(ADDR[0])}\s", out, re.M), out
    assert re.search(rf"^1\s+\S+\s+{re.escape(ADDR[1])}\s", out, re.M), out
    (run_dir,) = [d for d in out_dir.iterdir() if d.name.startswith("tiny.ws2.")]
    files = sorted((run_dir / "metrics").glob("rank_*.h5"))
    assert [f.name for f in files] == ["rank_00000.h5", "rank_00001.h5"]
    for f in files:
        st = status(f)
        assert st["state"] == "completed", (f, st)
        assert st["steps_done"] == 12
    (s0, l0, a0), (s1, l1, a1) = steps(files[0]), steps(files[1])
    assert (a0["world_size"], a0["node_rank"], a1["node_rank"]) == (2, 0, 1)
    assert s0 == s1 == list(range(12)) and l0 == l1

    ref_dir = tmp_path / "ref"
    p = run([TRAINER, "--config", TINY, "training.micro_batch_size=4", "training.max_steps=12",
             *QUICK_START, "--no-sweep-dir", "--output-dir", ref_dir], timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    sr, lr, ar = steps(ref_dir / "metrics" / "rank_00000.h5")
    assert ar["world_size"] == 1
    assert sr == s0
    for step, a, b in zip(sr, lr, l0):
        assert abs(a - b) <= 1e-5 * abs(a), f"step {step}: loss {b} (2 nodes) vs {a} (1 process)"


def test_sweep_job_array_runs_every_point(cluster, tmp_path):
    """submit_sweep.sh: one array per node count (1x2 and 2x1 points); both complete; a
    second submission finds nothing pending."""
    results = tmp_path / "sweep"
    env = clean_env()
    p = run([REPO / "slurm" / "submit_sweep.sh", SWEEP, results], env=env)
    assert p.returncode == 0, p.stderr
    jobs = p.stdout.split()
    assert len(jobs) == 2, (p.stdout, p.stderr)  # the 1-node point and the 2-node point
    for job in jobs:
        for rec in wait_job(job, 120, results / "logs" / f"ftb-sweep-{job}_*.out"):
            assert rec["JobState"] == "COMPLETED" and rec["ExitCode"] == "0:0", \
                tail(results / "logs" / f"ftb-sweep-{job}_*.out")
    points = [json.loads(l) for l in run([TAGGER, "expand", SWEEP, "--json"]).stdout.splitlines()]
    assert [(q["nodes"], q["nproc_per_node"]) for q in points] == [(1, 2), (2, 1)]
    for q in points:
        files = sorted((results / q["tag"] / "metrics").glob("rank_*.h5"))
        assert len(files) == 2, q["tag"]
        for f in files:
            assert status(f)["state"] == "completed", (f, status(f))
        assert [steps(f)[2]["node_rank"] for f in files] == ([0, 0] if q["nodes"] == 1 else [0, 1])
    pend = run([TAGGER, "expand", SWEEP, "--pending", results, "--json"])
    assert pend.returncode == 0 and pend.stdout.strip() == "", pend.stdout
    again = run([REPO / "slurm" / "submit_sweep.sh", SWEEP, results], env=env)
    assert again.returncode == 0 and again.stdout.strip() == "", again.stderr
    assert "nothing to submit" in again.stderr


def _submit_long_run(tmp_path, name, **env_extra):
    results = tmp_path / name
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1, **env_extra)
    # stop_after_seconds ends the (requeued) run as "completed"; max_steps never does
    job = sbatch(["-N2", "slurm/train.sbatch", "training.max_steps=1000000",
                  "training.stop_after_seconds=6"], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    # Signal only once training runs: the trainer's handlers are installed by then.
    try:
        wait_until(lambda: log.exists() and re.search(r"\] step \d+/1000000", log.read_text()),
                   90, f"training steps in {log}")
    except AssertionError as e:
        raise AssertionError(f"{e}; job {job_records(job)}\n{tail(log)}\n{cluster_diag()}") \
            from None
    return results, job, log


def _a_worker_printed(log_text):
    """Whether a worker's line (the launcher's `[<rank>] ` prefix) is in the job log: none
    when a signal's default action ended the trainers before their handlers existed."""
    return re.search(r"^\[\d+\] ", log_text, re.M) is not None


def _rank_files(results, sub):
    return sorted(results.glob(f"tiny.ws2.*/{sub}/rank_*.h5"))


# A fixed-length run for the resume tests: seq 128 makes a step slow enough (tens of ms on
# one CPU per node) that a signal sent at the first step line lands mid-run.
RESUME_STEPS = 300
RESUME_ARGS = [f"training.max_steps={RESUME_STEPS}", "data.seq_len=128", "checkpoint.interval=50",
               "metrics.log_every=10"]


def _rank_losses(results):
    """{rank file name: loss array} of the one run directory under results."""
    return {f.name: steps(f)[1] for f in _rank_files(results, "metrics")}


@pytest.fixture(scope="module")
def uninterrupted(cluster, tmp_path_factory):
    """The resume tests' reference: the same config, 2 nodes x 1 worker, never signalled."""
    results = tmp_path_factory.mktemp("uninterrupted")
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1)
    job = sbatch(["-N2", "slurm/train.sbatch", *RESUME_ARGS], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    rec = wait_job(job, 180, log)[0]
    assert rec["JobState"] == "COMPLETED" and rec["Restarts"] == "0", (rec, tail(log))
    losses = _rank_losses(results)
    assert sorted(losses) == ["rank_00000.h5", "rank_00001.h5"], losses.keys()
    assert all(len(l) == RESUME_STEPS for l in losses.values())
    return losses


@pytest.mark.parametrize("launch", ["srun", "mpirun"])
def test_preemption_usr1_requeues_and_the_rerun_completes(cluster, uninterrupted, tmp_path, launch):
    """scancel --signal=USR1 --batch (what --signal=B:USR1@300 sends before the time limit),
    with the launchers started by srun or by mpirun inside the allocation: both trainers save
    a checkpoint at the agreed stop step and exit with the requeue code, the job requeues
    itself (Restarts=1), runs again after slurm's requeue delay (cred_expire + 1 s), resumes
    from that checkpoint in the same content-tagged run directory and completes; the metrics
    files continue (every step exactly once) and record the resume; `sweep_tagger aggregate`
    shows the run completed with one resume; every step's loss is bit-identical to the
    uninterrupted run of the same config."""
    results = tmp_path / "preempt"
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1, FTB_LAUNCH=launch)
    job = sbatch(["-N2", "slurm/train.sbatch", *RESUME_ARGS], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    try:  # signal once training runs: the trainers' handlers are installed by then
        wait_until(lambda: log.exists() and re.search(rf"\] step \d+/{RESUME_STEPS} ",
                                                      log.read_text()),
                   90, f"training steps in {log}")
    except AssertionError as e:
        raise AssertionError(f"{e}; job {job_records(job)}\n{tail(log)}\n{cluster_diag()}") \
            from None
    p = run(["scancel", "--signal=USR1", "--batch", job])
    assert p.returncode == 0, p.stderr
    wait_until(lambda: int(job_records(job)[0]["Restarts"]) >= 1, 60, f"job {job} to requeue")
    rec = wait_job(job, 180, log)[0]
    out = log.read_text()
    assert rec["JobState"] == "COMPLETED" and rec["Restarts"] == "1", (rec, tail(log))
    assert "SIGUSR1: stopping the trainers" in out and f"scontrol requeue {job}" in out, out
    assert f"launcher exit code {REQUEUE_EXIT}" in out, out
    assert f"job {job} attempt 1 on" in out and "resumed from" in out, out
    assert not _rank_files(results, "metrics.attempt_1"), "a resumed run continues its files"
    (ckpt_dir,) = results.glob("tiny.ws2.*/checkpoints")
    assert list(ckpt_dir.glob("step_*/manifest.json")), list(ckpt_dir.rglob("*"))
    post = _rank_files(results, "metrics")
    assert len(post) == 2
    for f in post:
        with h5py.File(f, "r") as h:
            st = dict(h["status"].attrs)
            assert st["state"] == "completed", (f, st)
            assert h.attrs["resume_count"] == 1, dict(h.attrs)
            assert 0 < h.attrs["resume_steps"][0] < RESUME_STEPS, dict(h.attrs)
            assert list(h["steps/step"][:]) == list(range(RESUME_STEPS)), f
    agg = run([TAGGER, "aggregate", results, "--format", "json"])
    assert agg.returncode == 0, agg.stderr
    (row,) = json.loads(agg.stdout)["runs"]
    assert (row["status"], row["resumes"], row["steps_done"]) == ("completed", 1, RESUME_STEPS), row
    got = _rank_losses(results)
    for name, ref in uninterrupted.items():
        diff = [i for i, (a, b) in enumerate(zip(ref, got[name])) if a != b]
        assert len(got[name]) == len(ref) and not diff, \
            f"{name}: losses differ from the uninterrupted run at steps {diff[:10]}"


def test_preemption_term_without_requeue(cluster, tmp_path):
    """TERM to the batch shell with FTB_REQUEUE=0: the trainers save, record "preempted"
    and exit with the requeue code, which the job ends with (not requeued)."""
    results, job, log = _submit_long_run(tmp_path, "term", FTB_REQUEUE=0)
    p = run(["scancel", "--signal=TERM", "--batch", job])
    assert p.returncode == 0, p.stderr
    rec = wait_job(job, 60, log)[0]
    assert rec["Restarts"] == "0" and rec["ExitCode"] == f"{REQUEUE_EXIT}:0", (rec, tail(log))
    assert "preempted by SIGTERM; FTB_REQUEUE=0: not requeued" in log.read_text()
    files = _rank_files(results, "metrics")
    assert len(files) == 2
    for f in files:
        assert status(f)["state"] == "preempted", (f, status(f))


def test_plain_scancel_cancels_without_requeue(cluster, tmp_path):
    """A user's `scancel JOB` also TERMs the batch shell, but the job is already CANCELLED
    then: train.sbatch must not requeue it (scontrol requeue would)."""
    results, job, log = _submit_long_run(tmp_path, "cancel")
    p = run(["scancel", job])
    assert p.returncode == 0, p.stderr
    rec = wait_job(job, 60, log)[0]
    assert rec["JobState"] == "CANCELLED" and rec["Restarts"] == "0", (rec, tail(log))
    wait_until(lambda: "not requeued" in log.read_text(), 20, "the batch script's last words")
    time.sleep(2)  # a wrongly issued requeue would show up by now
    rec = job_records(job)[0]
    assert rec["JobState"] == "CANCELLED" and rec["Restarts"] == "0", (rec, tail(log))


def test_time_limit_notice_usr1_stops_the_run(cluster, tmp_path):
    """The real notice: sbatch -t 1 --signal=B:USR1@55 (train.sbatch has @60 for longer
    limits). slurmctld checks time limits every ~30 s, so USR1 arrives 5-35 s after the
    start; the trainers record "preempted" (FTB_REQUEUE=0 here: the job then ends)."""
    results = tmp_path / "limit"
    # FTB_NOTICE=0: SLURM's notice, not the script's own (test_own_notice_... tests that)
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1, FTB_REQUEUE=0, FTB_NOTICE=0)
    job = sbatch(["-N2", "-t", "1", "--signal=B:USR1@55", "slurm/train.sbatch",
                  "training.max_steps=1000000", "training.stop_after_seconds=50"], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    rec = wait_job(job, 100, log)[0]
    out = log.read_text()
    assert "SIGUSR1: stopping the trainers" in out, (rec, out[-3000:])
    assert "FTB_REQUEUE=0: not requeued" in out
    assert rec["Restarts"] == "0" and rec["JobState"] != "TIMEOUT", rec
    files = _rank_files(results, "metrics")
    if not files:
        # slurmctld's limit check can fire within a second of the start: the stop then lands
        # during set-up, before any metrics file exists. The workers exit 128 + the signal:
        # 138 when their own USR1 handler was installed (they say so) or when USR1 reached them
        # before it was (the signal's default action: they print nothing, not even a step),
        # 143 when the launcher's TERM reached them first.
        code = re.search(r"launcher exit code (\d+)", out)
        assert code and code.group(1) in ("138", "143"), out[-3000:]
        if code.group(1) == "138":
            assert ("stopped by signal User defined signal 1" in out or
                    not _a_worker_printed(out)), out[-3000:]
        return
    assert len(files) == 2
    for f in files:
        assert status(f)["state"] == "preempted", (f, status(f))


def _wait_for_steps(job, log, total):
    """Waits for the first training step line of the job (the trainers' handlers are
    installed by then)."""
    try:
        wait_until(lambda: log.exists() and re.search(rf"\] step \d+/{total} ", log.read_text()),
                   90, f"training steps in {log}")
    except AssertionError as e:
        raise AssertionError(f"{e}; job {job_records(job)}\n{tail(log)}\n{cluster_diag()}") \
            from None


def _assert_resumed_and_equal(results, uninterrupted, resume_step=None):
    """Every rank file: completed, steps 0..RESUME_STEPS-1 once, one resume (at resume_step
    when given); every loss equal to the uninterrupted run's."""
    files = _rank_files(results, "metrics")
    assert len(files) == 2, files
    for f in files:
        with h5py.File(f, "r") as h:
            assert dict(h["status"].attrs)["state"] == "completed", (f, dict(h["status"].attrs))
            assert h.attrs["resume_count"] == 1, dict(h.attrs)
            if resume_step is not None:
                assert h.attrs["resume_steps"][0] == resume_step, dict(h.attrs)
            assert list(h["steps/step"][:]) == list(range(RESUME_STEPS)), f
    got = _rank_losses(results)
    for name, ref in uninterrupted.items():
        diff = [i for i, (a, b) in enumerate(zip(ref, got[name])) if a != b]
        assert len(got[name]) == len(ref) and not diff, \
            f"{name}: losses differ from the uninterrupted run at steps {diff[:10]}"


def test_slow_save_survives_a_preemption_and_resumes_bit_identically(cluster, uninterrupted,
                                                                     tmp_path):
    """The stop-time save takes 8 s (test hook FTB_TEST_CKPT_SAVE_DELAY=stop:8), more than
    the launcher's default --grace of 5 s. The batch shell stops the trainers with their
    agreed stop (USR1: no SIGKILL while they save) and gives them the stop grace: both save
    the stop step, exit 75, the job requeues and resumes from exactly that checkpoint, and the
    losses equal the uninterrupted run's. (A TERM with SIGKILL after 5 s lost that save: exit
    137 and a resume from an older checkpoint.)"""
    results = tmp_path / "slowsave"
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1, FTB_TEST_CKPT_SAVE_DELAY="stop:8")
    job = sbatch(["-N2", "slurm/train.sbatch", *RESUME_ARGS], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    _wait_for_steps(job, log, RESUME_STEPS)
    t0 = time.monotonic()
    assert run(["scancel", "--signal=USR1", "--batch", job]).returncode == 0
    wait_until(lambda: int(job_records(job)[0]["Restarts"]) >= 1, 90, f"job {job} to requeue")
    assert time.monotonic() - t0 >= 8, "the stop did not wait for the 8 s save"
    rec = wait_job(job, 180, log)[0]
    out = log.read_text()
    assert rec["JobState"] == "COMPLETED" and rec["Restarts"] == "1", (rec, tail(log))
    assert f"launcher exit code {REQUEUE_EXIT}" in out, out[-4000:]
    assert "SIGKILL" not in out, out[-4000:]
    stop = re.search(r"stopped by signal [^\n]*? after (\d+) steps; checkpoint", out)
    assert stop, out[-4000:]
    # attempt 1 measured the save from attempt 0's worker logs: the 8 s hook and whatever a
    # loaded machine adds (10.8 s seen); its grace is 2 x that + 30 s, at least 60 s, rounded
    # up as train.sbatch's stop_grace does
    grace = re.search(r"stop grace (\d+) s \(last measured save: (\d+\.?\d*) s\)", out)
    assert grace, out[-4000:]
    save_s = float(grace.group(2))
    assert 8 <= save_s < 60, out[-4000:]
    assert int(grace.group(1)) == int(max(60, 2 * save_s + 30) + 0.999), grace.group(0)
    _assert_resumed_and_equal(results, uninterrupted, resume_step=int(stop.group(1)))


def test_signal_to_the_steps_only_requeues(cluster, uninterrupted, tmp_path):
    """What --signal=USR1@N (without B:) does: USR1 reaches the launch step, not the batch
    shell. The trainers save and the step exits 75; the shell trapped nothing but requeues
    on that code, and the rerun resumes and completes with the uninterrupted run's losses."""
    results = tmp_path / "stepsig"
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1)
    job = sbatch(["-N2", "slurm/train.sbatch", *RESUME_ARGS], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    _wait_for_steps(job, log, RESUME_STEPS)
    assert run(["scancel", "--signal=USR1", job]).returncode == 0  # the steps, not --batch
    rec = wait_job(job, 240, log)[0]
    out = log.read_text()
    assert rec["JobState"] == "COMPLETED" and rec["Restarts"] == "1", (rec, tail(log))
    assert "SIGUSR1: stopping" not in out, "the batch shell was not to be signalled"
    assert "preempted by exit code 75" in out and f"scontrol requeue {job}" in out, out[-4000:]
    _assert_resumed_and_equal(results, uninterrupted)


def test_signal_during_start_up_requeues(cluster, tmp_path):
    """A stop that arrives before the launch step exists (here: while the site set-up hook
    of attempt 0 runs) is recorded, the step is not started, and the job is requeued; the
    rerun completes."""
    results = tmp_path / "startup"
    hook = tmp_path / "setup.sh"
    hook.write_text('echo "site set-up attempt ${SLURM_RESTART_COUNT:-0}"\n'
                    '[[ ${SLURM_RESTART_COUNT:-0} == 0 ]] && sleep 8\ntrue\n')
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1, FTB_SETUP=hook)
    job = sbatch(["-N2", "slurm/train.sbatch", "training.max_steps=12"], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    wait_until(lambda: log.exists() and "site set-up attempt 0" in log.read_text(), 60,
               f"the set-up hook in {log}")
    assert run(["scancel", "--signal=USR1", "--batch", job]).returncode == 0
    rec = wait_job(job, 150, log)[0]
    out = log.read_text()
    assert rec["JobState"] == "COMPLETED" and rec["Restarts"] == "1", (rec, tail(log))
    assert "SIGUSR1 before the launch step started: recorded" in out, out[-4000:]
    assert "preempted by SIGUSR1: scontrol requeue" in out, out[-4000:]
    assert "site set-up attempt 1" in out and f"job {job} attempt 1 on" in out, out[-4000:]
    files = _rank_files(results, "metrics")
    assert len(files) == 2 and all(status(f)["state"] == "completed" for f in files), files


def test_own_notice_from_the_time_limit_stops_a_run_in_start_up(cluster, tmp_path):
    """The script's own notice (time left <= stop grace + 30 s, checked every 10 s) fires
    while attempt 0 is still in its set-up (a 25 s hook; -t 1 and FTB_STOP_GRACE=40: due at
    once): the stop is recorded before the launch step exists and the job requeues; attempt 1
    (no delay, a 12-step run) completes. After its sleep, attempt 0's hook raises the job's
    time limit to 10 minutes, so that no notice is due at once in attempt 1: neither the
    script's own (with 60 s left it had to finish within the watcher's first 10 s, which a
    loaded machine does not) nor SLURM's --signal=B:USR1@300 (with 3 minutes slurmctld sent it
    1 s into attempt 1 when its periodic check came before the 12 steps ended). The hook
    retries the update until slurmctld shows it: on a loaded machine one scontrol RPC can fail,
    and attempt 1 would then inherit the 1-minute limit."""
    results = tmp_path / "ownnotice"
    hook = tmp_path / "setup.sh"
    hook.write_text('if [[ ${SLURM_RESTART_COUNT:-0} == 0 ]]; then\n  sleep 25\n'
                    '  for try in 1 2 3 4 5 6 7 8 9 10; do\n'
                    '    scontrol update JobId="$SLURM_JOB_ID" TimeLimit=10\n'
                    '    scontrol show job -o "$SLURM_JOB_ID" | grep -q "TimeLimit=00:10:00" && break\n'
                    '    echo "test hook: TimeLimit=10 not applied yet (try $try)"; sleep 1\n'
                    '  done\nfi\ntrue\n')
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1, FTB_SETUP=hook, FTB_STOP_GRACE=40)
    job = sbatch(["-N2", "-t", "1", "slurm/train.sbatch", "training.max_steps=12"], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    rec = wait_job(job, 150, log)[0]
    out = log.read_text()
    assert "<= stop grace + 30 s = 70 s" in out, out[-4000:]
    assert "SIGUSR1 before the launch step started: recorded" in out, out[-4000:]
    script = [ln for ln in out.splitlines() if "[train.sbatch" in ln or "test hook" in ln]
    assert rec["Restarts"] == "1" and rec["JobState"] == "COMPLETED", (
        f"Restarts {rec['Restarts']}, {rec['JobState']}; the script's lines:", script)


def test_tcp_launch_matches_the_mpi_launch(cluster, uninterrupted, tmp_path):
    """FTB_LAUNCH=tcp: srun --mpi=none, each launcher told its node rank (SLURM_NODEID) and
    node 0's address (the first host's NodeAddr); the launchers meet over TCP. Two nodes
    train, and every step's loss equals (==) the srun --mpi=pmix launch of the same config."""
    results = tmp_path / "tcp"
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1, FTB_LAUNCH="tcp")
    job = sbatch(["-N2", "slurm/train.sbatch", *RESUME_ARGS], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    rec = wait_job(job, 180, log)[0]
    out = log.read_text()
    assert rec["JobState"] == "COMPLETED" and rec["ExitCode"] == "0:0", (rec, tail(log))
    assert "--mpi=none" in out and "TCP rendezvous, node 0 of 2" in out, out[-4000:]
    assert re.search(rf"^1\s+\S+\s+{re.escape(ADDR[1])}\s", out, re.M), out[-4000:]
    got = _rank_losses(results)
    assert got == uninterrupted, "losses differ from the MPI launch"


def test_export_none_settings_as_arguments_and_site_hook(cluster, tmp_path):
    """sbatch --export=NONE (what SBATCH_EXPORT=NONE sets): nothing of the submitter's
    environment reaches the job, so the settings come as NAME=value arguments; the FTB_SETUP
    hook's variables reach the launchers through srun (SLURM_EXPORT_ENV=ALL): the launcher
    lowers the hook's OPENBLAS_NUM_THREADS=7 and logs it, and the run completes."""
    results = tmp_path / "exportnone"
    (results / "logs").mkdir(parents=True)
    hook = tmp_path / "site setup.sh"
    hook.write_text("export OPENBLAS_NUM_THREADS=7\n")
    p = run(["sbatch", "--parsable", "--export=NONE", "-N2", "-o",
             results / "logs" / "%x-%j.out", "slurm/train.sbatch", f"CONFIG={TINY}",
             f"RESULTS={results}", "NPROC=1", f"FTB_BUILD_DIR={BUILD}", f"FTB_SETUP={hook}",
             "training.max_steps=12"], env=clean_env())
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    log = results / "logs" / f"ftb-train-{job}.out"
    rec = wait_job(job, 120, log)[0]
    out = log.read_text()
    assert rec["JobState"] == "COMPLETED" and rec["ExitCode"] == "0:0", (rec, tail(log))
    assert "site set-up: source" in out, out[-4000:]
    assert "OPENBLAS_NUM_THREADS=1 (inherited 7 exceeds" in out, out[-4000:]
    files = _rank_files(results, "metrics")
    assert len(files) == 2 and all(status(f)["state"] == "completed" for f in files), files


def _held_sweep(tmp_path, *extra):
    """slurm_test.toml copied to tmp_path (base made absolute) and submitted held."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SWEEP.read_text().replace('base = "../runs/tiny.toml"', f'base = "{TINY}"'))
    results = tmp_path / "res"
    p = run([REPO / "slurm" / "submit_sweep.sh", sweep, results, *extra, "--hold"])
    assert p.returncode == 0, p.stderr
    return sweep, results, p


def test_sweep_snapshot_runs_the_submitted_points_after_an_edit(cluster, tmp_path):
    """Each array runs the points snapshotted at submission: the sweep file edited while the
    tasks are held (every tag changes) does not move them (the 1-node task runs its submitted
    point and notes the edit), and a task whose snapshot was altered refuses to run (exit 2)."""
    sweep, results, p = _held_sweep(tmp_path)
    jobs = p.stdout.split()
    assert len(jobs) == 2, p.stderr
    before = [json.loads(l) for l in run([TAGGER, "expand", sweep, "--json"]).stdout.splitlines()]
    sweep.write_text(sweep.read_text().replace('"training.max_steps" = 10', '"training.max_steps" = 11')
                     .replace('"training.max_steps" = [10]', '"training.max_steps" = [11]'))
    after = [json.loads(l) for l in run([TAGGER, "expand", sweep, "--json"]).stdout.splitlines()]
    assert {q["tag"] for q in before}.isdisjoint(q["tag"] for q in after)
    snaps = sorted((results / "sweeps").glob("*-n2-*.jsonl"))
    assert len(snaps) == 1
    snaps[0].write_text(snaps[0].read_text().replace('"training.max_steps=10"',
                                                     '"training.max_steps=12"'))
    for job in jobs:
        assert run(["scontrol", "release", job]).returncode == 0
    one, two = (wait_job(job, 120, results / "logs" / f"ftb-sweep-{job}_*.out")[0] for job in jobs)
    log1 = (results / "logs" / f"ftb-sweep-{jobs[0]}_0.out").read_text()
    log2 = (results / "logs" / f"ftb-sweep-{jobs[1]}_0.out").read_text()
    assert one["JobState"] == "COMPLETED", (one, log1[-3000:])
    assert "changed since submission" in log1 and f"running the submitted point {before[0]['tag']}" \
        in log1, log1[-3000:]
    files = sorted((results / before[0]["tag"] / "metrics").glob("rank_*.h5"))
    assert len(files) == 2 and all(status(f)["state"] == "completed" for f in files), files
    assert steps(files[0])[0] == list(range(10))  # the submitted max_steps, not the edit's 11
    assert two["JobState"] == "FAILED" and two["ExitCode"] == "2:0", (two, log2[-3000:])
    assert "as submitted: it was changed" in log2, log2
    assert not (results / before[1]["tag"]).exists() and not (results / after[1]["tag"]).exists()


def test_sweep_resubmission_skips_queued_points_caps_retries_and_throttles(cluster, tmp_path):
    """A second submit_sweep.sh while the first arrays wait in the queue submits nothing
    ("already queued"); once they left the queue without completing, --max-tries 1 skips
    them; --throttle 1 sets the array's task throttle."""
    sweep, results, p = _held_sweep(tmp_path)
    jobs = p.stdout.split()
    try:
        again = run([REPO / "slurm" / "submit_sweep.sh", sweep, results])
        assert again.returncode == 0 and again.stdout.strip() == "", again.stderr
        assert f"is already queued as job {jobs[0]}_0 (PENDING): skipped" in again.stderr
        assert f"is already queued as job {jobs[1]}_0 (PENDING): skipped" in again.stderr
    finally:
        run(["scancel", *jobs])
    wait_until(lambda: not run(["squeue", "-h", "-j", ",".join(jobs)]).stdout.strip(), 30,
               "the cancelled arrays to leave the queue")
    capped = run([REPO / "slurm" / "submit_sweep.sh", sweep, results, "--max-tries", "1"])
    assert capped.returncode == 0 and capped.stdout.strip() == "", capped.stderr
    assert "was submitted 1 time(s)" in capped.stderr, capped.stderr
    _, _, thr = _held_sweep(tmp_path, "--max-tries", "2", "--throttle", "1")
    new = thr.stdout.split()
    try:
        assert len(new) == 2, thr.stderr
        rec = job_records(new[0])[0]
        assert rec.get("ArrayTaskThrottle") == "1", rec
    finally:
        run(["scancel", *new])


def test_time_limit_notice_to_the_steps_only_requeues_mid_run(cluster, tmp_path):
    """A real time limit with `--signal=USR1@50` (no B:, FTB_NOTICE=0): SLURM signals the
    launch step 10-40 s into the run (slurm 22.05 here signals the batch shell too; where it
    does not, the step's exit 75 requeues: test_signal_to_the_steps_only_requeues). The
    trainers save and exit 75, the job requeues; attempt 1 resumes from the checkpoint and,
    signalled again by its own limit, is not requeued a second time (FTB_MAX_REQUEUES=1): the
    job ends 75. slurmctld's limit check may deliver the notice within seconds of the
    start: attempt 0 then stops during set-up (138, no checkpoint; the trainers say so, or
    print nothing when USR1 came before their handler), which requeues as well,
    and attempt 1 starts over instead of resuming."""
    results = tmp_path / "limitsteps"
    env = clean_env(CONFIG=TINY, RESULTS=results, NPROC=1, FTB_NOTICE=0, FTB_MAX_REQUEUES=1)
    job = sbatch(["-N2", "-t", "1", "--signal=USR1@50", "slurm/train.sbatch",
                  "training.max_steps=1000000", "training.stop_after_seconds=55",
                  "checkpoint.interval=1000"], env, results)
    log = results / "logs" / f"ftb-train-{job}.out"
    rec = wait_job(job, 200, log)[0]
    out = log.read_text()
    assert f"scontrol requeue {job} (restart 1)" in out, out[-4000:]
    assert out.count("forwarding SIGUSR1 to local workers") >= 4, out[-4000:]  # 2 per attempt
    attempt0 = out.split(f"job {job} attempt 1 on")[0]
    assert len(attempt0) < len(out), out[-4000:]
    # Stopped in set-up: by the trainers' handler (they say so), or by USR1's default action
    # before they installed it (exit 138, not one line from a worker)
    in_set_up = "during set-up" in attempt0 or (
        "launcher exit code 138" in attempt0 and not _a_worker_printed(attempt0))
    assert in_set_up or "resumed from" in out, out[-4000:]
    assert "(FTB_MAX_REQUEUES=1): not requeued" in out, out[-4000:]
    assert rec["Restarts"] == "1" and rec["ExitCode"] == f"{REQUEUE_EXIT}:0", (rec, tail(log))
    files = _rank_files(results, "metrics")
    assert len(files) == 2 and all(status(f)["state"] == "preempted" for f in files), files
    for f in files:
        with h5py.File(f, "r") as h:
            # resume_count is written only by a resume (common/h5_metrics.h): absent = 0.
            assert h.attrs.get("resume_count", 0) == (0 if in_set_up else 1), dict(h.attrs)


GPU_SBATCH = REPO / "slurm" / "train_gpu.sbatch"


def test_gpu_sbatch_directives_and_a_dry_run_in_the_allocation(cluster, tmp_path):
    """slurm/train_gpu.sbatch on a cluster without GPUs (no GresTypes): sbatch --test-only
    refuses only its --gpus-per-node (GRES the cluster lacks); without that line the other
    directives (--ntasks-per-node=1, --exclusive, --time, ...) are accepted. That copy then
    runs on both nodes with the launchers in a dry run told 2 GPUs per node: one launcher
    per node, one worker per GPU (NPROC=gpu), local rank r on cuda:r."""
    p = run(["sbatch", "--test-only", "-N2", GPU_SBATCH])
    assert p.returncode != 0, p.stderr
    assert "gres" in p.stderr.lower(), p.stderr
    script = GPU_SBATCH.read_text()
    assert "#SBATCH --gpus-per-node=8\n" in script
    no_gres = tmp_path / "train_gpu_no_gres.sbatch"
    no_gres.write_text(script.replace("#SBATCH --gpus-per-node=8\n", ""))
    p = run(["sbatch", "--test-only", "-N2", no_gres])
    assert p.returncode == 0 and "to start at" in p.stderr, p.stderr
    results = tmp_path / "res"
    env = clean_env(CONFIG=TINY, RESULTS=results,
                    FTB_LAUNCHER_ARGS="--dry-run --gpus-per-node 2")
    job = sbatch(["-N2", no_gres], env, results)
    log = results / "logs" / f"ftb-train-gpu-{job}.out"
    rec = wait_job(job, 120, log)[0]
    out = log.read_text()
    assert rec["JobState"] == "COMPLETED" and rec["ExitCode"] == "0:0", tail(log)
    assert "(2 node(s) x gpu)" in out, out
    assert "2 node(s), 4 worker(s)" in out, out
    for rank in range(4):
        assert re.search(rf"^rank {rank}  node {rank // 2}  host \S+  local {rank % 2}/2$", out,
                         re.M), out
    assert out.count("  gpu: 1 = cuda:1 (LOCAL_RANK=1 of CUDA_VISIBLE_DEVICES=0,1)") == 2, out


def test_gpu_sbatch_outside_the_repository_exits_2(tmp_path):
    """The script finds train.sbatch under FTB_ROOT, else the submit directory: neither
    holding it is refused with the fix."""
    p = run(["bash", GPU_SBATCH], env=clean_env(FTB_ROOT=tmp_path))
    assert p.returncode == 2, p.stderr
    assert f"no slurm/train.sbatch under {tmp_path}" in p.stderr, p.stderr
    assert "submit from the repository root, or set FTB_ROOT" in p.stderr, p.stderr
