"""`metrics.profile_steps = [a, b]` writes one Chrome trace per rank
into <run_dir>/traces/ that json.load reads, holding named ranges for forward, backward,
optimizer and the all-reduce; the profiled run's losses equal an unprofiled run's;
`sweep_tagger aggregate` lists the traces; bad windows exit 2 naming the key."""
import csv
import json
import subprocess

from trainer_util import BUILD, losses, run_ranks, run_trainer

SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"


def test_trace_per_rank_with_named_ranges(tmp_path):
    out = tmp_path / "prof"
    run_ranks(out, 2, "training.max_steps=6", "metrics.profile_steps=[2, 3]")
    for rank in (0, 1):
        path = out / "traces" / f"rank_{rank:05d}.json"
        with open(path) as f:
            trace = json.load(f)
        names = {e["name"] for e in trace["traceEvents"]}
        for wanted in ("forward", "backward", "optimizer", "gradient_sync", "data"):
            assert wanted in names, (rank, wanted, sorted(names)[:40])
        assert any(n.startswith("allreduce") for n in names), sorted(names)[:40]
        assert any(n.startswith("aten::") for n in names)
        # complete events with a duration, on this rank's pid; the window it covers
        assert all(e["ph"] in ("X", "M") for e in trace["traceEvents"])
        assert all(e["pid"] == rank for e in trace["traceEvents"])
        assert trace["ftbench"]["first_step"] == 2 and trace["ftbench"]["last_step"] == 3
        assert trace["ftbench"]["complete"] is True
        # two steps traced: two forward and two optimizer ranges (one micro-batch each)
        assert sum(e["name"] == "forward" for e in trace["traceEvents"]) == 2
        assert sum(e["name"] == "optimizer" for e in trace["traceEvents"]) == 2

    plain = tmp_path / "plain"
    run_ranks(plain, 2, "training.max_steps=6")
    assert list(losses(out)) == list(losses(plain))  # profiling observes; the run is unchanged

    csv_path = tmp_path / "summary.csv"
    p = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(tmp_path), "--format", "csv",
                        "--out", str(csv_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = {r["tag"]: r for r in csv.DictReader(open(csv_path))}
    assert rows["prof"]["traces"] == "2" and rows["plain"]["traces"] == "0"


def test_a_one_step_window_on_the_last_step(tmp_path):
    run_trainer(tmp_path, "training.max_steps=4", "metrics.profile_steps=[3, 3]")
    trace = json.load(open(tmp_path / "traces" / "rank_00000.json"))
    assert trace["ftbench"]["first_step"] == 3 and trace["ftbench"]["last_step"] == 3


def test_bad_windows_exit_2_naming_the_key(tmp_path):
    for bad in ("[3, 2]", "[-1, 2]", "[1, 2, 3]", "[2, 40]"):
        p = run_trainer(tmp_path / "bad", "training.max_steps=20",
                        f"metrics.profile_steps={bad}", check=False)
        assert p.returncode == 2, (bad, p.stderr)
        assert "metrics.profile_steps" in p.stderr, (bad, p.stderr)
        assert not (tmp_path / "bad").exists()
