"""tokenizer.json (HF `tokenizers`) in the trainer: `trainer tokenize` and JSONL datasets.

Small tokenizers of each causal-LM family are trained here by the venv's `tokenizers`
(tokenizer_families.py: GPT-2, Llama 3, Qwen 2, SmolLM2 byte-level BPE; Mistral and Llama 2
SentencePiece-style BPE with byte_fallback; Metaspace with <unk>), with added and special
tokens. On a deterministic multilingual corpus of 10,000 texts the trainer's ids equal
`tokenizers`' ids (encode(text, add_special_tokens=False)) on every line, with the merges
as [a, b] pairs and as "a b" strings. A run trains on a tokenizer.json dataset, and bad
input exits 2 naming the file and the line or the JSON path.
"""
import json
import shutil
import subprocess

import pytest

tokenizers = pytest.importorskip("tokenizers")

import tokenizer_families as tf  # noqa: E402
from hf_util import make_hf_dir  # noqa: E402
from trainer_util import TRAINER, base_env, losses, read_token_cache, run_trainer  # noqa: E402

N_TEXTS = 10000


@pytest.fixture(scope="module", autouse=True)
def tokenizers_on_one_thread():
    """HF `tokenizers` trains and encodes on the test's thread: its thread pool, beside the
    other pytest workers on the cores, adds CPU time and no speed."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENIZERS_PARALLELISM", "false")
        yield


@pytest.fixture(scope="module")
def texts():
    return tf.corpus(N_TEXTS)


@pytest.fixture(scope="module")
def corpus_jsonl(tmp_path_factory, texts):
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps({"n": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


@pytest.fixture(scope="module")
def families(tmp_path_factory, texts):
    """family -> (tokenizer.json dict, HF ids of every text, directory of the pairs form).
    Each is trained on the first 2,000 texts: a BPE family learns as many merges there as
    from more; the Unigram families there without the characters of tf.UNSEEN."""
    out = {}
    for family in tf.FAMILIES:
        j = tf.make_tokenizer(family, texts[:2000])
        d = tmp_path_factory.mktemp(family)
        hf = tf.write_tokenizer(j, family, d / "pairs")
        ids = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        out[family] = (j, ids, d / "pairs")
    return out


def tokenize(tokenizer, src, dst, *flags, check=True):
    p = subprocess.run([str(TRAINER), "tokenize", "--tokenizer", str(tokenizer), *flags,
                        str(src), str(dst)], env=base_env(), capture_output=True, text=True,
                       timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def read_ids(path):
    return [json.loads(line)["input_ids"] for line in path.read_text().splitlines()]


def first_mismatches(ours, want, texts, k=3):
    bad = [i for i, (a, b) in enumerate(zip(ours, want)) if a != b]
    lines = [f"line {i + 1}: {texts[i][:120]!r}\n  ftbench {ours[i][:40]}\n  HF      {want[i][:40]}"
             for i in bad[:k]]
    return len(bad), "\n".join(lines)


# Unigram files have no merges: one form each.
@pytest.mark.parametrize("family,merges", [(f, m) for f in tf.FAMILIES for m in ("pairs", "strings")
                                           if m == "pairs" or not f.startswith("unigram")])
def test_ids_equal_hf_tokenizers_on_every_line(tmp_path, families, texts, corpus_jsonl, family,
                                               merges):
    j, want, _ = families[family]
    hf = tf.write_tokenizer(j, family, tmp_path, merges)
    if merges == "strings":  # HF reads the older form as the same tokenizer
        assert [e.ids for e in hf.encode_batch(texts[:300], add_special_tokens=False)] == want[:300]
    tokenize(tmp_path / "tokenizer.json", corpus_jsonl, tmp_path / "ids.jsonl")
    ours = read_ids(tmp_path / "ids.jsonl")
    assert len(ours) == N_TEXTS  # the empty texts give [] lines: JSON lines are never blank
    n_bad, shown = first_mismatches(ours, want, texts)
    assert n_bad == 0, f"{n_bad} of {N_TEXTS} lines differ from HF tokenizers:\n{shown}"


@pytest.mark.parametrize("variant", sorted(tf.VARIANTS))
def test_hand_changed_files_equal_hf_tokenizers(tmp_path, families, texts, variant):
    """Parts no trained family uses; the first 3,000 texts."""
    family, change = tf.VARIANTS[variant]
    j = json.loads(json.dumps(families[family][0]))
    change(j)
    hf = tf.write_tokenizer(j, family, tmp_path)
    want = [e.ids for e in hf.encode_batch(texts[:3000], add_special_tokens=False)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:3000]))
    tokenize(tmp_path / "tokenizer.json", src, tmp_path / "ids.jsonl")
    n_bad, shown = first_mismatches(read_ids(tmp_path / "ids.jsonl"), want, texts)
    assert n_bad == 0, f"{n_bad} of 3000 lines differ from HF tokenizers:\n{shown}"


def test_the_corpus_reaches_every_path(families):
    """The equality above covers added tokens, byte fallback and <unk> (BPE and Unigram, the
    latter on at least 50 lines each): the HF ids use them."""
    def ids_of(family):
        return {i for ids in families[family][1] for i in ids}

    def added(family, content):
        return next(a["id"] for a in families[family][0]["added_tokens"]
                    if a["content"] == content)

    def lines_using(family, pieces):
        vocab = [piece for piece, _ in families[family][0]["model"]["vocab"]]
        wanted = {vocab.index(p) for p in pieces}
        return sum(not wanted.isdisjoint(ids) for ids in families[family][1])

    for family, content in [("gpt2", "<mask>"), ("gpt2", "Zebra"), ("gpt2", "my_word"),
                            ("gpt2", "<|endoftext|>"), ("qwen2", "<|im_start|>"),
                            ("llama3", "<|begin_of_text|>"), ("llama2", "my_word"),
                            ("mistral", "</s>")]:
        assert added(family, content) in ids_of(family), (family, content)
    vocab = families["mistral"][0]["model"]["vocab"]
    assert any(vocab[f"<0x{b:02X}>"] in ids_of("mistral") for b in range(0x80, 0x100)), \
        "no byte fallback token of a non-ASCII byte"
    assert families["sp_unk"][0]["model"]["vocab"]["<unk>"] in ids_of("sp_unk")
    assert lines_using("unigram", tf.BYTES) >= 50, "Unigram byte fallback"
    assert lines_using("unigram_unk", ["<unk>"]) >= 50, "Unigram <unk>"


def test_add_bos_eos_follows_the_template_and_tokenizer_config(tmp_path, families, texts):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"body": t}) + "\n" for t in texts[:50]))
    for family, bos in [("llama3", "<|begin_of_text|>"), ("qwen2", None), ("mistral", "<s>")]:
        j, want, d = families[family]
        p = tokenize(d / "tokenizer.json", src, tmp_path / f"{family}.jsonl", "--add-bos-eos",
                     "--text-field", "body")
        ids = {a["content"]: a["id"] for a in j["added_tokens"]}
        eos = ids[tf.EOS[family]]
        expect = [([ids[bos]] if bos else []) + w + [eos] for w in want[:50]]
        assert read_ids(tmp_path / f"{family}.jsonl") == expect, p.stderr


def read_cache(jsonl):
    return [ids for ids, _, _ in read_token_cache(jsonl)]


def test_a_run_trains_on_a_tokenizer_json_dataset(tmp_path, families, texts):
    j, want, d = families["llama3"]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:80]))
    args = [f'data.source="{jsonl}"', f'data.tokenizer="{d / "tokenizer.json"}"',
            "data.seq_len=64", "training.max_steps=4", "metrics.skip_first_steps=1"]
    small = run_trainer(tmp_path / "small", *args, check=False)
    assert small.returncode == 2, small.stderr
    assert "more than model.vocab_size(512)" in small.stderr
    p = run_trainer(tmp_path / "out", *args, "model.vocab_size=4096")
    assert "tokenized 80 documents" in p.stderr
    ids = {a["content"]: a["id"] for a in j["added_tokens"]}
    bos, eos = ids["<|begin_of_text|>"], ids["<|end_of_text|>"]
    assert read_cache(jsonl) == [[bos] + w + [eos] for w in want[:80]]
    assert len(losses(tmp_path / "out")) == 4
    # The export carries the tokenizer as a model directory does, and its bos/eos ids.
    hf = tmp_path / "hf"
    e = subprocess.run([str(TRAINER), "export", "--checkpoint",
                        str(tmp_path / "out" / "checkpoints"), "--out", str(hf)],
                       env=base_env(), capture_output=True, text=True, timeout=120)
    assert e.returncode == 0, e.stderr
    assert (hf / "tokenizer.json").read_bytes() == (d / "tokenizer.json").read_bytes()
    assert (hf / "tokenizer_config.json").exists() and not (hf / "tokenizer.model").exists()
    config = json.loads((hf / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (bos, eos)


def test_from_pretrained_uses_its_tokenizer_json(tmp_path, families, texts):
    j, want, d = families["qwen2"]
    model = tmp_path / "model"
    make_hf_dir(model, seed=3, vocab_size=4096)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(d / name, model / name)
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:40]))
    run_trainer(tmp_path / "out", f'model.from_pretrained="{model}"', f'data.source="{jsonl}"',
                "data.seq_len=64", "training.max_steps=2", "metrics.skip_first_steps=1")
    eos = {a["content"]: a["id"] for a in j["added_tokens"]}["<|endoftext|>"]
    assert read_cache(jsonl) == [w + [eos] for w in want[:40]]  # Qwen 2 adds no BOS


def write_json(path, j):
    path.write_text(json.dumps(j, ensure_ascii=False))
    return path


def test_bad_input_exits_2_naming_the_file_and_where(tmp_path, families):
    j, _, d = families["qwen2"]
    tok = d / "tokenizer.json"
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "fine"}\n\n{"text": 3}\n')
    p = tokenize(tok, src, tmp_path / "out.jsonl", check=False)
    assert p.returncode == 2 and f"{src}:3" in p.stderr and "expected a string" in p.stderr
    assert not (tmp_path / "out.jsonl").exists(), "OUT is written whole or not at all"
    src.write_text('{"text": "fine"}\n{"text": "x"\n')
    p = tokenize(tok, src, tmp_path / "out.jsonl", check=False)
    assert p.returncode == 2 and f"{src}:2" in p.stderr and "invalid JSON" in p.stderr
    src.write_text('{"body": "x"}\n')
    p = tokenize(tok, src, tmp_path / "out.jsonl", check=False)
    assert p.returncode == 2 and 'no "text" field' in p.stderr and "--text-field" in p.stderr

    def refused(mutate, *expected):
        k = json.loads(json.dumps(j))
        mutate(k)
        bad = write_json(tmp_path / "bad.json", k)
        p = tokenize(bad, src, tmp_path / "out.jsonl", check=False)
        assert p.returncode == 2, p.stderr
        for e in (str(bad), *expected):
            assert e in p.stderr, (e, p.stderr)

    refused(lambda k: k.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer",
            '"Whitespace" is not supported')
    refused(lambda k: k["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex="(?<x"),
            "pre_tokenizer.pretokenizers[0].pattern", "does not compile")
    refused(lambda k: k["model"]["merges"].insert(0, ["no-such", "token"]), "model.merges[0]",
            "not in model.vocab")
    refused(lambda k: k["model"].update(type="WordPiece"), "model.type", "not supported")
    refused(lambda k: k.update(normalizer={"type": "Lowercase"}), "normalizer",
            '"Lowercase" is not supported')
    (tmp_path / "broken.json").write_text('{"model": ')
    p = tokenize(tmp_path / "broken.json", src, tmp_path / "o.jsonl", check=False)
    assert p.returncode == 2 and "not a valid tokenizer.json" in p.stderr
    p = tokenize(tmp_path / "absent.json", src, tmp_path / "o.jsonl", check=False)
    assert p.returncode == 2 and "--tokenizer" in p.stderr and "not found" in p.stderr
    p = subprocess.run([str(TRAINER), "tokenize", "--tokenizer", str(tok), str(src)],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "expected two files" in p.stderr


@pytest.mark.skipif(shutil.which("spm_train") is None,
                    reason="Debian package sentencepiece (scripts/setup.sh)")
def test_a_sentencepiece_model_goes_through_the_same_command(tmp_path, texts):
    """The interface is one: `trainer tokenize` with a tokenizer.model gives spm_encode's ids."""
    lines = [t.replace("\n", " ").replace("\r", " ") for t in texts[:2000] if t.strip()]
    (tmp_path / "c.txt").write_text("\n".join(lines) + "\n")
    subprocess.run(["spm_train", f"--input={tmp_path / 'c.txt'}",
                    f"--model_prefix={tmp_path / 'sp'}", "--vocab_size=800",
                    "--character_coverage=0.98"], check=True, capture_output=True, timeout=300)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines[:300]))
    tokenize(tmp_path / "sp.model", src, tmp_path / "ids.jsonl")
    p = subprocess.run(["spm_encode", f"--model={tmp_path / 'sp.model'}", "--output_format=id"],
                       input="\n".join(lines[:300]) + "\n", capture_output=True, text=True,
                       check=True, timeout=60)
    want = [[int(x) for x in line.split()] for line in p.stdout.splitlines()]
    assert read_ids(tmp_path / "ids.jsonl") == want
