"""QLoRA's NF4 frozen base (lora.base_dtype = "nf4", trainer/kernels/nf4.h) end to end.

1. The trainer's quantization (the tensors gtest Nf4.WritesTensorsForTheBitsandbytesCheck
   writes) equals bitsandbytes' quantize_4bit(quant_type="nf4", blocksize=64) byte for byte,
   and its dequantization bitsandbytes' dequantize_4bit (skipped without bitsandbytes; the
   gtest checks the published code values and a float64 reference either way).
2. An HF base imports quantized: the first loss of an NF4 LoRA run at lr 0 equals a float64
   reference of the HF model whose projection weights went through NF4 (the same rules in
   torch here) and whose embedding and lm_head are bf16-rounded.
3. The tiny model trains with an NF4 base close to a bf16 base (bound below), under DDP,
   ZeRO-2 and a 2-stage pipeline as at world 1, and its adapter exports and loads in PEFT.
4. Layouts that would split the packed base (tp, ZeRO-3) exit 2 naming the key; in a sweep
   grid "nf4" is a value like the others, its tp 2 point invalid with that refusal, and the
   "fp32" points keep the tags they had before the key existed.
"""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

from hf_util import LazyModule, make_hf_dir
from test_hf_model import SEQ, TESTS_BIN, reference_logits, write_tokens
from trainer_util import BUILD, TINY, TRAINER, assert_close, base_env, losses, run_ranks, run_trainer, steps

peft = LazyModule("peft")
transformers = LazyModule("transformers")

LORA = ("lora.rank=4", "lora.targets=\"all\"", "lora.alpha=16", "training.lr=0.003")
NF4 = "lora.base_dtype=\"nf4\""
CODES = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                      -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                      0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                      0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                      0.7229568362236023, 1.0], dtype=torch.float32)
# Measured (tiny model, LoRA r4 on all seven targets, 20 steps, fp32 compute, AMD EPYC Zen 4):
# the NF4 base's losses differ from the bf16 base's by at most 5.9e-4 relative (the base's
# quantization error, up to ~0.14 of a block's absmax per weight, shifts the function of a
# model near its random init only a little). The bound leaves ~8x for other BLAS, CPUs and
# seeds' worth of noise; a wrong dequantization (nibble order, scale or code table) makes
# another function of the tokens and moves the loss by far more than 0.5 %.
NF4_VS_BF16_BOUND = 5e-3


def nf4_round_trip(w):
    """w through NF4 and back, as bitsandbytes' default backend computes it (fp32)."""
    flat = torch.as_tensor(np.asarray(w, dtype=np.float32)).reshape(-1)
    assert flat.numel() % 64 == 0
    blocks = flat.view(-1, 64)
    absmax = blocks.abs().amax(1)
    scaled = (blocks * (1.0 / absmax.clamp(min=1e-38)).unsqueeze(1)).clamp(-1, 1)
    idx = torch.bucketize(scaled, (CODES[:-1] + CODES[1:]) / 2)
    return (CODES[idx] * absmax.unsqueeze(1)).reshape(np.shape(w)).numpy()


def test_quantization_equals_bitsandbytes(tmp_path):
    functional = pytest.importorskip("bitsandbytes.functional")
    env = dict(os.environ, FTB_NF4_OUT=str(tmp_path))
    p = subprocess.run([str(TESTS_BIN), "--gtest_filter=Nf4.WritesTensorsForTheBitsandbytesCheck"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "[  PASSED  ] 1 test" in p.stdout, p.stdout + p.stderr
    x = torch.from_numpy(np.fromfile(tmp_path / "x.f32", dtype="<f4"))
    # bitsandbytes' CPU ops run eagerly: torch.compile would build a C++ kernel for the same
    # lookups and products first (about 30 s on 2 cores).
    with torch._dynamo.config.patch(disable=True):
        packed, state = functional.quantize_4bit(x, quant_type="nf4", blocksize=64)
        theirs = functional.dequantize_4bit(packed, state).reshape(-1).numpy()
    codes = np.fromfile(tmp_path / "codes.u8", dtype=np.uint8)
    absmax = np.fromfile(tmp_path / "absmax.f32", dtype="<f4")
    assert x.numel() % 64 != 0 and x.numel() % 2 == 1, "a short last block and a pad nibble"
    assert np.array_equal(codes, packed.reshape(-1).numpy())
    assert np.array_equal(absmax, state.absmax.numpy())
    assert np.array_equal(np.fromfile(tmp_path / "dequant.f32", dtype="<f4"), theirs)


def bf16(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float32)).to(torch.bfloat16).float().numpy()


def test_hf_base_imports_quantized(tmp_path):
    cfg, w = make_hf_dir(tmp_path / "m", seed=21)
    toks = write_tokens(tmp_path / "tokens.bin", 8, cfg["vocab_size"])
    run_trainer(tmp_path / "run", f"model.from_pretrained={tmp_path / 'm'}",
                f"data.source={tmp_path / 'tokens.bin'}", f"data.seq_len={SEQ}",
                "data.bin_dtype=uint16", "training.micro_batch_size=4", "training.max_steps=1",
                "metrics.skip_first_steps=0", *LORA, NF4, "training.lr=0")
    q = {k: (bf16(v) if "embed" in k or "lm_head" in k else
             nf4_round_trip(v) if "proj" in k else v) for k, v in w.items()}
    samples = np.stack([toks[i * SEQ:i * SEQ + SEQ + 1] for i in range(4)]).astype(np.int64)
    logits = torch.from_numpy(reference_logits(cfg, q, samples[:, :-1]))
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                            torch.from_numpy(samples[:, 1:]).reshape(-1)).item()
    assert_close(steps(tmp_path / "run", "loss")[:1], [ref], 1e-5)


@pytest.fixture(scope="module")
def nf4_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("nf4")
    run_trainer(d / "nf4", *LORA, NF4, "checkpoint.interval=20")
    return d / "nf4"


def test_nf4_base_trains_close_to_the_bf16_base(nf4_run, tmp_path):
    run_trainer(tmp_path / "bf16", *LORA, "lora.base_dtype=\"bf16\"")
    nf4, ref = losses(nf4_run), losses(tmp_path / "bf16")
    assert len(nf4) == 20 and np.all(np.isfinite(nf4)) and nf4[-1] < nf4[0]
    assert_close(nf4, ref, NF4_VS_BF16_BOUND)


@pytest.mark.parametrize("layout", [("parallel.dp_replicate=2",),
                                    ("parallel.dp_shard=2", "parallel.zero_stage=2"),
                                    ("parallel.pp=2", "parallel.pp_microbatches=2")],
                         ids=["ddp", "zero2", "pp2"])
def test_nf4_data_parallel_equals_world_1(nf4_run, tmp_path, layout):
    run_ranks(tmp_path / "run", 2, *LORA, NF4, "training.micro_batch_size=1", *layout)
    assert_close(losses(tmp_path / "run"), losses(nf4_run), 1e-5)


def test_nf4_adapter_exports_and_loads_in_peft(nf4_run, tmp_path):
    p = subprocess.run([str(TRAINER), "export", "--adapter", "--checkpoint",
                        str(nf4_run / "checkpoints" / "step_00000020"), "--out",
                        str(tmp_path / "adapter")],
                       env=base_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=512)
    model = peft.PeftModel.from_pretrained(transformers.LlamaForCausalLM(config),
                                           tmp_path / "adapter")
    b = [v for k, v in model.state_dict().items() if "lora_B" in k]
    assert len(b) == 2 * 7 and all(float(v.abs().max()) > 0 for v in b)


@pytest.mark.parametrize("layout,key", [
    (("parallel.tp=2",), "parallel.tp"),
    (("parallel.dp_shard=2", "parallel.zero_stage=3"), "parallel.zero_stage"),
], ids=["tp2", "zero3"])
def test_layouts_that_split_the_packed_base_exit_2(tmp_path, layout, key):
    p = subprocess.run([str(TRAINER), "--estimate-memory", "--world-size", "2", "--config",
                        str(TINY), *LORA, NF4, *layout],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "lora.base_dtype" in p.stderr and key in p.stderr and "hint" in p.stderr.lower(), p.stderr


def expand(tmp_path, grid):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'base = "{TINY}"\nnproc_per_node = 2\n[grid]\n"lora.rank" = [4]\n'
                     f'"parallel.tp" = [1, 2]\n{grid}')
    p = subprocess.run([str(BUILD / "sweep_tagger" / "sweep_tagger"), "expand", str(sweep),
                        "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def test_sweep_grid_takes_nf4_and_fp32_points_keep_their_tags(tmp_path):
    points = expand(tmp_path, '"lora.base_dtype" = ["fp32", "bf16", "nf4"]\n')
    old = {p["overrides"]["parallel.tp"]: p["tag"] for p in expand(tmp_path, "")}
    assert len(points) == 6 and len({p["tag"] for p in points}) == 6
    for p in points:
        base, tp = p["overrides"]["lora.base_dtype"], p["overrides"]["parallel.tp"]
        assert p["valid"] == (base != "nf4" or tp == 1), p
        if base == "fp32":
            assert p["tag"] == old[tp]
        if not p["valid"]:
            assert "lora.base_dtype" in p["reason"] and "tensor parallelism" in p["reason"]
