#!/usr/bin/env python3
"""Puts benchmark reports into README.md: the body of results/bench/<name>.md (whose first
line is `# Title`) replaces the section `### Title` of README.md, up to the next heading of
level 1 to 3 (a report may carry `####` subsections).

    scripts/readme_splice.py results/bench/dpscale.md [more reports...]

A report whose title has no section in the README is an error (exit 2), not a silent skip.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def splice(readme, report):
    lines = report.read_text().rstrip("\n").split("\n")
    if not lines[0].startswith("# "):
        raise SystemExit(f"{report}:1: expected a '# Title' line, got {lines[0]!r}")
    heading = "### " + lines[0][2:]
    out = readme.split("\n")
    if heading not in out:
        print(f"error: README.md has no section {heading!r} for {report}\n"
              f"  hint: add the heading to README.md's Benchmarks, or fix the report's title",
              file=sys.stderr)
        sys.exit(2)
    start = out.index(heading) + 1
    end = start
    while end < len(out) and not re.match(r"#{1,3} ", out[end]):
        end += 1
    return "\n".join(out[:start] + lines[1:] + [""] + out[end:])


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    path = ROOT / "README.md"
    text = path.read_text()
    for name in argv:
        text = splice(text, Path(name))
    path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
