#!/usr/bin/env python3
"""Inputs of `scripts/bench.sh textdata`: one text corpus as JSONL and as a pre-tokenized .bin.

  bench_text_corpus.py corpus OUT_DIR DOCS   writes OUT_DIR/corpus.txt (one document a line)
                                             and OUT_DIR/corpus.jsonl ({"text": line})
  bench_text_corpus.py bin MODEL TXT OUT     OUT = uint16 stream of [bos] + ids + [eos] per
                                             line of TXT, the ids from `spm_encode
                                             --output_format=id` (sentencepiece's own CLI)

The corpus is deterministic (seeded): pseudo-words with Zipf-distributed frequencies, so a
sentencepiece model learns real sub-word pieces and the token stream is not uniform. The
.bin holds what the trainer's JSONL path trains on with data.padding = "packing" (the
documents' [bos] + encode(text) + [eos] concatenated, trainer/data/dataset.h), so both runs
see the same windows; the report checks that against the trainer's token cache.
"""
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np


def corpus(out_dir, docs):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(12)
    syl = ("ka to ri mu sel van dor pi lu ne bro sta quin fe zo ha ar el om ut gra ves li "
           "mon tar cu pe dra in os").split()
    words = sorted({"".join(rnd.choice(syl) for _ in range(rnd.randint(1, 4)))
                    for _ in range(6000)})
    rnd.shuffle(words)
    weights = [1.0 / (r + 1) for r in range(len(words))]  # Zipf
    lines = []
    for _ in range(docs):
        n = rnd.randint(40, 400)
        ws = rnd.choices(words, weights, k=n)
        lines.append(" ".join(w.capitalize() if i % 12 == 0 else w for i, w in enumerate(ws)) + ".")
    (out / "corpus.txt").write_text("\n".join(lines) + "\n")
    (out / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines))


def piece_id(model, piece):
    p = subprocess.run(["spm_encode", f"--model={model}", "--output_format=id",
                        f"--extra_options={piece}"], input="x\n", capture_output=True,
                       text=True, check=True, timeout=60)
    return int(p.stdout.split()[0 if piece == "bos" else -1])


def to_bin(model, txt, out):
    bos, eos = piece_id(model, "bos"), piece_id(model, "eos")
    p = subprocess.run(["spm_encode", f"--model={model}", "--output_format=id", txt],
                       capture_output=True, text=True, check=True, timeout=600)
    stream = []
    for line in p.stdout.splitlines():
        stream += [bos, *map(int, line.split()), eos]
    a = np.asarray(stream, dtype=np.int64)
    assert a.max() < 2**16, "ids do not fit uint16"
    a.astype("<u2").tofile(out)
    print(f"bench_text_corpus: {out}: {len(a)} tokens (bos {bos}, eos {eos})")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "corpus":
        corpus(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 5 and sys.argv[1] == "bin":
        to_bin(*sys.argv[2:])
    else:
        sys.exit(__doc__)
