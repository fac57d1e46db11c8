"""Pre-tokenized JSONL with Hugging Face's labels and attention_mask, against transformers.

1. A batch of right-padded records whose labels mask a prompt with -100 and differ from the
   ids in places: the trainer's first-step loss equals transformers' LlamaForCausalLM(input_ids,
   attention_mask=..., labels=...).loss on the same model directory within 1e-6 relative
   (fp32, training.fp32_gemm=aten).
2. attention_mask padding on the left and on the right: the padded positions are neither in
   the HDF5 file's tokens_dataset nor in the loss (each step's counts, and its loss against
   transformers' on the records without their padding); labels equal to the ids with an
   all-ones mask give the plain {"input_ids"} file's losses bit for bit.
3. A token-id file is read as ids even beside a model directory whose tokenizer.json the
   trainer would otherwise use.
4. Bad records exit 2 naming file:line, what was expected and a hint, before the run
   directory exists.
"""
import json
import shutil

import numpy as np
import pytest
import torch

import tokenizer_families as tf
from hf_util import LazyModule, make_hf_dir
from trainer_util import assert_close, losses, run_trainer, steps

transformers = LazyModule("transformers")

B, T = 4, 32
IGNORE = -100


def write_records(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def hf_model(d):
    return transformers.LlamaForCausalLM.from_pretrained(d, dtype=torch.float32).eval()


def labelled_batch(vocab, seed=4):
    """B right-padded records of T ids: a prompt masked with -100, padding (id 0) with
    attention_mask 0 and label -100, and in two records labels that differ from the ids."""
    rng = np.random.default_rng(seed)
    records = []
    for b in range(B):
        n = int(rng.integers(T // 2, T + 1))
        ids = rng.integers(1, vocab, size=n).tolist()
        prompt = int(rng.integers(1, n // 2))
        labels = [IGNORE] * prompt + ids[prompt:]
        if b % 2:  # a target that is not the next input (as in distillation or label noise)
            for k in rng.choice(np.arange(n // 2, n), size=3, replace=False):
                labels[k] = int(rng.integers(1, vocab))
        pad = T - n
        records.append({"input_ids": ids + [0] * pad, "attention_mask": [1] * n + [0] * pad,
                        "labels": labels + [IGNORE] * pad})
    return records


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("labels") / "m"
    cfg, _ = make_hf_dir(d, seed=17)
    return d, cfg


def hf_args(model, data, *extra):
    return [f'model.from_pretrained="{model}"', f'data.source="{data}"', f"data.seq_len={T - 1}",
            f"training.micro_batch_size={B}", "metrics.skip_first_steps=0", *extra]


def test_first_step_loss_equals_transformers_with_labels_and_padding(model_dir, tmp_path):
    d, cfg = model_dir
    records = labelled_batch(cfg["vocab_size"])
    data = write_records(tmp_path / "batch.jsonl", records)
    run_trainer(tmp_path / "run", *hf_args(d, data, "training.max_steps=1"))
    batch = {k: torch.tensor([r[k] for r in records]) for k in records[0]}
    assert int((batch["labels"][:, 1:] == IGNORE).sum()) > B, "prompts and padding are masked"
    with torch.no_grad():
        want = hf_model(d)(**batch).loss.item()
    got = steps(tmp_path / "run", "loss")[0]
    assert abs(got - want) <= 1e-6 * abs(want), f"ftbench {got!r}, transformers {want!r}"
    # The padded positions are not counted: T - 1 positions per record less its padding.
    real = [sum(r["attention_mask"]) for r in records]
    assert steps(tmp_path / "run", "tokens_dataset")[0] == sum(n - 1 for n in real)


def unpadded_loss(model, records):
    """transformers' mean loss over the targets of records without their padding."""
    total, count = 0.0, 0
    with torch.no_grad():
        for r in records:
            keep = [k for k, m in enumerate(r["attention_mask"]) if m]
            x = torch.tensor([r["input_ids"][k] for k in keep])
            logits = model(x[None, :-1]).logits[0].double()
            total += torch.nn.functional.cross_entropy(logits, x[1:], reduction="sum").item()
            count += len(keep) - 1
    return total / count


def test_attention_mask_padding_is_neither_counted_nor_in_the_loss(model_dir, tmp_path):
    d, cfg = model_dir
    rng = np.random.default_rng(9)
    records = []
    for left, right in [(0, 0), (3, 0), (0, 5), (2, 2)] * 2:  # (left, right) padding
        n = int(rng.integers(8, T + 1))
        ids = rng.integers(1, cfg["vocab_size"], size=n).tolist()
        # Padding with a real id: were it kept, the loss would change.
        records.append({"input_ids": [7] * left + ids + [7] * right,
                        "attention_mask": [0] * left + [1] * n + [0] * right})
    data = write_records(tmp_path / "padded.jsonl", records)
    run_trainer(tmp_path / "run", *hf_args(d, data, "training.max_steps=2", "training.lr=0"))
    model = hf_model(d)
    for step in range(2):
        mine = records[step * B:(step + 1) * B]
        assert steps(tmp_path / "run", "tokens_dataset")[step] == \
            sum(sum(r["attention_mask"]) - 1 for r in mine)
        assert steps(tmp_path / "run", "tokens_padded")[step] == B * (T - 1)
        assert_close(losses(tmp_path / "run")[step:step + 1], [unpadded_loss(model, mine)], 1e-6)


def test_labels_equal_to_the_ids_keep_the_plain_files_losses(tmp_path):
    rng = np.random.default_rng(3)
    docs = [rng.integers(1, 512, size=int(rng.integers(10, 60))).tolist() for _ in range(24)]
    plain = write_records(tmp_path / "plain.jsonl", [{"input_ids": ids} for ids in docs])
    full = write_records(tmp_path / "full.jsonl", [{"input_ids": ids, "labels": ids,
                                                    "attention_mask": [1] * len(ids)}
                                                   for ids in docs])
    args = ["training.max_steps=6", "data.seq_len=48"]
    run_trainer(tmp_path / "a", f'data.source="{plain}"', *args)
    run_trainer(tmp_path / "b", f'data.source="{full}"', *args)
    assert np.array_equal(losses(tmp_path / "a"), losses(tmp_path / "b"))
    assert np.array_equal(steps(tmp_path / "a", "tokens_dataset"),
                          steps(tmp_path / "b", "tokens_dataset"))


def test_token_ids_beside_a_model_tokenizer_are_read_as_ids(model_dir, tmp_path):
    d, cfg = model_dir
    m = tmp_path / "with_tokenizer"
    shutil.copytree(d, m)
    tf.write_tokenizer(tf.make_tokenizer("qwen2", tf.corpus(300), vocab=400), "qwen2", m)
    data = write_records(tmp_path / "batch.jsonl", labelled_batch(cfg["vocab_size"]))
    p = run_trainer(tmp_path / "tok", *hf_args(m, data, "training.max_steps=1"))
    assert "holds input_ids: read as token ids" in p.stderr + p.stdout
    run_trainer(tmp_path / "plain", *hf_args(d, data, "training.max_steps=1"))
    assert np.array_equal(losses(tmp_path / "tok"), losses(tmp_path / "plain"))


OK = '{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}\n'


@pytest.mark.parametrize("bad,needles", [
    ('{"input_ids": [1, 2, 3], "labels": [-100, 2]}',
     ['"labels" has 2 entries, "input_ids" 3', "hint: one entry per input id: labels[i] is the "
      "target at position i, -100 where there is none"]),
    ('{"input_ids": [1, 2, 3], "labels": [-100, 2, -1]}',
     ["labels[2] = -1: expected -100 (not a target) or a token id in [0, vocab_size(512))"]),
    ('{"input_ids": [1, 2, 3], "labels": [-100, 2, 512]}', ["labels[2] = 512"]),
    ('{"input_ids": [1, 2, 3], "labels": {"a": 1}}',
     ['"labels" is a JSON object, expected a list']),
    ('{"input_ids": [1, 2, 3], "attention_mask": [1, 1]}',
     ['"attention_mask" has 2 entries, "input_ids" 3', "attention_mask[i] is 1 for a token"]),
    ('{"input_ids": [1, 2, 3], "attention_mask": [1, 1, 2]}',
     ["attention_mask[2] = 2, expected 0 (padding) or 1"]),
    ('{"input_ids": [1, 2, 3, 4], "attention_mask": [1, 0, 1, 1]}',
     ["attention_mask[1] is 0 between ones: padding must come before or after the tokens",
      "hint: the trainer drops padded positions"]),
    ('{"input_ids": [1, 2, 3], "labels": [true, 2, 3]}', ['non-integer value in "labels"']),
], ids=["labels_length", "label_negative", "label_vocab", "labels_object", "mask_length",
        "mask_value", "mask_gap", "label_bool"])
def test_bad_records_exit_2_naming_file_line_and_what_was_expected(tmp_path, bad, needles):
    data = tmp_path / "bad.jsonl"
    data.write_text(OK + "\n" + bad + "\n")
    out = tmp_path / "out"
    p = run_trainer(out, f'data.source="{data}"', "training.max_steps=1", check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    for n in [f"{data}:3", "data.source", *needles]:
        assert n in p.stderr, (n, p.stderr)
    assert not out.exists(), "bad data is refused before the run directory is created"
