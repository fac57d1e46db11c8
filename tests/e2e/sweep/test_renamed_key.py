"""training.warmup_steps (steps left out of summaries) is now metrics.skip_first_steps.

Run directories written before the rename keep their tags (the key hashes under its old
name), so `expand --pending` still counts them as done; aggregate still reads how many steps
they leave out, and still knows whether their config is valid.
Binaries: $FTB_BUILD_DIR/sweep_tagger/{sweep_tagger,ftb_synth_runs}.
"""
import json
import os
import pathlib
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
SYNTH = BUILD / "sweep_tagger" / "ftb_synth_runs"

MODEL = """[model]
name = "t"
dim = 8
n_layers = 1
n_heads = 2
n_kv_heads = 2
ffn_dim = 16
vocab_size = 32
max_seq_len = 16

[data]
seq_len = 16
"""
# `sweep_tagger expand --field tag` of the build before the rename, for this base config and
# the grid "training.warmup_steps" = [2, 5].
OLD_TAGS = {2: "t.ws1.9b8870ed37f1ad0f", 5: "t.ws1.f94215b901944e6c"}


def tagger(*args):
    p = subprocess.run([str(SWEEP_TAGGER), *map(str, args)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def old_run_dir(tmp_path, results, skip):
    """A completed world-1 run directory as the trainer wrote it before the rename: the metrics
    of a synthetic 12-step run and a run.toml recording training.warmup_steps."""
    src = tmp_path / "src"
    subprocess.run([str(SYNTH), str(src), "--runs", "1", "--steps", "12", "--ranks-per-node",
                    "1", "--states", "completed"], check=True, capture_output=True)
    (synth,) = [d for d in src.iterdir() if d.is_dir()]
    run = results / OLD_TAGS[skip]
    run.mkdir(parents=True)
    shutil.copytree(synth / "metrics", run / "metrics")
    (run / "run.toml").write_text(
        "# ftbench run.toml: the resolved config of this run (written once)\n"
        f"# tag = {OLD_TAGS[skip]}\n# config_hash = {OLD_TAGS[skip].rsplit('.', 1)[1]}\n"
        f"# world_size = 1\n# nodes = 1\n{MODEL}\n[training]\nwarmup_steps = {skip}\n")
    return run


def test_old_run_directory_keeps_its_tag_and_counts_as_done(tmp_path):
    (tmp_path / "base.toml").write_text(MODEL)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('base = "base.toml"\n\n[grid]\n"metrics.skip_first_steps" = [2, 5]\n')
    assert tagger("expand", sweep, "--field", "tag").split() == [OLD_TAGS[2], OLD_TAGS[5]]

    results = tmp_path / "results"
    old_run_dir(tmp_path, results, 5)
    assert tagger("expand", sweep, "--pending", results, "--field", "tag").split() == \
        [OLD_TAGS[2]]

    data = json.loads(tagger("aggregate", results, "--format", "json"))
    (row,) = data["runs"] if isinstance(data, dict) else data
    assert row["tag"] == OLD_TAGS[5] and row["status"] == "completed", row
    assert row["steps_done"] == 12 and row["measured_steps"] == 12 - 5, row
    # The recorded old key reads under its new name ("noisy": valid, measured on a busy machine).
    assert row["is_valid"] in (True, "noisy"), row


def test_old_key_in_a_sweep_is_refused_naming_the_new_one(tmp_path):
    (tmp_path / "base.toml").write_text(MODEL)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('base = "base.toml"\n\n[grid]\n"training.warmup_steps" = [2, 5]\n')
    p = subprocess.run([str(SWEEP_TAGGER), "expand", str(sweep)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "training.warmup_steps" in p.stderr and "metrics.skip_first_steps" in p.stderr, p.stderr
