"""`sweep_tagger aggregate --best` as a ranking, on synthetic run files (ftb_synth_runs: the
trainer's MetricsFile and run.toml code, synthetic numbers):

- four configurations x 3 repeats: every configuration listed in order of its median, with
  its min-max and runs (recomputed here from the CSV), named by the axis that differs
  (`data.seq_len=...`), each with the noise verdict against the next one;
- runs all marked noisy are ranked and marked, exit 0; --exclude-noisy says it would leave
  nothing and ranks them anyway; nothing completed: exit 1;
- --price-per-hour prices the runs recorded without a price (a recorded price wins), for
  --best cost and the CSV; without it, cost of unpriced runs exits 2 naming the flag.
Binaries: $FTB_BUILD_DIR/sweep_tagger/{sweep_tagger,ftb_synth_runs}.
"""
import csv
import io
import os
import pathlib
import re
import shutil
import statistics
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
SYNTH = BUILD / "sweep_tagger" / "ftb_synth_runs"


def synth(path, *args):
    for exe in (SWEEP_TAGGER, SYNTH):
        if not exe.is_file():
            pytest.fail(f"{exe} not found: build it or set FTB_BUILD_DIR")
    subprocess.run([str(SYNTH), str(path), "--steps", "8", "--ranks-per-node", "1", *args],
                   check=True, capture_output=True, timeout=120)
    return path


def tagger(*args):
    return subprocess.run([str(SWEEP_TAGGER), "aggregate", *map(str, args), "--jobs", "2"],
                          capture_output=True, text=True, timeout=120)


def rows(results, *args):
    p = tagger(results, *args)
    assert p.returncode == 0, p.stderr
    return list(csv.DictReader(io.StringIO(p.stdout)))


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return synth(tmp_path_factory.mktemp("four") / "res", "--runs", "4", "--repeats", "3")


def test_every_configuration_is_ranked_with_median_spread_runs_and_verdict(four):
    by_seq = {}
    for r in rows(four):
        by_seq.setdefault(r["data.seq_len"], []).append(float(r["tokens_per_s_dataset"]))
    assert sorted(len(v) for v in by_seq.values()) == [3, 3, 3, 3]
    want = sorted(by_seq, key=lambda s: -statistics.median(by_seq[s]))
    p = tagger(four, "--best", "tokens_per_s")
    assert p.returncode == 0, p.stderr
    listed = re.findall(r"^  (\d)\. data\.seq_len=(\d+): ([\d.]+) tokens/s \(3 runs, min-max "
                        r"([\d.]+)-([\d.]+); steps p10-p90 [\d.]+-[\d.]+\)$", p.stdout, re.M)
    assert [s for _, s, *_ in listed] == want, p.stdout
    for rank, seq, med, lo, hi in listed:
        v = by_seq[seq]
        assert float(med) == pytest.approx(statistics.median(v), abs=0.051)
        assert (float(lo), float(hi)) == pytest.approx((min(v), max(v)), abs=0.051)
    verdicts = re.findall(r"^     vs (\d)\.: [\d.]+ % higher, (beyond noise|within noise|noise "
                          r"not measured) \(", p.stdout, re.M)
    assert [int(n) for n, _ in verdicts] == [2, 3, 4], p.stdout
    assert re.search(rf"^data\.seq_len={want[0]} beats data\.seq_len={want[1]} by [\d.]+ %, ",
                     p.stdout, re.M), p.stdout
    assert "noisy" not in p.stdout and "Excluded" not in p.stdout


def test_noisy_runs_are_ranked_and_marked(tmp_path):
    res = synth(tmp_path / "res", "--runs", "2", "--repeats", "2", "--noisy")
    assert {r["is_valid"] for r in rows(res)} == {"noisy"}
    p = tagger(res, "--best", "tokens_per_s")
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(re.findall(r"^  \d\. data\.seq_len=\d+: .* \[noisy: 2 of 2 runs\]$", p.stdout,
                          re.M)) == 2, p.stdout
    assert "The ranking includes 4 noisy run(s), marked [noisy]" in p.stdout
    p = tagger(res, "--best", "tokens_per_s", "--exclude-noisy")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "--exclude-noisy: every run that counts is noisy, so excluding them would leave " \
           "nothing: ranked anyway" in p.stdout
    assert "  2. data.seq_len=" in p.stdout


def test_nothing_to_rank_exits_1_but_the_table_still_exits_0(tmp_path):
    res = synth(tmp_path / "res", "--runs", "2", "--states", "failed")
    p = tagger(res, "--best", "tokens_per_s")
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.startswith("Nothing to rank: no run completed with a valid config")
    assert "Excluded from the ranking (2):" in p.stdout
    assert tagger(res).returncode == 0


def test_price_per_hour_prices_the_runs_without_one(tmp_path):
    bare = synth(tmp_path / "bare", "--runs", "2", "--price-per-hour", "0")
    priced = synth(tmp_path / "priced", "--runs", "4")  # metrics.price_per_hour = 0.5
    res = tmp_path / "res"
    res.mkdir()
    for d in list(bare.iterdir()) + list(priced.iterdir()):  # seq_len 256, 512: bare
        if not (res / d.name).exists():  # the price is not part of the tag
            shutil.copytree(d, res / d.name)
    assert len(list(res.iterdir())) == 4
    p = tagger(bare, "--best", "cost")
    assert p.returncode == 2 and "--price-per-hour USD" in p.stderr, p.stderr
    p = tagger(res, "--best", "cost", "--price-per-hour", "2")
    assert p.returncode == 0, p.stderr
    assert "Price: --price-per-hour 2.0 $ per device-hour for 2 run(s) recorded without " \
           "metrics.price_per_hour; 2 run(s) keep their recorded price." in p.stdout, p.stdout
    assert len(re.findall(r"^  \d\. data\.seq_len=\d+: [\d.]+ \$/M tokens", p.stdout, re.M)) == 4
    table = rows(res, "--price-per-hour", "2")
    prices = {r["data.seq_len"]: float(r["price_per_hour"]) for r in table}
    assert prices == {"256": 2.0, "512": 2.0, "1024": 0.5, "2048": 0.5}
    for r in table:  # $/M tokens = price x world size / (M tokens/h)
        assert float(r["usd_per_mt"]) == pytest.approx(
            float(r["price_per_hour"]) * int(r["world_size"]) / float(r["mt_per_hour"]))
    p = tagger(res, "--best", "cost", "--price-per-hour", "-1")
    assert p.returncode == 2 and "--price-per-hour" in p.stderr, p.stderr
