"""Chat records ({"messages": [...]}) against transformers' apply_chat_template.

Small Llama 3 and Qwen 2 tokenizers are trained here (tokenizer_families.py), each beside a
tokenizer_config.json holding its model's chat template (Meta-Llama-3-8B-Instruct's,
Qwen2-Instruct's). On 300 conversations of every shape (a system turn or none, up to three
rounds, a last user turn, empty, blank, newline-led and special-token contents, the
multilingual corpus):
1. `trainer tokenize` writes the ids transformers' apply_chat_template gives with the shipped
   template and, as labels, the assistant mask it gives (return_assistant_tokens_mask=True)
   for the same template with {% generation %} around each assistant content and its
   end-of-turn token, token for token; the ChatML data has tokens that straddle the start of
   an assistant content (a newline-led content after "assistant\\n"), which the mask includes.
2. A LoRA run on a Llama 3 model directory with chat data trains; its token cache holds
   transformers' ids and masks, its start-up line counts the masked positions, and the adapter
   it exports loads in PEFT, whose loss over the assistant tokens of a batch equals the
   trainer's (1e-5, fp32), and `trainer logits --model --adapter --merge-adapter` on
   conversations of unequal length gives the logits of PEFT's merged model (merge_and_unload)
   within 1e-5 of the largest logit in fp32, and within 1e-5 absolute with --dtype fp64
   against that model in float64 (its rotary angles in float64 too); the LoRA checkpoint
   itself given as `trainer logits --checkpoint` exits 2 pointing at --adapter.
3. Bad input exits 2 before the run directory exists: a role other than system, user and
   assistant, a message without content, no messages list (naming file:line); a template that
   is neither Llama 3's nor ChatML, no template, a tokenizer without byte-level pre-tokens
   (naming the file); the fixed data.chat_template formats a model whose template is unknown.
"""
import json
import random
import shutil
import subprocess

import numpy as np
import pytest
import torch

tokenizers = pytest.importorskip("tokenizers")

import tokenizer_families as tf  # noqa: E402
from hf_util import LazyModule, make_hf_dir  # noqa: E402
from test_lora_adapter import LORA, export_adapter  # noqa: E402
from trainer_util import (TRAINER, assert_close, base_env, losses, read_token_targets,  # noqa: E402
                          run_trainer, steps)

transformers = LazyModule("transformers")
peft = LazyModule("peft")
safetensors_numpy = LazyModule("safetensors.numpy")

# As the model directories ship them (tokenizer_config.json, JSON-decoded).
LLAMA3 = (r"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          r"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] "
          r"| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content "
          r"%}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
          r"'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
QWEN2 = (r"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
         r"{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
         r"{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
         r"{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# The same renderings with {% generation %} around what the trainer puts in the loss.
LLAMA3_GEN = (r"{% for message in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
              r"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
              r"{% if message['role'] == 'assistant' %}{% generation %}"
              r"{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
              r"{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}")
QWEN2_GEN = (r"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
             r"{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
             r"{{ '<|im_start|>' + message['role'] + '\n' }}{% if message['role'] == 'assistant' %}"
             r"{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
             r"{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\n' }}{% endfor %}")
MISTRAL = (r"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
           r"{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}"
           r"{{ message['content'] + eos_token }}{% endif %}{% endfor %}")

FAMILIES = {
    "llama3": dict(template=LLAMA3, gen=LLAMA3_GEN,
                   extra=["<|start_header_id|>", "<|end_header_id|>"],
                   tokens={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "qwen2": dict(template=QWEN2, gen=QWEN2_GEN, extra=[],
                  tokens={"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
}
# Contents the corpus lacks: empty, blank, newline-led (ChatML keeps the newline: a token can
# cover the header's "\n" and the content's), special-token strings, trailing blanks.
EDGE = ["", " ", "\n", "\n\nSure, here it is.", "\t\n lead", "trailing \n", "two  spaces  ",
        "<|im_end|> inside", "<|eot_id|>", "\u3000ideographic space\u3000", "ok"]
SEQ = 256


@pytest.fixture(scope="module")
def texts():
    return tf.corpus(1600)


def write_chat_dir(family, texts, d, template=None):
    """A tokenizer.json of `family` and a tokenizer_config.json with its chat template."""
    f = FAMILIES[family]
    tok = tokenizers.Tokenizer.from_str(json.dumps(tf.make_tokenizer(family, texts)))
    if f["extra"]:
        tok.add_special_tokens(f["extra"])
    tf.write_tokenizer(json.loads(tok.to_str()), family, d)
    cfg = dict(f["tokens"], chat_template=f["template"] if template is None else template)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture(scope="module")
def chat_dirs(tmp_path_factory, texts):
    return {family: write_chat_dir(family, texts, tmp_path_factory.mktemp(family))
            for family in FAMILIES}


def hf_tokenizer(d, family):
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"),
                                                **FAMILIES[family]["tokens"])


def conversations(texts, n, seed=7, short=False):
    rnd = random.Random(seed)

    def pick():
        if rnd.random() < 0.3:
            return rnd.choice(EDGE)
        t = rnd.choice(texts)
        return t[:24] if short else t

    out = []
    for _ in range(n):
        m = [{"role": "system", "content": pick()}] if rnd.random() < 0.4 else []
        for _ in range(rnd.randint(1, 2 if short else 3)):
            m += [{"role": "user", "content": pick()}, {"role": "assistant", "content": pick()}]
        if rnd.random() < 0.2:
            m.append({"role": "user", "content": pick()})
        out.append(m)
    return out


def hf_ids_and_masks(hf, family, convs):
    """transformers' ids (shipped template) and assistant masks (its generation form)."""
    f = FAMILIES[family]
    ids, masks = [], []
    for m in convs:
        text = hf.apply_chat_template(m, chat_template=f["template"], tokenize=False)
        assert hf.apply_chat_template(m, chat_template=f["gen"], tokenize=False) == text
        out = hf.apply_chat_template(m, chat_template=f["gen"], tokenize=True, return_dict=True,
                                     return_assistant_tokens_mask=True)
        assert list(out["input_ids"]) == hf(text, add_special_tokens=False)["input_ids"]
        ids.append(list(out["input_ids"]))
        masks.append(list(out["assistant_masks"]))
    return ids, masks


def straddling_turns(hf, convs):
    """ChatML assistant turns whose content starts inside a token (transformers' offsets)."""
    n = 0
    for m in convs:
        text = hf.apply_chat_template(m, chat_template=QWEN2, tokenize=False)
        offsets = hf(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        head, at = "<|im_start|>assistant\n", text.find("<|im_start|>assistant\n")
        while at >= 0:
            c = at + len(head)
            n += any(b < c < e for b, e in offsets)
            at = text.find(head, c)
    return n


def write_jsonl(path, convs):
    path.write_text("".join(json.dumps({"messages": m}, ensure_ascii=False) + "\n" for m in convs))
    return path


def tokenize(tokenizer, src, dst, *flags):
    return subprocess.run([str(TRAINER), "tokenize", "--tokenizer", str(tokenizer), *flags,
                           str(src), str(dst)], env=base_env(), capture_output=True, text=True,
                          timeout=300)


def mismatches(ours, want, k=3):
    bad = [i for i, (a, b) in enumerate(zip(ours, want)) if a != b]
    return len(bad), "\n".join(f"conversation {i}:\n  ftbench {ours[i]}\n  HF      {want[i]}"
                               for i in bad[:k])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tokenize_gives_transformers_ids_and_assistant_mask(tmp_path, chat_dirs, texts, family):
    d = chat_dirs[family]
    convs = conversations(texts, 300)
    hf = hf_tokenizer(d, family)
    want_ids, want_masks = hf_ids_and_masks(hf, family, convs)
    p = tokenize(d / "tokenizer.json", write_jsonl(tmp_path / "chat.jsonl", convs),
                 tmp_path / "ids.jsonl")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in (tmp_path / "ids.jsonl").read_text().splitlines()]
    assert len(rows) == len(convs)
    ids = [r["input_ids"] for r in rows]
    n_bad, shown = mismatches(ids, want_ids)
    assert n_bad == 0, f"{n_bad} of {len(convs)} conversations' ids differ:\n{shown}"
    for r in rows:  # labels: the id where it is a target, -100 elsewhere
        assert all(lb in (-100, i) for lb, i in zip(r["labels"], r["input_ids"]))
    masks = [[int(lb != -100) for lb in r["labels"]] for r in rows]
    n_bad, shown = mismatches(masks, want_masks)
    assert n_bad == 0, f"{n_bad} of {len(convs)} conversations' masks differ:\n{shown}"
    assert sum(map(sum, masks)) > 0
    if family == "qwen2":
        assert straddling_turns(hf, convs) > 0, "no token straddles a content's start"


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, chat_dirs, texts):
    """A LoRA run of 3 steps on a Llama 3 model directory (its tokenizer and chat template
    beside the weights) with 32 short conversations, and its exported adapter."""
    d = tmp_path_factory.mktemp("chat_lora")
    make_hf_dir(d / "m", seed=21, vocab_size=4096, max_position_embeddings=SEQ + 1)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(chat_dirs["llama3"] / name, d / "m" / name)
    convs = conversations(texts, 32, seed=11, short=True)
    jsonl = write_jsonl(d / "chat.jsonl", convs)
    p = run_trainer(d / "run", *chat_args(d / "m", jsonl, "training.max_steps=3",
                                         "training.lr=1e-2", "checkpoint.interval=3"))
    export_adapter(d / "run" / "checkpoints" / "step_00000003", d / "adapter")
    return d, convs, jsonl, p.stdout + p.stderr


def chat_args(model, jsonl, *extra):
    return [f'model.from_pretrained="{model}"', f'data.source="{jsonl}"', f"data.seq_len={SEQ}",
            "training.micro_batch_size=4", "metrics.skip_first_steps=0", *LORA, *extra]


def samples(jsonl):
    """The run's samples: each cached conversation cut to SEQ + 1 ids, those without a loss
    target then dropped."""
    cut = [(i[:SEQ + 1], m[:SEQ + 1]) for i, m in read_token_targets(jsonl)]
    return [(i, m) for i, m in cut if any(m[1:])]


def test_a_lora_run_trains_on_the_assistant_tokens_only(lora_run, chat_dirs):
    d, convs, jsonl, log = lora_run
    want_ids, want_masks = hf_ids_and_masks(hf_tokenizer(chat_dirs["llama3"], "llama3"), "llama3",
                                            convs)
    cached = read_token_targets(jsonl)  # untruncated, as the template renders them
    assert [ids for ids, _ in cached] == want_ids
    assert [flags for _, flags in cached] == want_masks
    kept = samples(jsonl)
    positions = sum(len(i) - 1 for i, _ in kept)
    masked = positions - sum(sum(m[1:]) for _, m in kept)
    assert masked > 0 and positions > masked
    assert (f"{len(kept)} samples, {positions} training positions, {masked} of them masked"
            in log), log
    loss = losses(d / "run")
    assert len(loss) == 3 and np.all(np.isfinite(loss))


def test_the_exported_adapter_loads_in_peft_with_the_trainers_chat_loss(lora_run, tmp_path):
    d, convs, jsonl, _ = lora_run
    base = transformers.LlamaForCausalLM.from_pretrained(d / "m", dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(base, d / "adapter").eval()
    b = [v for k, v in model.state_dict().items() if "lora_B" in k]
    assert len(b) == 2 * 7 and all(float(v.abs().max()) > 0 for v in b)
    # PEFT's loss over the assistant tokens of the first batch, and the trainer's with the
    # adapter (lora.from_pretrained, lr 0): one step on samples 0-3.
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, flags in samples(jsonl)[:4]:
            x = torch.tensor(ids)
            logits = model(x[None, :-1]).logits[0].double()
            keep = torch.tensor(flags[1:], dtype=torch.bool)
            total += torch.nn.functional.cross_entropy(logits[keep], x[1:][keep],
                                                       reduction="sum").item()
            count += int(keep.sum())
    run_trainer(tmp_path / "run", *chat_args(d / "m", jsonl, "training.max_steps=1",
                                             "training.lr=0",
                                             f"lora.from_pretrained={d / 'adapter'}"))
    assert_close(steps(tmp_path / "run", "loss")[:1], [total / count], 1e-5)


def float64_rotary(rotary):
    """transformers' LlamaRotaryEmbedding.forward with its angles in float64: transformers
    computes them in fp32 whatever the model's dtype (inv_freq and positions .float()),
    ~1e-5 from the float64 angles at these logits; the trainer's tables are float64 there."""
    base, dim = rotary.config.rope_parameters["rope_theta"], rotary.inv_freq.numel() * 2
    inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)

    def forward(x, position_ids):
        freqs = position_ids[..., None].double() * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        return ((emb.cos() * rotary.attention_scaling).to(x.dtype),
                (emb.sin() * rotary.attention_scaling).to(x.dtype))
    return forward


def test_logits_with_the_exported_adapter_equal_the_merged_peft_model(lora_run, tmp_path):
    d, _, jsonl, _ = lora_run
    rows = [ids for ids, _ in samples(jsonl)[:3]]
    assert len(set(map(len, rows))) > 1, "rows of unequal length"
    ids = tmp_path / "ids.jsonl"
    ids.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
    out = tmp_path / "l.safetensors"
    p = subprocess.run([str(TRAINER), "logits", "--model", str(d / "m"), "--adapter",
                        str(d / "adapter"), "--merge-adapter", "--ids-file", str(ids), "--out",
                        str(out)],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = safetensors_numpy.load_file(str(out))
    base = transformers.LlamaForCausalLM.from_pretrained(d / "m", dtype=torch.float32).eval()
    merged = peft.PeftModel.from_pretrained(base, d / "adapter").merge_and_unload().eval()
    with torch.no_grad():
        for i, r in enumerate(rows):
            assert got["attention_mask"][i].sum() == len(r)
            want = merged(torch.tensor([r])).logits[0].numpy()
            # Relative to the largest logit: this trained model's logits reach ~7, where
            # transformers' own fp32 forward is 1e-5..2.3e-5 from its fp64 one.
            err = np.abs(got["logits"][i, :len(r)] - want).max()
            assert err <= 1e-5 * np.abs(want).max(), (i, err)
    # In float64 on both sides, the logits agree within 1e-5 absolute (measured 3.6e-6 to
    # 5.0e-6: each side merges the adapter into the fp32 weights in its own order).
    out64 = tmp_path / "l64.safetensors"
    p = subprocess.run([str(TRAINER), "logits", "--model", str(d / "m"), "--adapter",
                        str(d / "adapter"), "--merge-adapter", "--ids-file", str(ids), "--dtype",
                        "fp64", "--out", str(out64)],
                       env=base_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = safetensors_numpy.load_file(str(out64))
    assert got["logits"].dtype == np.float64 and got["loss"].dtype == np.float64
    merged = merged.double()
    merged.model.rotary_emb.forward = float64_rotary(merged.model.rotary_emb)
    with torch.no_grad():
        for i, r in enumerate(rows):
            want = merged(torch.tensor([r])).logits[0].numpy()
            err = np.abs(got["logits"][i, :len(r)] - want).max()
            assert err <= 1e-5, (i, err)
    p = subprocess.run([str(TRAINER), "logits", "--checkpoint",
                        str(d / "run" / "checkpoints" / "step_00000003"), "--ids", "1,2", "--out",
                        str(tmp_path / "x.safetensors")], env=base_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "a LoRA checkpoint" in p.stderr and "--adapter" in p.stderr
    assert not (tmp_path / "x.safetensors").exists()


def run_bad(tmp_path, *args):
    out = tmp_path / "out"
    p = run_trainer(out, *args, "training.max_steps=1", "model.vocab_size=4096", check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert not out.exists(), "bad data is refused before the run directory is created"
    return p.stderr


@pytest.mark.parametrize("message,line,needles", [
    ({"role": "tool", "content": "42"}, 2,
     ['messages[1] has role "tool", expected "system", "user" or "assistant"', "hint: "]),
    ({"role": "assistant"}, 2, ['messages[1] (role "assistant") has no "content" string']),
    ({"role": "user", "content": ["a", "b"]}, 2, ['has no "content" string (a JSON array)']),
])
def test_a_malformed_message_exits_2_naming_file_line_and_message(tmp_path, chat_dirs, message,
                                                                  line, needles):
    ok = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    jsonl = write_jsonl(tmp_path / "chat.jsonl", [ok, [ok[0], message]])
    err = run_bad(tmp_path, f'data.source="{jsonl}"',
                  f'data.tokenizer="{chat_dirs["qwen2"] / "tokenizer.json"}"')
    for n in [f"{jsonl}:{line}", "data.source", *needles]:
        assert n in err, (n, err)


def test_messages_that_are_not_a_list_exit_2(tmp_path, chat_dirs):
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text('{"messages": "hi"}\n')
    err = run_bad(tmp_path, f'data.source="{jsonl}"',
                  f'data.tokenizer="{chat_dirs["qwen2"] / "tokenizer.json"}"')
    assert f"{jsonl}:1" in err and '"messages" is a JSON string, expected a list' in err


def copy_dir(src, dst, config):
    dst.mkdir()
    shutil.copy(src / "tokenizer.json", dst / "tokenizer.json")
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    return dst


def test_unknown_or_missing_template_exits_2_naming_the_file_and_the_fixed_formats(tmp_path,
                                                                                  chat_dirs):
    convs = [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]]
    jsonl = write_jsonl(tmp_path / "chat.jsonl", convs)
    cfg = dict(FAMILIES["qwen2"]["tokens"], chat_template=MISTRAL)
    m = copy_dir(chat_dirs["qwen2"], tmp_path / "mistral", cfg)
    args = [f'data.source="{jsonl}"', f'data.tokenizer="{m / "tokenizer.json"}"']
    err = run_bad(tmp_path, *args)
    for n in [str(m / "tokenizer_config.json"), "data.chat_template",
              "chat template is neither Llama 3's nor ChatML", "{{ bos_token }}",
              'hint: set data.chat_template (trainer tokenize: --chat-template) to "llama3" or']:
        assert n in err, (n, err)
    # The fixed format renders it; the template is then not read.
    run_trainer(tmp_path / "chatml", *args, "data.chat_template=\"chatml\"", "training.max_steps=1",
                "model.vocab_size=4096", "data.seq_len=64")
    (m / "chat_template.jinja").write_text(QWEN2)  # beside the tokenizer: it wins, as in HF
    run_trainer(tmp_path / "jinja", *args, "training.max_steps=1", "model.vocab_size=4096",
                "data.seq_len=64")
    n = copy_dir(chat_dirs["qwen2"], tmp_path / "none", FAMILIES["qwen2"]["tokens"])
    err = run_bad(tmp_path, f'data.source="{jsonl}"', f'data.tokenizer="{n / "tokenizer.json"}"')
    assert "no chat template: neither chat_template.jinja nor a \"chat_template\" in" in err, err
    assert str(n) in err
    p = tokenize(n / "tokenizer.json", jsonl, tmp_path / "o.jsonl", "--chat-template", "zephyr")
    assert p.returncode == 2 and "--chat-template" in p.stderr and "zephyr" in p.stderr
    p = tokenize(n / "tokenizer.json", jsonl, tmp_path / "o.jsonl")
    assert p.returncode == 2 and "no chat template" in p.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_a_tokenizer_without_byte_level_pre_tokens_exits_2(tmp_path, texts):
    d = tmp_path / "mistral"
    tf.write_tokenizer(tf.make_tokenizer("mistral", texts[:800]), "mistral", d)
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]
    jsonl = write_jsonl(tmp_path / "chat.jsonl", [chat])
    err = run_bad(tmp_path, f'data.source="{jsonl}"', f'data.tokenizer="{d / "tokenizer.json"}"',
                  'data.chat_template="chatml"')
    assert str(d / "tokenizer.json") in err and "byte-level pre-tokenizer" in err, err
