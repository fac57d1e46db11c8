"""scripts/bench_gpu_reference.py, the plain PyTorch loop `scripts/bench.sh gpu` measures ftbench
against, trains as the trainer does. On the CPU, from the same HF weights (hf_util.make_hf_dir:
GQA 4/2, tied embeddings, rope theta 500, eps 1e-6) and the same .bin windows (`trainer
--generate-data`), 8 steps of micro-batch 2 x 32 tokens at tiny.toml's lr 1e-3:

- fp32: the first loss within 1e-5 of the trainer's (measured: equal) and the first gradient
  norm within 1e-5 (measured 4.7e-7: the whole backward agrees); every loss within 1.5e-5.
  Measured on the 2-core development VM (AMD EPYC, 2026-11-29): at most 6.2e-6. That is
  rounding, which AdamW's first steps amplify (an update is about lr x sign(g) even where |g|
  is tiny): the trainer against itself moves by up to 1.3e-6 with its other fp32 BLAS and
  4.2e-6 with SDPA in place of its fused softmax. A wrong optimizer detail moves these losses
  more within the same 8 steps: no clipping 5.8e-5, weight decay 0.01 6.7e-5, AdamW eps 1e-6
  7.6e-5, beta2 0.999 8.4e-5, beta1 0.95 2.4e-4.
- bf16 (fp32 masters cast on use, as the trainer): every loss within 2e-3 (measured 6.6e-4; the
  trainer's own fused softmax against SDPA in bf16: 1.0e-3).
- --model takes the trainer's model.* keys (what bench.sh gpu passes both): the trainer's
  parameter count, and llama1b's keys are Llama-3.2-1B's shape; every micro-batch of a process
  starts from the same weights.

bench_gpu_report.py is checked on a made-up run set (its figures are the test's, not a
measurement).
"""
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "e2e" / "trainer"))
import bench_gpu_reference  # noqa: E402
import bench_gpu_report  # noqa: E402
from bench_llama import Llama, Shape  # noqa: E402
from hf_util import make_hf_dir  # noqa: E402
from trainer_util import TINY, TRAINER, base_env, run_trainer, steps  # noqa: E402

STEPS = 8


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """An HF model directory (tied, GQA) and the trainer's tokens for it."""
    d = tmp_path_factory.mktemp("ref")
    make_hf_dir(d / "hf", seed=3, tie_word_embeddings=True)
    p = subprocess.run([str(TRAINER), "--config", str(TINY), f"model.from_pretrained={d / 'hf'}",
                        "data.seq_len=32", "--generate-data", str(d / "tokens.bin")],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    return d


def trainer(d, model, name, *overrides, n=STEPS):
    run_trainer(d / name, f"model.from_pretrained={model}", f"data.source={d / 'tokens.bin'}",
                "data.seq_len=32", f"training.max_steps={n}", *overrides)
    return steps(d / name, "loss"), steps(d / name, "grad_norm")


def reference(d, model, name, *args, n=STEPS):
    out = d / f"{name}.json"
    bench_gpu_reference.main(["--model-dir", str(model), "--tokens", str(d / "tokens.bin"),
                              "--seq", "32", "--batch", "2", "--warmup", "0", "--steps", str(n),
                              "--rounds", "1", "--device", "cpu", "--threads", "1", "--lr", "1e-3",
                              "--out", str(out), *args])
    run = json.loads(out.read_text())["runs"][0]
    return np.array(run["losses"]), np.array(run["grad_norms"])


def rel(a, b):
    return np.abs(a - b) / np.abs(b)


def test_fp32_losses_equal_the_trainers(data):
    loss, norm = trainer(data, data / "hf", "fp32")
    ref_loss, ref_norm = reference(data, data / "hf", "fp32", "--dtype", "fp32")
    assert rel(ref_loss[0], loss[0]) <= 1e-5, (ref_loss, loss)
    assert rel(ref_norm[0], norm[0]) <= 1e-5, (ref_norm, norm)
    assert rel(ref_loss, loss).max() <= 1.5e-5, rel(ref_loss, loss)


def test_bf16_trains_like_the_trainer(data):
    loss, _ = trainer(data, data / "hf", "bf16", "training.dtype=bf16")
    ref_loss, _ = reference(data, data / "hf", "bf16", "--dtype", "bf16")
    assert rel(ref_loss, loss).max() <= 2e-3, rel(ref_loss, loss)


def test_model_keys_give_the_trainers_model(data):
    """--model takes the trainer's model.* keys (the tiny preset: untied, vocabulary 512) and
    draws N(0, 0.02) weights: the trainer's parameter count, and a first loss near the
    trainer's (other values of the same distribution: measured 1.7e-3 apart, both near
    ln 512 = 6.24). Each micro-batch is a new run: the same one twice trains alike."""
    with open(ROOT / "configs" / "models" / "tiny.toml", "rb") as f:
        preset = tomllib.load(f)["model"]
    keys = [f"model.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in preset.items()]
    run_trainer(data / "keys", f"data.source={data / 'tokens.bin'}", "data.seq_len=32",
                "training.max_steps=1")
    with h5py.File(data / "keys" / "metrics" / "rank_00000.h5", "r") as f:
        params, loss = int(f.attrs["total_params"]), float(f["steps/loss"][0])
    out = data / "keys.json"
    bench_gpu_reference.main(["--model", *keys, "--tokens", str(data / "tokens.bin"), "--seq", "32",
                              "--batch", "2", "2", "--warmup", "0", "--steps", "2", "--rounds", "1",
                              "--device", "cpu", "--dtype", "fp32", "--threads", "1",
                              "--out", str(out)])
    ref = json.loads(out.read_text())
    assert ref["params"] == params
    assert ref["runs"][0]["losses"] == ref["runs"][1]["losses"]
    assert rel(ref["runs"][0]["losses"][0], loss) <= 1e-2, (ref["runs"][0]["losses"], loss)


def test_llama1b_is_the_shape_of_llama_3_2_1b():
    """scripts/bench.sh's GPU_LLAMA1B keys: Llama-3.2-1B's 1,235,814,400 parameters."""
    text = (ROOT / "scripts" / "bench.sh").read_text()
    keys = re.search(r"^GPU_LLAMA1B=\((.*?)\)$", text, re.S | re.M).group(1).split()
    with torch.device("meta"):
        model = Llama(Shape.from_keys(keys))
    assert sum(t.numel() for t in model.parameters()) == 1_235_814_400


NVIDIA_SMI = """
==============NVSMI LOG==============

Driver Version                            : 999.1
CUDA Version                              : 99.9

Attached GPUs                             : 1
GPU 00000000:00:00.0
    Product Name                          : Fake GPU
    Clocks
        Graphics                          : 100 MHz
    Applications Clocks
        Graphics                          : 200 MHz
        Memory                            : 300 MHz
    Max Clocks
        Graphics                          : 400 MHz
        Memory                            : 500 MHz
    GPU Power Readings
        Current Power Limit               : 600.00 W
        Max Power Limit                   : 700.00 W
"""


def fake_runs(d):
    """A made-up run set: 1 warm-up step, 2 rounds of 2 steps; d2048 at micro-batch 1 (every
    variant ran) and 2 (ftbench out of memory, eager fits); the compiled process failed."""
    (d / "nvidia-smi.txt").write_text(NVIDIA_SMI)
    (d / "date").write_text("2000-01-01 00:00 UTC\n")
    (d / "steps").write_text("1 2 2\n")
    (d / "models").write_text("d2048\n")
    (d / "micro_batches").write_text("1 2\n")
    (d / "elapsed.tsv").write_text("d2048 ftbench\t12\ntotal\t34\n")
    m = d / "d2048"
    (m / "ftbench.mb1" / "metrics").mkdir(parents=True)
    (m / "model.keys").write_text("model.dim=2048\nmodel.n_layers=16\n")
    with h5py.File(m / "ftbench.mb1" / "metrics" / "rank_00000.h5", "w") as f:
        f["steps/step_time_s"] = [9.0, 1.0, 1.0, 0.5, 0.5]  # rounds: 2048 and 4096 tokens/s
        f["steps/tokens_padded"] = [2048] * 5
        f["steps/flops_per_token"] = [1e9] * 5
        f["steps/loss"] = [10.5, 10.4, 10.3, 10.2, 10.1]
        f.attrs.update(peak_flops=1e13, peak_check="ok", device_peak_allocated_bytes=2**30,
                       total_params=886_000_000, torch_version="2.11.0", peak_source="table")
    (m / "ftbench.mb1.rc").write_text("0\n")
    (m / "ftbench.mb2.rc").write_text("5\n")
    runs = [{"micro_batch": 1, "fits": True, "losses": [10.5], "compile_s": None,
             "peak_allocated_bytes": 2**31,
             "rounds": [{"tokens_per_s": 2000.0}, {"tokens_per_s": 3000.0}]},
            {"micro_batch": 2, "fits": True, "losses": [10.6], "compile_s": None,
             "peak_allocated_bytes": 2**32, "rounds": [{"tokens_per_s": 5000.0}] * 2}]
    eager = {"torch_version": "2.11.0+cu130", "params": 886_000_000, "runs": runs}
    (m / "eager.json").write_text(json.dumps(eager))
    (m / "eager.rc").write_text("0\n")
    (m / "compiled.rc").write_text("1\n")


def test_the_report_reads_the_gpu_the_rounds_and_what_did_not_fit(tmp_path, capsys):
    fake_runs(tmp_path)
    assert bench_gpu_report.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# {bench_gpu_report.TITLE}\n")
    assert ("GPU **Fake GPU**, driver 999.1, CUDA 99.9; clocks: max graphics 400 MHz, max memory "
            "500 MHz, applications graphics 200 MHz, applications memory 300 MHz; power limit "
            "600.00 W (max 700.00 W)") in out
    # 4096 / 3000 best rounds, 3072 / 2500 medians; MFU 1e9 x 4096 / 1e13
    assert ("| d2048 | 1 | 4096 (3072) | 3000 (2500) | failed | 41.0 % | **1.37×** (1.23×) met "
            "| failed | 1024 / 2048 / - |") in out
    assert ("| d2048 | 2 | does not fit | 5000 (5000) | failed | - | ftbench does not fit "
            "| failed |") in out
    assert "- every target: **NOT met**" in out
    assert "compiled failed: exit 1, log runs/gpu/d2048/compiled.log" in out
    assert "first-step loss ftbench 10.5000, eager 10.5000" in out
    assert ("`model.dim=2048 model.n_layers=16`; parameters: ftbench 886,000,000, eager "
            "886,000,000") in out
    assert "- elapsed: d2048 ftbench 12 s, total 34 s" in out


def test_a_report_of_a_stopped_benchmark_says_what_did_not_run(tmp_path, capsys):
    """bench.sh gpu rewrites the report after each part: a model not reached is "not run", and
    whether the targets are met is not known."""
    fake_runs(tmp_path)
    (tmp_path / "models").write_text("d2048 llama1b\n")
    assert bench_gpu_report.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| llama1b | 2 | not run | not run | not run | - | not run | not run | - / - / - |" in out
    assert "- every target: not known: the benchmark stopped before every run" in out
