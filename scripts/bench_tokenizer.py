#!/usr/bin/env python3
"""`scripts/bench.sh tokenizer`: ftbench's tokenizer.json encoder against HF `tokenizers`
(Rust), one thread each, on the same texts; writes the markdown report to stdout.

  bench_tokenizer.py WORK_DIR TRAINER [ROUNDS]

The corpus and the tokenizers are those of the equality test
(tests/e2e/trainer/tokenizer_families.py): 10,000 deterministic multilingual texts, and one
small tokenizer per family trained on their first 4,000 by `tokenizers`. Each round runs, per
family, HF's `Tokenizer.encode_batch(texts, add_special_tokens=False)` on a freshly loaded
tokenizer (its word cache cold, as the trainer's is) and `trainer tokenize`, whose stderr gives
the seconds spent inside encode() alone (no JSON parsing, no output). HF runs with
RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false (bench.sh sets them before Python
starts). Both must give the same ids on every text; the report says so, else it fails.
"""
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e" / "trainer"))
sys.path.insert(0, str(ROOT / "scripts"))

import tokenizers  # noqa: E402
import tokenizer_families as tf  # noqa: E402
from bench_common import cpu_model  # noqa: E402

FAMILIES = ("gpt2", "llama3", "qwen2", "smollm2", "mistral", "llama2")
ENCODE = re.compile(r"trainer tokenize: (\d+) texts, (\d+) tokens from encode\(\); "
                    r"encode ([0-9.e+-]+) s")


def hf_round(path, texts):
    tok = tokenizers.Tokenizer.from_file(str(path))
    t0 = time.perf_counter()
    enc = tok.encode_batch(texts, add_special_tokens=False)
    seconds = time.perf_counter() - t0
    return seconds, [e.ids for e in enc]


def ftb_round(trainer, path, src, dst):
    p = subprocess.run([trainer, "tokenize", "--tokenizer", str(path), str(src), str(dst)],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"bench_tokenizer: trainer tokenize failed ({p.returncode}):\n{p.stderr}")
    m = ENCODE.search(p.stderr)
    if not m:
        sys.exit(f"bench_tokenizer: no timing line in trainer tokenize's stderr:\n{p.stderr}")
    ids = [json.loads(line)["input_ids"] for line in dst.read_text().splitlines()]
    return float(m.group(3)), ids


def loadavg():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def commit():
    p = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %cs"],
                       capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
    return p.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def main():
    work, trainer = Path(sys.argv[1]), sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    work.mkdir(parents=True, exist_ok=True)
    texts = tf.corpus(10000)
    src = work / "corpus.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    paths = {}
    for fam in FAMILIES:
        print(f"bench: tokenizer: training the {fam} tokenizer", file=sys.stderr)
        tf.write_tokenizer(tf.make_tokenizer(fam, texts[:4000]), fam, work / fam)
        paths[fam] = work / fam / "tokenizer.json"
    before = loadavg()
    start = datetime.datetime.now(datetime.timezone.utc)
    hf_s = {f: [] for f in FAMILIES}
    ftb_s = {f: [] for f in FAMILIES}
    tokens, same = {}, {}
    for r in range(rounds):
        for fam in FAMILIES:
            print(f"bench: tokenizer round {r + 1}/{rounds}: {fam}", file=sys.stderr)
            s, want = hf_round(paths[fam], texts)
            hf_s[fam].append(s)
            s, ours = ftb_round(trainer, paths[fam], src, work / f"{fam}.ids.jsonl")
            ftb_s[fam].append(s)
            tokens[fam] = sum(len(x) for x in want)
            same[fam] = same.get(fam, True) and ours == want
    after = loadavg()
    print(report(texts, tokens, same, hf_s, ftb_s, before, after, start, rounds))
    if not all(same.values()):
        sys.exit("bench_tokenizer: ftbench's ids differ from HF tokenizers' (see the report)")


def report(texts, tokens, same, hf_s, ftb_s, before, after, start, rounds):
    nbytes = sum(len(t.encode()) for t in texts)
    lines = [
        "# tokenizer.json encoding: ftbench's C++ encoder against HF tokenizers, one thread",
        "",
        f"Measured {start:%Y-%m-%d %H:%M} UTC on {cpu_model()} ({os.cpu_count()} cores), commit "
        f"{commit()}, HF tokenizers {tokenizers.__version__}; load average {before} before and "
        f"{after} after the runs. `scripts/bench.sh tokenizer`: {len(texts)} deterministic "
        f"multilingual texts ({nbytes} bytes of UTF-8: prose, contractions, numbers, code, "
        "emoji, CJK, Arabic and other scripts, whitespace runs; "
        "tests/e2e/trainer/tokenizer_families.py), one tokenizer per family trained on the first "
        "4,000 by `tokenizers` (3,000-token vocabularies). HF: `Tokenizer.encode_batch(texts, "
        "add_special_tokens=False)` with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false, "
        "a freshly loaded tokenizer each round. ftbench: `trainer tokenize`, the time inside "
        "encode() alone (one thread). Both caches start cold in every round. tokens/s = the "
        f"texts' tokens over the encoding time; best of {rounds} alternating rounds (median in "
        "brackets). Target: ftbench ≥ 0.5× HF.",
        "",
        "| family | tokens | same ids on every text | HF tokens/s | ftbench tokens/s "
        "| ftbench / HF |",
        "|---|--:|---|--:|--:|--:|",
    ]
    ratios = []
    for fam in hf_s:
        hf_best, ftb_best = tokens[fam] / min(hf_s[fam]), tokens[fam] / min(ftb_s[fam])
        hf_med = tokens[fam] / statistics.median(hf_s[fam])
        ftb_med = tokens[fam] / statistics.median(ftb_s[fam])
        ratios.append(ftb_best / hf_best)
        lines.append(f"| {fam} | {tokens[fam]} | {'yes' if same[fam] else 'NO'} | "
                     f"{hf_best:,.0f} ({hf_med:,.0f}) | {ftb_best:,.0f} ({ftb_med:,.0f}) | "
                     f"{ftb_best / hf_best:.2f}× |")
    met = "met" if min(ratios) >= 0.5 else "NOT met"
    lines += ["", f"- lowest ratio **{min(ratios):.2f}×** (target ≥ 0.5×: {met}); "
                  f"highest {max(ratios):.2f}×"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
