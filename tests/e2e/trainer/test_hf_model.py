"""Hugging Face model import and export.

Model directories are written here with numpy only (hf_util.py). The reference is a plain
PyTorch Llama written below from the HF LlamaForCausalLM definition (RMSNorm, rotate_half
RoPE, GQA by repeat_interleave, SwiGLU, untied or tied head), in float64, not ftbench code.

1. Logits of the imported model (gtest HfImport.WriteLogitsForPythonReference: the importer
   loads the directory into the ftbench Llama and runs its forward) match the reference
   within 1e-5 relative (max |diff| / max |ref|), fp32, for MHA, GQA, tied, bf16 and fp16
   weights and sharded files. The trainer's first-step loss on a .bin batch matches the
   reference's loss.
2. The first-step loss under ZeRO-3 world 2, TP 2, TP 2 x dp_shard 2 and pp 2 equals world
   1's within 1e-5; two trained steps at pp 2 (untied and tied) export to a directory whose
   transformers logits equal the world-1 run's export's.
3. `trainer export` of a run's checkpoint (any layout) gives back the imported tensors bit
   for bit, single-file and sharded; re-importing the export and exporting again is
   bit-identical.
4. Malformed directories exit 2 before the run directory exists, naming file and tensor.
"""
import json
import os
import resource
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_util import (CONFIG, hf_params, make_hf_dir, read_hf_dir, read_safetensors,
                     to_bf16_bytes, write_safetensors)
from trainer_util import (BUILD, TINY, TRAINER, assert_close, base_env, finish, free_port,
                          run_ranks, run_trainer, steps)

TESTS_BIN = BUILD / "tests" / "trainer_tests"
SEQ = 32


# ----------------------------------------------------------------- reference model

def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def reference_logits(cfg, w, tokens):
    """HF LlamaForCausalLM forward in float64. w: HF name -> float32 array."""
    p = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in w.items()}
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = D // H, cfg["rms_norm_eps"]
    B, T = tokens.shape
    inv = 1.0 / cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    emb = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([emb, emb], -1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    x = p["model.embed_tokens.weight"][torch.from_numpy(tokens)]
    for l in range(cfg["num_hidden_layers"]):
        g = lambda n: p[f"model.layers.{l}.{n}.weight"]
        h = rms_norm(x, g("input_layernorm"), eps)
        q = (h @ g("self_attn.q_proj").T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ g("self_attn.k_proj").T).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ g("self_attn.v_proj").T).view(B, T, KV, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        a = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5 + mask, -1) @ v
        x = x + a.transpose(1, 2).reshape(B, T, D) @ g("self_attn.o_proj").T
        h = rms_norm(x, g("post_attention_layernorm"), eps)
        x = x + (torch.nn.functional.silu(h @ g("mlp.gate_proj").T) * (h @ g("mlp.up_proj").T)) \
            @ g("mlp.down_proj").T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return (x @ head.T).numpy()


def ftbench_logits(tmp, hf_dir, tokens):
    tok, out = tmp / "tokens.bin", tmp / "logits.bin"
    tokens.astype("<i8").tofile(tok)
    env = base_env(FTB_HF_DIR=hf_dir, FTB_HF_TOKENS=tok, FTB_HF_OUT=out, FTB_HF_BATCH=tokens.shape[0])
    p = subprocess.run([str(TESTS_BIN), "--gtest_filter=HfImport.WriteLogitsForPythonReference"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "[  PASSED  ] 1 test" in p.stdout, p.stdout + p.stderr
    return np.fromfile(out, dtype="<f4").reshape(*tokens.shape, -1)


def rel_err(a, ref):
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


VARIANTS = {
    "mha": dict(num_key_value_heads=4),
    "gqa": dict(),
    "gqa_tied_mistral": dict(tie_word_embeddings=True, arch="MistralForCausalLM",
                             num_attention_heads=8, num_key_value_heads=2),
    "gqa_bf16_sharded": dict(dtype="BF16", shards=3),
    "mha_fp16": dict(dtype="F16", num_key_value_heads=4),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_logits_match_reference(name, tmp_path):
    cfg, w = make_hf_dir(tmp_path / "m", seed=len(name), **VARIANTS[name])
    tokens = np.random.default_rng(1).integers(0, cfg["vocab_size"], size=(2, 24))
    got = ftbench_logits(tmp_path, tmp_path / "m", tokens)
    ref = reference_logits(cfg, w, tokens)
    assert ref.std() > 0.5  # far from uniform: the weights matter
    err = rel_err(got, ref)
    assert err <= 1e-5, f"{name}: logits differ by {err:.3g} relative"


# ----------------------------------------------------------------- training runs

def write_tokens(path, n_samples, vocab, seed=3):
    """A .bin token stream: sample i is tokens[i*SEQ : i*SEQ + SEQ + 1] (trainer/data)."""
    t = np.random.default_rng(seed).integers(1, vocab, size=n_samples * SEQ + 1).astype("<u2")
    t.tofile(path)
    return t


def hf_run_args(hf_dir, data, *extra):
    return [f"model.from_pretrained={hf_dir}", f"data.source={data}", f"data.seq_len={SEQ}",
            "data.bin_dtype=uint16", "training.max_steps=1", "metrics.skip_first_steps=0", *extra]


@pytest.fixture(scope="module")
def gqa_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    cfg, w = make_hf_dir(d / "m", seed=11)
    toks = write_tokens(d / "tokens.bin", 16, cfg["vocab_size"])
    return d / "m", d / "tokens.bin", cfg, w, toks


@pytest.fixture(scope="module")
def world1(gqa_model, tmp_path_factory):
    hf_dir, data, *_ = gqa_model
    out = tmp_path_factory.mktemp("w1")
    p = run_trainer(out, *hf_run_args(hf_dir, data, "training.micro_batch_size=4"))
    assert "loaded " in p.stderr + p.stdout
    return out


def test_first_step_loss_matches_reference(gqa_model, world1):
    _, _, cfg, w, toks = gqa_model
    samples = np.stack([toks[i * SEQ:i * SEQ + SEQ + 1] for i in range(4)]).astype(np.int64)
    logits = torch.from_numpy(reference_logits(cfg, w, samples[:, :-1]))
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                            torch.from_numpy(samples[:, 1:]).reshape(-1)).item()
    assert_close(steps(world1, "loss")[:1], [ref], 1e-5)


LAYOUTS = {
    "zero3_world2": (2, ["training.micro_batch_size=2", "parallel.dp_shard=2", "parallel.zero_stage=3"]),
    "tp2": (2, ["training.micro_batch_size=4", "parallel.tp=2"]),
    "tp2_x_dp_shard2": (4, ["training.micro_batch_size=2", "parallel.tp=2", "parallel.dp_shard=2",
                            "parallel.zero_stage=3"]),
    # Each stage loads the layers it holds: the first the embedding, the last norm and head.
    "pp2": (2, ["training.micro_batch_size=2", "parallel.pp=2", "parallel.pp_microbatches=2"]),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layouts_load_the_same_model(name, gqa_model, world1, tmp_path):
    hf_dir, data, *_ = gqa_model
    world, extra = LAYOUTS[name]
    run_ranks(tmp_path, world, *hf_run_args(hf_dir, data, *extra))
    ref = steps(world1, "loss")
    for rank in range(world):
        assert_close(steps(tmp_path, "loss", rank), ref, 1e-5)


# ----------------------------------------------------------------- export

def export(ckpt, out, *extra):
    p = subprocess.run([str(TRAINER), "export", "--checkpoint", str(ckpt), "--out", str(out), *extra],
                       env=base_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def assert_same_tensors(exported, values):
    """exported: name -> (dtype, shape, raw); values: name -> float32 array. Bitwise."""
    assert sorted(exported) == sorted(values)
    for name, (dtype, shape, raw) in exported.items():
        assert dtype == "F32" and tuple(shape) == values[name].shape, name
        assert raw == np.ascontiguousarray(values[name], dtype="<f4").tobytes(), name


@pytest.mark.parametrize("layout", ["world1", "zero3_world2", "tp2", "tp2_x_dp_shard2", "pp2"])
def test_export_gives_back_the_imported_weights(layout, gqa_model, tmp_path):
    # lr = 0: one optimizer step leaves the weights exactly as imported (AdamW adds -0 * x).
    hf_dir, data, cfg, w, _ = gqa_model
    args = hf_run_args(hf_dir, data, "training.lr=0")
    if layout == "world1":
        run_trainer(tmp_path / "run", *args, "training.micro_batch_size=4")
    else:
        world, extra = LAYOUTS[layout]
        run_ranks(tmp_path / "run", world, *args, *extra)
    p = export(tmp_path / "run" / "checkpoints", tmp_path / "hf")
    assert "exported" in p.stderr + p.stdout
    got = json.loads((tmp_path / "hf" / "config.json").read_text())
    for k, v in cfg.items():
        assert got[k] == v, k
    assert_same_tensors(read_safetensors(tmp_path / "hf" / "model.safetensors"), w)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_export_of_a_trained_pipeline_run_loads_in_transformers(tied, gqa_model, tmp_path):
    """Two steps at lr 1e-3 at pp 2 and at world 1: equal losses within 1e-5, and each run
    exported: transformers loads the pipeline run's export (both stages' tensors) and its
    logits equal the world-1 export's within 1e-5 relative. Tied: the first stage's
    embedding and the last stage's copy (its output projection) trained as one weight."""
    transformers = pytest.importorskip("transformers")
    hf_dir, data, cfg, w, _ = gqa_model
    if tied:
        hf_dir = tmp_path / "tied"
        cfg, w = make_hf_dir(hf_dir, seed=12, tie_word_embeddings=True)
    # (At lr 1e-2 Adam's first update, about lr * sign(g), turns the rounding of gradients
    # near zero, summed in another order at pp 2, into 2e-5 of the tied model's logits.)
    args = hf_run_args(hf_dir, data, "training.lr=1e-3", "training.max_steps=2")
    run_trainer(tmp_path / "w1", *args, "training.micro_batch_size=4")
    world, extra = LAYOUTS["pp2"]
    run_ranks(tmp_path / "pp2", world, *args, *extra)
    for rank in range(world):
        assert_close(steps(tmp_path / "pp2", "loss", rank), steps(tmp_path / "w1", "loss"), 1e-5)
    tokens = torch.from_numpy(np.random.default_rng(5).integers(0, cfg["vocab_size"], (2, SEQ)))
    logits = {}
    for run in ("w1", "pp2"):
        export(tmp_path / run / "checkpoints", tmp_path / f"hf_{run}", "--dtype", "fp32")
        assert "lm_head.weight" not in read_hf_dir(tmp_path / f"hf_{run}") or not tied
        model = transformers.LlamaForCausalLM.from_pretrained(tmp_path / f"hf_{run}",
                                                              dtype=torch.float32).eval()
        with torch.no_grad():
            logits[run] = model(tokens).logits.numpy()
    base = reference_logits(cfg, w, tokens.numpy())
    assert rel_err(logits["w1"], base) > 1e-4, "two steps must change the model"
    assert rel_err(logits["pp2"], logits["w1"]) <= 1e-5


def test_sharded_export_reimports_bit_identically(gqa_model, tmp_path):
    hf_dir, data, cfg, w, _ = gqa_model
    run_trainer(tmp_path / "a", *hf_run_args(hf_dir, data, "training.lr=0", "training.micro_batch_size=4"))
    export(tmp_path / "a" / "checkpoints", tmp_path / "hf_a", "--max-shard-mb", "0.05")
    index = json.loads((tmp_path / "hf_a" / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    assert_same_tensors(read_hf_dir(tmp_path / "hf_a"), w)
    # Re-import the sharded export in a run, export that: the same bytes again.
    run_trainer(tmp_path / "b", *hf_run_args(tmp_path / "hf_a", data, "training.lr=0",
                                             "training.micro_batch_size=4"))
    export(tmp_path / "b" / "checkpoints", tmp_path / "hf_b")
    assert read_hf_dir(tmp_path / "hf_b") == read_hf_dir(tmp_path / "hf_a")
    assert_close(steps(tmp_path / "b", "loss"), steps(tmp_path / "a", "loss"), 0)


def test_export_dtype_follows_the_run_or_the_flag(gqa_model, tmp_path):
    """A bf16 run exports bf16 weights (config.json torch_dtype bfloat16) by default, the
    fp32 master weights rounded to nearest even; --dtype fp32 / fp16 write those instead."""
    hf_dir, data, cfg, w, _ = gqa_model
    run_trainer(tmp_path / "run", *hf_run_args(hf_dir, data, "training.lr=0", "training.dtype=bf16",
                                               "training.micro_batch_size=4"))
    ckpt = tmp_path / "run" / "checkpoints"
    p = export(ckpt, tmp_path / "hf_run")
    assert "bf16 weights; training.dtype of " in p.stderr + p.stdout
    as_bytes = {
        "BF16": lambda a: to_bf16_bytes(a)[0],
        "F32": lambda a: np.ascontiguousarray(a, dtype="<f4").tobytes(),
        "F16": lambda a: np.ascontiguousarray(a, dtype="<f2").tobytes(),
    }
    for out, flag, st, hf in [("hf_run", None, "BF16", "bfloat16"), ("hf_fp32", "fp32", "F32", "float32"),
                              ("hf_fp16", "fp16", "F16", "float16")]:
        if flag:
            export(ckpt, tmp_path / out, "--dtype", flag)
        assert json.loads((tmp_path / out / "config.json").read_text())["torch_dtype"] == hf
        got = read_safetensors(tmp_path / out / "model.safetensors")
        assert sorted(got) == sorted(w)
        for name, (dtype, shape, raw) in got.items():
            assert dtype == st and tuple(shape) == w[name].shape, name
            assert raw == as_bytes[st](w[name]), (out, name)
    bad = subprocess.run([str(TRAINER), "export", "--checkpoint", str(ckpt), "--out",
                          str(tmp_path / "x"), "--dtype", "int8"], env=base_env(),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--dtype" in bad.stderr and "int8" in bad.stderr, bad.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.tmp").exists()


def test_export_of_a_mistral_run_stays_a_mistral_with_its_sliding_window(tmp_path):
    cfg, w = make_hf_dir(tmp_path / "m", seed=7, arch="MistralForCausalLM", sliding_window=4096)
    data = tmp_path / "tokens.bin"
    write_tokens(data, 8, cfg["vocab_size"])
    run_trainer(tmp_path / "run", *hf_run_args(tmp_path / "m", data, "training.lr=0",
                                               "training.micro_batch_size=4"))
    export(tmp_path / "run" / "checkpoints", tmp_path / "hf")
    got = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert got["architectures"] == ["MistralForCausalLM"] and got["model_type"] == "mistral"
    assert got["sliding_window"] == 4096
    assert_same_tensors(read_safetensors(tmp_path / "hf" / "model.safetensors"), w)


def test_export_of_a_run_started_from_a_preset(tmp_path):
    """configs/runs/tiny.toml has no model.from_pretrained: export exited 2 ("key
    'model.from_pretrained': missing required key") for every run started from a preset."""
    run_trainer(tmp_path / "run", "training.max_steps=2")
    export(tmp_path / "run" / "checkpoints", tmp_path / "hf")
    got = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert got["architectures"] == ["LlamaForCausalLM"] and got["ftbench_export"]["step"] == 2
    assert "bos_token_id" not in got, "synthetic data has no tokenizer to name the ids"
    with open(tmp_path / "run" / "checkpoints" / "step_00000002" / "manifest.json") as f:
        n_model = sum(1 for k in json.load(f)["tensors"] if k.startswith("model."))
    assert len(read_safetensors(tmp_path / "hf" / "model.safetensors")) == n_model


def test_export_refuses_bad_arguments(tmp_path):
    for args, needle in [(["--checkpoint", str(tmp_path / "none"), "--out", str(tmp_path / "o")],
                          "holds no step_N checkpoints"),
                         (["--out", str(tmp_path / "o")], "--checkpoint"),
                         (["--checkpoint", str(tmp_path), "--out", str(tmp_path)], "already exists"),
                         # a mistyped flag names the right one (it printed cxxopts' message
                         # and the usage); a bad size says what the flag is
                         (["--chekpoint", str(tmp_path), "--out", str(tmp_path / "o")],
                          "key '--chekpoint': unknown option\n  hint: did you mean '--checkpoint'?"),
                         (["--checkpoint", str(tmp_path), "--out", str(tmp_path / "o"),
                           "--max-shard-mb", "-1"],
                          "must be > 0, got -1\n  hint: --max-shard-mb: split the weights")]:
        p = subprocess.run([str(TRAINER), "export", *args], env=base_env(), capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and needle in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and "terminate" not in p.stderr


# ----------------------------------------------------------------- malformed input

def run_bad(tmp_path, hf_dir, *extra):
    out = tmp_path / "run"
    data = tmp_path / "tokens.bin"
    if not data.exists():
        write_tokens(data, 8, CONFIG["vocab_size"])
    p = run_trainer(out, *hf_run_args(hf_dir, data, *extra), check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "terminate called" not in p.stderr and "Segmentation" not in p.stderr
    assert not out.exists(), "a bad model directory must be refused before the run directory"
    return p.stderr


def corrupt(path, edit):
    """Rewrites the single-file model at `path` through edit(header, data) -> (header, data)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    header, data = edit(header, data)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


Q0 = "model.layers.0.self_attn.q_proj.weight"


def shift_offsets(h, d):
    b, e = h[Q0]["data_offsets"]
    h[Q0]["data_offsets"] = [b - 64, e - 64]  # now overlaps the tensor before it
    return h, d


MALFORMED = {
    "truncated_file": (lambda f: f.write_bytes(f.read_bytes()[:-100]),
                       ["model.safetensors", "lm_head.weight", "past the end of the data section"]),
    "header_length_past_eof": (lambda f: f.write_bytes(struct.pack("<Q", 1 << 40) + f.read_bytes()[8:]),
                               ["model.safetensors", "header length 1099511627776", "past the end of the file"]),
    "shorter_than_length_field": (lambda f: f.write_bytes(b"\x10\x00"), ["truncated: 2 bytes"]),
    "overlapping_offsets": (lambda f: corrupt(f, shift_offsets),
                            ["model.safetensors", Q0, "overlap tensor"]),
    "offsets_out_of_range": (lambda f: corrupt(f, lambda h, d: (h | {Q0: h[Q0] | {"data_offsets": [
        len(d), len(d) + h[Q0]["data_offsets"][1] - h[Q0]["data_offsets"][0]]}}, d)),
                             ["model.safetensors", Q0, "past the end of the data section"]),
    "wrong_dtype": (lambda f: corrupt(f, lambda h, d: (h | {Q0: h[Q0] | {"dtype": "I32"}}, d)),
                    ["model.safetensors", Q0, "dtype I32, expected F32, F16 or BF16"]),
    "wrong_shape": (lambda f: corrupt(f, lambda h, d: (h | {Q0: h[Q0] | {"shape": [32, 128]}}, d)),
                    ["model.safetensors", Q0, "shape [32, 128], expected [64, 64]"]),
    "missing_tensor": (lambda f: corrupt(f, lambda h, d: ({k: v for k, v in h.items() if k != Q0}, d)),
                       [Q0, "is missing", "shape [64, 64]"]),
    "unexpected_tensor": (lambda f: corrupt(f, lambda h, d: (h | {"model.layers.2.mlp.up_proj.weight": {
        "dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}, d)),
                          ["model.safetensors", "unexpected tensor 'model.layers.2.mlp.up_proj.weight'"]),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_safetensors_exit_2(name, tmp_path):
    make_hf_dir(tmp_path / "m")
    edit, needles = MALFORMED[name]
    edit(tmp_path / "m" / "model.safetensors")
    err = run_bad(tmp_path, tmp_path / "m")
    for n in needles:
        assert n in err, f"{n!r} not in:\n{err}"


def test_nan_or_inf_weight_exits_2_naming_the_tensor(tmp_path):
    """A NaN in the weights trained on and was reported as "training diverged, lower lr"."""
    make_hf_dir(tmp_path / "m")

    def poison(h, d):
        b = h[Q0]["data_offsets"][0]
        d = d[:b] + struct.pack("<ff", float("nan"), float("inf")) + d[b + 8:]
        return h, d
    corrupt(tmp_path / "m" / "model.safetensors", poison)
    err = run_bad(tmp_path, tmp_path / "m")
    assert "model.safetensors: tensor '" + Q0 + "' holds 1 NaN and 1 infinite values" in err, err
    assert "model.from_pretrained" in err, err


def raw_header(path, text):
    """Replaces the safetensors file at `path` by a header of raw JSON `text` and no data."""
    path.write_bytes(struct.pack("<Q", len(text)) + text)


def nested(levels):
    return b"[" * levels + b"1" + b"]" * levels


BIG = b"B" * 20_000_000
# A header nested 100,000 levels deep crashed the trainer (SIGSEGV: stack overflow in the JSON
# library printing the error); 60,000 levels gave a 120 KB message; a 20 MB string came back
# whole in a 20,000,165-byte line.
HOSTILE = {
    "deep_100k": (lambda d: raw_header(d / "model.safetensors", b'{"t": ' + nested(100_000) + b"}"),
                  ["model.safetensors", "JSON nested deeper than 64 levels"]),
    "deep_60k": (lambda d: raw_header(d / "model.safetensors", b'{"t": ' + nested(60_000) + b"}"),
                 ["model.safetensors", "JSON nested deeper than 64 levels"]),
    "huge_dtype": (lambda d: raw_header(d / "model.safetensors", b'{"t": {"dtype": "' + BIG +
                                        b'", "shape": [1], "data_offsets": [0, 4]}}'),
                   ["tensor 't': dtype BBBB", "... (20000000 bytes), expected F32, F16 or BF16"]),
    "huge_name": (lambda d: raw_header(d / "model.safetensors", b'{"' + BIG + b'": 1}'),
                  ["tensor 'BBBB", "... (20000000 bytes)': expected"]),
    "huge_unterminated_string": (lambda d: raw_header(d / "model.safetensors", b'{"' + BIG),
                                 ["invalid JSON", "... (20000001 bytes)"]),
    "config_json_deep": (lambda d: (d / "config.json").write_bytes(
        b'{"architectures": ' + nested(100_000) + b"}"),
                         ["config.json", "JSON nested deeper than 64 levels"]),
    "config_json_architecture_deep_at_the_limit": (lambda d: (d / "config.json").write_bytes(
        b'{"architectures": [' + nested(62) + b"]}"),
                                                   ["unsupported architecture [[[["]),
    "index_json_deep": (lambda d: (d / "model.safetensors.index.json").write_bytes(
        b'{"weight_map": ' + nested(100_000) + b"}"),
                        ["model.safetensors.index.json", "JSON nested deeper than 64 levels"]),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_json_exits_2_with_a_short_message(name, tmp_path):
    make_hf_dir(tmp_path / "m")
    edit, needles = HOSTILE[name]
    edit(tmp_path / "m")
    err = run_bad(tmp_path, tmp_path / "m")
    for n in needles:
        assert n in err, f"{n!r} not in:\n{err[:2000]}"
    longest = max(len(line) for line in err.splitlines())
    assert longest < 1000, f"a {longest}-byte line:\n{err[:2000]}"


def loop(path):
    """Replaces `path` by a symbolic link to itself."""
    if path.is_dir():
        import shutil
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.symlink_to(path.name)


@pytest.mark.parametrize("what,needles", [
    ("model.safetensors", ["model.safetensors", "Too many levels of symbolic links",
                           "expected the model's weights (a safetensors file)"]),
    ("model.safetensors.index.json", ["model.safetensors.index.json",
                                      "Too many levels of symbolic links",
                                      "expected the safetensors index"]),
    ("config.json", ["config.json", "Too many levels of symbolic links"]),
    (".", ["Too many levels of symbolic links"]),  # the model directory itself
])
def test_symlink_loop_exits_2_naming_the_path(what, needles, tmp_path):
    """A loop gave exit 1 and "filesystem error: status: Too many levels of symbolic links"."""
    make_hf_dir(tmp_path / "m")
    loop(tmp_path / "m" if what == "." else tmp_path / "m" / what)
    err = run_bad(tmp_path, tmp_path / "m")
    for n in needles:
        assert n in err, f"{n!r} not in:\n{err}"
    assert "filesystem error" not in err, err


def test_sharded_index_naming_a_missing_tensor_exits_2(tmp_path):
    make_hf_dir(tmp_path / "m", shards=2)
    idx = tmp_path / "m" / "model.safetensors.index.json"
    j = json.loads(idx.read_text())
    j["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00002-of-00002.safetensors"
    idx.write_text(json.dumps(j))
    err = run_bad(tmp_path, tmp_path / "m")
    assert "model-00002-of-00002.safetensors" in err and "model.layers.9.mlp.up_proj.weight" in err


def test_unsupported_architecture_exits_2(tmp_path):
    make_hf_dir(tmp_path / "m", arch="GPT2LMHeadModel")
    err = run_bad(tmp_path, tmp_path / "m")
    assert "config.json" in err and "unsupported architecture \"GPT2LMHeadModel\"" in err


def test_explicit_model_key_that_disagrees_exits_2(tmp_path):
    make_hf_dir(tmp_path / "m")
    err = run_bad(tmp_path, tmp_path / "m", "model.dim=128")
    assert "model.dim" in err and "128 disagrees with" in err and "which gives 64" in err
    # Agreeing keys are accepted (the run goes past validation and trains).
    p = run_trainer(tmp_path / "ok", *hf_run_args(tmp_path / "m", tmp_path / "tokens.bin",
                                                  "model.dim=64", "model.n_kv_heads=2"))
    assert "loaded " in p.stdout + p.stderr


def test_a_billion_layers_in_config_json_is_refused_before_any_allocation(tmp_path):
    """num_hidden_layers: 1000000000 took 12.8 GB of RSS in 20 s (the list of the tensors the
    weights should hold) before any check. Under a 2 GiB data limit (a run of this model needs
    a fraction of it) the old build dies of bad_alloc instead of filling the machine."""
    make_hf_dir(tmp_path / "m")
    cfg_path = tmp_path / "m" / "config.json"
    cfg_path.write_text(json.dumps(json.loads(cfg_path.read_text()) | {"num_hidden_layers": 10**9}))
    write_tokens(tmp_path / "tokens.bin", 8, CONFIG["vocab_size"])
    limit = lambda: resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30))  # noqa: E731
    p = subprocess.run([str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path / "run"),
                        "--no-sweep-dir", *hf_run_args(tmp_path / "m", tmp_path / "tokens.bin")],
                       env=base_env(), capture_output=True, text=True, timeout=120,
                       preexec_fn=limit)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"{cfg_path}" in p.stderr, p.stderr
    assert "num_hidden_layers is 1000000000, but the safetensors files hold layers 0..1" \
        in p.stderr, p.stderr
    assert not (tmp_path / "run").exists()


def test_every_rank_exits_2_when_one_rank_lacks_the_model(tmp_path):
    # Rank 1 points at a directory without weights (as if its node lacked the files): the
    # ranks share their verdicts, so rank 0 exits 2 too instead of waiting for rank 1.
    make_hf_dir(tmp_path / "m")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text((tmp_path / "m" / "config.json").read_text())
    write_tokens(tmp_path / "tokens.bin", 8, CONFIG["vocab_size"])
    port, procs = free_port(), []
    for r, d in enumerate([tmp_path / "m", tmp_path / "empty"]):
        env = base_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=2, LOCAL_WORLD_SIZE=2,
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [str(TRAINER), "--config", str(TINY), "--output-dir", str(tmp_path / "run"),
               "--no-sweep-dir", *hf_run_args(d, tmp_path / "tokens.bin"), "parallel.dp_shard=2",
               "parallel.zero_stage=3"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    for rc, _, err in finish(procs, timeout=60):
        assert rc == 2 and "no model.safetensors and no model.safetensors.index.json" in err, err
    assert not (tmp_path / "run").exists()
