"""`sweep_tagger aggregate --compare REF.csv [--fail-on-regression PCT]` on synthetic runs
(ftb_synth_runs: the trainer's MetricsFile and run.toml code, synthetic numbers), four
configurations x 3 repeats, REF.csv written by `aggregate --out`:

- the same runs again: every configuration within noise, exit 0 with --fail-on-regression 5;
- the same configurations 20 % slower (--speed 0.8): each flagged a regression beyond noise,
  exit 1 with --fail-on-regression 10 naming them, exit 0 with 25;
- a reference whose runs differ in a key (training.seed): the sweep points still match and
  the key is listed with both values; without REF.constants.csv the report says the keys
  equal across the reference are unknown;
- an unreadable reference, a column missing, a bad PCT: exit 2 naming what and where.
Binaries: $FTB_BUILD_DIR/sweep_tagger/{sweep_tagger,ftb_synth_runs}.
"""
import os
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
SYNTH = BUILD / "sweep_tagger" / "ftb_synth_runs"
SEQS = ("256", "512", "1024", "2048")


def synth(path, *args):
    for exe in (SWEEP_TAGGER, SYNTH):
        if not exe.is_file():
            pytest.fail(f"{exe} not found: build it or set FTB_BUILD_DIR")
    subprocess.run([str(SYNTH), str(path), "--runs", "4", "--repeats", "3", "--steps", "8",
                    "--ranks-per-node", "1", *args], check=True, capture_output=True, timeout=120)
    return path


def aggregate(results, *args):
    return subprocess.run([str(SWEEP_TAGGER), "aggregate", str(results), *map(str, args),
                           "--jobs", "2"], capture_output=True, text=True, timeout=120)


def table_rows(text):
    """configuration -> the cells of its row in the comparison table."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| data.seq_len="):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    results = synth(root / "res")
    p = aggregate(results, "--out", root / "REF.csv")
    assert p.returncode == 0, p.stderr
    assert (root / "REF.constants.csv").is_file()
    return results, root / "REF.csv"


def test_a_repeat_of_the_same_runs_is_within_noise(ref):
    results, csv = ref
    p = aggregate(results, "--compare", csv, "--fail-on-regression", "5")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = table_rows(p.stdout)
    assert sorted(rows) == sorted(f"data.seq_len={s}" for s in SEQS), p.stdout
    for name, cells in rows.items():
        assert cells[1] == cells[2] and cells[1].endswith("(3 runs)"), cells
        assert cells[3] == "+0.0" and cells[4] == "within noise", cells
    assert "No regression beyond noise." in p.stdout
    assert "--fail-on-regression 5.0: no configuration regressed" in p.stdout


def test_a_twenty_percent_regression_is_flagged_and_fails_ci(ref, tmp_path):
    _, csv = ref
    slow = synth(tmp_path / "slow", "--speed", "0.8")
    p = aggregate(slow, "--compare", csv, "--fail-on-regression", "10")
    assert p.returncode == 1, p.stdout + p.stderr
    rows = table_rows(p.stdout)
    assert len(rows) == 4, p.stdout
    for cells in rows.values():
        assert float(cells[3]) == pytest.approx(-20.0, abs=0.2), cells
        assert cells[4] == "regression", cells
        assert cells[5].startswith("beyond noise (no overlap of the repeats' ranges"), cells
    failed = re.search(r"^--fail-on-regression 10\.0: regressed beyond noise by more than "
                       r"10\.0 %: (.*): exit 1\.$", p.stdout, re.M)
    assert failed, p.stdout
    for s in SEQS:
        assert f"data.seq_len={s} (20.0 % lower)" in failed.group(1)
    assert aggregate(slow, "--compare", csv, "--fail-on-regression", "25").returncode == 0


def test_a_key_that_differs_from_the_reference_is_listed(ref, tmp_path):
    _, csv = ref
    seeded = synth(tmp_path / "seeded", "--set", "training.seed=7")
    p = aggregate(seeded, "--compare", csv)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = table_rows(p.stdout)
    assert len(rows) == 4, p.stdout
    for cells in rows.values():  # another config hash, the same sweep point
        assert cells[4] == "within noise" and cells[6] == "training.seed: 0 -> 7", cells
    # A reference written to stdout has no constants file: the seed cannot be compared.
    bare = tmp_path / "STDOUT.csv"
    bare.write_text(aggregate(ref[0]).stdout)
    p = aggregate(seeded, "--compare", bare)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "training.seed" not in p.stdout
    assert "STDOUT.constants.csv not found: the keys equal in every reference run are " \
           "unknown" in p.stdout


def test_refusals_exit_2_naming_the_flag_file_line_and_column(ref, tmp_path):
    results, csv = ref
    lines = csv.read_text().splitlines()
    header = lines[0].split(",")
    at = header.index("tokens_per_s_dataset")
    cut = tmp_path / "cut.csv"
    cut.write_text("\n".join(",".join(f for i, f in enumerate(line.split(",")) if i != at)
                             for line in lines) + "\n")
    p = aggregate(results, "--compare", cut)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"{cut}:1: key 'tokens_per_s_dataset': the header has no column" in p.stderr
    assert "hint: --compare takes a table" in p.stderr
    p = aggregate(results, "--compare", tmp_path / "none.csv")
    assert p.returncode == 2 and "key '--compare': the reference table is missing" in p.stderr
    for pct in ("-5", "nan", "ten"):
        p = aggregate(results, "--compare", csv, "--fail-on-regression", pct)
        assert p.returncode == 2 and "--fail-on-regression" in p.stderr, (pct, p.stderr)
    p = aggregate(results, "--fail-on-regression", "5")
    assert p.returncode == 2 and "--compare REF.csv is missing" in p.stderr, p.stderr
