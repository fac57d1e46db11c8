"""Every relative link of the user docs reaches a file, and every #anchor a heading of it.

A new user follows these links from the top README; trainer/README.md once pointed at a
`#benchmarks` section it does not have (the benchmarks are in results/bench/README.md).
Anchors are GitHub's: the heading lower-cased, punctuation other than '-' and '_' dropped,
spaces as '-'. Headings inside code blocks do not count. The pages: every Markdown file
outside results/, build*/ and hidden folders (docs_check.markdown_files), and the two
READMEs of results/.
"""
import re

from docs_util import ROOT, docs_check

DOCS = docs_check.markdown_files() + [ROOT / "results" / "README.md",
                                      ROOT / "results" / "bench" / "README.md"]


def anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def test_the_split_pages_are_among_the_checked_docs():
    names = {str(p.relative_to(ROOT)) for p in DOCS}
    for page in ("README.md", "trainer/README.md", "trainer/docs/metrics.md",
                 "launcher/docs/placement.md", "slurm/docs/preemption.md",
                 "sweep_tagger/docs/compare.md", "docs/architecture.md", "tests/README.md"):
        assert page in names, page


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for src in DOCS:
        doc = src.relative_to(ROOT)
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


def test_no_page_outside_results_is_longer_than_450_lines():
    """Pages stay short enough to read for one question; long reference goes beside them."""
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in docs_check.markdown_files()
            if (n := len(p.read_text().splitlines())) > 450]
    assert not long, "split these pages (see trainer/docs/ for the pattern):\n" + "\n".join(long)
