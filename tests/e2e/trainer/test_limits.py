"""Limits end in a message, never in the OOM killer, an abort or a hang.

1. `parallel.pp_microbatches = 1000000000000` was accepted: each rank grew to 12 GB and the
   OOM killer ended it without a word (exit 137). A pipeline step may draw at most the
   dataset's samples (common/pipeline.h pipeMicrobatchProblem): refused at once, exit 2,
   naming the key; a token file is checked when the trainer opens it.
2. `--estimate-memory` allocated per micro-batch (+320 MB at 10^6, bad_alloc at 10^7) and
   `sweep_tagger expand --memory-budget` aborted on the uncaught std::bad_alloc (exit 134):
   the estimate is in closed form, and every program's main ends a failed allocation with
   the out-of-memory exit code 5 and a message.
3. Under an address-space limit just below what a run needs, the trainer hung at 100 % CPU
   in the start-up GEMM (OpenBLAS retrying a failing mmap), silent until killed: the
   measurement checks its bytes first and runs under a deadline; the run ends with exit 5.
"""
import json
import resource
import subprocess
import time

import pytest

from test_hf_model import write_tokens
from trainer_util import QUICK_START, TINY, TRAINER, base_env, run_trainer

SWEEP_TAGGER = TRAINER.parents[1] / "sweep_tagger" / "sweep_tagger"
PP2 = ["parallel.pp=2"]


def run(cmd, timeout=60, limit=None, env=None):
    """(CompletedProcess, CPU seconds it took); `limit`: (resource, bytes) set in the child."""
    pre = (lambda: resource.setrlimit(limit[0], (limit[1], limit[1]))) if limit else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([str(c) for c in cmd], env=env or base_env(), capture_output=True,
                       text=True, timeout=timeout, preexec_fn=pre)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def no_crash(p):
    assert "terminate called" not in p.stderr and "Aborted" not in p.stderr, p.stderr
    assert p.returncode not in (134, -6, 137, -9, 139, -11), p.returncode


# ---- 1. the micro-batch count is bounded --------------------------------------------

def test_a_trillion_micro_batches_are_refused_at_once(tmp_path):
    p, cpu = run([TRAINER, "--config", TINY, "--world-size", "2", "--estimate-memory", *PP2,
                  "parallel.pp_microbatches=1000000000000"])
    assert p.returncode == 2, p.stdout + p.stderr
    assert ("override 'parallel.pp_microbatches=1000000000000': key 'parallel.pp_microbatches': "
            "pp_microbatches(1000000000000) x micro_batch_size(2) x data-parallel size(1) = "
            "2000000000000 samples per step exceed the 1024 samples of data.num_samples"
            in p.stderr), p.stderr
    assert "hint: at most 512 micro-batches per step" in p.stderr, p.stderr
    assert cpu < 5, f"{cpu:.1f} s of CPU"


def test_a_token_file_bounds_the_micro_batches_when_opened(tmp_path):
    """8 samples of 32 tokens, micro-batch 2: a pipeline step of 5 micro-batches needs 10."""
    data = tmp_path / "tokens.bin"
    write_tokens(data, 8, 512)
    common = [f"data.source={data}", "data.seq_len=32", "data.bin_dtype=uint16",
              "training.max_steps=1", *QUICK_START, *PP2]
    env = base_env(RANK=0, LOCAL_RANK=0, WORLD_SIZE=2, LOCAL_WORLD_SIZE=2,
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=1)  # never reached: refused first
    p, _ = run([TRAINER, "--config", TINY, "--output-dir", tmp_path / "run", "--no-sweep-dir",
                *common, "parallel.pp_microbatches=5"], env=env)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "key 'parallel.pp_microbatches'" in p.stderr, p.stderr
    assert f"10 samples per step exceed the 8 samples of {data}" in p.stderr, p.stderr
    assert not (tmp_path / "run").exists()


# ---- 2. the estimate in closed form; no bad_alloc aborts -------------------------------

def test_estimate_of_ten_million_micro_batches_is_instant(tmp_path):
    # 2 GiB of data segment: the old estimate needed more for its per-micro-batch lists.
    p, cpu = run([TRAINER, "--config", TINY, "--world-size", "2", "--estimate-memory", *PP2,
                  "parallel.pp_microbatches=10000000", "data.num_samples=100000000",
                  "training.micro_batch_size=1"],
                 limit=(resource.RLIMIT_DATA, 2 << 30))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "pipeline stage" in p.stdout and "10000000 micro-batches" in p.stdout, p.stdout
    assert cpu < 5, f"{cpu:.1f} s of CPU"


def sweep(tmp_path, grid):
    s = tmp_path / "s.toml"
    s.write_text(f'base = "{TINY}"\nnproc_per_node = 2\n[grid]\n' + grid)
    return s


def test_expand_with_a_memory_budget_never_aborts(tmp_path):
    s = sweep(tmp_path, '"parallel.pp" = [2]\n'
                        '"parallel.pp_microbatches" = [10000000, 1000000000000]\n'
                        '"data.num_samples" = [100000000]\n'
                        '"training.micro_batch_size" = [1]\n')
    p, cpu = run([SWEEP_TAGGER, "expand", s, "--json", "--memory-budget", "600MiB"],
                 limit=(resource.RLIMIT_DATA, 2 << 30))
    no_crash(p)
    assert p.returncode == 0, p.stderr
    points = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(points) == 2, p.stdout
    reasons = [pt.get("reason", "") for pt in points]
    bound = "samples per step exceed the 100000000 samples of data.num_samples"
    assert sum(bound in r for r in reasons) == 1, reasons  # 10^12 refused, 10^7 estimated
    assert cpu < 10, f"{cpu:.1f} s of CPU"


def test_a_failed_allocation_in_sweep_tagger_exits_5_with_a_message(tmp_path):
    """A billion layers over two stages: the balanced split's table needs 24 GB."""
    s = sweep(tmp_path, '"parallel.pp" = [2]\n"parallel.pp_microbatches" = [2]\n'
                        '"model.n_layers" = [1000000000]\n')
    p, _ = run([SWEEP_TAGGER, "expand", s, "--json"], limit=(resource.RLIMIT_AS, 1 << 30))
    no_crash(p)
    assert p.returncode == 5, p.stdout + p.stderr
    assert "sweep_tagger: out of memory: std::bad_alloc" in p.stderr, p.stderr


# ---- 3. the start-up GEMM under an address-space limit ----------------------------------

def vm_peak_of_a_run(tmp_path, *overrides):
    """The trainer's VmPeak (kB) over a short run, sampled from /proc until it exits."""
    cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path / "probe"),
           "--no-sweep-dir", "training.max_steps=2", *overrides]
    p = subprocess.Popen(cmd, env=base_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    peak = 0
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmPeak:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.005)
    assert p.returncode == 0, p.stderr.read()
    return peak


def test_address_space_just_below_the_need_ends_as_oom_within_a_minute(tmp_path):
    blas = ["training.fp32_gemm=\"openblas\""]
    need_kb = vm_peak_of_a_run(tmp_path, *blas)
    for short_mb in (32, 96):  # inside OpenBLAS's 128 MiB work buffer
        limit = (need_kb << 10) - (short_mb << 20)
        t0 = time.monotonic()
        p, _ = run([TRAINER, "--config", TINY, "--output-dir", tmp_path / f"run{short_mb}",
                    "--no-sweep-dir", "training.max_steps=2", *blas],
                   timeout=150, limit=(resource.RLIMIT_AS, limit))
        took = time.monotonic() - t0
        no_crash(p)
        assert p.returncode == 5, f"limit {limit >> 20} MiB: rc {p.returncode}\n{p.stderr}"
        assert "out of memory" in p.stderr.lower() or "cannot map" in p.stderr, p.stderr
        assert took < 60, f"limit {limit >> 20} MiB: {took:.0f} s"


@pytest.mark.parametrize("junk", ["number", "nesting"])
def test_a_jsonl_line_quotes_a_huge_token_short_and_bounds_nesting(tmp_path, junk):
    """A 2 MB number or 100,000 nested arrays on line 2 of an input_ids JSONL: exit 2 naming
    file:line in a message of a few hundred bytes (the token cut to a prefix with its length;
    the nesting refused before the JSON library recurses), nothing written."""
    src = tmp_path / "ids.jsonl"
    bad = "7" * 2_000_000 if junk == "number" else "[" * 100_000
    src.write_text('{"input_ids": [1, 2, 3, 4, 5]}\n{"input_ids": [1, ' + bad + "]}\n")
    p = run_trainer(tmp_path / "out", f'data.source="{src}"', "data.seq_len=4", check=False)
    assert p.returncode == 2 and f"{src}:2" in p.stderr, p.stderr[-2000:]
    assert len(p.stderr) < 2000, f"{len(p.stderr)} bytes: {p.stderr[:500]}"
    assert not (tmp_path / "out").exists()
