"""gemm_efficiency's denominator is the best GEMM measured on the host (trainer/README.md
"Metrics"): each run records its start and end figures in the peak cache, divides by the
best known, and flags a start-up figure more than 10 % below the cached best."""
import re
import subprocess

import numpy as np

from trainer_util import TINY, TRAINER, base_env, metrics, steps


def run(out_dir, cache_dir, recheck="1", overrides=()):
    """A short run on its own peak cache (overrides after the fixed ones win); its process,
    root attrs, gemm_efficiency column and model FLOP/s per device."""
    cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(out_dir), "--no-sweep-dir",
           "training.max_steps=4", "checkpoint.save_final=false",
           "training.fp32_gemm=aten", *overrides]  # one BLAS: one cache key in both runs
    # FTB_TEST_GEMM_RECHECK=1: re-check after the last step although the run is short.
    p = subprocess.run(cmd, env=base_env(FTB_CACHE_DIR=cache_dir, FTB_TEST_GEMM_RECHECK=recheck),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, f"trainer failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    with metrics(out_dir) as f:
        a = dict(f.attrs)
        eff = f["steps/gemm_efficiency"][:]
        fpt = f["steps/flops_per_token"][:]
        tps = f["steps/tokens_per_s_per_device"][:]
    a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()}
    return p, a, eff, fpt * tps


def test_denominator_is_the_hosts_best_and_a_slow_start_is_flagged(tmp_path):
    cache = tmp_path / "cache"
    p1, a1, eff1, flops1 = run(tmp_path / "first", cache)
    assert a1["gemm_flops_start"] > 0 and a1["gemm_flops_end"] > 0
    assert a1["gemm_flops_cached"] == 0, "an empty cache has no best"
    assert a1["gemm_flops"] == a1["gemm_flops_start"]
    assert a1["gemm_warning"] == ""
    assert abs(eff1[-1] - flops1[-1] / a1["gemm_flops"]) <= 1e-9 * flops1[-1] / a1["gemm_flops"]
    files = list(cache.glob("cpu_peak.*.txt"))
    assert len(files) == 1, files
    best = max(a1["gemm_flops_start"], a1["gemm_flops_end"])
    text = files[0].read_text()
    assert f"gemm " in text and a1["gemm_key"] in text, text

    # Plant a best figure 5x this machine's: the next start is far below it.
    planted = float(5 * best)
    lines = [l for l in text.splitlines() if not l.startswith("gemm ")]
    files[0].write_text("\n".join(lines + [f"gemm {planted!r} {a1['gemm_key']}"]) + "\n")
    p2, a2, eff2, flops2 = run(tmp_path / "second", cache)
    assert a2["gemm_flops_cached"] == planted
    assert a2["gemm_flops"] == planted, "the denominator is the host's best"
    assert abs(eff2[-1] - flops2[-1] / planted) <= 1e-9 * flops2[-1] / planted
    warning = a2["gemm_warning"]
    assert warning.startswith("machine was busy"), warning
    assert re.search(r"\d+ % below the best measured on this host", warning), warning
    assert warning in a2["env_warnings"]
    assert "machine was busy" in p2.stderr + p2.stdout
    assert "GEMM warning" in p2.stdout  # the summary row


def test_a_short_run_skips_the_end_recheck_and_says_so(tmp_path):
    p, a, _, _ = run(tmp_path / "short", tmp_path / "cache", recheck="0")
    assert "gemm_flops_end" not in a
    assert "GEMM not re-measured after the last step" in p.stdout + p.stderr



def test_without_the_gemm_probe_mfu_stays_and_gemm_efficiency_says_not_measured(tmp_path):
    """metrics.gemm_probe = false: no start-up GEMM, no host-best entry, no re-check;
    gemm_efficiency NaN and its summary row says why; MFU against the hardware peak kept."""
    cache = tmp_path / "cache"
    p, a, eff, _ = run(tmp_path / "run", cache, overrides=["metrics.gemm_probe=false"])
    mfu = steps(tmp_path / "run", "mfu")
    assert a["gemm_flops"] == 0 and a["gemm_flops_start"] == 0 and a["gemm_key"] == ""
    assert "gemm_flops_end" not in a, "nothing to re-check"
    assert a["gemm_source"] == "not measured (metrics.gemm_probe = false)"
    assert np.isnan(eff).all(), eff
    assert (mfu > 0).all() and (mfu < 1).all(), mfu
    assert not any(line.startswith("gemm ") for f in cache.glob("cpu_peak.*.txt")
                   for line in f.read_text().splitlines()), "no figure for the host's best"
    row = next(line for line in p.stdout.splitlines() if "GEMM efficiency" in line)
    assert "not reported: not measured (metrics.gemm_probe = false)" in row, row
    assert "GEMM not re-measured" not in p.stdout + p.stderr


def test_auto_times_its_routes_whatever_the_gemm_probe_says(tmp_path):
    """fp32_gemm = "auto" chooses its BLAS by timing both: that figure is the denominator."""
    _, a, eff, _ = run(tmp_path / "run", tmp_path / "cache", recheck="0",
                       overrides=["training.fp32_gemm=auto", "metrics.gemm_probe=false"])
    assert a["gemm_flops"] > 0 and a["fp32_gemm_aten_flops"] > 0, a["gemm_source"]
    assert np.isfinite(eff).all() and (eff > 0).all(), eff
