"""Hugging Face model directories for the HF import/export tests, written with numpy only.

safetensors (https://huggingface.co/docs/safetensors): 8-byte little-endian header length N,
N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}}, then the raw
little-endian tensor bytes (offsets relative to the end of the header).
"""
import json
import struct
from pathlib import Path

import numpy as np
import pytest

ST_DTYPE = {"F32": "<f4", "F16": "<f2"}


class LazyModule:
    """A module imported at its first attribute use, skipping the test (pytest.importorskip)
    when it is not installed. peft and transformers take seconds of CPU to import: a module
    that names them at import time would cost that in every pytest-xdist worker that merely
    collects it."""

    def __init__(self, name):
        self._name = name
        self._module = None

    def __getattr__(self, attr):
        if self._module is None:
            self._module = pytest.importorskip(self._name)
        return getattr(self._module, attr)


def to_bf16_bytes(a):
    """float32 -> bfloat16 bytes (round to nearest even), and the float32 values they hold."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    back = (r.astype("<u4") << 16).view("<f4")
    return r.tobytes(), back


def encode(a, dtype):
    """(bytes, float32 values actually stored) of array `a` in safetensors dtype."""
    if dtype == "BF16":
        return to_bf16_bytes(a)
    stored = np.ascontiguousarray(a, dtype=ST_DTYPE[dtype])
    return stored.tobytes(), stored.astype("<f4")


def write_safetensors(path, tensors, header_extra=None):
    """tensors: list of (name, dtype, shape, raw bytes), written in that order."""
    header, off = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    header.update(header_extra or {})
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for *_, raw in tensors:
            f.write(raw)


def read_safetensors(path):
    """name -> (dtype, shape, raw bytes)."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], data[8 + n + b:8 + n + e])
    return out


def read_hf_dir(d):
    """Every tensor of an HF directory (single file or index + shards): name -> raw bytes."""
    d = Path(d)
    files = [d / "model.safetensors"]
    if (d / "model.safetensors.index.json").exists():
        index = json.loads((d / "model.safetensors.index.json").read_text())
        files = [d / f for f in sorted(set(index["weight_map"].values()))]
    out = {}
    for f in files:
        out.update({k: (v[0], v[1], v[2]) for k, v in read_safetensors(f).items()})
    return out


CONFIG = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=96, vocab_size=256, max_position_embeddings=128, rope_theta=500.0,
              rms_norm_eps=1e-6, tie_word_embeddings=False)


def hf_params(cfg):
    """(HF name, shape) of every LlamaForCausalLM parameter, in file order."""
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, F, V = D // H, cfg["intermediate_size"], cfg["vocab_size"]
    out = [("model.embed_tokens.weight", (V, D))]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (D,)), (p + "self_attn.q_proj.weight", (H * hd, D)),
                (p + "self_attn.k_proj.weight", (KV * hd, D)),
                (p + "self_attn.v_proj.weight", (KV * hd, D)),
                (p + "self_attn.o_proj.weight", (D, H * hd)),
                (p + "post_attention_layernorm.weight", (D,)),
                (p + "mlp.gate_proj.weight", (F, D)), (p + "mlp.down_proj.weight", (D, F)),
                (p + "mlp.up_proj.weight", (F, D))]
    out.append(("model.norm.weight", (D,)))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, D)))
    return out


def make_hf_dir(d, seed=0, dtype="F32", shards=1, arch="LlamaForCausalLM", keep_values=True,
                **overrides):
    """Writes config.json + random weights; returns (cfg, {name: float32 values stored})
    ({} unless keep_values)."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    cfg = dict(CONFIG, **overrides)
    rng = np.random.default_rng(seed)
    tensors, values = [], {}
    for name, shape in hf_params(cfg):
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        else:  # large enough that logits are far from uniform
            a = rng.standard_normal(shape) / np.sqrt(shape[-1]) * 1.5
        raw, stored = encode(a.astype("<f4"), dtype)
        tensors.append((name, dtype, shape, raw))
        if keep_values:
            values[name] = stored
    full = dict(cfg, architectures=[arch], model_type="llama", hidden_act="silu",
                torch_dtype={"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype])
    (d / "config.json").write_text(json.dumps(full, indent=2))
    if shards == 1:
        write_safetensors(d / "model.safetensors", tensors)
    else:
        parts = np.array_split(np.arange(len(tensors)), shards)
        weight_map = {}
        for i, idx in enumerate(parts):
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(d / fname, [tensors[j] for j in idx])
            weight_map.update({tensors[j][0]: fname for j in idx})
        (d / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": weight_map}))
    return cfg, values
