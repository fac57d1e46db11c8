"""Memory techniques: the optimizer step inside backward (training.optimizer_in_backward).

Each parameter is stepped as soon as its gradient is final and the gradient is freed, so no
gradient buffer for the whole model exists (trainer/parallel/ddp.h). The losses must equal
the ordinary step's, and the peak RSS must drop by about the gradients' bytes. (A resume
is bit-identical: test_checkpoint.py's layout dp2_optimizer_in_backward.)
"""
import subprocess

import numpy as np
import pytest

from trainer_util import ROOT, TINY, TRAINER, assert_close, base_env, gpus_visible, losses, \
    metrics, run_ranks, run_trainer, steps

IN_BACKWARD = "training.optimizer_in_backward=true"
NO_CLIP = "training.max_grad_norm=0"  # clipping by the global norm cannot run inside backward


@pytest.mark.parametrize("optimizer", ["adamw", "adafactor"])
def test_in_backward_equals_the_ordinary_step_world_one(tmp_path, optimizer):
    common = [NO_CLIP, f"training.optimizer=\"{optimizer}\""]
    run_trainer(tmp_path / "ref", *common)
    run_trainer(tmp_path / "oib", *common, IN_BACKWARD)
    ref, oib = losses(tmp_path / "ref"), losses(tmp_path / "oib")
    assert len(ref) == 20 and ref[-1] < ref[0] - 0.1
    assert_close(oib, ref, 1e-6)
    # the gradient norm is still recorded: summed from the gradients as they are handed over
    assert_close(steps(tmp_path / "oib", "grad_norm"), steps(tmp_path / "ref", "grad_norm"), 1e-6)


@pytest.mark.parametrize("optimizer", ["adamw", "adafactor"])
def test_in_backward_equals_the_ordinary_step_ddp(tmp_path, optimizer):
    # 0.02 MiB buckets: the tiny model's gradients span many buckets, so the two staging
    # buffers are reused while backward runs.
    common = [NO_CLIP, f"training.optimizer=\"{optimizer}\"", "training.micro_batch_size=1",
              "parallel.bucket_mb=0.02"]
    run_ranks(tmp_path / "ref", 2, *common)
    run_ranks(tmp_path / "oib", 2, *common, IN_BACKWARD)
    for rank in (0, 1):
        assert_close(losses(tmp_path / "oib", rank), losses(tmp_path / "ref", rank), 1e-6)


def test_in_backward_equals_the_ordinary_step_zero3(tmp_path):
    # ZeRO-3 over 2 ranks: each unit's shard is stepped when its reduce-scatter returns
    # (AdamW: Adafactor's factored moments need whole 2-D tensors, which ZeRO does not keep).
    common = [NO_CLIP, "training.micro_batch_size=1", "parallel.dp_shard=2",
              "parallel.zero_stage=3"]
    run_ranks(tmp_path / "ref", 2, *common)
    run_ranks(tmp_path / "oib", 2, *common, IN_BACKWARD)
    for rank in (0, 1):
        assert_close(losses(tmp_path / "oib", rank), losses(tmp_path / "ref", rank), 1e-6)
    assert_close(steps(tmp_path / "oib", "grad_norm"), steps(tmp_path / "ref", "grad_norm"), 1e-6)


def test_in_backward_lowers_peak_rss_by_the_gradient_bytes(tmp_path):
    """D512/L8 fp32, world 1, AdamW: the peak RSS drops by at least 80 % of the gradients'
    bytes (58 M parameters, 232 MB), and the estimate stays within 10 % of the measured peak."""
    cfg = ROOT / "configs" / "runs" / "bench-d512.toml"
    common = [NO_CLIP, "training.micro_batch_size=1", "data.seq_len=128", "data.min_doc_len=128",
              "training.max_steps=3", "checkpoint.interval=0"]
    peak = {}
    for name, extra in (("ref", []), ("oib", [IN_BACKWARD])):
        run_trainer(tmp_path / name, *common, *extra, config=cfg, timeout=300)
        peak[name] = float(steps(tmp_path / name, "peak_rss_bytes")[-1])
        est = subprocess.run([str(TRAINER), "--config", str(cfg), *common, *extra,
                              "--estimate-memory"], env=base_env(), capture_output=True,
                             text=True, timeout=60)
        assert est.returncode == 0, est.stderr
        total = [ln for ln in est.stdout.splitlines() if ln.strip().startswith("total")][0]
        gib = float(total.split()[-2])
        assert abs(gib * 2**30 - peak[name]) <= 0.10 * peak[name], (name, total, peak[name])
    with metrics(tmp_path / "oib") as f:
        grad_bytes = 4 * int(f.attrs["trainable_params"])
    assert peak["ref"] - peak["oib"] >= 0.8 * grad_bytes, (peak, grad_bytes)
    assert_close(losses(tmp_path / "oib"), losses(tmp_path / "ref"), 1e-6)


@pytest.mark.parametrize("override,key", [
    ("training.grad_accum_steps=2", "training.grad_accum_steps"),
    ("training.max_grad_norm=1.0", "training.max_grad_norm"),
])
def test_in_backward_refuses_what_it_cannot_hold(tmp_path, override, key):
    """Exit 2 naming the key and why, before the run directory exists (pipelines and ZeRO:
    tests/unit/common/run_config_test.cpp)."""
    extra = [] if key == "training.max_grad_norm" else [NO_CLIP]
    cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path / "run"),
           "--no-sweep-dir", IN_BACKWARD, override, *extra]
    p = subprocess.run(cmd, env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert key in p.stderr and "optimizer_in_backward" in p.stderr, p.stderr
    assert not (tmp_path / "run").exists()


# ---- training.device_memory_limit_gb: a GPU's caching allocator capped (GPU runs:
# scripts/gpu_check.sh); what a machine without a GPU can check ----

@pytest.mark.parametrize("device,says", [("cpu", "training.device is \"cpu\""),
                                         ("auto", "resolves to cpu")])
def test_device_memory_cap_is_refused_on_the_cpu(tmp_path, device, says):
    if device == "auto" and gpus_visible():
        pytest.skip("a GPU is visible: \"auto\" resolves to it")
    p = subprocess.run([str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path / "run"),
                        "--no-sweep-dir", f"training.device=\"{device}\"",
                        "training.device_memory_limit_gb=24"],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "training.device_memory_limit_gb" in p.stderr and says in p.stderr, p.stderr
    assert "parallel.memory_limit_gb" in p.stderr  # the hint: the host's limit
    assert not (tmp_path / "run").exists()


def test_estimate_for_a_capped_gpu_is_device_memory(tmp_path):
    """Planning a 24 GB card from a machine without one: the table is the GPU's memory, and the
    cap is the budget it is checked against."""
    common = [str(TRAINER), "--config", str(TINY), "--estimate-memory",
              "training.device=\"cuda\"", "model.name=\"llama-2-7b\"", "data.seq_len=4096",
              "training.micro_batch_size=1", "training.dtype=\"bf16\""]
    out = subprocess.run(common + ["training.device_memory_limit_gb=24"], env=base_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "GPU memory: the CUDA caching allocator's bytes" in out.stdout
    assert "runtime baseline                       0.000 GiB" in out.stdout
    assert "memory_limit 24.00 GiB: does NOT fit" in out.stdout, out.stdout


# ---- training.master_weights = "none": bf16 weights without an fp32 copy ----

BF16 = "training.dtype=\"bf16\""


@pytest.fixture(scope="module")
def fp32_masters(tmp_path_factory):
    out = tmp_path_factory.mktemp("fp32_masters")
    run_trainer(out, BF16, "training.max_steps=60")
    return losses(out)


@pytest.mark.parametrize("update", ["stochastic", "kahan", "nearest"])
def test_bf16_weights_train_like_fp32_masters(tmp_path, fp32_masters, update):
    """tiny, bf16 compute, 60 steps, lr 1e-3: every loss within 2e-3 (relative) of the run with
    fp32 masters. Measured (trainer/docs/memory.md): stochastic 4.0e-4, kahan 1.6e-4,
    nearest 3.4e-4; the bound leaves 5x for another CPU's summation order."""
    run_trainer(tmp_path / update, BF16, "training.max_steps=60", "training.master_weights=\"none\"",
                f"training.bf16_update=\"{update}\"")
    got = losses(tmp_path / update)
    assert got[-1] < got[0] - 0.5, "bf16 weights must still learn"
    assert_close(got, fp32_masters, 2e-3)
    with metrics(tmp_path / update) as f:  # the weights the checkpoint holds are bf16 values
        w = f.attrs.get("total_params")
    assert w > 0


@pytest.mark.parametrize("override,key", [
    ("training.dtype=\"fp32\"", "training.dtype"),
    ("lora.rank=4", "training.master_weights"),
])
def test_bf16_weights_refuse_what_they_cannot_hold(tmp_path, override, key):
    p = subprocess.run([str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path / "run"),
                        "--no-sweep-dir", BF16, "training.master_weights=\"none\"", override],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert key in p.stderr and "master_weights" in p.stderr, p.stderr
    assert not (tmp_path / "run").exists()


def test_fit_table_lists_what_fits_a_24_gib_card():
    """`--estimate-memory --fit`: the 7 B shape on a 24 GiB card; the first (smallest) row is
    bf16 weights, Adafactor inside backward, checkpointed, and it fits."""
    base = [str(TRAINER), "--config", str(TINY), "model.name=\"llama-2-7b\"", "data.seq_len=4096",
            "training.device=\"cuda\""]
    out = subprocess.run(base + ["training.device_memory_limit_gb=24", "--estimate-memory", "--fit"],
                         env=base_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [ln.split() for ln in out.stdout.splitlines()[2:]]
    assert len(rows) == 16
    assert rows[0][:6] == ["bf16,", "no", "masters", "adafactor", "inside", "backward"], rows[0]
    assert rows[0][-1].isdigit() and int(rows[0][-1]) >= 1
    # without the card's memory a GPU plan cannot be listed; --fit alone is refused
    for extra, key in ((["--estimate-memory", "--fit"], "training.device_memory_limit_gb"),
                       (["--fit"], "--fit")):
        p = subprocess.run(base + extra, env=base_env(), capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and key in p.stderr, p.stderr


@pytest.mark.parametrize("key,value", [("training.activation_offload", "\"host\""),
                                       ("training.optimizer_offload", "\"host\""),
                                       ("training.cuda_graphs", "true")])
@pytest.mark.parametrize("device,says", [("cpu", "training.device is \"cpu\""),
                                         ("auto", "resolves to cpu")])
def test_gpu_techniques_are_refused_on_the_cpu(tmp_path, device, says, key, value):
    """Offload moves a GPU's checkpointed inputs, or its optimizer state, to host memory, and
    CUDA graphs replay a GPU's captured step (scripts/gpu_check.sh checks each on a GPU); on
    the CPU: exit 2 naming the key before anything is written."""
    if device == "auto" and gpus_visible():
        pytest.skip("a GPU is visible: \"auto\" resolves to it")
    p = subprocess.run([str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path / "run"),
                        "--no-sweep-dir", f"training.device=\"{device}\"",
                        "training.activation_checkpointing=\"full\"", f"{key}={value}"],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert key in p.stderr and says in p.stderr, p.stderr
    assert not (tmp_path / "run").exists()

