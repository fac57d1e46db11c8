"""The bad pipeline configurations exit 2 with a hint, from the trainer and from `expand`.

Four points of the tiny model with 4 blocks: more stages than blocks, fewer micro-batches
than stages for 1F1B, virtual stages that do not divide the blocks, a pp_split that does not
sum to them. `sweep_tagger expand` marks each invalid with a reason that is the trainer's
refusal word for word, and the trainer (validating the same config and world size, as a
launched rank would) exits 2 with the key, the numbers and a hint, writing nothing.
Binaries: $FTB_BUILD_DIR/{trainer/trainer,sweep_tagger/sweep_tagger}.
"""
import json
import os
import pathlib
import re
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
TRAINER = BUILD / "trainer" / "trainer"

# (world size, overrides, what the refusal must say)
BAD = [
    (8, {"parallel.pp": 8}, ["key 'parallel.pp'", "pp(8) exceeds model.n_layers(4)"]),
    (4, {"parallel.pp": 4, "parallel.pp_microbatches": 2},
     ["key 'parallel.pp_microbatches'", "needs at least pp(4) micro-batches, got 2"]),
    (2, {"parallel.pp": 2, "parallel.pp_schedule": "interleaved_1f1b",
         "parallel.pp_virtual_stages": 3, "parallel.pp_microbatches": 2},
     ["key 'parallel.pp_virtual_stages'", "6 model chunks do not divide model.n_layers(4)"]),
    (2, {"parallel.pp": 2, "parallel.pp_split": [1, 2], "parallel.pp_microbatches": 2},
     ["key 'parallel.pp_split'", "[1, 2] sums to 3, not model.n_layers(4)"]),
]


def toml_value(v):
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


def sweep_text(base):
    out = [f'base = "{base}"', "nodes = 1"]
    for world, overrides, _ in BAD:
        out.append("[[include]]")
        out.append(f"nproc_per_node = {world}")
        out.append('"model.n_layers" = 4')
        out += [f'"{k}" = {toml_value(v)}' for k, v in overrides.items()]
    return "\n".join(out) + "\n"


def trainer_refusal(point, out_dir):
    env = dict(os.environ, WORLD_SIZE=str(point["world_size"]), RANK="0", LOCAL_RANK="0",
               LOCAL_WORLD_SIZE=str(point["nproc_per_node"]), GROUP_RANK="0",
               OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    p = subprocess.run([str(TRAINER), "--config", point["base"], *point["args"],
                        "--output-dir", str(out_dir)],
                       env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stderr


def test_bad_pipelines_exit_2_with_a_hint_from_trainer_and_expand(tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(sweep_text(REPO / "configs" / "runs" / "tiny.toml"))
    p = subprocess.run([str(SWEEP_TAGGER), "expand", str(sweep), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    points = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(points) == len(BAD)
    for point, (world, _, needles) in zip(points, BAD):
        assert point["world_size"] == world
        assert not point["valid"], point["args"]
        out = tmp_path / f"out{point['index']}"
        rc, stderr = trainer_refusal(point, out)
        assert rc == 2, stderr
        assert not out.exists(), "nothing may be written on bad input"
        refusal = re.sub(r"^\[rank 0/\d+ [^\]]*\] ", "", stderr.strip())
        assert point["reason"].strip() == refusal
        assert "\n  hint: " in refusal, refusal
        for needle in needles:
            assert needle in refusal, (needle, refusal)
