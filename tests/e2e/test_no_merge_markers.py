"""No file of the repository holds an unresolved merge: a conflict marker in a README or a
source file is text a user reads or code that does not build."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<{7} |>{7} |={7}$)")


def test_no_conflict_markers():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True, timeout=60).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        if not path.is_file() or path.suffix in {".png", ".h5", ".bin", ".model"}:
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{i + 1}" for i, line in enumerate(lines) if MARKER.match(line)]
    assert not found, "unresolved merge conflict markers at " + ", ".join(found)
