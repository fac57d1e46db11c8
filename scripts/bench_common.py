"""Helpers shared by the scripts/bench_*_report.py writers (run as `python3 scripts/X.py`,
so this directory is on sys.path)."""
from pathlib import Path


def cpu_model():
    """/proc/cpuinfo's first "model name": every benchmark table records it."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def cpu_description():
    """/proc/cpuinfo's first cpu family, model and model name, for a report's CPU line (a
    virtual machine's model name alone, such as "AMD EPYC", does not say which generation)."""
    info = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key = line.split(":", 1)[0].strip()
        if key in ("cpu family", "model", "model name") and key not in info:
            info[key] = line.split(":", 1)[1].strip()
    return ", ".join(f"{k} {info[k]}" for k in ("cpu family", "model", "model name") if k in info)


def skip_first_steps(cfg):
    """The steps a run leaves out of summaries, from its parsed config (run.toml or the metrics
    file's `config`): metrics.skip_first_steps; runs made before that key was renamed recorded
    it as training.warmup_steps."""
    if "skip_first_steps" in cfg.get("metrics", {}):
        return cfg["metrics"]["skip_first_steps"]
    return cfg.get("training", {}).get("warmup_steps", 0)
