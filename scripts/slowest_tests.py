#!/usr/bin/env python3
"""Prints the slowest tests of one scripts/test.sh run from its JUnit XML reports.

Usage: slowest_tests.py REPORT_DIR [N]
REPORT_DIR holds ctest.xml (ctest --output-junit), gtest-*.xml (GoogleTest's XML report of
a sharded test binary, one per shard: tests/CMakeLists.txt) and pytest-*.xml (pytest
--junitxml, one per pass). Prints the N (default 20) slowest pytest tests, setup and teardown
included (a module fixture's run counts in the first test that uses it), and the N/2 slowest
unit tests (a shard's ctest entry is replaced by its tests). A missing or unreadable report is skipped with a note; exit 0 unless REPORT_DIR
is not a directory (exit 2)."""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def cases(path):
    """(seconds, name, pass) of each test case in one JUnit file."""
    out = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        cls, name = tc.get("classname", ""), tc.get("name", "")
        if path.name.startswith("pytest"):
            label = f"{cls.replace('.', '/')}.py::{name}"
        elif path.name.startswith("gtest"):
            label = f"{cls}.{name}"
        else:
            label = name
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
            rows = cases(f)
        except (ET.ParseError, OSError) as e:
            print(f"slowest_tests: skipping {f}: {e}", file=sys.stderr)
            continue
        if f.name == "ctest.xml":
            ct.extend(r for r in rows if ".shard" not in r[1])
        elif f.name.startswith("gtest"):
            ct.extend((secs, label, "ctest") for secs, label, _ in rows)
        else:
            py.extend(rows)
    table(f"slowest {n} end-to-end tests (pytest, wall incl. fixtures)", py, n)
    table(f"slowest {n // 2} unit tests (ctest)", ct, n // 2)
    print(f"   ({len(ct)} unit tests, {len(py)} end-to-end tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
