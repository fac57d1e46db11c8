"""LoRA runs as a user relies on them: only adapters train and are checkpointed, a resume
(also into another layout) continues the same run, the base a checkpoint was trained on is
enforced, and the FLOP count the run reports says what it counts.

(Layout equality of LoRA runs: tests/e2e/trainer/test_layouts.py, LORA_LAYOUTS.)
"""
import json

import h5py
import numpy as np
import pytest

from test_checkpoint import h5, losses, preempt, run
from trainer_util import assert_close

LORA = ("lora.rank=4", "lora.targets=\"all\"", "lora.alpha=16", "training.lr=0.003")


def manifest(step_dir):
    return json.loads((step_dir / "manifest.json").read_text())


def test_checkpoint_holds_only_adapters_and_records_the_base(tmp_path):
    out = tmp_path / "run"
    run(out, 1, *LORA, "training.max_steps=4", "checkpoint.interval=4")
    m = manifest(out / "checkpoints" / "step_00000004")
    model = sorted(n for n in m["tensors"] if n.startswith("model."))
    assert model and all(".lora_A.weight" in n or ".lora_B.weight" in n for n in model), model
    assert len(model) == 2 * 7 * 2  # 2 layers x 7 targets x (A, B)
    assert not any(n.startswith("optim.") and ".lora_" not in n for n in m["tensors"])
    assert m["compat"]["lora.base"] == '"seed 1234"' and m["compat"]["lora.rank"] == "4"
    with h5(out) as f:
        assert f.attrs["flops_formula"] == "lora-v1"
        assert 0 < f.attrs["trainable_params"] < f.attrs["total_params"]
        full = f["steps/flops_per_token"][0]
    ref = tmp_path / "full"
    run(ref, 1, "training.max_steps=2")
    with h5(ref) as f:
        assert f.attrs["flops_formula"] == "full-v1"
        assert f.attrs["trainable_params"] == f.attrs["total_params"]
        assert full < f["steps/flops_per_token"][0]


@pytest.mark.parametrize("world,layout", [
    (1, ("training.micro_batch_size=2",)),
    (2, ("training.micro_batch_size=1", "parallel.dp_shard=2", "parallel.zero_stage=3")),
    (2, ("training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=2")),
], ids=["w1", "zero3_w2", "pp2"])
def test_sigterm_then_resume_is_bit_identical(tmp_path, world, layout):
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    run(ref, world, *layout, *LORA)
    preempt(cut, world, layout + LORA + ("checkpoint.interval=4",))
    run(cut, world, *layout, *LORA, "checkpoint.interval=4")
    for r in range(world):
        with h5(cut, r) as f:
            assert list(f["steps/step"][:]) == list(range(20))
        assert np.array_equal(losses(ref, r), losses(cut, r))


def test_resharding_zero3_to_tp2_matches_the_uninterrupted_run(tmp_path):
    ref, new = tmp_path / "ref", tmp_path / "new"
    run(ref, 2, "training.micro_batch_size=1", "parallel.dp_shard=2", "parallel.zero_stage=3",
        *LORA, "checkpoint.interval=8", "checkpoint.keep_last=0")
    step8 = ref / "checkpoints" / "step_00000008"
    run(new, 2, "training.micro_batch_size=2", "parallel.tp=2", *LORA,
        f"checkpoint.resume={step8}")
    assert_close(losses(new), losses(ref)[8:], 1e-5)


@pytest.mark.parametrize("change,names", [
    (("training.seed=1",), "lora.base"),
    (("lora.rank=8",), "lora.rank"),
    (("lora.targets=\"q,v\"",), "lora.targets"),
    (("lora.rank=0",), "lora.rank"),
], ids=["other_base", "rank", "targets", "full_finetuning"])
def test_resume_on_another_base_or_adapter_shape_exits_2_naming_it(tmp_path, change, names):
    out = tmp_path / "run"
    run(out, 1, *LORA, "training.max_steps=4", "checkpoint.interval=4")
    step4 = out / "checkpoints" / "step_00000004"
    new = tmp_path / "new"
    overrides = [o for o in LORA if o.split("=")[0] not in {c.split("=")[0] for c in change}]
    if change == ("lora.rank=0",):
        overrides = ["training.lr=0.003"]
    outs = run(new, 1, *overrides, *change, f"checkpoint.resume={step4}", expect=2)
    assert names in outs[0][2], outs[0][2]
    assert not new.exists(), "nothing may be written"


def test_dropout_masks_repeat_run_to_run_and_across_a_resume(tmp_path):
    """LoRA dropout draws its masks from training.seed (libtorch seeds its default generator at
    random in every process): two runs of one config are bit-identical, and a resumed run
    draws the masks the uninterrupted one drew."""
    drop = LORA + ("lora.dropout=0.1",)
    a, b, cut = tmp_path / "a", tmp_path / "b", tmp_path / "cut"
    run(a, 1, *drop)
    run(b, 1, *drop)
    assert np.array_equal(losses(a), losses(b))
    preempt(cut, 1, drop + ("checkpoint.interval=4",))
    run(cut, 1, *drop, "checkpoint.interval=4")
    assert np.array_equal(losses(a), losses(cut))


def test_bf16_base_trains_with_fp32_adapters(tmp_path):
    out = tmp_path / "run"
    run(out, 1, *LORA, "lora.base_dtype=\"bf16\"", "training.max_steps=8")
    loss = losses(out)
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0]
