"""Helpers shared by the scripts/bench_*_report.py writers (run as `python3 scripts/X.py`,
so this directory is on sys.path)."""
from pathlib import Path


def cpu_model():
    """/proc/cpuinfo's first "model name": every benchmark table records it."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"
