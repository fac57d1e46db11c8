"""ftbench against the real PyTorch 2.x libraries of the project venv.

1. transformers' AutoModelForCausalLM loads `trainer export` of a trained run, and its fp32
   logits equal those of ftbench's own forward of the same directory within 1e-5 relative
   (max |diff| / max |ref|), for a Llama (GQA, untied) and a Mistral (tied) export.
2. torch 2.x `torchrun` starts the trainer through its own rendezvous (the agent serves the
   TCPStore, TORCHELASTIC_USE_AGENT_STORE=True: every rank is a store client), and the run's
   losses equal the same run's started by hand with the torchrun variables.
3. ftbench's launcher starts a stock torch 2.x DDP script unchanged, and DDP keeps every
   rank's parameters equal.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "trainer"))
from hf_util import make_hf_dir  # noqa: E402
from trainer_util import (BUILD, ROOT, TINY, TRAINER, assert_close, base_env, free_port,  # noqa: E402
                          losses, run_ranks, run_trainer)

TESTS_BIN = BUILD / "tests" / "trainer_tests"
LAUNCHER = BUILD / "launcher" / "launcher"
SEQ = 32


def ftbench_logits(tmp, hf_dir, tokens):
    """Logits of ftbench's Llama with the weights of hf_dir (the importer's forward)."""
    tok, out = tmp / "tokens.bin", tmp / "logits.bin"
    tokens.astype("<i8").tofile(tok)
    env = base_env(FTB_HF_DIR=hf_dir, FTB_HF_TOKENS=tok, FTB_HF_OUT=out,
                   FTB_HF_BATCH=tokens.shape[0])
    p = subprocess.run([str(TESTS_BIN), "--gtest_filter=HfImport.WriteLogitsForPythonReference"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "[  PASSED  ] 1 test" in p.stdout, p.stdout + p.stderr
    return np.fromfile(out, dtype="<f4").reshape(*tokens.shape, -1)


def transformers_logits(hf_dir, tokens):
    os.environ["HF_HUB_OFFLINE"] = "1"  # a local directory; nothing is fetched
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).logits.numpy()


@pytest.mark.parametrize("arch,extra", [
    ("LlamaForCausalLM", {}),
    ("MistralForCausalLM", dict(tie_word_embeddings=True, num_attention_heads=8,
                                num_key_value_heads=2)),
])
def test_transformers_loads_the_export_with_equal_logits(arch, extra, tmp_path):
    cfg, _ = make_hf_dir(tmp_path / "m", seed=5, arch=arch, **extra)
    data = tmp_path / "tokens.bin"
    rng = np.random.default_rng(3)
    rng.integers(1, cfg["vocab_size"], size=8 * SEQ + 1).astype("<u2").tofile(data)
    # Three optimizer steps at lr 1e-2, so the exported weights are the run's, not the import's.
    run_trainer(tmp_path / "run", f"model.from_pretrained={tmp_path / 'm'}", f"data.source={data}",
                f"data.seq_len={SEQ}", "data.bin_dtype=uint16", "training.max_steps=3",
                "metrics.skip_first_steps=0", "training.lr=1e-2", "training.micro_batch_size=2")
    p = subprocess.run([str(TRAINER), "export", "--checkpoint", str(tmp_path / "run" / "checkpoints"),
                        "--out", str(tmp_path / "hf")], env=base_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    tokens = rng.integers(0, cfg["vocab_size"], size=(2, 24))
    ref = ftbench_logits(tmp_path, tmp_path / "hf", tokens)
    got = transformers_logits(tmp_path / "hf", tokens)
    assert ref.std() > 0.5  # far from uniform: the weights matter
    err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    assert err <= 1e-5, f"{arch}: transformers' logits differ from ftbench's by {err:.3g}"


TORCHRUN_RUN = ["training.max_steps=4", "training.micro_batch_size=2", "metrics.skip_first_steps=0"]


@pytest.mark.parametrize("rdzv", [["--standalone"],
                                  ["--rdzv-backend", "static", "--master-addr", "127.0.0.1"]])
def test_torchrun_starts_the_trainer(rdzv, tmp_path):
    by_hand = tmp_path / "by_hand"
    run_ranks(by_hand, 2, *TORCHRUN_RUN)
    out = tmp_path / "torchrun"
    port = ["--master-port", str(free_port())] if "static" in rdzv else []
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", *rdzv, *port,
           "--no-python", str(TRAINER), "--config", str(TINY), "--output-dir", str(out), "--no-sweep-dir",
           *TORCHRUN_RUN]
    env = base_env()
    env.pop("OMP_NUM_THREADS")  # torchrun sets it
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert_close(losses(out), losses(by_hand), 1e-6)
    assert_close(losses(out, rank=1), losses(by_hand, rank=1), 1e-6)


def test_launcher_starts_a_stock_ddp_script(tmp_path):
    p = subprocess.run([str(LAUNCHER), "--nproc-per-node", "2", "--tee", "--",
                        sys.executable, str(HERE / "ddp_script.py")],
                       env=base_env(), capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = re.findall(r"DDP rank=(\d) world=2 local_rank=(\d) checksum=(\S+)", p.stdout + p.stderr)
    assert sorted((r, lr) for r, lr, _ in lines) == [("0", "0"), ("1", "1")], p.stdout + p.stderr
    assert len({c for *_, c in lines}) == 1, lines  # DDP kept the replicas equal
