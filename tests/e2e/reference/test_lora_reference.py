"""ftbench's LoRA against the float64 reference Llama of test_llama_reference.py.

The reference computes y = W x + (alpha / r) B (A x) on every adapted projection as the
reference forward on the merged weight W + (alpha / r) B A (the same function of A and B in
exact arithmetic; dropout 0), in float64, and differentiates the masked mean cross-entropy with
respect to A and B.

The trainer runs one step on a random HF base (hf_util.make_hf_dir) with LoRA on every
target, from
- a PEFT adapter with random, non-zero A and B (lora.from_pretrained), so both gradients are
  non-zero, and
- fresh adapters (A kaiming-uniform, B zero, as PEFT initialises them): the first loss is the
  base model's, dL/dA is zero and dL/dB is not; A is read back from the checkpoint (an AdamW
  step with a zero gradient and no weight decay leaves it as it was).
Its step-1 loss (HDF5) must equal the reference's within 1e-5 relative, and its adapter
gradients, read from the checkpoint's first AdamW moment (exp_avg = (1 - beta1) g after one
step; clipping off), must equal the reference's within 1e-4 of their largest entry.
"""
import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))
from hf_util import hf_params, make_hf_dir, write_safetensors  # noqa: E402
from test_llama_reference import forward, masked_mean_ce  # noqa: E402
from trainer_util import TRAINER, run_trainer, steps  # noqa: E402

SEQ, BATCH, RANK, ALPHA, BETA1 = 32, 4, 4, 8.0, 0.9
TARGETS = {"q": ("attention.wq", "self_attn.q_proj"), "k": ("attention.wk", "self_attn.k_proj"),
           "v": ("attention.wv", "self_attn.v_proj"), "o": ("attention.wo", "self_attn.o_proj"),
           "gate": ("feed_forward.w1", "mlp.gate_proj"), "up": ("feed_forward.w3", "mlp.up_proj"),
           "down": ("feed_forward.w2", "mlp.down_proj")}


def lora_supported():
    p = subprocess.run([str(TRAINER), "--help-config"], capture_output=True, text=True, timeout=60)
    return "lora.rank" in p.stdout


def torchtitan(hf_name):
    """HF parameter name -> ftbench's (trainer/hf/pretrained.h)."""
    n = hf_name.replace("model.embed_tokens", "tok_embeddings").replace("lm_head", "output")
    n = n.replace("model.norm", "norm").replace("model.layers", "layers")
    n = n.replace("input_layernorm", "attention_norm").replace("post_attention_layernorm", "ffn_norm")
    for _, (ours, hf) in TARGETS.items():
        n = n.replace(hf, ours)
    return n


def write_adapter(d, cfg, seed):
    """A PEFT adapter directory with random non-zero A [r, in] and B [out, r]; returns
    {ftbench adapter name: float32 array}."""
    d.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    base = dict(hf_params(cfg))
    tensors, values = [], {}
    for l in range(cfg["num_hidden_layers"]):
        for key, (ours, hf) in TARGETS.items():
            out, inp = base[f"model.layers.{l}.{hf}.weight"]
            for ab, shape in (("lora_A", (RANK, inp)), ("lora_B", (out, RANK))):
                a = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype("<f4")
                tensors.append((f"base_model.model.model.layers.{l}.{hf}.{ab}.weight", "F32",
                                shape, a.tobytes()))
                values[f"layers.{l}.{ours}.{ab}.weight"] = a
    write_safetensors(d / "adapter_model.safetensors", tensors)
    (d / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": ALPHA,
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
        "target_modules": sorted(hf.split(".")[1] for _, hf in TARGETS.values())}))
    return values


def checkpoint_tensor(step_dir, name):
    """A global tensor of a checkpoint, reassembled from its slices with h5py."""
    m = json.loads((step_dir / "manifest.json").read_text())
    t = m["tensors"][name]
    full = np.full(t["shape"], np.nan, dtype=np.float64)
    for s in t["slices"]:
        with h5py.File(step_dir / s["file"], "r") as f:
            full[tuple(slice(o, o + n) for o, n in zip(s["offset"], s["size"]))] = f[s["dataset"]][...]
    assert not np.isnan(full).any(), name
    return full


def reference(cfg, base, adapters, samples):
    """float64 loss and {adapter name: gradient}."""
    ref_cfg = {"dim": cfg["hidden_size"], "n_layers": cfg["num_hidden_layers"],
               "n_heads": cfg["num_attention_heads"], "n_kv_heads": cfg["num_key_value_heads"],
               "rope_theta": cfg["rope_theta"], "norm_eps": cfg["rms_norm_eps"]}
    params = {torchtitan(k): torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in base.items()}
    ad = {k: torch.from_numpy(v.astype(np.float64)).requires_grad_(True) for k, v in adapters.items()}
    for l in range(cfg["num_hidden_layers"]):
        for ours, _ in TARGETS.values():
            pre = f"layers.{l}.{ours}"
            params[pre + ".weight"] = params[pre + ".weight"] + \
                ALPHA / RANK * ad[pre + ".lora_B.weight"] @ ad[pre + ".lora_A.weight"]
    tokens = torch.from_numpy(samples[:, :-1])
    targets = torch.from_numpy(samples[:, 1:])
    loss = masked_mean_ce(forward(params, tokens, ref_cfg), targets, torch.ones_like(targets, dtype=torch.bool))
    loss.backward()
    return loss.item(), {k: v.grad.numpy() for k, v in ad.items()}


@pytest.mark.parametrize("start", ["peft_adapter", "fresh"])
def test_first_step_loss_and_adapter_gradients_match_the_float64_reference(start, tmp_path):
    if not lora_supported():
        pytest.skip(f"{TRAINER} has no lora.* keys")
    cfg, base = make_hf_dir(tmp_path / "m", seed=21)
    toks = np.random.default_rng(4).integers(1, cfg["vocab_size"], size=BATCH * SEQ + 1).astype("<u2")
    toks.tofile(tmp_path / "tokens.bin")
    extra = []
    if start == "peft_adapter":
        adapters = write_adapter(tmp_path / "adapter", cfg, seed=8)
        extra = [f"lora.from_pretrained={tmp_path / 'adapter'}"]
    run_trainer(tmp_path / "run", f"model.from_pretrained={tmp_path / 'm'}",
                f"data.source={tmp_path / 'tokens.bin'}", f"data.seq_len={SEQ}",
                "data.bin_dtype=uint16", f"training.micro_batch_size={BATCH}",
                "training.max_steps=1", "metrics.skip_first_steps=0", "training.max_grad_norm=0",
                "training.weight_decay=0", f"training.beta1={BETA1}", f"lora.rank={RANK}",
                f"lora.alpha={ALPHA}", "lora.targets=all", *extra)
    step = tmp_path / "run" / "checkpoints" / "step_00000001"
    if start == "fresh":  # A as the trainer initialised it (unchanged by a zero gradient), B zero
        adapters = {}
        for l in range(cfg["num_hidden_layers"]):
            for ours, _ in TARGETS.values():
                pre = f"layers.{l}.{ours}"
                adapters[pre + ".lora_A.weight"] = checkpoint_tensor(step, f"model.{pre}.lora_A.weight")
                adapters[pre + ".lora_B.weight"] = np.zeros_like(
                    checkpoint_tensor(step, f"model.{pre}.lora_B.weight"))
    samples = np.stack([toks[i * SEQ:i * SEQ + SEQ + 1] for i in range(BATCH)]).astype(np.int64)
    ref_loss, ref_grads = reference(cfg, base, adapters, samples)
    loss = steps(tmp_path / "run", "loss")[0]
    assert abs(loss - ref_loss) <= 1e-5 * abs(ref_loss), (loss, ref_loss)
    for name, g_ref in ref_grads.items():
        g = checkpoint_tensor(step, f"optim.exp_avg.{name}") / (1 - BETA1)
        scale = np.abs(g_ref).max()
        if start == "fresh" and "lora_A" in name:
            assert scale == 0 and np.abs(g).max() == 0, name  # B = 0: no gradient reaches A
            continue
        assert scale > 0, name
        diff = np.abs(g - g_ref).max()
        assert diff <= 1e-4 * scale, f"{name}: max |grad - reference| {diff:.3g}, max |grad| {scale:.3g}"
