"""The C++ Llama model against an independent Python implementation.

The gtest ExportModel.WriteTinyModelForPythonReference (tests/unit/trainer/export_test.cpp)
builds the tiny preset, runs forward/backward and one AdamW step on a fixed padded batch and
writes every tensor as raw little-endian .bin files plus index.json. This file re-implements
the forward from the model definition alone (hyper-parameters read from
configs/models/tiny.toml, not from the export): RMSNorm with eps, RoPE in the HF
"rotate_half" layout with theta, GQA by repeat_interleave of the kv heads, SwiGLU, causal
softmax, untied output; computed in float64. It then checks logits, the masked mean
cross-entropy, every gradient, and AdamW (torch.optim.AdamW on the exported gradients).
"""
import json
import math
import os
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("FTB_BUILD_DIR", ROOT / "build" / "release"))
TESTS_BIN = BUILD / "tests" / "trainer_tests"
EXPORT_TEST = "ExportModel.WriteTinyModelForPythonReference"


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    assert TESTS_BIN.exists(), f"{TESTS_BIN} not built (cmake --build ... --target trainer_tests)"
    out = tmp_path_factory.mktemp("export")
    env = dict(os.environ, FTB_EXPORT_DIR=str(out), OMP_NUM_THREADS="1")
    p = subprocess.run([str(TESTS_BIN), f"--gtest_filter={EXPORT_TEST}"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[  PASSED  ] 1 test" in p.stdout, p.stdout  # ran, not skipped
    index = json.loads((out / "index.json").read_text())
    return out, index


def load(out, entry):
    dtype = {"float32": "<f4", "int64": "<i8"}[entry["dtype"]]
    arr = np.fromfile(out / entry["file"], dtype=dtype)
    return torch.from_numpy(arr.reshape(entry["shape"]).copy())


def load_file(out, name, like):
    return torch.from_numpy(np.fromfile(out / name, dtype="<f4").reshape(like["shape"]).copy())


def preset():
    with open(ROOT / "configs" / "models" / "tiny.toml", "rb") as f:
        return tomllib.load(f)["model"]


# ----------------------------------------------------------------- reference model

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_tables(head_dim, seq_len, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # HF layout: [T, head_dim]
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def attention(x, p, cfg, cos, sin):
    B, T, D = x.shape
    H, KV = cfg["n_heads"], cfg["n_kv_heads"]
    hd = D // H
    q = (x @ p["attention.wq.weight"].T).view(B, T, H, hd).transpose(1, 2)
    k = (x @ p["attention.wk.weight"].T).view(B, T, KV, hd).transpose(1, 2)
    v = (x @ p["attention.wv.weight"].T).view(B, T, KV, hd).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(H // KV, dim=1)  # kv head j serves query heads j*rep .. j*rep+rep-1
    v = v.repeat_interleave(H // KV, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
    scores = scores + torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(B, T, D) @ p["attention.wo.weight"].T


def feed_forward(x, p):
    return (F.silu(x @ p["feed_forward.w1.weight"].T) * (x @ p["feed_forward.w3.weight"].T)) \
        @ p["feed_forward.w2.weight"].T


def forward(params, tokens, cfg):
    T = tokens.shape[1]
    cos, sin = rope_tables(cfg["dim"] // cfg["n_heads"], T, cfg["rope_theta"])
    eps = cfg["norm_eps"]
    h = params["tok_embeddings.weight"][tokens]
    for layer in range(cfg["n_layers"]):
        p = {k[len(f"layers.{layer}."):]: v for k, v in params.items()
             if k.startswith(f"layers.{layer}.")}
        h = h + attention(rms_norm(h, p["attention_norm.weight"], eps), p, cfg, cos, sin)
        h = h + feed_forward(rms_norm(h, p["ffn_norm.weight"], eps), p)
    h = rms_norm(h, params["norm.weight"], eps)
    return h @ params["output.weight"].T


def masked_mean_ce(logits, targets, mask):
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                         reduction="none")
    m = mask.reshape(-1).to(logits.dtype)
    return (ce * m).sum() / m.sum()


def expected_names(cfg):
    names = {"tok_embeddings.weight", "norm.weight", "output.weight"}
    for layer in range(cfg["n_layers"]):
        for n in ("attention_norm", "ffn_norm", "attention.wq", "attention.wk", "attention.wv",
                  "attention.wo", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3"):
            names.add(f"layers.{layer}.{n}.weight")
    return names


@pytest.fixture(scope="module")
def reference(export):
    out, index = export
    cfg = preset()
    assert not cfg["tie_embeddings"], "the reference implements the untied output"
    params = {e["name"]: load(out, e).double().requires_grad_(True) for e in index["params"]}
    tokens, targets = load(out, index["tokens"]), load(out, index["targets"])
    mask = load(out, index["mask"]).bool()
    logits = forward(params, tokens, cfg)
    loss = masked_mean_ce(logits, targets, mask)
    loss.backward()
    return cfg, params, logits.detach(), loss.item()


# ----------------------------------------------------------------- checks

def test_parameter_names_and_shapes(export):
    out, index = export
    cfg = preset()
    D, H, KV, F_, V = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"], cfg["ffn_dim"], cfg["vocab_size"]
    hd = D // H
    shapes = {e["name"]: tuple(e["shape"]) for e in index["params"]}
    assert set(shapes) == expected_names(cfg)
    assert shapes["tok_embeddings.weight"] == (V, D)
    assert shapes["output.weight"] == (V, D)
    assert shapes["layers.0.attention.wq.weight"] == (H * hd, D)
    assert shapes["layers.0.attention.wk.weight"] == (KV * hd, D)
    assert shapes["layers.1.attention.wo.weight"] == (D, H * hd)
    assert shapes["layers.1.feed_forward.w1.weight"] == (F_, D)
    assert shapes["layers.1.feed_forward.w2.weight"] == (D, F_)
    # The model under test must not be trivially initialised (norms at 1, the rest N(0, 0.02)).
    emb = load(out, next(e for e in index["params"] if e["name"] == "tok_embeddings.weight"))
    assert 0.015 < emb.std().item() < 0.025


def test_logits_match_reference(export, reference):
    out, index = export
    _, _, ref_logits, _ = reference
    logits = load(out, index["logits"]).double()
    assert logits.shape == ref_logits.shape
    diff = (logits - ref_logits).abs().max().item()
    assert diff < 1e-4, f"max |logits - reference| = {diff}"
    assert ref_logits.abs().max().item() > 1e-2  # not a vacuous comparison


def test_masked_loss_matches_reference(export, reference):
    out, index = export
    _, _, _, ref_loss = reference
    mask = load(out, index["mask"])
    assert index["count"] == mask.sum().item() == 16 + 11  # padding really excluded
    assert abs(index["loss"] - ref_loss) <= 1e-5 * abs(ref_loss), (index["loss"], ref_loss)
    assert abs(ref_loss - math.log(preset()["vocab_size"])) < 0.5  # near-uniform at init


def test_gradients_match_reference(export, reference):
    out, index = export
    _, params, _, _ = reference
    for e in index["params"]:
        g = load_file(out, e["grad_file"], e).double()
        ref = params[e["name"]].grad
        scale = ref.abs().max().item()
        assert scale > 0, e["name"]
        diff = (g - ref).abs().max().item()
        assert diff <= 1e-4 * scale + 1e-7, f"{e['name']}: max diff {diff}, max |grad| {scale}"


def test_adamw_step_matches_torch_optim(export):
    """One AdamW step on the exported fp32 gradients, by torch.optim.AdamW (the reference)."""
    out, index = export
    hp = index["adamw"]
    entries = index["params"]
    params = [load(out, e).clone().requires_grad_(True) for e in entries]
    for p, e in zip(params, entries):
        p.grad = load_file(out, e["grad_file"], e)
    opt = torch.optim.AdamW(params, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                            weight_decay=hp["weight_decay"])
    opt.step()
    for p, e in zip(params, entries):
        ours = load_file(out, e["updated_file"], e)
        before = load(out, e)
        assert not torch.equal(ours, before), e["name"]
        diff = (ours - p.detach()).abs().max().item()
        assert diff < 1e-6, f"{e['name']}: AdamW differs from torch.optim.AdamW by {diff}"
