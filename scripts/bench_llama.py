"""The trainer's Llama (trainer/model/llama.cpp) in plain PyTorch, shared by
scripts/bench_eager.py and scripts/bench_gpu_reference.py (run as `python3 scripts/X.py`, so
this directory is on sys.path).

The same math as the trainer: RMSNorm (statistics in fp32, eps), HF "rotate_half" RoPE with
theta (tables computed in float64, stored fp32) that also scales q by 1/sqrt(head_dim), GQA by
repeat_interleave of the kv heads, causal attention, SwiGLU (in fp32), an output projection that
may be the embedding (tied), mean cross-entropy in fp32. Parameters are fp32 (the trainer's
master weights) and cast to the compute dtype where they are used; the residual stream is in
the compute dtype, as the trainer's is (training.dtype = "bf16": fp32 masters cast on use).
Parameters are named after the trainer's (tok_embeddings, layers.N.wq, ...); an HF directory
maps onto them as the trainer maps it (trainer/docs/hf.md).
"""
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

# HF LlamaForCausalLM names of a block's tensors against ours (trainer/docs/hf.md).
HF_BLOCK = {"input_layernorm": "attention_norm", "self_attn.q_proj": "wq",
            "self_attn.k_proj": "wk", "self_attn.v_proj": "wv", "self_attn.o_proj": "wo",
            "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "w1", "mlp.down_proj": "w2",
            "mlp.up_proj": "w3"}
HF_ROOT = {"model.embed_tokens.weight": "tok_embeddings", "model.norm.weight": "norm",
           "lm_head.weight": "output"}

# The trainer's model.* keys (common/run_keys.cpp): the Shape field and the value's type.
MODEL_KEYS = {"model.dim": ("dim", int), "model.n_layers": ("layers", int),
              "model.n_heads": ("heads", int), "model.n_kv_heads": ("kv_heads", int),
              "model.ffn_dim": ("ffn", int), "model.vocab_size": ("vocab", int),
              "model.max_seq_len": ("max_seq", int), "model.rope_theta": ("rope_theta", float),
              "model.norm_eps": ("norm_eps", float),
              "model.tie_embeddings": ("tie", lambda v: v == "true")}


@dataclass
class Shape:
    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    max_seq: int
    rope_theta: float = 10000.0  # the trainer's defaults (common/run_keys.cpp)
    norm_eps: float = 1e-5
    tie: bool = False

    @staticmethod
    def from_keys(items):
        """The shape of the trainer's model.* overrides ("model.dim=2048", ...; model.name is
        only a label); an unset rope theta, norm eps or tie is the trainer's default."""
        values = {}
        for item in items:
            key, _, value = item.partition("=")
            if key == "model.name":
                continue
            if key not in MODEL_KEYS:
                raise SystemExit(f"{item}: not one of the model keys {', '.join(MODEL_KEYS)}")
            field, convert = MODEL_KEYS[key]
            values[field] = convert(value)
        return Shape(**values)

    @staticmethod
    def from_hf(config):
        return Shape(config["hidden_size"], config["num_hidden_layers"],
                     config["num_attention_heads"], config["num_key_value_heads"],
                     config["intermediate_size"], config["vocab_size"],
                     config["max_position_embeddings"], float(config["rope_theta"]),
                     float(config["rms_norm_eps"]), bool(config["tie_word_embeddings"]))


def rms_norm(x, weight, eps, dtype):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight).to(dtype)


def rope_tables(head_dim, seq, theta):
    inv = theta ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin, scale):  # x: B, H, T, hd; the halves (x1, x2) rotate
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    return (torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1) * scale).to(x.dtype)


def causal_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)


def causal_matmul(q, k, v):  # q k^T, masked softmax in fp32, probs v: no fused kernel
    T = q.shape[-2]
    mask = torch.full((T, T), float("-inf"), device=q.device).triu(1)
    probs = torch.softmax((q @ k.transpose(-2, -1)).float() + mask, -1).to(q.dtype)
    return probs @ v


ATTENTION = {"sdpa": causal_sdpa, "matmul": causal_matmul}


class Block(nn.Module):
    def __init__(self, s, attention, dtype):
        super().__init__()
        hd = s.dim // s.heads
        self.heads, self.kv_heads, self.hd, self.eps = s.heads, s.kv_heads, hd, s.norm_eps
        self.attention, self.dtype = ATTENTION[attention], dtype
        self.attention_norm = nn.Parameter(torch.ones(s.dim))
        self.wq = nn.Parameter(torch.empty(s.heads * hd, s.dim))
        self.wk = nn.Parameter(torch.empty(s.kv_heads * hd, s.dim))
        self.wv = nn.Parameter(torch.empty(s.kv_heads * hd, s.dim))
        self.wo = nn.Parameter(torch.empty(s.dim, s.heads * hd))
        self.ffn_norm = nn.Parameter(torch.ones(s.dim))
        self.w1 = nn.Parameter(torch.empty(s.ffn, s.dim))
        self.w2 = nn.Parameter(torch.empty(s.dim, s.ffn))
        self.w3 = nn.Parameter(torch.empty(s.ffn, s.dim))

    def proj(self, x, w):
        return F.linear(x, w.to(self.dtype))

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = rms_norm(x, self.attention_norm, self.eps, self.dtype)
        q = self.proj(h, self.wq).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.proj(h, self.wk).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = self.proj(h, self.wv).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin, 1.0 / math.sqrt(self.hd)), apply_rope(k, cos, sin, 1.0)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        attn = self.attention(q, k, v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.proj(attn, self.wo)
        g = rms_norm(x, self.ffn_norm, self.eps, self.dtype)
        gate, up = self.proj(g, self.w1).float(), self.proj(g, self.w3).float()
        return x + self.proj((F.silu(gate) * up).to(self.dtype), self.w2)


class Llama(nn.Module):
    """forward(tokens, targets) is the mean cross-entropy (fp32) of a full batch."""

    def __init__(self, s, attention="sdpa", dtype=torch.float32):
        super().__init__()
        self.shape, self.dtype = s, dtype
        self.tok_embeddings = nn.Parameter(torch.empty(s.vocab, s.dim))
        self.layers = nn.ModuleList(Block(s, attention, dtype) for _ in range(s.layers))
        self.norm = nn.Parameter(torch.ones(s.dim))
        self.output = None if s.tie else nn.Parameter(torch.empty(s.vocab, s.dim))
        cos, sin = rope_tables(s.dim // s.heads, s.max_seq, s.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def init_weights(self, generator):
        """Every matrix N(0, 0.02), the norms ones, as the trainer draws them (not the same
        values: the trainer seeds one generator per tensor)."""
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() == 2:
                    p.normal_(0.0, 0.02, generator=generator)
                else:
                    p.fill_(1.0)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        h = F.embedding(tokens, self.tok_embeddings).to(self.dtype)
        for block in self.layers:
            h = block(h, cos, sin)
        return self.head_loss(h, targets)

    def head_loss(self, h, targets):
        h = rms_norm(h, self.norm, self.shape.norm_eps, self.dtype)
        out = self.tok_embeddings if self.output is None else self.output
        logits = F.linear(h, out.to(self.dtype))
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def hf_to_ours(hf_name):
    """The trainer's parameter name of an HF LlamaForCausalLM tensor name."""
    if hf_name in HF_ROOT:
        return HF_ROOT[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)  # model.layers.N.<module>.weight
    return f"layers.{layer}." + HF_BLOCK[rest.removesuffix(".weight")]


def load_weights(model, model_dir):
    """Copies the tensors of an HF directory (one safetensors file or shards) into the model's
    parameters in place; a missing or unexpected tensor is an error."""
    from safetensors.torch import load_file
    device = str(model.norm.device)
    loaded = set()
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        state = {hf_to_ours(k): v for k, v in load_file(f, device=device).items()
                 if "rotary_emb" not in k}
        unexpected = model.load_state_dict(state, strict=False).unexpected_keys
        if unexpected:
            raise SystemExit(f"{f}: tensors the model does not have: {unexpected}")
        loaded |= set(state)
    missing = {n for n, _ in model.named_parameters()} - loaded
    if missing:
        raise SystemExit(f"{model_dir}: no tensor for {sorted(missing)}")
