"""One node, no MPI: environment contract, logs, exit codes, restarts, signals, orphans."""
import os
import pathlib
import re
import signal
import subprocess
import time

import pytest

from launcher_util import (ALLREDUCE, REPO, TRAINER, alive, records, run, torch_python, wait_for,
                      worker_cmd)


@pytest.mark.quick  # scripts/test.sh --quick: the launcher's end-to-end test
def test_environment_contract(launcher, tmp_path):
    env = {"OMPI_MCA_fake": "1", "PMIX_FAKE": "1", "PMI_FAKE": "1", "KEEP_ME": "yes"}
    p = run([launcher, "--nproc-per-node", "2", "--run-id", "contract", "--max-restarts", "2",
             "--", *worker_cmd("--record", tmp_path)], env=env)
    assert p.returncode == 0, p.stderr
    recs = records(tmp_path)
    assert sorted(recs) == [0, 1]
    ports = set()
    cores = len(os.sched_getaffinity(0))
    for rank, rec in recs.items():
        e = rec["env"]
        assert e["RANK"] == str(rank) and e["LOCAL_RANK"] == str(rank)
        assert e["WORLD_SIZE"] == "2" and e["LOCAL_WORLD_SIZE"] == "2"
        assert e["GROUP_RANK"] == "0" and e["GROUP_WORLD_SIZE"] == "1"
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert e["TORCHELASTIC_RUN_ID"] == "contract"
        assert e["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert e["TORCHELASTIC_MAX_RESTARTS"] == "2"
        if "OMP_NUM_THREADS" not in os.environ:
            assert e["OMP_NUM_THREADS"] == str(max(1, cores // 2))
        assert e["KEEP_ME"] == "yes"
        assert not [k for k in e if k.startswith(("OMPI_", "PMIX_", "PMI_"))]
        assert rec["pgid"] == rec["pid"], "each worker leads its own process group"
        assert rec["stdin"] == "/dev/null"
        ports.add(e["MASTER_PORT"])
    assert len(ports) == 1 and 0 < int(ports.pop()) < 65536


def test_omp_num_threads_inherited(launcher, tmp_path):
    """An inherited OMP_NUM_THREADS is kept when it fits the bound cores, lowered when not."""
    cpus = len(os.sched_getaffinity(0))
    p = run([launcher, "--nproc-per-node", "1", "--", *worker_cmd("--record", tmp_path)],
            env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr
    assert records(tmp_path)[0]["env"]["OMP_NUM_THREADS"] == "1"
    p = run([launcher, "--nproc-per-node", "1", "--", *worker_cmd("--record", tmp_path)],
            env={"OMP_NUM_THREADS": str(cpus + 5)})
    assert records(tmp_path)[0]["env"]["OMP_NUM_THREADS"] == str(cpus)
    assert f"inherited {cpus + 5} exceeds {cpus} CPU(s) bound to this worker" in p.stderr


def test_bind_cores(launcher, tmp_path):
    """By default the cores are split and bound among local workers, threads match."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    p = run([launcher, "--nproc-per-node", "2", "--", *worker_cmd("--record", tmp_path)],
            env={"OMP_NUM_THREADS": ""})
    assert p.returncode == 0, p.stderr
    recs = records(tmp_path)
    half = len(cpus) // 2
    assert recs[0]["affinity"] == cpus[:half] and recs[1]["affinity"] == cpus[half:2 * half]
    assert {r["env"]["OMP_NUM_THREADS"] for r in recs.values()} == {str(half)}


def test_tuned_env_versus_no_tune_env(launcher, tmp_path):
    """The tuned worker env differs from the caller's only by the
    torchrun variables and the logged tuning; --no-tune-env leaves it untouched."""
    caller = {"OMP_NUM_THREADS": "64", "OPENBLAS_CORETYPE": "Prescott", "KEEP_ME": "1"}
    contract = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"}
    base = {**os.environ, **caller}
    dirs = {}
    for mode in ("tuned", "untouched"):
        d = tmp_path / mode
        d.mkdir()
        flags = [] if mode == "tuned" else ["--no-tune-env"]
        p = run([launcher, *flags, "--nproc-per-node", "1", "--",
                 *worker_cmd("--record", d)], env=caller)
        assert p.returncode == 0, p.stderr
        dirs[mode] = (records(d)[0], p.stderr)
    rec, log = dirs["untouched"]
    changed = {k for k in set(rec["env"]) | set(base) if rec["env"].get(k) != base.get(k)}
    assert changed <= contract, changed  # nothing but the torchrun variables
    assert rec["affinity"] == sorted(os.sched_getaffinity(0))
    assert "tuned environment" not in log
    rec, log = dirs["tuned"]
    changed = {k for k in set(rec["env"]) | set(base) if rec["env"].get(k) != base.get(k)}
    assert changed - contract == {"OMP_NUM_THREADS", "OPENBLAS_CORETYPE"}, changed
    cpus = len(os.sched_getaffinity(0))
    assert rec["env"]["OMP_NUM_THREADS"] == str(cpus)
    assert rec["env"]["OPENBLAS_CORETYPE"] != "Prescott"
    assert "rank 0 tuned environment" in log and "OPENBLAS_CORETYPE=Prescott uses narrower" in log


def test_dry_run_shows_the_tuning_and_reasons(launcher):
    p = run([launcher, "--dry-run", "--nproc-per-node", "1", "--", "/bin/true"],
            env={"OPENBLAS_CORETYPE": "Prescott", "OMP_NUM_THREADS": "999"})
    assert p.returncode == 0, p.stderr
    assert "environment check, node 0" in p.stdout and "ISA " in p.stdout
    assert "  tuned: OMP_NUM_THREADS=" in p.stdout and "(inherited 999 exceeds" in p.stdout
    assert "  tuned: OPENBLAS_CORETYPE=" in p.stdout
    q = run([launcher, "--dry-run", "--no-tune-env", "--nproc-per-node", "1", "--", "/bin/true"],
            env={"OPENBLAS_CORETYPE": "Prescott", "OMP_NUM_THREADS": "999"})
    assert "tuned:" not in q.stdout and "caller's environment unchanged" in q.stdout


def probed(text):
    """The 'worker environment (local rank 0, probed): ...' line (launcher/env_probe.h)."""
    lines = [l for l in text.splitlines() if "worker environment (local rank 0, probed): " in l]
    assert len(lines) == 1, text
    return lines[0].split("probed): ", 1)[1]


def test_dry_run_and_log_show_the_workers_blas_core_threads_and_allocator(launcher, tmp_path):
    """--dry-run and the launcher log show the BLAS vendor of the program to start,
    the core type its BLAS picks under the worker's environment (tuned or not), threads,
    binding and the allocator, detected by the trainer's own code (common/env_check.h)."""
    if not TRAINER.exists():
        pytest.skip(f"{TRAINER} not built")
    libs = subprocess.run(["ldd", str(TRAINER)], capture_output=True, text=True).stdout
    caller = {"OPENBLAS_CORETYPE": "Prescott", "OMP_NUM_THREADS": "1"}
    p = run([launcher, "--dry-run", "--nproc-per-node", "1", "--", TRAINER, "--help"], env=caller)
    assert p.returncode == 0, p.stderr
    line, tuned = probed(p.stdout), re.search(r"tuned: OPENBLAS_CORETYPE=(\w+)", p.stdout)[1]
    assert line.startswith("BLAS OpenBLAS ") and f", core {tuned} (" in line, line
    assert "1 intra-op / 1 BLAS thread(s)" in line and "on a CPU with " in line
    alloc = "jemalloc" if "libjemalloc" in libs else "glibc malloc"
    assert f"; allocator {alloc}" in line, line
    # --no-tune-env: the caller's core type reaches the BLAS, and the probe sees it.
    q = run([launcher, "--dry-run", "--no-tune-env", "--nproc-per-node", "1", "--", TRAINER],
            env=caller)
    assert ", core Prescott (sse) on a CPU with " in probed(q.stdout), q.stdout
    # Programs without a BLAS, and scripts, are named as such.
    assert probed(run([launcher, "--dry-run", "--", "/bin/true"]).stdout).startswith(
        "BLAS none linked")
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    assert "is not an ELF executable (a script?)" in probed(
        run([launcher, "--dry-run", "--", script]).stdout)
    # A real launch logs the same line once, after the workers started.
    r = run([launcher, "--nproc-per-node", "1", "--", "/bin/true"])
    assert r.returncode == 0 and "allocator glibc malloc" in probed(r.stderr), r.stderr


def test_log_files_and_tee(launcher, tmp_path):
    logs = tmp_path / "logs"
    p = run([launcher, "--nproc-per-node", "2", "--log-dir", logs, "--run-id", "r", "--tee",
             "--", *worker_cmd("--stdout", "hello-out", "--stderr", "hello-err")])
    assert p.returncode == 0, p.stderr
    d = logs / "r" / "attempt_0"
    for r in (0, 1):
        assert (d / f"rank_{r}.out").read_text() == "hello-out\n"
        assert (d / f"rank_{r}.err").read_text() == "hello-err\n"
        assert f"[{r}] hello-out" in p.stdout.splitlines()
        assert f"[{r}] hello-err" in p.stderr.splitlines()


def test_log_dir_without_tee_keeps_console_quiet(launcher, tmp_path):
    p = run([launcher, "--log-dir", tmp_path, "--run-id", "q", "--",
             *worker_cmd("--stdout", "only-in-file")])
    assert p.returncode == 0
    assert "only-in-file" not in p.stdout
    assert (tmp_path / "q" / "attempt_0" / "rank_0.out").read_text() == "only-in-file\n"


def test_no_log_dir_passes_output_through(launcher):
    p = run([launcher, "--nproc-per-node", "2", "--", *worker_cmd("--stdout", "plain")])
    assert p.returncode == 0
    assert p.stdout.splitlines().count("plain") == 2


@pytest.mark.timing  # a wall-clock bound: runs alone (tests/conftest.py)
def test_worker_exit_code_is_launcher_exit_code(launcher):
    """Acceptance 3 (single node part): a worker that exits 3 makes the launcher exit 3."""
    p = run([launcher, "--nproc-per-node", "2", "--grace", "1", "--",
             *worker_cmd("--ranks", "1", "--exit", "3", "--stderr", "bad thing happened",
                         "--sleep-others", "30")])
    assert p.returncode == 3, p.stderr
    assert p.elapsed < 5
    assert "root cause" in p.stderr and "exit code 3" in p.stderr
    assert "| bad thing happened" in p.stderr
    row = [l for l in p.stderr.splitlines() if l.strip().startswith("root cause")][0].split()
    assert row[6:9] == ["127.0.0.1", "1", "1"], row  # ip, rank, local rank


@pytest.mark.timing  # a wall-clock bound: runs alone (tests/conftest.py)
def test_worker_killed_by_signal_exits_128_plus_signal(launcher):
    p = run([launcher, "--nproc-per-node", "2", "--",
             *worker_cmd("--ranks", "0", "--kill", "KILL", "--sleep-others", "30")])
    assert p.returncode == 137, p.stderr
    assert "SIGKILL (137)" in p.stderr
    assert p.elapsed < 3


def test_restart_then_give_up(launcher, tmp_path):
    """Acceptance 3: with --max-restarts 1 it restarts once with RESTART_COUNT=1."""
    logs = tmp_path / "logs"
    p = run([launcher, "--nproc-per-node", "2", "--max-restarts", "1", "--log-dir", logs,
             "--run-id", "rs", "--", *worker_cmd("--record", tmp_path, "--barrier", "2",
                                                 "--ranks", "1", "--exit", "3",
                                                 "--sleep-others", "30")])
    assert p.returncode == 3, p.stderr
    a0, a1 = records(tmp_path, 0), records(tmp_path, 1)
    assert sorted(a0) == sorted(a1) == [0, 1]
    assert {r["env"]["TORCHELASTIC_RESTART_COUNT"] for r in a1.values()} == {"1"}
    assert a0[0]["env"]["MASTER_PORT"] != a1[0]["env"]["MASTER_PORT"], "fresh port"
    assert (logs / "rs" / "attempt_1" / "rank_1.err").exists()
    assert not records(tmp_path, 2)
    assert "restart 1 of 1" in p.stderr


def test_restart_recovers(launcher, tmp_path):
    p = run([launcher, "--nproc-per-node", "2", "--max-restarts", "2", "--",
             *worker_cmd("--record", tmp_path, "--ranks", "0", "--exit", "7",
                         "--until-restart", "1")])
    assert p.returncode == 0, p.stderr
    assert sorted(records(tmp_path, 1)) == [0, 1] and not records(tmp_path, 2)


def _start(launcher, tmp_path, *worker_args, launcher_args=()):
    proc = subprocess.Popen([launcher, "--nproc-per-node", "2", *launcher_args, "--",
                             *worker_cmd("--record", tmp_path, *worker_args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    recs = wait_for(lambda: len(records(tmp_path)) == 2 and records(tmp_path), 20,
                    "both workers to start")
    return proc, recs


def test_signals_are_forwarded(launcher, tmp_path):
    proc, recs = _start(launcher, tmp_path, "--signals", "--sleep", "30", "--on-term", "0")
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
        proc.send_signal(sig)
        time.sleep(0.2)
    for r in (0, 1):
        wait_for(lambda: (tmp_path / f"rank_{r}.attempt_0.signals").exists() and
                 len((tmp_path / f"rank_{r}.attempt_0.signals").read_text().split()) >= 3,
                 10, "signals to arrive")
    # HUP is a shutdown signal: the workers exit on it (default action) -> 128+1
    out, err = proc.communicate(timeout=10)
    got = (tmp_path / "rank_0.attempt_0.signals").read_text().split()
    assert got[:3] == ["SIGUSR1", "SIGUSR2", "SIGHUP"], got
    assert proc.returncode == 129, err


@pytest.mark.timing  # a wall-clock bound: runs alone (tests/conftest.py)
def test_sigterm_with_graceful_workers_exits_0(launcher, tmp_path):
    proc, recs = _start(launcher, tmp_path, "--sleep", "30", "--on-term", "0")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)
    assert proc.returncode == 0 and time.monotonic() - t0 < 2


def test_sigterm_kills_workers_and_exits_143(launcher, tmp_path):
    proc, recs = _start(launcher, tmp_path, "--sleep", "30")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 143, err
    assert not any(alive(r["pid"]) for r in recs.values())


@pytest.mark.timing  # a wall-clock bound: runs alone (tests/conftest.py)
def test_grace_then_sigkill(launcher, tmp_path):
    """Rank 0 ignores SIGTERM: it is SIGKILLed after --grace; exit code is rank 1's."""
    p = run([launcher, "--nproc-per-node", "2", "--grace", "1", "--",
             *worker_cmd("--ignore-term", "--ranks", "1", "--sleep", "0.5", "--exit", "4",
                         "--sleep-others", "30")])
    assert p.returncode == 4, p.stderr
    assert 1.4 < p.elapsed < 4, p.elapsed
    assert "sending SIGKILL" in p.stderr


def test_launcher_sigkill_leaves_no_orphans(launcher, tmp_path):
    proc, recs = _start(launcher, tmp_path, "--sleep", "60", "--ignore-term")
    proc.kill()
    proc.communicate(timeout=10)
    wait_for(lambda: not any(alive(r["pid"]) for r in recs.values()), 2,
             "workers to die with their launcher (PR_SET_PDEATHSIG)")


def test_launcher_sigkill_takes_grandchildren(launcher, tmp_path):
    """What a worker started itself (same process group) dies with a
    SIGKILLed launcher: the reaper kills every worker's process group."""
    proc, recs = _start(launcher, tmp_path, "--grandchild", "--sleep", "60", "--ignore-term")
    kids = [r["grandchild"] for r in recs.values()]
    assert all(alive(k) for k in kids)
    assert all(os.getpgid(k) == r["pgid"] for k, r in zip(kids, recs.values()))
    proc.kill()
    proc.communicate(timeout=10)
    wait_for(lambda: not any(alive(k) for k in kids), 2,
             "grandchildren to die within 2 s of the launcher's SIGKILL")
    # The workers get the same SIGKILL (PDEATHSIG and the reaper) at the same moment, but a
    # killed process is only gone once the kernel has torn it down: same 2 s bound.
    wait_for(lambda: not any(alive(r["pid"]) for r in recs.values()), 2,
             "workers to die within 2 s of the launcher's SIGKILL")


def test_normal_exit_ends_grandchildren(launcher, tmp_path):
    """A worker that exits and leaves a child behind: the launcher kills the group."""
    p = run([launcher, "--nproc-per-node", "1", "--",
             *worker_cmd("--record", tmp_path, "--grandchild")])
    assert p.returncode == 0, p.stderr
    kid = records(tmp_path)[0]["grandchild"]
    wait_for(lambda: not alive(kid), 2, "the leftover grandchild to be killed")


def test_usr1_is_a_stop_and_the_workers_code_passes_through(launcher, tmp_path):
    """A forwarded USR1 after which workers exit with a requeue code is a stop,
    not a failure: no failure table, no restart, the workers' code is the exit code."""
    proc, recs = _start(launcher, tmp_path, "--sleep", "60", "--on-usr1", "75",
                        launcher_args=("--max-restarts", "2"))
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 75, err
    assert "job failed" not in err and "root cause" not in err, err
    assert "workers stopped by SIGUSR1; exit code 75" in err
    assert not records(tmp_path, 1), "a stop must not restart"


def test_usr1_default_action_passes_128_plus_signal(launcher, tmp_path):
    """Workers that do not handle USR1 die by it: exit 138, reported as a stop."""
    proc, recs = _start(launcher, tmp_path, "--sleep", "60")
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 138, err
    assert "root cause" not in err and "stopped by SIGUSR1" in err, err


def test_exec_failure_is_a_failure(launcher, tmp_path):
    script = tmp_path / "noexec.sh"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    p = run([launcher, "--", str(script)])
    assert p.returncode == 127, p.stderr
    assert "exec" in p.stderr and "No such file" in p.stderr


@pytest.mark.timing  # a wall-clock bound: runs alone (tests/conftest.py)
def test_fail_fast_single_node_under_a_second(launcher, tmp_path):
    p = run([launcher, "--nproc-per-node", "2", "--",
             *worker_cmd("--ranks", "1", "--sleep", "0.3", "--kill", "9", "--sleep-others", "60")])
    assert p.returncode == 137
    assert p.elapsed < 1.5, p.elapsed


def test_torch_allreduce_two_workers(launcher):
    """Acceptance 4: a stock torch.distributed (Gloo, env://) script runs unchanged."""
    py = torch_python()
    if py is None:
        pytest.skip("no python with torch")
    p = run([launcher, "--nproc-per-node", "2", "--", py, str(ALLREDUCE)], timeout=120)
    assert p.returncode == 0, p.stderr
    lines = sorted(l for l in p.stdout.splitlines() if l.startswith("ALLREDUCE"))
    assert len(lines) == 2 and all(" ok " in l and "sum=3.0" in l for l in lines), p.stdout




def test_trainer_two_workers_matches_hand_started(launcher, tmp_path):
    """Acceptance 1: launcher --nproc-per-node 2 -- trainer ... equals the hand-started run."""
    if not TRAINER.exists():
        pytest.skip(f"trainer not built at {TRAINER} (set FTB_TRAINER)")
    cfg = REPO / "configs" / "runs" / "tiny.toml"
    import re
    loss_re = re.compile(r"loss[=: ]+([0-9.eE+-]+)")

    def losses(text):
        return [float(m.group(1)) for m in loss_re.finditer(text)]

    # One BLAS for both: "auto" times ATen against OpenBLAS at start and can pick differently
    # in the two runs on a busy machine.
    one_blas = "training.fp32_gemm=aten"
    via = run([launcher, "--nproc-per-node", "2", "--", str(TRAINER), "--config", str(cfg),
               one_blas, f"output.dir={tmp_path / 'via'}"], timeout=600, cwd=REPO)
    assert via.returncode == 0, via.stderr[-3000:]
    port = "29611"
    procs = [subprocess.Popen([str(TRAINER), "--config", str(cfg), one_blas,
                               f"output.dir={tmp_path / 'hand'}"], cwd=REPO,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2",
                                   "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    hand = losses(outs[0][0] + outs[0][1])
    assert hand, "no loss lines found in the hand-started run"
    assert losses(via.stdout + via.stderr) == hand


def test_crash_is_reported_with_program_host_and_stack(launcher):
    """A fatal signal (here SIGSEGV sent to the launcher, as a crash would raise it) writes
    one line naming the program, pid, host and signal, then the stack as addr2line offsets
    (common/crash_report.h), and the launcher still dies of the signal: exit -11."""
    p = subprocess.Popen([launcher, "--nproc-per-node", "1", "--", "sleep", "30"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children = pathlib.Path(f"/proc/{p.pid}/task/{p.pid}/children")
    wait_for(lambda: children.read_text().strip() != "", 20,
             "the worker's start (the handler is installed first thing in main)")
    p.send_signal(signal.SIGSEGV)
    out, err = p.communicate(timeout=30)
    assert p.returncode == -signal.SIGSEGV, (p.returncode, err)
    line = next((l for l in err.splitlines() if "fatal signal" in l), "")
    assert re.search(rf"^launcher on \S+ \(pid {p.pid}\): fatal signal SEGV \(Segmentation fault\) "
                     rf"sent by pid {os.getpid()};", line), err
    assert re.search(r"launcher\(\+0x[0-9a-f]+\)", err), err
