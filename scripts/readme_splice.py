#!/usr/bin/env python3
"""Puts benchmark reports into results/bench/README.md: the body of results/bench/<name>.md
(whose first line is `# Title`) replaces the section `### Title` of results/bench/README.md,
up to the next heading of level 1 to 3 (a report may carry `####` subsections).

    scripts/readme_splice.py results/bench/*.md

results/bench/README.md itself, which that glob includes, is skipped. A report whose title
has no section in it is an error (exit 2), not a silent skip.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "results" / "bench" / "README.md"
TARGET_NAME = "results/bench/README.md"


def splice(readme, report):
    lines = report.read_text().rstrip("\n").split("\n")
    if not lines[0].startswith("# "):
        raise SystemExit(f"{report}:1: expected a '# Title' line, got {lines[0]!r}")
    heading = "### " + lines[0][2:]
    out = readme.split("\n")
    if heading not in out:
        print(f"error: {TARGET_NAME} has no section {heading!r} for {report}\n"
              f"  hint: add the heading to {TARGET_NAME}, or fix the report's title",
              file=sys.stderr)
        sys.exit(2)
    start = out.index(heading) + 1
    end = start
    while end < len(out) and not re.match(r"#{1,3} ", out[end]):
        end += 1
    return "\n".join(out[:start] + lines[1:] + [""] + out[end:])


def main(argv, target=TARGET):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    text = target.read_text()
    for name in argv:
        if Path(name).resolve() == target.resolve():
            continue
        text = splice(text, Path(name))
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
