#!/usr/bin/env python3
"""Writes a random-weight Hugging Face LlamaForCausalLM directory (config.json +
model.safetensors, fp32) with the shape of a model preset, for `scripts/bench.sh hfload`.

Usage: bench_hf_model.py PRESET.toml OUT_DIR
"""
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e" / "trainer"))
from hf_util import make_hf_dir  # noqa: E402  (the tests' numpy-only safetensors writer)

m = tomllib.loads(Path(sys.argv[1]).read_text())["model"]
make_hf_dir(Path(sys.argv[2]), keep_values=False, hidden_size=m["dim"],
            num_hidden_layers=m["n_layers"], num_attention_heads=m["n_heads"],
            num_key_value_heads=m["n_kv_heads"], intermediate_size=m["ffn_dim"],
            vocab_size=m["vocab_size"], max_position_embeddings=m["max_seq_len"],
            rope_theta=m["rope_theta"], rms_norm_eps=m["norm_eps"],
            tie_word_embeddings=m["tie_embeddings"])
