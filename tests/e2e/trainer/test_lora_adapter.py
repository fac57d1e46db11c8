"""LoRA runs and PEFT adapter directories, end to end through the trainer.

1. `trainer export --adapter` of a LoRA run loads with peft.PeftModel.from_pretrained over
   transformers' LlamaForCausalLM of the run's base directory (frozen, so the base's HF
   directory is its export), and PEFT's logits equal ftbench's for the same base and adapter
   (gtest PeftImport.WriteLoraLogitsForPythonReference, tests/unit/trainer/peft_logits_test.cpp)
   within 1e-5 relative, fp32; PEFT's loss on a batch equals the trainer's step-1 loss with
   that adapter (lora.from_pretrained, lr 0) within 1e-5. The adapter_config.json says what
   the run trained.
2. Round trip: export after 2 steps, load with lora.from_pretrained and continue: the first
   loss equals the loss the original run computes at step 3 on the same samples (resumed from
   its checkpoint), and training goes on.
3. Malformed adapters exit 2 before the run directory exists, naming the file and the tensor.
"""
import json
import subprocess

import numpy as np
import pytest
import torch

from hf_util import LazyModule, make_hf_dir, read_safetensors
from test_hf_model import SEQ, TESTS_BIN, rel_err, write_tokens
from trainer_util import TRAINER, assert_close, base_env, run_ranks, run_trainer, steps

peft = LazyModule("peft")
transformers = LazyModule("transformers")

B = 4
LORA = ["lora.rank=4", "lora.alpha=8", "lora.targets=all"]


def lora_supported():
    p = subprocess.run([str(TRAINER), "--help-config"], capture_output=True, text=True, timeout=60)
    return "lora.rank" in p.stdout


pytestmark = pytest.mark.skipif(not lora_supported(), reason="the trainer has no lora.* keys")


def args(hf_dir, data, *extra):
    return [f"model.from_pretrained={hf_dir}", f"data.source={data}", f"data.seq_len={SEQ}",
            "data.bin_dtype=uint16", f"training.micro_batch_size={B}", "metrics.skip_first_steps=0",
            *LORA, *extra]


def export_adapter(ckpt, out):
    p = subprocess.run([str(TRAINER), "export", "--adapter", "--checkpoint", str(ckpt), "--out",
                        str(out)], env=base_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "as a PEFT adapter" in p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A LoRA run of 2 steps on a random HF base, and its exported adapter."""
    d = tmp_path_factory.mktemp("lora")
    cfg, _ = make_hf_dir(d / "m", seed=13)
    toks = write_tokens(d / "tokens.bin", 32, cfg["vocab_size"])  # 8 steps of B
    run_trainer(d / "run", *args(d / "m", d / "tokens.bin", "training.max_steps=2",
                                 "training.lr=1e-2", "checkpoint.interval=1", "checkpoint.keep_last=0"))
    export_adapter(d / "run" / "checkpoints" / "step_00000002", d / "adapter")
    return d, cfg, toks


def test_exported_adapter_config_says_what_the_run_trained(trained):
    d, cfg, _ = trained
    c = json.loads((d / "adapter" / "adapter_config.json").read_text())
    assert c["peft_type"] == "LORA" and c["r"] == 4 and c["lora_alpha"] == 8
    assert sorted(c["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj",
                                                  "gate_proj", "up_proj", "down_proj"])
    assert c["base_model_name_or_path"] == str((d / "m").resolve())


def peft_model(d):
    model = transformers.LlamaForCausalLM.from_pretrained(d / "m", dtype=torch.float32)
    return peft.PeftModel.from_pretrained(model, d / "adapter").eval()


def test_ftbench_logits_with_the_exported_adapter_equal_peft(trained, tmp_path):
    d, cfg, _ = trained
    tokens = np.random.default_rng(2).integers(0, cfg["vocab_size"], size=(2, 24))
    tokens.astype("<i8").tofile(tmp_path / "tokens.bin")
    env = base_env(FTB_HF_DIR=d / "m", FTB_PEFT_ADAPTER=d / "adapter", FTB_PEFT_RANK=4,
                   FTB_PEFT_ALPHA=8, FTB_PEFT_TARGETS="all", FTB_HF_TOKENS=tmp_path / "tokens.bin",
                   FTB_HF_OUT=tmp_path / "logits.bin", FTB_HF_BATCH=2)
    p = subprocess.run([str(TESTS_BIN), "--gtest_filter=PeftImport.WriteLoraLogitsForPythonReference"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "[  PASSED  ] 1 test" in p.stdout, p.stdout + p.stderr
    ours = np.fromfile(tmp_path / "logits.bin", dtype="<f4").reshape(2, 24, -1)
    with torch.no_grad():
        theirs = peft_model(d)(torch.from_numpy(tokens)).logits.numpy()
        base = transformers.LlamaForCausalLM.from_pretrained(d / "m", dtype=torch.float32)(
            torch.from_numpy(tokens)).logits.numpy()
    assert rel_err(theirs, base) > 1e-4, "the trained adapter must change the logits"
    err = rel_err(ours, theirs)
    assert err <= 1e-5, f"ftbench and PEFT logits differ by {err:.3g} relative"


def test_peft_loss_with_the_exported_adapter_equals_the_trainers(trained, tmp_path):
    d, cfg, toks = trained
    model = peft_model(d)
    # B is no longer zero after two steps at lr 1e-2: the adapter changes the function.
    b = [v for k, v in model.state_dict().items() if "lora_B" in k]
    assert len(b) == 2 * 7 and all(float(v.abs().max()) > 0 for v in b)
    samples = torch.from_numpy(np.stack([toks[i * SEQ:i * SEQ + SEQ + 1]
                                         for i in range(B)]).astype(np.int64))
    with torch.no_grad():
        logits = model(samples[:, :-1]).logits.double()
    peft_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                  samples[:, 1:].reshape(-1)).item()
    run_trainer(tmp_path / "run", *args(d / "m", d / "tokens.bin", "training.max_steps=1",
                                        "training.lr=0", f"lora.from_pretrained={d / 'adapter'}"))
    assert_close(steps(tmp_path / "run", "loss")[:1], [peft_loss], 1e-5)


def test_export_then_load_and_continue_training(trained, tmp_path):
    d, cfg, toks = trained
    # The original run's step 3, resumed from its step-2 checkpoint: samples [2B, 3B).
    run_trainer(tmp_path / "resumed", *args(d / "m", d / "tokens.bin", "training.max_steps=3",
                                            "training.lr=1e-2",
                                            f"checkpoint.resume={d / 'run' / 'checkpoints' / 'step_00000002'}"))
    # A new run from the exported adapter on the stream from sample 2B on.
    toks[2 * B * SEQ:].tofile(tmp_path / "rest.bin")
    run_trainer(tmp_path / "cont", *args(d / "m", tmp_path / "rest.bin", "training.max_steps=3",
                                         "training.lr=1e-2", f"lora.from_pretrained={d / 'adapter'}"))
    cont = steps(tmp_path / "cont", "loss")
    assert_close(cont[:1], steps(tmp_path / "resumed", "loss")[-1:], 1e-6)
    assert np.all(np.isfinite(cont)) and len(cont) == 3
    export_adapter(tmp_path / "cont" / "checkpoints", tmp_path / "adapter2")
    assert (tmp_path / "adapter2" / "adapter_model.safetensors").read_bytes() != \
        (d / "adapter" / "adapter_model.safetensors").read_bytes()  # it trained on


def test_adapter_of_a_pipeline_run_gathers_both_stages(trained, tmp_path):
    """The same 2 steps as `trained` at pp 2 (micro-batch 2 x 2 micro-batches, each stage
    training the adapters of its block): the exported adapter holds every block's tensors,
    equal to the world-1 run's within 1e-5, and PEFT computes the same logits with it."""
    d, cfg, _ = trained
    run_ranks(tmp_path / "run", 2, *args(d / "m", d / "tokens.bin", "training.max_steps=2",
                                         "training.lr=1e-2", "training.micro_batch_size=2",
                                         "parallel.pp=2", "parallel.pp_microbatches=2"))
    export_adapter(tmp_path / "run" / "checkpoints", tmp_path / "adapter")
    ours, ref = read_safetensors(tmp_path / "adapter" / "adapter_model.safetensors"), \
        read_safetensors(d / "adapter" / "adapter_model.safetensors")
    assert sorted(ours) == sorted(ref) and len(ours) == 2 * 7 * 2
    for name, (dtype, shape, raw) in ours.items():
        assert (dtype, shape) == ref[name][:2], name
        a, b = (np.frombuffer(x, dtype="<f4") for x in (raw, ref[name][2]))
        # AdamW divides each element's step by its own gradient's magnitude: where a gradient
        # is near eps, the two layouts' summation orders (rounding at 1e-7) move that
        # element's step by up to ~lr x 1e-3, so an absolute term of lr x 1e-3 joins the bound.
        assert np.max(np.abs(a - b)) <= 1e-5 * np.max(np.abs(b)) + 1e-3 * 1e-2, name
    tokens = torch.from_numpy(np.random.default_rng(3).integers(0, cfg["vocab_size"], (2, 24)))
    base = transformers.LlamaForCausalLM.from_pretrained(d / "m", dtype=torch.float32)
    with torch.no_grad():
        pp = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()(tokens).logits
        w1 = peft_model(d)(tokens).logits
    assert rel_err(pp.numpy(), w1.numpy()) <= 1e-5


def test_full_export_of_a_lora_checkpoint_points_to_adapter(trained, tmp_path):
    d, *_ = trained
    p = subprocess.run([str(TRAINER), "export", "--checkpoint", str(d / "run" / "checkpoints"),
                        "--out", str(tmp_path / "x")], env=base_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--adapter" in p.stderr, p.stderr
    assert not (tmp_path / "x").exists()


def corrupt_rank(d):
    c = json.loads((d / "adapter_config.json").read_text())
    (d / "adapter_config.json").write_text(json.dumps(c | {"r": 8}))


def truncate(d):
    f = d / "adapter_model.safetensors"
    f.write_bytes(f.read_bytes()[:-64])


def drop_tensor(d):
    import struct
    f = d / "adapter_model.safetensors"
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n])
    del h["base_model.model.model.layers.1.mlp.up_proj.lora_B.weight"]
    text = json.dumps(h).encode()
    f.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


A0 = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"


def poison(d):
    """A NaN and an infinity in A0: accepted, they trained as "diverged, lower the lr"."""
    import struct
    f = d / "adapter_model.safetensors"
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n])
    assert h[A0]["dtype"] == "F32", h[A0]
    at = 8 + n + h[A0]["data_offsets"][0]
    f.write_bytes(raw[:at] + struct.pack("<ff", float("nan"), float("inf")) + raw[at + 8:])


def deep_config(d):
    (d / "adapter_config.json").write_text('{"peft_type": ' + "[" * 100_000 + "]" * 100_000 + "}")


def loop(path):
    import shutil
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(path.name)


BAD = {
    "nan_and_inf": (poison, ["adapter_model.safetensors",
                             f"tensor '{A0}' holds 1 NaN and 1 infinite values",
                             "the adapter's weights are damaged"]),
    "deep_config": (deep_config, ["adapter_config.json", "JSON nested deeper than 64 levels"]),
    "weights_loop": (lambda d: loop(d / "adapter_model.safetensors"),
                     ["adapter_model.safetensors", "Too many levels of symbolic links",
                      "expected the adapter's weights (a safetensors file)"]),
    "config_loop": (lambda d: loop(d / "adapter_config.json"),
                    ["adapter_config.json", "Too many levels of symbolic links",
                     "expected the adapter's config (a JSON file)"]),
    "directory_loop": (loop, ["Too many levels of symbolic links",
                              "expected a PEFT adapter directory"]),
    "r_mismatch": (corrupt_rank, ["adapter_config.json", "field \"r\" is 8, lora.rank is 4"]),
    "truncated": (truncate, ["adapter_model.safetensors", "past the end of the data section"]),
    "missing_tensor": (drop_tensor, ["adapter_model.safetensors",
                                     "base_model.model.model.layers.1.mlp.up_proj.lora_B.weight",
                                     "is missing"]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_malformed_adapter_exits_2_before_the_run_directory(name, trained, tmp_path):
    import shutil
    d, *_ = trained
    shutil.copytree(d / "adapter", tmp_path / "bad")
    edit, needles = BAD[name]
    edit(tmp_path / "bad")
    p = run_trainer(tmp_path / "run", *args(d / "m", d / "tokens.bin", "training.max_steps=1",
                                            f"lora.from_pretrained={tmp_path / 'bad'}"), check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "lora.from_pretrained" in p.stderr and str(tmp_path / "bad") in p.stderr, p.stderr
    for n in needles:
        assert n in p.stderr, f"{n!r} not in:\n{p.stderr}"
    assert "terminate called" not in p.stderr and not (tmp_path / "run").exists()
    assert "filesystem error" not in p.stderr and "diverged" not in p.stderr, p.stderr
    assert max(len(line) for line in p.stderr.splitlines()) < 1000, p.stderr[:2000]
