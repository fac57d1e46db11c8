"""`trainer --max-micro-batch` (trainer/README.md "Memory estimate"): the size it reports
was measured to fit the budget less the safety margin, and the next size up was measured
not to. About a minute: each try is a real 3-step run of the tiny model."""
import re
import subprocess

import pytest

from trainer_util import TINY, TRAINER, base_env, gpus_visible

TRY = re.compile(r"try micro-batch (\d+): estimate ([\d.]+) MiB, measured peak RSS ([\d.]+) MiB "
                 r"\(max over ranks\) -> (fits|exceeds)")


def test_largest_fitting_micro_batch_fits_and_the_next_does_not(tmp_path):
    p = subprocess.run([str(TRAINER), "--config", str(TINY), "--max-micro-batch",
                        "data.seq_len=256", "parallel.memory_limit_gb=0.55",
                        f"output.dir={tmp_path}"],
                       env=base_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    limit = float(re.search(r"peak RSS is <= ([\d.]+) MiB", p.stdout).group(1))
    assert abs(limit - 0.9 * 0.55 * 1024) < 0.1, p.stdout  # the default 10 % margin
    tries = {int(m[0]): (float(m[2]), m[3]) for m in TRY.findall(p.stdout)}
    best = int(re.search(r"max micro-batch = (\d+): measured peak RSS", p.stdout).group(1))
    assert best >= 1 and best in tries and best + 1 in tries, p.stdout
    assert tries[best][1] == "fits" and tries[best][0] <= limit, p.stdout
    assert tries[best + 1][1] == "exceeds" and tries[best + 1][0] > limit, p.stdout
    assert "estimator: largest micro-batch with estimate" in p.stdout
    assert not list(tmp_path.glob(".max_micro_batch.*")), "the scratch runs are removed"


def test_safety_margin_outside_0_1_is_refused():
    p = subprocess.run([str(TRAINER), "--config", str(TINY), "--max-micro-batch",
                        "--safety-margin", "1.5"], env=base_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--safety-margin" in p.stderr, p.stderr


@pytest.mark.skipif(gpus_visible(), reason="a GPU is visible: this is the error of a machine without one")
@pytest.mark.parametrize("world", ["1", "2"])
def test_a_gpu_config_without_a_gpu_exits_2_before_any_try(tmp_path, world):
    """The tries would run here: training.device = "cuda" on a machine without a GPU is
    refused at once, naming the key and what was found, and leaves no scratch directory."""
    args = ["--max-micro-batch", "--world-size", world, 'training.device="cuda"',
            f"output.dir={tmp_path}"]
    p = subprocess.run([str(TRAINER), "--config", str(TINY), *args], env=base_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, f"{p.stdout}\n{p.stderr}"
    assert "key 'training.device'" in p.stderr, p.stderr
    assert "--max-micro-batch measures its tries on this machine" in p.stderr, p.stderr
    assert "0 CUDA device(s) are visible" in p.stderr, p.stderr
    assert "hint: " in p.stderr, p.stderr
    assert "try micro-batch" not in p.stdout, p.stdout
    assert not list(tmp_path.glob(".max_micro_batch.*")), "no scratch directory"
