"""gemm_efficiency's denominator is the best GEMM measured on the host (trainer/README.md
"Metrics"): each run records its start and end figures in the peak cache, divides by the
best known, and flags a start-up figure more than 10 % below the cached best."""
import re
import subprocess

from trainer_util import TINY, TRAINER, base_env, metrics


def run(out_dir, cache_dir, recheck="1"):
    cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(out_dir), "--no-sweep-dir",
           "training.max_steps=4", "checkpoint.save_final=false",
           "training.fp32_gemm=aten"]  # one BLAS: one cache key in both runs
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
