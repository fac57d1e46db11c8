"""Every relative link of the user docs reaches a file, and every #anchor a heading of it.

A new user follows these links from the top README; trainer/README.md once pointed at a
`#benchmarks` section it does not have (the benchmarks are in results/bench/README.md).
Anchors are GitHub's: the heading lower-cased, punctuation other than '-' and '_' dropped,
spaces as '-'. Headings inside code blocks do not count.
"""
import re

import pathlib

# Not trainer_util's ROOT: importing it requires a built trainer, and this test reads docs only.
ROOT = pathlib.Path(__file__).resolve().parents[3]
DOCS = ["README.md", "trainer/README.md", "launcher/README.md", "sweep_tagger/README.md",
        "slurm/README.md", "docs/architecture.md", "tests/README.md", "results/bench/README.md",
        "results/README.md"]


def anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for doc in DOCS:
        src = ROOT / doc
        for link in re.findall(r"\]\(([^)\s]+)\)", src.read_text()):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (src.parent / path).resolve() if path else src
            if not target.exists():
                broken.append(f"{doc}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{doc}: {link} (no such heading)")
    assert not broken, "\n".join(broken)
