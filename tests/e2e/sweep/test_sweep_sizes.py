"""Hostile sweep sizes: a grid of 8 axes x 100 values (1e16 points) is refused with exit 2
before anything is expanded, and `expand --index I` of a sweep at the limit (10000
points) costs the points up to I, within a bounded address space.

Binary: $FTB_BUILD_DIR/sweep_tagger/sweep_tagger.
"""
import json
import os
import pathlib
import resource
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
BASE = REPO / "tests" / "data" / "sweep_tagger" / "base.toml"
INT_KEYS = ["training.seed", "training.max_steps", "metrics.skip_first_steps", "data.num_samples",
            "training.lr_warmup_steps", "training.threads", "data.pad_id", "metrics.log_every"]
ADDRESS_SPACE = 512 << 20  # the refused sweep needed 1.1 GB resident before this fix


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def sweep_file(tmp_path, axes, values):
    lines = [f'base = "{BASE}"', "[grid]"]
    lines += [f'"{k}" = [{", ".join(str(v + 1) for v in range(values))}]' for k in axes]
    path = tmp_path / "sweep.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def expand(path, *args):
    if not SWEEP_TAGGER.is_file():
        pytest.fail(f"{SWEEP_TAGGER} not found: build it or set FTB_BUILD_DIR")
    return subprocess.run([str(SWEEP_TAGGER), "expand", str(path), *args], capture_output=True,
                          text=True, timeout=120, preexec_fn=limited)


def test_eight_axes_of_a_hundred_values_are_refused_with_exit_2(tmp_path):
    path = sweep_file(tmp_path, INT_KEYS, 100)
    for args in (["--index", "0"], ["--json"], []):
        p = expand(path, *args)
        assert p.returncode == 2, (args, p.returncode, p.stderr[-400:])
        assert f"{path}:2: key 'grid': the sweep has 10000000000000000 points (" in p.stderr
        assert "more than the limit of 10000 points per sweep" in p.stderr
        assert "hint: split it into several sweep files" in p.stderr
        assert p.stdout == ""


def test_index_of_a_sweep_at_the_limit_is_the_grid_point_it_names(tmp_path):
    path = sweep_file(tmp_path, INT_KEYS[:2], 100)  # 100 x 100 = 10000 points: accepted
    for index in (0, 4321, 9999):
        p = expand(path, "--index", str(index))
        assert p.returncode == 0, p.stderr
        point = json.loads(p.stdout)
        assert point["index"] == index
        # Mixed radix, last axis fastest: index = 100 * (seed - 1) + (max_steps - 1).
        assert point["overrides"] == {"training.seed": index // 100 + 1,
                                      "training.max_steps": index % 100 + 1}
    p = expand(path, "--index", "10000")
    assert p.returncode == 2
    assert "--index 10000 is out of range (the sweep has 10000 points)" in p.stderr
