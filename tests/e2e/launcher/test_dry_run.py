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
    # A GPU job planned from a machine without one: one worker per GPU on each node.
    "hosts_gpus_per_node": (
        ["--dry-run", "--hosts", "gpu[01-02]", "--gpus-per-node", "8", "--nproc-per-node", "gpu",
         "--run-id", "g7", "--cores-per-node", "64", "--", "/bin/true"], {}),
    # Inside an sbatch GPU job (--gpus-per-node=h100:4 --ntasks-per-node=1): SLURM's GRES
    # variables on the batch node stand for every node's.
    "slurm_gres_env": (
        ["--dry-run", "--nproc-per-node", "gpu", "--", "/bin/true"],
        {"SLURM_JOB_NODELIST": "g[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)",
         "SLURM_JOB_CPUS_PER_NODE": "16(x2)", "SLURM_JOB_ID": "4343", "SLURM_GPUS_ON_NODE": "4",
         "SLURM_JOB_GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
         "SLURM_GPUS_PER_NODE": "h100:4"}),
    # Only the job's request (SLURM_GPUS_PER_NODE), e.g. copied from the sbatch line.
    "slurm_gpus_per_node_request": (
        ["--dry-run", "--nproc-per-node", "gpu", "--run-id", "g8", "--cores-per-node", "8", "--",
         "/bin/true"],
        {"SLURM_JOB_NODELIST": "g[1-2]", "SLURM_GPUS_PER_NODE": "a100:2"}),
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


def test_gpu_plan_maps_each_rank_to_a_gpu(launcher):
    """--nproc-per-node gpu with --gpus-per-node 8: 8 ranks per node, local rank r on GPU r,
    every worker seeing the node's 8 GPUs (torchrun's cuda:LOCAL_RANK)."""
    args, env = CASES["hosts_gpus_per_node"]
    p = dry_run(launcher, args, env)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "2 node(s), 16 worker(s)" in out
    rows = [l.split() for l in out.splitlines() if l.startswith(("0 ", "1 "))]
    assert [(r[1], r[4], r[5], r[6]) for r in rows] == [("gpu01", "8", "8", "0-7"),
                                                       ("gpu02", "8", "8", "8-15")]
    assert "GPUs 8: --gpus-per-node 8: ids 0,1,2,3,4,5,6,7 on every node" in out
    for rank in range(16):
        local = rank % 8
        block = out.split(f"\nrank {rank}  node {rank // 8}  host gpu0{rank // 8 + 1}  "
                          f"local {local}/8\n")[1].split("\n\n")[0]
        assert f" LOCAL_RANK={local} " in block
        assert " CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 " in block
        assert (f"  gpu: {local} = cuda:{local} (LOCAL_RANK={local} of "
                "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7)") in block


@pytest.mark.parametrize("args,env", [
    (["--hosts", "gpu[01-02]"], {}),
    ([], {"SLURM_JOB_NODELIST": "g[1-2]", "SLURM_JOB_ID": "7"}),
], ids=["hosts", "slurm_without_gres"])
def test_nproc_gpu_without_gpu_information_exits_2_naming_gpus_per_node(launcher, args, env):
    p = dry_run(launcher, ["--dry-run", *args, "--nproc-per-node", "gpu", "--", "/bin/true"], env)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "key '--nproc-per-node'" in p.stderr and "'gpu' requested but the node has no GPU" \
        in p.stderr, p.stderr
    assert "add --gpus-per-node N to --dry-run" in p.stderr, p.stderr
    assert p.stdout == ""


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
    # These were once accepted as host names
    "hosts_two_colons": (["--dry-run", "--hosts", "n1:2:3"], {},
                         "character ':' is not allowed in a host name"),
    "hosts_slash": (["--dry-run", "--hosts", "a/b:2"], {},
                    "character '/' is not allowed in a host name"),
    "hosts_world_overflow": (["--dry-run", "--hosts", "n[1-999999]:9999"], {},
                             "at most 2147483647"),
    "full_without_dry_run": (["--full"], {}, "only valid with --dry-run"),
    "env_bad_value": (["--dry-run", "--env", "some"], {}, "expected 'set' or 'all'"),
    "srun_without_pmi": ([], {"SLURM_STEP_NUM_TASKS": "2"}, "srun tasks without PMI"),
    # Two workers would share the one GPU (it used to be CUDA_VISIBLE_DEVICES=gpus[r % n]).
    "more_workers_than_gpus": (["--nproc-per-node", "2"], {"CUDA_VISIBLE_DEVICES": "0"},
                               "2 workers on a node with 1 GPU(s) (ids 0 from "
                               "CUDA_VISIBLE_DEVICES=0): workers would share a GPU"),
    "gpus_per_node_without_dry_run": (["--gpus-per-node", "8"], {}, "only valid with --dry-run"),
    "plan_more_workers_than_gpus": (["--dry-run", "--hosts", "g1:3", "--gpus-per-node", "2"], {},
                                    "3 workers on a node with 2 GPU(s) (--gpus-per-node 2"),
    "more_workers_than_slurm_gpus": (["--nproc-per-node", "3"],
                                     {"SLURM_JOB_ID": "5", "SLURM_GPUS_ON_NODE": "2",
                                      "CUDA_VISIBLE_DEVICES": "0,1"},
                                     "3 workers on a node with 2 GPU(s)"),
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


def _ranks_shown(out):
    return [l for l in out.splitlines() if l.startswith("rank ")]


def test_large_plan_prints_a_summary(launcher):
    """800 000 workers give a short summary (speed: bench_launcher.sh)."""
    p = dry_run(launcher, ["--dry-run", "--hosts", "n[1-100000]:8", "--run-id", "big", "--",
                           "/bin/true"], {})
    assert p.returncode == 0, p.stderr
    assert "100000 node(s), 800000 worker(s)" in p.stdout
    assert "0-99999  n1 .. n100000  100000" in p.stdout
    shown = _ranks_shown(p.stdout)
    assert [l.split()[1] for l in shown] == [*map(str, range(8)), "799999"]
    assert "... 799991 worker(s) not shown (ranks 8-799998); --full lists them" in p.stdout
    assert "WORLD_SIZE=800000" in p.stdout and "RANK=799999" in p.stdout
    assert len(p.stdout.splitlines()) < 60


def test_full_and_summary_flags(launcher):
    base = ["--dry-run", "--hosts", "n[1-10]:8,m[1-2]:4", "--run-id", "f", "--cores-per-node",
            "8"]
    default = dry_run(launcher, [*base, "--", "/bin/true"], {}).stdout  # 88 > 64: summary
    assert len(_ranks_shown(default)) == 9
    assert "0-9    n1 .. n10  10" in default and "10-11  m1 .. m2   2" in default
    full = dry_run(launcher, [*base, "--full", "--", "/bin/true"], {}).stdout
    assert [int(l.split()[1]) for l in _ranks_shown(full)] == list(range(88))
    small = ["--dry-run", "--hosts", "a,b", "--run-id", "s", "--"]
    forced = dry_run(launcher, [*small[:-1], "--summary", "--", "/bin/true"], {}).stdout
    assert "summary (--summary)" in forced and len(_ranks_shown(forced)) == 2


SECRETS = {"HF_TOKEN": "hf_s3cr3t", "MY_API_KEY": "k3y", "DB_PASSWORD": "pw1", "aws_secret": "sx1zz",
           "PLAIN_SETTING": "visible", "OMPI_MCA_fake": "1"}


def test_dry_run_prints_only_what_the_launcher_sets(launcher):
    """No inherited variables (and no secrets) unless --env all."""
    p = dry_run(launcher, ["--dry-run", "--hosts", "a", "--run-id", "e", "--", "/bin/true"],
                {**SECRETS, "RANK": "5"})
    assert p.returncode == 0, p.stderr
    for v in ("hf_s3cr3t", "k3y", "pw1", "PLAIN_SETTING", "OMPI_MCA_fake"):
        assert v not in p.stdout, v
    assert "inherits this launcher's 7 variable(s) unchanged" in p.stdout
    assert "minus 1 OMPI_*/PMIX_*/PMI_*/FTB_RDZV_SECRET variable(s)" in p.stdout
    assert "  replaces inherited: RANK=5" in p.stdout  # a value the launcher changes


def test_env_all_masks_secrets(launcher):
    p = dry_run(launcher, ["--dry-run", "--env", "all", "--hosts", "a", "--run-id", "e", "--",
                           "/bin/true"], SECRETS)
    assert p.returncode == 0, p.stderr
    assert "  PLAIN_SETTING=visible" in p.stdout
    for k in ("HF_TOKEN", "MY_API_KEY", "DB_PASSWORD", "aws_secret"):
        assert f"  {k}=<masked>" in p.stdout, k
    for v in ("hf_s3cr3t", "k3y", "pw1", "sx1zz"):
        assert v not in p.stdout, v
    assert "removed: OMPI_MCA_fake" in p.stdout
