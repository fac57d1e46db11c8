"""Layouts that compute the same global batch give the same losses."""
import numpy as np
import pytest

from trainer_util import assert_close, losses, run_ranks, run_trainer


# The two reference runs several tests compare against, each trained once per module.
@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """tiny as configured (micro-batch 2), named explicitly: max_length padding, no activation
    checkpointing."""
    out = tmp_path_factory.mktemp("plain")
    run_trainer(out, "training.activation_checkpointing=\"none\"", "data.padding=max_length")
    return losses(out)


@pytest.fixture(scope="module")
def mb4(tmp_path_factory):
    """tiny with micro-batch 4: the global batch of 2 ranks x 2 and of 2 x 2 accumulated."""
    out = tmp_path_factory.mktemp("mb4")
    run_trainer(out, "training.micro_batch_size=4")
    return losses(out)


@pytest.mark.quick  # scripts/test.sh --quick: the trainer's end-to-end test
def test_two_hand_started_ranks_match_world_one(tmp_path, mb4):
    run_ranks(tmp_path / "ws2", 2, "training.micro_batch_size=2")
    ref = mb4
    assert len(ref) == 20
    assert ref[-1] < ref[0] - 0.1, "the tiny model should learn the synthetic successor rule"
    for rank in (0, 1):  # every rank records the same global loss
        assert_close(losses(tmp_path / "ws2", rank), ref, 1e-5)


def test_grad_accumulation_matches_bigger_micro_batch(tmp_path, mb4):
    run_trainer(tmp_path / "acc", "training.micro_batch_size=2", "training.grad_accum_steps=2")
    assert_close(losses(tmp_path / "acc"), mb4, 1e-5)


def test_activation_checkpointing_does_not_change_losses(tmp_path, plain):
    for mode in ("full", "every_2"):
        run_trainer(tmp_path / mode, f"training.activation_checkpointing=\"{mode}\"")
        assert_close(losses(tmp_path / mode), plain, 1e-6)


def test_longest_padding_matches_max_length(tmp_path, plain):
    # Right padding under a causal mask never reaches real tokens, so only speed changes.
    run_trainer(tmp_path / "longest", "data.padding=longest")
    assert_close(losses(tmp_path / "longest"), plain, 1e-5)


def test_token_files_reproduce_synthetic_data(tmp_path, plain):
    # --generate-data writes exactly the synthetic documents, so losses agree.
    for ext in ("jsonl", "bin"):
        data = tmp_path / f"data.{ext}"
        run_trainer(tmp_path / "gen", "--generate-data", str(data))
        assert data.stat().st_size > 0
        run_trainer(tmp_path / ext, f"data.source={data}")
        if ext == "jsonl":
            assert_close(losses(tmp_path / ext), plain, 1e-6)
        else:  # .bin is a flat stream cut into full windows: no padding at all
            assert np.all(np.isfinite(losses(tmp_path / ext)))


def test_bf16_and_adafactor_train(tmp_path):
    run_trainer(tmp_path / "bf16", "training.dtype=bf16")
    run_trainer(tmp_path / "ada", "training.optimizer=adafactor", "training.lr=1e-2")
    bf16 = losses(tmp_path / "bf16")
    assert np.all(np.isfinite(bf16)) and bf16[-1] < bf16[0]
    ada = losses(tmp_path / "ada")
    assert np.all(np.isfinite(ada)) and ada[-1] < ada[0]
