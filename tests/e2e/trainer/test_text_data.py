"""JSONL text datasets tokenized with sentencepiece.

A tiny sentencepiece model is trained with `spm_train` on a corpus written here; the
trainer's token ids (its documented cache file) equal `spm_encode --output_format=id`
of the same text, prompt tokens are masked out of the loss (counted), and bad JSONL
exits 2 naming file:line and the field before the run directory exists.
"""
import json
import random
import re
import shutil
import subprocess

import numpy as np
import pytest

from hf_util import make_hf_dir
from trainer_util import (TINY, TRAINER, base_env, losses, read_token_cache, run_ranks,
                          run_trainer)

pytestmark = pytest.mark.skipif(shutil.which("spm_train") is None,
                                reason="Debian package sentencepiece (scripts/setup.sh)")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(tokenizer.model, list of sentences): a 200-piece unigram model."""
    d = tmp_path_factory.mktemp("spm")
    rnd = random.Random(0)
    syl = "ka to ri mu sel van dor pi lu ne bro sta quin fe zo ha ar el om ut".split()
    words = ["".join(rnd.choice(syl) for _ in range(rnd.randint(1, 3))) for _ in range(300)]
    lines = [" ".join(rnd.choice(words) for _ in range(rnd.randint(4, 14))) for _ in range(600)]
    (d / "corpus.txt").write_text("\n".join(lines) + "\n")
    subprocess.run(["spm_train", f"--input={d / 'corpus.txt'}", f"--model_prefix={d / 'tok'}",
                    "--vocab_size=200"], check=True, capture_output=True, timeout=120)
    return d / "tok.model", lines


def spm_encode(model, texts, extra=""):
    """sentencepiece's own ids of each one-line text."""
    args = ["spm_encode", f"--model={model}", "--output_format=id"]
    if extra:
        args.append(f"--extra_options={extra}")
    p = subprocess.run(args, input="\n".join(texts) + "\n", capture_output=True, text=True,
                       check=True, timeout=60)
    return [[int(t) for t in line.split()] for line in p.stdout.splitlines()]


def read_cache(jsonl):
    """The trainer's token cache beside `jsonl`: [(ids, prompt_len)] (text_dataset.cpp)."""
    docs = read_token_cache(jsonl)
    assert all(masked >= 0 for _, masked, _ in docs), "text and prompt masks are prefixes"
    return [(ids, masked) for ids, masked, _ in docs]


def write_pairs(path, lines, n=60):
    pairs = []
    for line in lines[:n]:
        w = line.split()
        pairs.append({"prompt": " ".join(w[:3]) + " ->", "completion": " " + " ".join(w[3:]),
                      "id": len(pairs)})
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return pairs


def text_args(jsonl, model, *more):
    return [f'data.source="{jsonl}"', f'data.tokenizer="{model}"', "data.seq_len=64",
            "training.max_steps=4", "metrics.skip_first_steps=1", *more]


def masked_in_log(out):
    m = re.search(r"(\d+) samples, (\d+) training positions, (\d+) of them masked", out)
    assert m, out
    return [int(x) for x in m.groups()]


def test_prompt_completion_tokenizes_like_spm_encode_and_masks_the_prompt(tmp_path, corpus):
    model, lines = corpus
    jsonl = tmp_path / "sft.jsonl"
    pairs = write_pairs(jsonl, lines)
    p = run_trainer(tmp_path / "out", *text_args(jsonl, model, 'data.prompt_field="prompt"',
                                                 'data.completion_field="completion"'))
    want = spm_encode(model, [q["prompt"] + q["completion"] for q in pairs], "bos:eos")
    prompts = spm_encode(model, [q["prompt"] for q in pairs])
    docs = read_cache(jsonl)
    assert [ids for ids, _ in docs] == want
    # bos + the prompt's tokens are not targets: |encode(prompt)| masked positions each.
    assert [pl for _, pl in docs] == [1 + len(t) for t in prompts]
    assert all(len(ids) <= 65 for ids in want), "no document may be cut at seq_len 64"
    samples, positions, masked = masked_in_log(p.stderr)
    assert samples == len(pairs)
    assert positions == sum(len(ids) - 1 for ids in want)
    assert masked == sum(len(t) for t in prompts) > 0
    assert np.isfinite(losses(tmp_path / "out")).all()


def test_text_field_matches_spm_encode_and_the_cache_is_reused(tmp_path, corpus):
    model, lines = corpus
    jsonl = tmp_path / "docs.jsonl"
    texts = lines[100:160]
    jsonl.write_text("".join(json.dumps({"body": t, "n": i}) + "\n" for i, t in enumerate(texts)))
    args = text_args(jsonl, model, 'data.text_field="body"')
    first = run_trainer(tmp_path / "a", *args)
    assert "tokenized 60 documents" in first.stderr
    assert [ids for ids, _ in read_cache(jsonl)] == spm_encode(model, texts, "bos:eos")
    assert masked_in_log(first.stderr)[2] == 0
    second = run_trainer(tmp_path / "b", *args)
    assert "tokenized" not in second.stderr, "the second run must read the cache"
    assert "documents of " in second.stderr and "from the cache" in second.stderr
    assert np.array_equal(losses(tmp_path / "a"), losses(tmp_path / "b"))


def test_the_model_directorys_tokenizer_is_the_default(tmp_path, corpus):
    """model.from_pretrained + a .jsonl of texts and no data.tokenizer: the model directory's
    tokenizer.model tokenizes (ids equal spm_encode's)."""
    model, lines = corpus
    make_hf_dir(tmp_path / "m", seed=5)  # vocab 256 >= the 200 pieces
    shutil.copy(model, tmp_path / "m" / "tokenizer.model")
    jsonl = tmp_path / "docs.jsonl"
    texts = lines[200:240]
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    p = run_trainer(tmp_path / "out", f'model.from_pretrained="{tmp_path / "m"}"',
                    f'data.source="{jsonl}"', "data.seq_len=64", "training.max_steps=2",
                    "metrics.skip_first_steps=0")
    assert f"with {tmp_path / 'm' / 'tokenizer.model'}" in p.stderr, p.stderr
    assert [ids for ids, _ in read_cache(jsonl)] == spm_encode(model, texts, "bos:eos")
    assert np.isfinite(losses(tmp_path / "out")).all()


def test_export_carries_the_tokenizer_and_its_bos_eos_ids(tmp_path, corpus):
    """A run from a preset with data.tokenizer: export failed ("key 'model.from_pretrained':
    missing required key"); now the export holds the tokenizer.model the run used and
    config.json names its bos/eos ids (sentencepiece's <s> and </s>, from spm_train's vocab)."""
    model, lines = corpus
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines[:40]))
    run_trainer(tmp_path / "out", *text_args(jsonl, model, "training.max_steps=2"))
    p = subprocess.run([str(TRAINER), "export", "--checkpoint", str(tmp_path / "out" / "checkpoints"),
                        "--out", str(tmp_path / "hf")], env=base_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "hf" / "tokenizer.model").read_bytes() == model.read_bytes()
    pieces = [line.split("\t")[0] for line in model.with_suffix(".vocab").read_text().splitlines()]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["bos_token_id"] == pieces.index("<s>"), config
    assert config["eos_token_id"] == pieces.index("</s>"), config


def test_packing_fills_every_window(tmp_path, corpus):
    model, lines = corpus
    jsonl = tmp_path / "docs.jsonl"
    texts = lines[:80]
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    p = run_trainer(tmp_path / "out", *text_args(jsonl, model, 'data.padding="packing"'))
    stream = sum(len(ids) for ids in spm_encode(model, texts, "bos:eos"))
    samples, positions, masked = masked_in_log(p.stderr)
    assert (samples, positions, masked) == (-(-(stream - 1) // 64), stream - 1, 0)
    with __import__("h5py").File(tmp_path / "out" / "metrics" / "rank_00000.h5") as f:
        padded, dataset = f["steps/tokens_padded"][:], f["steps/tokens_dataset"][:]
    assert np.array_equal(padded[:3], dataset[:3]), "packed windows carry no padding"


def test_two_ranks_tokenize_once(tmp_path, corpus):
    model, lines = corpus
    jsonl = tmp_path / "sft.jsonl"
    write_pairs(jsonl, lines)
    outs = run_ranks(tmp_path / "out", 2, *text_args(jsonl, model, 'data.prompt_field="prompt"',
                                                      'data.completion_field="completion"'))
    assert sum("tokenized 60 documents" in e for _, _, e in outs) == 1, outs
    assert np.isfinite(losses(tmp_path / "out")).all()


@pytest.mark.parametrize("text,line,names", [
    ('{"text": "ka to"}\n{"text": "ri mu"}\n{"text": "sel\n', 3, ["invalid JSON"]),
    ('{"text": "ka to"}\n{"body": "ri mu"}\n', 2, ["data.text_field", '"text"']),
    ('{"text": 7}\n', 1, ["data.text_field", "expected a string"]),
    ('{"prompt": "ka", "completion": "to"}\n\n{"prompt": "ri"}\n', 3,
     ["data.completion_field", '"completion"']),
    ("", 0, ["empty file"]),
    ("\n  \n", 0, ["empty file"]),
])
def test_bad_jsonl_exits_2_naming_file_line_and_field(tmp_path, corpus, text, line, names):
    model, _ = corpus
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text(text)
    fields = (['data.prompt_field="prompt"', 'data.completion_field="completion"']
              if "prompt" in text else [])
    out = tmp_path / "out"
    p = subprocess.run([str(TRAINER), "--config", str(TINY), "--output-dir", str(out),
                        *text_args(jsonl, model, *fields)],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert (f"{jsonl}:{line}" if line else str(jsonl)) in p.stderr
    for n in names:
        assert n in p.stderr, (n, p.stderr)
    assert not out.exists(), "bad data is refused before the run directory is created"
