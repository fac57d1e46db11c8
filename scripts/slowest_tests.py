#!/usr/bin/env python3
"""Prints the slowest tests of one scripts/test.sh run from its JUnit XML reports.

Usage: slowest_tests.py REPORT_DIR [N]
REPORT_DIR holds ctest.xml (ctest --output-junit) and pytest-*.xml (pytest --junitxml, one
per pass). Prints the N (default 20) slowest pytest tests, setup and teardown included (a
module fixture's run counts in the first test that uses it), and the N/2 slowest ctest
entries. A missing or unreadable report is skipped with a note; exit 0 unless REPORT_DIR
is not a directory (exit 2)."""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def cases(path):
    """(seconds, name, pass) of each test case in one JUnit file."""
    out = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        cls, name = tc.get("classname", ""), tc.get("name", "")
        label = f"{cls.replace('.', '/')}.py::{name}" if path.name.startswith("pytest") else name
        label = label.split("@", 1)[0]  # pytest-xdist group suffix (tests/conftest.py)
        out.append((float(tc.get("time") or 0), label, path.stem.removeprefix("pytest-")))
    return out


def table(title, rows, n):
    rows = sorted(rows, reverse=True)[:n]
    if not rows:
        return
    print(f"== {title}")
    for secs, label, where in rows:
        print(f"   {secs:7.1f} s  {label}" + (f"  [{where}]" if where != "ctest" else ""))


def main(argv):
    if len(argv) < 2 or not Path(argv[1]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    n = int(argv[2]) if len(argv) > 2 else 20
    py, ct = [], []
    for f in sorted(Path(argv[1]).glob("*.xml")):
        try:
            (ct if f.name == "ctest.xml" else py).extend(cases(f))
        except (ET.ParseError, OSError) as e:
            print(f"slowest_tests: skipping {f}: {e}", file=sys.stderr)
    table(f"slowest {n} end-to-end tests (pytest, wall incl. fixtures)", py, n)
    table(f"slowest {n // 2} unit tests (ctest)", ct, n // 2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
