"""PEFT adapter directories: ftbench's writer and reader against PEFT itself (from PyPI).

Model directories are written with numpy (hf_util.py); the adapters by the gtest helpers
PeftAdapter.WriteForPython / ReadForPython (tests/unit/trainer/peft_adapter_test.cpp), which
call trainer/hf/peft_adapter.h, and by PEFT's own save_pretrained.

1. An adapter ftbench writes loads with peft.PeftModel.from_pretrained over transformers'
   LlamaForCausalLM: every lora_A / lora_B PEFT holds is the file's tensor, and PEFT's
   logits equal an independent float64 reference of y = W x + (alpha / r) B A x (the
   reference Llama of test_hf_model.py on the merged weights) within 1e-5 relative.
2. An adapter PEFT's save_pretrained writes (non-zero B, its default targets and all seven)
   reads back in ftbench bit for bit, under ftbench's names.
"""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

from hf_util import LazyModule, make_hf_dir, read_safetensors
from test_hf_model import TESTS_BIN, reference_logits, rel_err
from trainer_util import base_env

peft = LazyModule("peft")
transformers = LazyModule("transformers")

ALL = ["q", "k", "v", "o", "gate", "up", "down"]
HF_MODULE = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
             "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
             "down": "mlp.down_proj"}
OURS = {"q": "attention.wq", "k": "attention.wk", "v": "attention.wv", "o": "attention.wo",
        "gate": "feed_forward.w1", "up": "feed_forward.w3", "down": "feed_forward.w2"}


def gtest(name, **env):
    p = subprocess.run([str(TESTS_BIN), f"--gtest_filter=PeftAdapter.{name}"],
                       env=base_env(**env), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "[  PASSED  ] 1 test" in p.stdout, p.stdout + p.stderr
    assert "SKIPPED" not in p.stdout, p.stdout


def spec_env(rank, alpha, targets):
    return dict(FTB_PEFT_RANK=rank, FTB_PEFT_ALPHA=alpha, FTB_PEFT_TARGETS=",".join(targets))


def hf_llama(model_dir):
    return transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def merged(w, adapter, cfg_r, alpha, targets, n_layers):
    """Base weights (HF names) plus (alpha / r) B A of each adapted projection, float64."""
    out = {k: np.asarray(v, dtype=np.float64) for k, v in w.items()}
    for l in range(n_layers):
        for t in targets:
            pre = f"base_model.model.model.layers.{l}.{HF_MODULE[t]}"
            a = adapter[pre + ".lora_A.weight"].astype(np.float64)
            b = adapter[pre + ".lora_B.weight"].astype(np.float64)
            out[f"model.layers.{l}.{HF_MODULE[t]}.weight"] += alpha / cfg_r * (b @ a)
    return out


def as_arrays(st):
    return {n: np.frombuffer(raw, dtype="<f4").reshape(shape) for n, (dt, shape, raw) in st.items()
            if dt == "F32"}


@pytest.mark.parametrize("rank,alpha,targets", [(4, 8, ALL), (2, 16, ["q", "v"]),
                                                (8, 8, ["k", "o", "down"])])
def test_peft_loads_our_adapter_and_computes_our_lora(rank, alpha, targets, tmp_path):
    cfg, w = make_hf_dir(tmp_path / "m", seed=rank)
    gtest("WriteForPython", FTB_PEFT_MODEL=tmp_path / "m", FTB_PEFT_OUT=tmp_path / "ad",
          **spec_env(rank, alpha, targets))
    conf = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    assert conf["r"] == rank and conf["lora_alpha"] == alpha
    assert sorted(conf["target_modules"]) == sorted(HF_MODULE[t].split(".")[1] for t in targets)
    adapter = as_arrays(read_safetensors(tmp_path / "ad" / "adapter_model.safetensors"))
    assert len(adapter) == cfg["num_hidden_layers"] * len(targets) * 2

    model = peft.PeftModel.from_pretrained(hf_llama(tmp_path / "m"), tmp_path / "ad").eval()
    # Every adapter tensor PEFT holds is the file's (none left at PEFT's own init).
    held = {k.replace(".default", ""): v for k, v in model.state_dict().items() if "lora_" in k}
    assert sorted(held) == sorted(adapter)
    for k, v in held.items():
        assert np.array_equal(v.numpy(), adapter[k]), k
    assert model.peft_config["default"].lora_dropout == pytest.approx(0.1)

    tokens = np.random.default_rng(5).integers(0, cfg["vocab_size"], size=(2, 20))
    with torch.no_grad():
        got = model(torch.from_numpy(tokens)).logits.double().numpy()
        base = hf_llama(tmp_path / "m")(torch.from_numpy(tokens)).logits.double().numpy()
    ref = reference_logits(cfg, merged(w, adapter, rank, alpha, targets, cfg["num_hidden_layers"]),
                           tokens)
    assert rel_err(base, ref) > 1e-2, "the adapter must change the logits"
    err = rel_err(got, ref)
    assert err <= 1e-5, f"PEFT logits differ from the float64 LoRA reference by {err:.3g}"


@pytest.mark.parametrize("targets", [None, ALL])
def test_we_read_what_peft_saves(targets, tmp_path):
    cfg, _ = make_hf_dir(tmp_path / "m", seed=3)
    modules = None if targets is None else [HF_MODULE[t].split(".")[1] for t in targets]
    lc = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=modules,
                         task_type="CAUSAL_LM", init_lora_weights=False)  # B random, not zero
    pm = peft.get_peft_model(hf_llama(tmp_path / "m"), lc)
    pm.save_pretrained(tmp_path / "ad")
    saved = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    keys = targets or ["q", "v"]  # PEFT's default for Llama
    assert sorted(saved["target_modules"]) == sorted(HF_MODULE[t].split(".")[1] for t in keys)
    gtest("ReadForPython", FTB_PEFT_MODEL=tmp_path / "m", FTB_PEFT_ADAPTER=tmp_path / "ad",
          FTB_PEFT_OUT=tmp_path / "read", **spec_env(4, 8, keys))
    index = json.loads((tmp_path / "read" / "index.json").read_text())
    want = {}
    for k, v in pm.state_dict().items():
        if "lora_" not in k:
            continue
        # base_model.model.model.layers.N.self_attn.q_proj.lora_A.default.weight
        parts = k.replace(".default", "").split(".")
        layer, module, ab = parts[4], ".".join(parts[5:7]), parts[7]
        key = next(t for t, m in HF_MODULE.items() if m == module)
        want[f"layers.{layer}.{OURS[key]}.{ab}.weight"] = v.detach().numpy()
    assert sorted(index) == sorted(want)
    for name, e in index.items():
        got = np.fromfile(tmp_path / "read" / e["file"], dtype="<f4").reshape(e["shape"])
        assert np.array_equal(got, want[name]), name
        assert np.abs(got).max() > 0, name
