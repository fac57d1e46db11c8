"""`trainer logits` (trainer/hf/logits.h) against transformers and PEFT.

A small Llama directory (hf_util.make_hf_dir) and a PEFT adapter saved by PEFT itself: the
logits trainer logits writes equal transformers' LlamaForCausalLM (and PeftModel) within 1e-5
in fp32, its per-token loss equals torch's cross_entropy of predicting token t+1, --text is
encoded as `tokenizers` encodes it, rows of unequal length are right-padded with an
attention_mask and each equals that row alone bit for bit (and transformers given the mask),
--dtype bf16 writes BF16 logits near the fp32 ones, --checkpoint gives bit for bit the logits
of `trainer export --dtype fp32` of that checkpoint, and bad input exits 2 naming the flag or
file, writing nothing.
"""
import json
import subprocess

import numpy as np
import pytest
import torch

from hf_util import LazyModule, make_hf_dir
from trainer_util import TRAINER, base_env, run_trainer

peft = LazyModule("peft")
safetensors_numpy = LazyModule("safetensors.numpy")
safetensors_torch = LazyModule("safetensors.torch")
transformers = LazyModule("transformers")

IDS = [[1, 17, 200, 3, 99, 42, 7, 255], [0, 5, 5, 128, 64, 32, 16, 8]]


def logits_cmd(*args):
    return subprocess.run([str(TRAINER), "logits", *map(str, args)], env=base_env(),
                          capture_output=True, text=True, timeout=60)


def hf_llama(model_dir):
    return transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def check_against(out, model):
    got = safetensors_numpy.load_file(str(out))
    ids = torch.tensor(IDS)
    assert np.array_equal(got["input_ids"], ids.numpy()) and got["input_ids"].dtype == np.int64
    with torch.no_grad():
        want = model(ids).logits
    assert got["logits"].dtype == np.float32 and got["logits"].shape == tuple(want.shape)
    assert np.abs(got["logits"] - want.numpy()).max() <= 1e-5
    loss = torch.nn.functional.cross_entropy(want[:, :-1].reshape(-1, want.shape[-1]),
                                             ids[:, 1:].reshape(-1), reduction="none")
    assert got["loss"].shape == (2, 7)
    assert np.abs(got["loss"] - loss.reshape(2, 7).numpy()).max() <= 1e-5


def write_ids(path, rows):
    path.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
    return path


def test_logits_equal_transformers(tmp_path):
    make_hf_dir(tmp_path / "m", seed=5)
    out = tmp_path / "l.safetensors"
    p = logits_cmd("--model", tmp_path / "m", "--ids-file", write_ids(tmp_path / "i.jsonl", IDS),
                   "--out", out)
    assert p.returncode == 0, p.stderr
    check_against(out, hf_llama(tmp_path / "m"))
    one = tmp_path / "one.safetensors"
    p = logits_cmd("--model", tmp_path / "m", "--ids", ",".join(map(str, IDS[0])), "--out", one)
    assert p.returncode == 0, p.stderr
    a, b = safetensors_numpy.load_file(str(one)), safetensors_numpy.load_file(str(out))
    assert np.abs(a["logits"][0] - b["logits"][0]).max() <= 1e-6


def test_logits_with_peft_adapter_equal_peft(tmp_path):
    make_hf_dir(tmp_path / "m", seed=6)
    lc = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj",
                         "down_proj"], task_type="CAUSAL_LM", init_lora_weights=False)
    pm = peft.get_peft_model(hf_llama(tmp_path / "m"), lc)
    pm.save_pretrained(tmp_path / "ad")
    out = tmp_path / "l.safetensors"
    p = logits_cmd("--model", tmp_path / "m", "--adapter", tmp_path / "ad", "--ids-file",
                   write_ids(tmp_path / "i.jsonl", IDS), "--out", out)
    assert p.returncode == 0, p.stderr
    check_against(out, pm.eval())
    base = tmp_path / "base.safetensors"
    assert logits_cmd("--model", tmp_path / "m", "--ids-file", tmp_path / "i.jsonl", "--out",
                      base).returncode == 0
    diff = safetensors_numpy.load_file(str(base))["logits"] - \
        safetensors_numpy.load_file(str(out))["logits"]
    assert np.abs(diff).max() > 1e-3, "the adapter must change the logits"


@pytest.mark.parametrize("args,names", [
    (["--model", "{d}/missing", "--ids", "1,2"], "--model"),
    (["--model", "{d}/m", "--ids", "1,256"], "--ids"),
    (["--model", "{d}/m", "--ids", "1,x"], "--ids"),
    (["--model", "{d}/m", "--ids", ""], "--ids"),
    (["--model", "{d}/m", "--ids-file", "{d}/nope.jsonl"], "nope.jsonl"),
    (["--model", "{d}/m", "--ids-file", "{d}/empty_row.jsonl"], "empty_row.jsonl:2"),
    (["--model", "{d}/m", "--ids", "1,2", "--dtype", "fp16"], "--dtype"),
    (["--model", "{d}/m", "--checkpoint", "{d}/m", "--ids", "1,2"], "--model / --checkpoint"),
    (["--ids", "1,2"], "--model / --checkpoint"),
    (["--checkpoint", "{d}/m", "--ids", "1,2"], "--checkpoint"),
    (["--model", "{d}/m", "--ids", "1,2", "--adapter", "{d}/m"], "--adapter"),
    (["--model", "{d}/m", "--ids", "1,2", "--bogus"], "bogus"),
    (["--model", "{d}/m", "--ids", "1,2", "--merge-adapter"], "--merge-adapter"),
    (["--model", "{d}/m", "--text", "hi"], "--tokenizer"),
    (["--model", "{d}/m"], "--ids"),
])
def test_bad_input_exits_2_and_writes_nothing(args, names, tmp_path):
    make_hf_dir(tmp_path / "m", seed=1, keep_values=False)
    write_ids(tmp_path / "empty_row.jsonl", [[1, 2, 3], []])
    out = tmp_path / "o" / "l.safetensors"
    out.parent.mkdir()
    p = logits_cmd(*[a.format(d=tmp_path) for a in args], "--out", out)
    assert p.returncode == 2, p.stdout + p.stderr
    assert names in p.stderr, p.stderr
    assert list(out.parent.iterdir()) == []


def test_more_tokens_than_a_mistral_sliding_window_exit_2(tmp_path):
    make_hf_dir(tmp_path / "m", seed=2, arch="MistralForCausalLM", keep_values=False,
                sliding_window=4)
    out = tmp_path / "o" / "l.safetensors"
    out.parent.mkdir()
    p = logits_cmd("--model", tmp_path / "m", "--ids", "1,2,3,4,5", "--out", out)
    assert p.returncode == 2 and "sliding_window 4" in p.stderr, p.stderr
    assert list(out.parent.iterdir()) == []
    assert logits_cmd("--model", tmp_path / "m", "--ids", "1,2,3,4", "--out", out).returncode == 0


def test_text_is_encoded_by_the_tokenizer(tmp_path):
    tf = pytest.importorskip("tokenizer_families")
    j = tf.make_tokenizer("gpt2", tf.corpus(300), vocab=400)
    hf_tok = tf.write_tokenizer(j, "gpt2", tmp_path / "tok")
    make_hf_dir(tmp_path / "m", seed=4, keep_values=False, vocab_size=512)
    text = "the cat was on the mat, and it is 42"
    out = tmp_path / "l.safetensors"
    p = logits_cmd("--model", tmp_path / "m", "--text", text, "--tokenizer",
                   tmp_path / "tok" / "tokenizer.json", "--out", out)
    assert p.returncode == 0, p.stderr
    got = safetensors_numpy.load_file(str(out))
    ids = hf_tok.encode(text, add_special_tokens=False).ids
    assert got["input_ids"].tolist() == [ids]
    with torch.no_grad():
        want = hf_llama(tmp_path / "m")(torch.tensor([ids])).logits
    assert np.abs(got["logits"] - want.numpy()).max() <= 1e-5


RAGGED = [[1, 17, 200, 3, 99, 42, 7, 255], [0, 5, 5], [9, 8, 7, 6, 5]]


def test_rows_of_unequal_length_are_right_padded_with_an_attention_mask(tmp_path):
    m = tmp_path / "m"
    make_hf_dir(m, seed=7)
    out = tmp_path / "l.safetensors"
    p = logits_cmd("--model", m, "--ids-file", write_ids(tmp_path / "i.jsonl", RAGGED), "--out", out)
    assert p.returncode == 0, p.stderr
    got = safetensors_numpy.load_file(str(out))
    T = max(map(len, RAGGED))
    assert got["input_ids"].tolist() == [r + [0] * (T - len(r)) for r in RAGGED]
    assert got["attention_mask"].dtype == np.int64
    assert got["attention_mask"].tolist() == [[1] * len(r) + [0] * (T - len(r)) for r in RAGGED]
    assert got["logits"].shape == (3, T, 256) and got["loss"].shape == (3, T - 1)
    for i, r in enumerate(RAGGED):  # each row alone, bit for bit; zeros at the padding
        one = tmp_path / f"{i}.safetensors"
        assert logits_cmd("--model", m, "--ids", ",".join(map(str, r)), "--out", one).returncode == 0
        alone = safetensors_numpy.load_file(str(one))
        assert np.array_equal(got["logits"][i, :len(r)], alone["logits"][0])
        assert np.array_equal(got["loss"][i, :len(r) - 1], alone["loss"][0])
        assert not got["logits"][i, len(r):].any() and not got["loss"][i, len(r) - 1:].any()
    with torch.no_grad():
        want = hf_llama(m)(torch.from_numpy(got["input_ids"]),
                           attention_mask=torch.from_numpy(got["attention_mask"])).logits.numpy()
    for i, r in enumerate(RAGGED):
        assert np.abs(got["logits"][i, :len(r)] - want[i, :len(r)]).max() <= 1e-5


def test_bf16_logits_are_stored_as_bf16_near_the_fp32_ones(tmp_path):
    make_hf_dir(tmp_path / "m", seed=8)
    ids = write_ids(tmp_path / "i.jsonl", IDS)
    for name, extra in [("fp32", []), ("bf16", ["--dtype", "bf16"])]:
        p = logits_cmd("--model", tmp_path / "m", "--ids-file", ids, *extra, "--out",
                       tmp_path / f"{name}.safetensors")
        assert p.returncode == 0, p.stderr
    fp32 = safetensors_torch.load_file(str(tmp_path / "fp32.safetensors"))
    bf16 = safetensors_torch.load_file(str(tmp_path / "bf16.safetensors"))
    assert fp32["logits"].dtype == torch.float32 and bf16["logits"].dtype == torch.bfloat16
    assert bf16["loss"].dtype == torch.float32
    scale = float(fp32["logits"].abs().max())
    err = float((bf16["logits"].float() - fp32["logits"]).abs().max()) / scale
    assert 0 < err <= 5e-2, err
    assert float((bf16["loss"] - fp32["loss"]).abs().max()) <= 5e-2 * float(fp32["loss"].max())


def test_checkpoint_logits_equal_those_of_its_export(tmp_path):
    """A full run's checkpoint: --checkpoint gives the logits and loss of --model on its
    `trainer export --dtype fp32`, bit for bit, also with a PEFT adapter on top; the
    checkpoint given as --model exits 2 pointing at --checkpoint."""
    make_hf_dir(tmp_path / "m", seed=9)
    run_trainer(tmp_path / "run", f"model.from_pretrained={tmp_path / 'm'}", "data.seq_len=32",
                "training.max_steps=2", "training.lr=1e-2", "metrics.skip_first_steps=0")
    ckpt = sorted((tmp_path / "run" / "checkpoints").glob("step_*"))[-1]
    p = subprocess.run([str(TRAINER), "export", "--checkpoint", str(ckpt), "--out",
                        str(tmp_path / "hf"), "--dtype", "fp32"], env=base_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lc = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "up_proj"],
                         task_type="CAUSAL_LM", init_lora_weights=False)
    peft.get_peft_model(hf_llama(tmp_path / "hf"), lc).save_pretrained(tmp_path / "ad")
    ids = write_ids(tmp_path / "i.jsonl", RAGGED)
    got = {}
    for adapter in ([], ["--adapter", tmp_path / "ad"]):
        for src in (["--model", tmp_path / "hf"], ["--checkpoint", ckpt]):
            out = tmp_path / f"{src[0][2:]}{len(adapter)}.safetensors"
            p = logits_cmd(*src, *adapter, "--ids-file", ids, "--out", out)
            assert p.returncode == 0, p.stderr
            got[src[0], len(adapter)] = safetensors_numpy.load_file(str(out))
        for k in ("input_ids", "attention_mask", "logits", "loss"):
            assert np.array_equal(got["--checkpoint", len(adapter)][k],
                                  got["--model", len(adapter)][k]), (adapter, k)
    base = tmp_path / "base.safetensors"
    assert logits_cmd("--model", tmp_path / "m", "--ids-file", ids, "--out", base).returncode == 0
    diff = safetensors_numpy.load_file(str(base))["logits"] - got["--checkpoint", 0]["logits"]
    assert np.abs(diff).max() > 1e-3, "two steps at lr 1e-2 must change the logits"
    diff = got["--checkpoint", 2]["logits"] - got["--checkpoint", 0]["logits"]
    assert np.abs(diff).max() > 1e-3, "the adapter must change the logits"
    p = logits_cmd("--model", ckpt, "--ids", "1,2", "--out", tmp_path / "x.safetensors")
    assert p.returncode == 2 and "--model" in p.stderr and "--checkpoint STEP_DIR" in p.stderr
    assert not (tmp_path / "x.safetensors").exists()
