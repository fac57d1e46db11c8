"""Interference (trainer/README.md "Interference"): a run that shares its CPU with a busy
loop is marked noisy with its figure; the same run alone on that CPU is not.

The machine may be shared, so "alone" is not guaranteed. Both runs are bound to the CPU
that was least busy just before. The busy-loop half always holds: two runnable tasks on
one CPU give about 50 % whatever else runs. The quiet half asserts the run is not marked
(and the busy-loop figure is more than 5x its figure) when the CPU was idle; when the
quiet run was marked, the test requires the run's own figures to show other processes on
its CPU (other_load_cpus > 0.05 CPUs, so a false alarm still fails) and skips that half,
naming the load it measured."""
import csv
import io
import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from trainer_util import BUILD, QUICK_START, TINY, TRAINER, base_env, metrics

SWEEP_TAGGER_BIN = BUILD / "sweep_tagger" / "sweep_tagger"

TASKSET = shutil.which("taskset")
pytestmark = [
    pytest.mark.skipif(TASKSET is None or not hasattr(os, "sched_getaffinity"),
                       reason="needs taskset and sched_getaffinity (Linux)"),
    pytest.mark.timing,  # needs an idle CPU: runs alone (tests/conftest.py)
]
STEPS = 60
THRESHOLD = 0.05  # metrics.max_interference's default


def cpu_busy(cpus, seconds=0.5):
    """Busy fraction of each CPU in `cpus` over `seconds` (/proc/stat, all processes)."""
    def ticks():
        out = {}
        with open("/proc/stat") as f:
            for line in f:
                name, *v = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                    v = [int(x) for x in v[:8]]
                    out[int(name[3:])] = (v[0] + v[1] + v[2] + v[5] + v[6], sum(v))
        return out
    a = ticks()
    time.sleep(seconds)
    b = ticks()
    return {c: (b[c][0] - a[c][0]) / max(b[c][1] - a[c][1], 1) for c in cpus}


def run_on(cpu, out_dir):
    cmd = [TASKSET, "-c", str(cpu), str(TRAINER), "--config", str(TINY), "--output-dir",
           str(out_dir), "--no-sweep-dir", *QUICK_START, f"training.max_steps={STEPS}",
           "checkpoint.save_final=false", "metrics.log_every=20"]
    p = subprocess.run(cmd, env=base_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"trainer failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    with metrics(out_dir) as f:
        attrs = {k: f.attrs[k] for k in ("interference", "noisy", "other_load_cpus",
                                         "runqueue_wait_frac", "max_interference")}
        attrs["per_step"] = np.array(f["steps/interference"][:])
    return p, attrs


def as_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def test_busy_loop_on_the_runs_cpu_marks_it_noisy_and_an_idle_cpu_does_not(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    busy = cpu_busy(cpus)
    cpu = min(cpus, key=lambda c: busy[c])

    # A competing busy loop pinned to the same CPU as the trainer.
    loop = subprocess.Popen([TASKSET, "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        p_busy, noisy = run_on(cpu, tmp_path / "busy")
    finally:
        loop.kill()
        loop.wait()
    assert noisy["interference"] > 0.25, noisy  # two runnable tasks on one CPU: ~0.5
    reason = as_str(noisy["noisy"])
    assert "interference" in reason and "metrics.max_interference" in reason, reason
    assert noisy["max_interference"] == THRESHOLD
    assert len(noisy["per_step"]) == STEPS and np.nanmax(noisy["per_step"]) > 0.25
    assert "interference" in p_busy.stdout and "NOISY" in p_busy.stdout, p_busy.stdout

    # The aggregate table marks the row noisy in its valid column, with the figure.
    if SWEEP_TAGGER_BIN.exists():
        agg = subprocess.run([str(SWEEP_TAGGER_BIN), "aggregate", str(tmp_path),
                              "--format", "csv"], capture_output=True, text=True, timeout=60)
        assert agg.returncode == 0, agg.stderr
        rows = list(csv.DictReader(io.StringIO(agg.stdout)))
        cells = next(r for r in rows if r["tag"] == "busy")
        assert cells["is_valid"] == "noisy" and float(cells["interference"]) > 0.25, cells

    # The same run with the CPU to itself (as far as this machine allows).
    before = cpu_busy([cpu])[cpu]
    _, quiet = run_on(cpu, tmp_path / "quiet")
    if as_str(quiet["noisy"]):
        # Marked: only right when other processes really ran on that CPU during the run.
        assert quiet["other_load_cpus"] > 0.05, (quiet, before)
        pytest.skip(f"CPU {cpu} was not idle during the quiet run (other processes used "
                    f"{quiet['other_load_cpus']:.2f} of it; {before:.0%} busy just before): "
                    f"interference {quiet['interference']:.1%} > {THRESHOLD:.0%}, rightly "
                    f"marked noisy; the 'not marked' half needs an idle CPU")
    assert quiet["interference"] <= THRESHOLD
    assert noisy["interference"] > 5 * quiet["interference"], (quiet, noisy)


def tokens_on(cpu, out_dir):
    """tokens/s and tokens per CPU-second (root attrs over the measured steps) of a run of
    tiny at seq 256 x micro-batch 4 (steps of ~70 ms: many scheduler slices each) on `cpu`."""
    cmd = [TASKSET, "-c", str(cpu), str(TRAINER), "--config", str(TINY), "--output-dir",
           str(out_dir), "--no-sweep-dir", *QUICK_START, "data.seq_len=256",
           "training.micro_batch_size=4", "training.max_steps=30", "checkpoint.save_final=false"]
    p = subprocess.run(cmd, env=base_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"trainer failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    assert "tokens per CPU-second (padded, global)" in p.stdout + p.stderr
    with metrics(out_dir) as f:
        skip = int(f.attrs["skip_first_steps"]) if "skip_first_steps" in f.attrs else 2
        wall = float(np.median(f["steps/tokens_per_s_padded"][skip:]))
        return wall, float(f.attrs["tokens_per_cpu_s"]), float(f.attrs["interference"])


def test_tokens_per_cpu_second_keeps_most_of_what_busy_loops_take_from_tokens_per_s(tmp_path):
    """Two busy loops on the run's CPU take two thirds of it: tokens/s falls to a half or
    less. tokens_per_cpu_s (the run's own CPU time) keeps at least 0.6 of the quiet run's.
    Measured on a 2-vCPU test machine (Zen 3), three pairs: the CPU-time figure moved by
    -28 % to +3 % while tokens/s fell by 61-78 %: the time the loops took is corrected, the
    slower CPU time of a shared core (caches, switches every few ms, a core the hypervisor
    may share) is not, so a bound of 15 % does not hold here (trainer/docs/metrics.md)."""
    cpus = sorted(os.sched_getaffinity(0))
    busy = cpu_busy(cpus)
    cpu = min(cpus, key=lambda c: busy[c])
    quiet_wall, quiet_cpu, quiet_itf = tokens_on(cpu, tmp_path / "quiet")
    loops = [subprocess.Popen([TASKSET, "-c", str(cpu), sys.executable, "-c", "while True: pass"])
             for _ in range(2)]
    try:
        time.sleep(0.3)
        wall, per_cpu, itf = tokens_on(cpu, tmp_path / "busy")
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    if quiet_itf > THRESHOLD:
        pytest.skip(f"CPU {cpu} was not idle during the quiet run (interference "
                    f"{quiet_itf:.1%}): no quiet figure to compare with")
    figures = (f"tokens/s {quiet_wall:.0f} -> {wall:.0f}; tokens per CPU-second "
               f"{quiet_cpu:.0f} -> {per_cpu:.0f}; interference {quiet_itf:.1%} -> {itf:.1%}")
    assert itf > 0.4, figures  # three runnable tasks on one CPU: ~0.67
    assert wall <= 0.5 * quiet_wall, figures
    assert per_cpu >= 0.6 * quiet_cpu, figures
    assert per_cpu / quiet_cpu - 1 > 2 * (wall / quiet_wall - 1), figures  # most of it kept
