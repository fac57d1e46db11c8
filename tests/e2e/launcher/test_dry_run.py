"""--dry-run placement (golden files) and bad input (exit 2 before anything starts)."""
import os
import subprocess

import pytest

from launcher_util import HERE, run

GOLDEN = HERE / "golden"
CLEAN_ENV = {"PATH": "/usr/bin:/bin"}  # a fixed environment: the report prints it

# name -> (launcher args, extra environment)
CASES = {
    # Acceptance 5: ranks 0-1 on n01, 2-3 on n02, 4 on n03.
    "hosts_issue_example": (
        ["--dry-run", "--hosts", "n[01-02]:2,n03:1", "--run-id", "golden", "--cores-per-node", "8",
         "--", "/bin/echo", "hello", "two words"], {}),
    "hosts_default_nproc_multi_bracket": (
        ["--dry-run", "--hosts", "r[1-2]n[1-2]", "--nproc-per-node", "2", "--run-id", "g2",
         "--cores-per-node", "4", "--master-port", "1234", "--", "/bin/true"], {}),
    "hosts_zero_padding_and_lists": (
        ["--dry-run", "--hosts", "gpu[001-002,010]:1,login", "--run-id", "g3", "--cores-per-node",
         "2", "--max-restarts", "3", "--iface", "ib0", "--", "/bin/true", "--flag=1"], {}),
    "hosts_nproc_cpu_inherited_omp": (
        ["--dry-run", "--hosts", "a,b", "--nproc-per-node", "cpu", "--run-id", "g4",
         "--cores-per-node", "3", "--", "/bin/true"], {"OMP_NUM_THREADS": "7"}),
    "slurm_tasks_per_node": (
        ["--dry-run", "--", "/bin/true"],
        {"SLURM_JOB_NODELIST": "gpu-a[1-2],n[07-08]", "SLURM_TASKS_PER_NODE": "2(x3),1",
         "SLURM_JOB_CPUS_PER_NODE": "8(x3),4", "SLURM_JOB_ID": "4242"}),
    "slurm_nproc_flag_wins": (
        ["--dry-run", "--nproc-per-node", "1", "--run-id", "g6", "--", "/bin/true"],
        {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "4(x3)",
         "SLURM_JOB_CPUS_PER_NODE": "4(x3)"}),
}


def dry_run(launcher, args, env):
    return subprocess.run([launcher, *args], env={**CLEAN_ENV, **env}, capture_output=True,
                          text=True, timeout=30)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_placement(launcher, name):
    args, env = CASES[name]
    p = dry_run(launcher, args, env)
    assert p.returncode == 0, p.stderr
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("FTB_UPDATE_GOLDEN") == "1":
        golden.write_text(p.stdout)
    assert golden.exists(), f"missing {golden}; run with FTB_UPDATE_GOLDEN=1"
    assert p.stdout == golden.read_text()


def test_issue_example_ranks(launcher):
    """Acceptance 5, stated directly (independent of the golden file)."""
    args, env = CASES["hosts_issue_example"]
    out = dry_run(launcher, args, env).stdout
    rows = [l.split() for l in out.splitlines() if l[:1].isdigit() and " n0" in l]
    assert [(r[1], r[6], r[7]) for r in rows] == [("n01", "0-1", "0-1"), ("n02", "2-3", "0-1"),
                                                  ("n03", "4", "0")]
    assert "MASTER_ADDR:MASTER_PORT = n01:29500" in out
    assert "  argv: /bin/echo hello 'two words'" in out
    for rank, host, local in [(0, "n01", 0), (1, "n01", 1), (2, "n02", 0), (3, "n02", 1),
                              (4, "n03", 0)]:
        assert f"rank {rank}  node {'012'[rank // 2]}  host {host}  local {local}/" in out


def test_dry_run_single_node_real_rendezvous(launcher, tmp_path):
    marker = tmp_path / "started"
    p = run([launcher, "--dry-run", "--nproc-per-node", "2", "--", "/usr/bin/touch", str(marker)],
            env={"SLURM_JOB_NODELIST": ""})
    assert p.returncode == 0, p.stderr
    assert "nodes from this node" in p.stdout and "127.0.0.1" in p.stdout
    assert "RANK=1" in p.stdout and "WORLD_SIZE=2" in p.stdout
    assert not marker.exists(), "--dry-run must not start anything"


# (args, extra env, expected message fragment)
BAD = {
    "unparsable_hostlist": (["--dry-run", "--hosts", "n[01-"], {}, "unbalanced"),
    "hostlist_reversed_range": (["--dry-run", "--hosts", "n[3-1]:2"], {}, "n[3-1]"),
    "hosts_bad_count": (["--dry-run", "--hosts", "n1:0"], {}, "must be an integer >= 1"),
    "slurm_tasks_mismatch": (["--dry-run"], {"SLURM_JOB_NODELIST": "n[1-3]",
                                             "SLURM_TASKS_PER_NODE": "2(x2)"}, "gives 2 counts"),
    "slurm_bad_tasks": (["--dry-run"], {"SLURM_JOB_NODELIST": "n[1-2]",
                                        "SLURM_TASKS_PER_NODE": "2(x"}, "SLURM_TASKS_PER_NODE"),
    "nproc_zero": (["--nproc-per-node", "0"], {}, "--nproc-per-node"),
    "nproc_garbage": (["--nproc-per-node", "lots"], {}, "expected N, auto, cpu or gpu"),
    "missing_interface": (["--iface", "nosuch0"], {}, "interface 'nosuch0' does not exist"),
    "network_without_address": (["--network", "10.254.254.0/24"], {}, "no local address"),
    "bad_cidr": (["--network", "10.0.0.0/40"], {}, "prefix"),
    "program_not_found": ([], {}, "not found in PATH"),
    "hosts_without_dry_run": (["--hosts", "n1"], {}, "only valid with --dry-run"),
    "srun_without_pmi": ([], {"SLURM_STEP_NUM_TASKS": "2"}, "srun tasks without PMI"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_exits_2_before_starting(launcher, tmp_path, name):
    args, env, fragment = BAD[name]
    marker = tmp_path / "started"
    program = ["/usr/bin/touch", str(marker)] if name != "program_not_found" else [
        "no-such-program-ftb"]
    p = run([launcher, *args, "--", *program], env=env, timeout=20)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert fragment in p.stderr, p.stderr
    assert not marker.exists()


def test_no_program_exits_2(launcher):
    for argv in ([launcher], [launcher, "--nproc-per-node", "2"], [launcher, "--tee", "--"]):
        p = run(argv)
        assert p.returncode == 2 and "no program given" in p.stderr, p.stderr


def test_help(launcher):
    p = run([launcher, "--help"])
    assert p.returncode == 0
    for flag in ("--nproc-per-node", "--max-restarts", "--monitor-interval", "--grace",
                 "--log-dir", "--tee", "--iface", "--network", "--master-port", "--run-id",
                 "--dry-run", "--hosts"):
        assert flag in p.stdout
