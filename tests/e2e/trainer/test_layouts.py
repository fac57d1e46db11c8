"""Every parallel layout trains the same model on the same global batch.

Global batch 4 x 64 tokens, fp32, 20 steps of the tiny model (4 heads, 2 kv heads, so tp=2
splits both). Losses and global gradient norms must equal world size 1 within 1e-5 relative.
Pipeline rows (parallel.pp) whose stages need more blocks than tiny's 2 run it with 4
(model.n_layers=4 in the row), against a world-1 reference of that model.
"""
import h5py
import pytest

from trainer_util import ONE_BLAS, assert_close, run_ranks, run_trainer, steps

# Every run on one BLAS (run_trainer and run_ranks add ONE_BLAS; named here as well, since
# equal losses rest on it): "auto" picks the faster at start, which a busy machine can flip
# between the reference and a layout, and the two round differently.

LAYOUTS = {
    "ddp_world2": (2, ["training.micro_batch_size=2"]),
    "zero1": (2, ["training.micro_batch_size=2", "parallel.dp_shard=2", "parallel.zero_stage=1"]),
    "zero2": (2, ["training.micro_batch_size=2", "parallel.dp_shard=2", "parallel.zero_stage=2"]),
    "zero3": (2, ["training.micro_batch_size=2", "parallel.dp_shard=2", "parallel.zero_stage=3"]),
    "tp2": (2, ["training.micro_batch_size=4", "parallel.tp=2"]),
    "tp2_fsdp2": (4, ["training.micro_batch_size=2", "parallel.tp=2", "parallel.dp_shard=2",
                      "parallel.zero_stage=3"]),
    # Overlapped bucketed DDP: many small buckets, gradient accumulation, and with tp.
    "ddp_accum2_small_buckets": (2, ["training.micro_batch_size=1", "training.grad_accum_steps=2",
                                     "parallel.bucket_mb=0.05"]),
    "tp2_dp2": (4, ["training.micro_batch_size=2", "parallel.tp=2", "parallel.bucket_mb=0.05"]),
    # ZeRO-2 reduce-scatters each unit during backward, every micro-batch, and with tp.
    "zero2_accum2": (2, ["training.micro_batch_size=1", "training.grad_accum_steps=2",
                         "parallel.dp_shard=2", "parallel.zero_stage=2"]),
    "tp2_zero2": (4, ["training.micro_batch_size=2", "parallel.tp=2", "parallel.dp_shard=2",
                      "parallel.zero_stage=2"]),
    "hsdp_2x2": (4, ["training.micro_batch_size=1", "parallel.dp_replicate=2",
                     "parallel.dp_shard=2", "parallel.zero_stage=2"]),
    # Pipelines: micro-batches of the global batch flow through the stages (one block each
    # unless n_layers says otherwise); every rank records the global loss and norm.
    "pp2_1f1b": (2, ["training.micro_batch_size=2", "parallel.pp=2",
                     "parallel.pp_microbatches=2"]),
    "pp2_gpipe": (2, ["training.micro_batch_size=2", "parallel.pp=2",
                      "parallel.pp_microbatches=2", "parallel.pp_schedule=gpipe"]),
    "pp2_interleaved": (2, ["model.n_layers=4", "training.micro_batch_size=2", "parallel.pp=2",
                            "parallel.pp_microbatches=2", "parallel.pp_schedule=interleaved_1f1b",
                            "parallel.pp_virtual_stages=2"]),
    # Zero-bubble H1: stage 1 defers each weight pass by one backward; with dp the DDP
    # buckets wait for the final weight pass, and recomputed blocks leave theirs too.
    "pp2_zb_h1": (2, ["training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=4",
                      "parallel.pp_schedule=zb_h1"]),
    "pp2_zb_h1_dp2_checkpointing": (4, ["training.micro_batch_size=1", "parallel.pp=2",
                                        "parallel.pp_microbatches=2", "parallel.pp_schedule=zb_h1",
                                        "parallel.bucket_mb=0.05",
                                        "training.activation_checkpointing=\"full\""]),
    "pp4": (4, ["model.n_layers=4", "training.micro_batch_size=1", "parallel.pp=4",
                "parallel.pp_microbatches=4"]),
    "pp2_zero1": (4, ["training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=2",
                      "parallel.dp_shard=2", "parallel.zero_stage=1"]),
    "pp2_zero3": (4, ["training.micro_batch_size=1", "parallel.pp=2", "parallel.pp_microbatches=2",
                      "parallel.dp_shard=2", "parallel.zero_stage=3"]),
    "pp2_tp2": (4, ["training.micro_batch_size=2", "parallel.pp=2", "parallel.pp_microbatches=2",
                    "parallel.tp=2"]),
    # Tied embeddings: the last stage's copy of the embedding is its output projection, the
    # two copies' gradients summed between the first and the last stage every step.
    "pp2_tied": (2, ["model.tie_embeddings=true", "training.micro_batch_size=2", "parallel.pp=2",
                     "parallel.pp_microbatches=2"]),
    "pp2_tied_dp2": (4, ["model.tie_embeddings=true", "training.micro_batch_size=1",
                         "parallel.pp=2", "parallel.pp_microbatches=2"]),
}

# LoRA (rank 4 on all seven targets, base frozen): adapters split as their base weights are
# under tp, the frozen base sharded by ZeRO-3, recomputed under activation checkpointing.
LORA = ["lora.rank=4", "lora.targets=all", "lora.alpha=16", "training.lr=0.003"]
LORA_LAYOUTS = {
    "lora_ddp_world2": (2, ["training.micro_batch_size=2"]),
    "lora_zero1": (2, ["training.micro_batch_size=2", "parallel.dp_shard=2",
                       "parallel.zero_stage=1"]),
    "lora_zero2_accum2": (2, ["training.micro_batch_size=1", "training.grad_accum_steps=2",
                              "parallel.dp_shard=2", "parallel.zero_stage=2"]),
    "lora_zero3": (2, ["training.micro_batch_size=2", "parallel.dp_shard=2",
                       "parallel.zero_stage=3"]),
    "lora_tp2": (2, ["training.micro_batch_size=4", "parallel.tp=2"]),
    "lora_tp2_fsdp2": (4, ["training.micro_batch_size=2", "parallel.tp=2",
                           "parallel.dp_shard=2", "parallel.zero_stage=3"]),
    "lora_checkpointing_ddp": (2, ["training.micro_batch_size=2",
                                   "training.activation_checkpointing=\"full\""]),
    # Pipelines: each stage trains the adapters of its own blocks.
    "lora_pp2_1f1b": (2, ["training.micro_batch_size=2", "parallel.pp=2",
                          "parallel.pp_microbatches=2"]),
    "lora_pp2_interleaved": (2, ["model.n_layers=4", "training.micro_batch_size=2",
                                 "parallel.pp=2", "parallel.pp_microbatches=2",
                                 "parallel.pp_schedule=interleaved_1f1b",
                                 "parallel.pp_virtual_stages=2"]),
    # Block 0's adapters see an input that needs no gradient, also when recomputed.
    "lora_pp2_zb_h1": (2, ["training.micro_batch_size=1", "parallel.pp=2",
                           "parallel.pp_microbatches=4", "parallel.pp_schedule=zb_h1"]),
    "lora_pp2_zb_h1_checkpointing": (2, ["training.micro_batch_size=1", "parallel.pp=2",
                                         "parallel.pp_microbatches=4",
                                         "parallel.pp_schedule=zb_h1",
                                         "training.activation_checkpointing=\"full\""]),
    "lora_pp2_zero3": (4, ["training.micro_batch_size=1", "parallel.pp=2",
                           "parallel.pp_microbatches=2", "parallel.dp_shard=2",
                           "parallel.zero_stage=3"]),
}


def model_overrides(overrides):
    return [o for o in overrides if o.startswith("model.")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """World-1 runs, one per set of model (and LoRA) overrides, made on first use."""
    runs = {}

    def get(model):
        if tuple(model) not in runs:
            out = tmp_path_factory.mktemp("ws1")
            run_trainer(out, "training.micro_batch_size=4", ONE_BLAS, *model)
            runs[tuple(model)] = out
        return runs[tuple(model)]
    return get


def pipeline_links(out, rank):
    """The transports of this rank's pipeline links, from its `collectives` record."""
    with h5py.File(out / "metrics" / f"rank_{rank:05d}.h5", "r") as f:
        record = f.attrs["collectives"]
    return [t for t in record.split("; ") if t.startswith("pp_")]


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_matches_world_one(name, reference, tmp_path):
    world, overrides = LAYOUTS[name]
    run_ranks(tmp_path, world, ONE_BLAS, *overrides)
    ref = reference(model_overrides(overrides))
    ref_loss, ref_norm = steps(ref, "loss"), steps(ref, "grad_norm")
    assert len(ref_loss) == 20
    for rank in range(world):
        assert_close(steps(tmp_path, "loss", rank), ref_loss, 1e-5)
        assert_close(steps(tmp_path, "grad_norm", rank), ref_norm, 1e-5)
        if name.startswith("pp"):  # all ranks on this host: the links run through memory
            links = pipeline_links(tmp_path, rank)
            assert links and all(t.endswith(": local memory") for t in links), links


def test_pipeline_links_forced_onto_the_backend(reference, tmp_path):
    """parallel.pp_local_p2p = false: the links run on Gloo, with the same losses."""
    world, overrides = LAYOUTS["pp2_1f1b"]
    run_ranks(tmp_path, world, ONE_BLAS, *overrides, "parallel.pp_local_p2p=false")
    ref = reference(model_overrides(overrides))
    for rank in range(world):
        assert_close(steps(tmp_path, "loss", rank), steps(ref, "loss"), 1e-5)
        assert pipeline_links(tmp_path, rank) == [
            "pp_0_1: backend point-to-point (parallel.pp_local_p2p = false)"]


@pytest.mark.parametrize("name", list(LORA_LAYOUTS))
def test_lora_layout_matches_world_one(name, reference, tmp_path):
    world, overrides = LORA_LAYOUTS[name]
    run_ranks(tmp_path, world, ONE_BLAS, *overrides, *LORA)
    ref = reference(model_overrides(overrides) + LORA)
    ref_loss, ref_norm = steps(ref, "loss"), steps(ref, "grad_norm")
    assert ref_loss[-1] < ref_loss[0] - 0.05  # the adapters learn
    for rank in range(world):
        assert_close(steps(tmp_path, "loss", rank), ref_loss, 1e-5)
        assert_close(steps(tmp_path, "grad_norm", rank), ref_norm, 1e-5)


def test_zero3_bf16_and_checkpointing_train(tmp_path):
    # bf16 parameters travel as bytes through Gloo; gradients reduce in fp32.
    run_ranks(tmp_path, 2, "training.micro_batch_size=2", "parallel.dp_shard=2",
              "parallel.zero_stage=3", "training.dtype=bf16")
    loss = steps(tmp_path, "loss")
    assert loss[-1] < loss[0]
