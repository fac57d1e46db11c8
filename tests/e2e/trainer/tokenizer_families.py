"""tokenizer.json files of the causal-LM families, made here by HF `tokenizers`, and a
deterministic multilingual corpus to compare encoders on (no network).

Used by test_tokenizer_json.py and by `scripts/bench.sh tokenizer`
(scripts/bench_tokenizer.py).

  corpus(n)                    n texts (seeded): prose with contractions, numbers, code,
                               emoji, CJK, Arabic, Hebrew, Devanagari, Thai, Cyrillic,
                               whitespace runs (Unicode spaces too), combining marks,
                               compatibility forms, special-token strings inside text
  make_tokenizer(family, texts)  trains a small tokenizer of `family` on texts: its
                               tokenizer.json as a dict (the Unigram families on texts
                               without the UNSEEN characters)
  VARIANTS                     name -> (family, change): tokenizer.json files changed by hand
                               into what no family here trains (NFKC + Strip + a Regex
                               Replace; Split behaviors Removed, Contiguous, MergedWith*,
                               invert; ByteLevel add_prefix_space; NFD; the older Metaspace)
  write_tokenizer(j, family, out_dir, merges="pairs")
                               writes out_dir/tokenizer.json (merges as [a, b] pairs, or as
                               the older "a b" strings) and out_dir/tokenizer_config.json
"""
import json
import random
from pathlib import Path

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

# The pre-tokenizer regexes these families ship in their tokenizer.json.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# gpt2: ByteLevel with GPT-2's regex. llama3: Split(Llama 3 regex) + ByteLevel, ignore_merges,
# a BOS template. qwen2: NFC + Split(Qwen 2 regex) + ByteLevel. smollm2: Digits + ByteLevel.
# mistral: SentencePiece-style BPE, Metaspace (prepend "first"), byte_fallback, a BOS
# template. llama2: the older SentencePiece-style file, Prepend + Replace normalizers and no
# pre-tokenizer. sp_unk: Metaspace (always, split) without byte_fallback: unknown characters
# become one fused <unk>. unigram: a Unigram model with Metaspace and byte_fallback;
# unigram_unk: the same without byte_fallback (unknown characters as one fused <unk>).
FAMILIES = ("gpt2", "llama3", "qwen2", "smollm2", "mistral", "llama2", "sp_unk", "unigram",
            "unigram_unk")

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have "
         "from or one had by word but not what all were we when your can said there use an "
         "each which she do how their if will up other about out many then them these so "
         "some her would make like him into time has look two more write go see number no way "
         "could people my than first water been call who oil its now find long down day did "
         "get come made may part tokenizer Transformer GPU throughput benchmark finetuning "
         "naïve café résumé coöperate Zürich São Paulo München").split()
CONTRACTIONS = ["don't", "I'm", "we'll", "they've", "she'd", "it's", "DON'T", "You'RE",
                "can't", "won't", "y'all", "o'clock", "rock'n'roll", "'tis", "We'D", "IT'S"]
SCRIPTS = [
    "日本語のテキストを分かち書きせずに書きます。東京は晴れ。",
    "机器学习模型的吞吐量测试，包括中文标点符号！还有全角数字１２３。",
    "한국어 문장도 포함합니다. 토크나이저 테스트입니다.",
    "مرحبا بالعالم، هذا نص عربي للاختبار ١٢٣٤ مع أرقام.",
    "שלום עולם, זהו טקסט בעברית.",
    "नमस्ते दुनिया, यह हिंदी पाठ है। ०१२३",
    "สวัสดีชาวโลก นี่คือข้อความภาษาไทย",
    "Привет, мир! Это тест токенизатора: ёжик в тумане.",
    "Γειά σου Κόσμε· αυτό είναι ελληνικό κείμενο.",
    "Ελληνικά και English mixed with русский and 中文 in one line",
]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "❤️", "🔥🔥🔥", "🤖", "✅", "🎉"]
SPACES = ["\u00a0", "\u3000", "\u2009", "\u180e", "\u0085", "\u2028", "\u200b", "\u1680",
          "\u202f", "\u001f"]
COMBINING = ["e\u0301", "A\u030a", "n\u0303", "\u1100\u1161\u11a8", "\ufb01", "\uff21\uff22",
             "\u2460", "x\u00b2", "\u212b", "\u1e9b\u0323"]
SPECIAL_IN_TEXT = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>",
                   "<|begin_of_text|>", "<mask>", " <mask> ", "Zebra", "aZebra", "Zebra!",
                   "my_word", "<think>", "<|endoftext|><|endoftext|>", "<|im_start"]

CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "if __name__ == \"__main__\":\n    main()\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "const re = /^[a-z]+$/i; // regex\nconsole.log(`x=${x}`);",
    "<div class=\"row\"><span>&nbsp;</span></div>",
    "    \n\t\n  \r\n",
    "x = [1, 2, 3]\ny = {'a': 1, \"b\": 2.5e-3}\n",
    "#include <vector>\nstd::vector<int> v{1,2,3};",
    "λx.x  →  ∀ε>0 ∃δ>0: |x−y|<δ ⇒ |f(x)−f(y)|<ε",
]


def _number(rnd):
    return rnd.choice([
        str(rnd.randint(0, 9)), str(rnd.randint(10, 999)), str(rnd.randint(1000, 10**9)),
        f"{rnd.random() * 1000:.4f}", f"{rnd.randint(1, 999)},{rnd.randint(100, 999)}",
        f"2026-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}", "3.14159265358979",
        "0x" + "".join(rnd.choice("0123456789abcdef") for _ in range(8)), "1e-9", "-42"])


def _piece(rnd):
    kind = rnd.random()
    if kind < 0.45:
        return rnd.choice(WORDS)
    if kind < 0.55:
        return rnd.choice(CONTRACTIONS)
    if kind < 0.65:
        return _number(rnd)
    if kind < 0.73:
        return rnd.choice(SCRIPTS)
    if kind < 0.79:
        return rnd.choice(EMOJI)
    if kind < 0.84:
        return rnd.choice(SPACES) * rnd.randint(1, 3)
    if kind < 0.89:
        return rnd.choice(COMBINING)
    if kind < 0.93:
        return rnd.choice(SPECIAL_IN_TEXT)
    if kind < 0.97:
        return rnd.choice(CODE)
    return rnd.choice([" " * rnd.randint(2, 9), "\t" * rnd.randint(1, 4), "\n" * rnd.randint(1, 4),
                       " \n ", "\r\n", "!!!", "...", "?!", "—", "«»", "aaaaaaaaaaaaaaaaaaaa"])


def corpus(n, seed=20261127):
    """n texts; every 500th is empty, some start or end with whitespace."""
    rnd = random.Random(seed)
    texts = []
    for i in range(n):
        if i % 500 == 499:
            texts.append("")
            continue
        parts = [_piece(rnd) for _ in range(rnd.randint(1, 40))]
        seps = [rnd.choice([" ", " ", " ", "", "  ", "\n", ", ", ". "]) for _ in parts]
        text = "".join(p + s for p, s in zip(parts, seps))
        if rnd.random() < 0.1:
            text = rnd.choice([" ", "  ", "\n", "\t"]) + text
        texts.append(text)
    return texts


def _byte_level(family):
    if family == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None
    if family == "smollm2":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                 use_regex=True)]), None
    regex = LLAMA3_REGEX if family == "llama3" else QWEN2_REGEX
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), "isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                            use_regex=False)])
    return pre, normalizers.NFC() if family == "qwen2" else None


SPECIALS = {
    "gpt2": ["<|endoftext|>"],
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "smollm2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
}
EOS = {"gpt2": "<|endoftext|>", "llama3": "<|end_of_text|>", "qwen2": "<|endoftext|>",
       "smollm2": "<|endoftext|>", "mistral": "</s>", "llama2": "</s>", "sp_unk": "</s>",
       "unigram": "</s>", "unigram_unk": "</s>"}
BYTES = [f"<0x{b:02X}>" for b in range(256)]


def _train_byte_level(family, texts, vocab):
    tok = Tokenizer(models.BPE(ignore_merges=family == "llama3"))
    tok.pre_tokenizer, norm = _byte_level(family)
    if norm is not None:
        tok.normalizer = norm
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS[family],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    if family == "llama3":
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          special_tokens=[("<|begin_of_text|>",
                                                           tok.token_to_id("<|begin_of_text|>"))])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # Added tokens beyond the specials: a normalized one, and lstrip / single_word ones.
    tok.add_tokens([AddedToken("my_word", normalized=True), AddedToken("<think>", special=False,
                                                                      normalized=False)])
    if family == "gpt2":
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True)])
        tok.add_tokens([AddedToken("Zebra", single_word=True, normalized=False)])
    return tok


def _train_sentencepiece_style(family, texts, vocab):
    fallback = family != "sp_unk"
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=fallback))
    if family == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                               normalizers.Replace(" ", "▁")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="▁", prepend_scheme="first" if family == "mistral" else "always",
            split=family == "sp_unk")
    specials = ["<unk>", "<s>", "</s>"] + (BYTES if fallback else [])
    # A small alphabet leaves rare characters (most CJK) to the byte fallback or to <unk>.
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, limit_alphabet=120,
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", 1)])
    tok.add_tokens([AddedToken("my_word", normalized=True)])
    return tok


# The emoji and the Thai script, left out of the Unigram families' training texts: the corpus
# then reaches their byte fallback (unigram) and <unk> (unigram_unk).
UNSEEN = str.maketrans("", "", "".join(EMOJI) + "สวัสดีชาวโลกนี่คือข้อความภาษาไทย")


def _train_unigram(family, texts, vocab):
    fallback = family == "unigram"
    texts = [t.translate(UNSEEN) for t in texts]
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    specials = ["<unk>", "<s>", "</s>"] + (BYTES if fallback else [])
    trainer = trainers.UnigramTrainer(vocab_size=vocab, special_tokens=specials,
                                      unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.add_tokens([AddedToken("my_word", normalized=True)])
    j = json.loads(tok.to_str())
    j["model"]["byte_fallback"] = fallback
    return Tokenizer.from_str(json.dumps(j))


def make_tokenizer(family, texts, vocab=3000):
    """A tokenizer of `family` trained on texts, as its tokenizer.json dict."""
    assert family in FAMILIES
    if family.startswith("unigram"):
        tok = _train_unigram(family, texts, vocab)
    elif family in ("mistral", "llama2", "sp_unk"):
        tok = _train_sentencepiece_style(family, texts, vocab)
    else:
        tok = _train_byte_level(family, texts, vocab)
    j = json.loads(tok.to_str())
    # As in Llama 2 / Mistral files: the byte tokens are vocabulary entries, not added tokens.
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] not in BYTES]
    return j


def write_tokenizer(j, family, out_dir, merges="pairs"):
    """Writes out_dir/tokenizer.json and tokenizer_config.json (its eos_token); returns the
    HF Tokenizer loaded from that tokenizer.json."""
    assert merges in ("pairs", "strings")
    j = json.loads(json.dumps(j))
    if merges == "strings":
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS[family]}))
    return Tokenizer.from_file(str(out / "tokenizer.json"))


def _normalizers(j):
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]}


def _splits(j):
    def split(regex, behavior, invert=False):
        return {"type": "Split", "pattern": regex, "behavior": behavior, "invert": invert}
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        split({"String": " "}, "MergedWithNext"), split({"Regex": "\\p{N}+"}, "Contiguous", True),
        split({"Regex": "[\\p{P}]"}, "MergedWithPrevious"), split({"Regex": "x"}, "Removed"),
        {"type": "Digits", "individual_digits": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}


VARIANTS = {
    "gpt2_nfkc_strip_replace": ("gpt2", _normalizers),
    "gpt2_split_behaviors": ("gpt2", _splits),
    "gpt2_add_prefix_space": ("gpt2", lambda j: j["pre_tokenizer"].update(add_prefix_space=True)),
    "gpt2_nfd": ("gpt2", lambda j: j.update(normalizer={"type": "NFD"})),
    "mistral_metaspace_legacy": ("mistral", lambda j: j.update(pre_tokenizer={
        "type": "Metaspace", "replacement": "▁", "add_prefix_space": True})),
}
