"""`sweep_tagger expand`'s valid flag is the trainer's acceptance.

A sweep over tp, ffn_dim, optimizer, nodes and nproc_per_node is expanded; for every point
the trainer validates the same config and layout (`--print-config` runs the same
TrainConfig::fromConfig as a real run, with the world size the launcher would give it in
WORLD_SIZE). expand's valid flag must equal "the trainer exits 0", and an invalid point's
reason must be the trainer's refusal, word for word (the trainer prefixes "[rank 0/N host] ").
Binaries: $FTB_BUILD_DIR/{trainer/trainer,sweep_tagger/sweep_tagger}.
"""
import concurrent.futures
import json
import os
import pathlib
import re
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
TRAINER = BUILD / "trainer" / "trainer"

# tiny: n_heads 4, n_kv_heads 2, ffn_dim 192, vocab 512. tp 3 divides nothing; tp 4 not
# n_kv_heads; ffn_dim 345 is odd; adafactor refuses tp > 1; world sizes 2, 3, 4, 6.
SWEEP = """
base = "{base}"
[grid]
"parallel.tp" = [1, 2, 3, 4]
"model.ffn_dim" = [192, 345]
"training.optimizer" = ["adamw", "adafactor"]
nodes = [1, 2]
nproc_per_node = [2, 3]
"""


def trainer_refusal(point):
    env = dict(os.environ, WORLD_SIZE=str(point["world_size"]), RANK="0", LOCAL_RANK="0",
               LOCAL_WORLD_SIZE=str(point["nproc_per_node"]), GROUP_RANK="0",
               OMP_NUM_THREADS="1")
    p = subprocess.run([str(TRAINER), "--config", point["base"], *point["args"], "--print-config"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode in (0, 2), (point["args"], p.returncode, p.stderr)
    if p.returncode == 0:
        return ""
    return re.sub(r"^\[rank 0/\d+ [^\]]*\] ", "", p.stderr.strip())


def expand_against_the_trainer(tmp_path, sweep_text):
    """The points `expand` makes of sweep_text over tiny.toml, each checked against the
    trainer: valid iff the trainer accepts it, and an invalid point's reason its refusal."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(sweep_text.format(base=REPO / "configs" / "runs" / "tiny.toml"))
    p = subprocess.run([str(SWEEP_TAGGER), "expand", str(sweep), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    points = [json.loads(line) for line in p.stdout.splitlines()]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        refusals = list(pool.map(trainer_refusal, points))
    for point, refusal in zip(points, refusals):
        assert point["valid"] == (refusal == ""), (point["args"], point["reason"], refusal)
        assert point["reason"].strip() == refusal, point["args"]
    return points


def test_expand_valid_flag_and_reason_equal_the_trainers_acceptance(tmp_path):
    points = expand_against_the_trainer(tmp_path, SWEEP)
    assert len(points) == 4 * 2 * 2 * 2 * 2
    valid = sum(point["valid"] for point in points)
    # Both outcomes occur, for each reason the grid was built to hit.
    reasons = " ".join(pt["reason"] for pt in points)
    for needle in ("does not divide world_size", "does not divide n_heads(4)",
                   "does not divide n_kv_heads(2)", "does not divide ffn_dim(345)",
                   "splits tensors across ranks"):
        assert needle in reasons, needle
    assert 0 < valid < len(points)


# The memory techniques' keys in a sweep grid: every combination is a point, and expand's
# verdict is the trainer's (bf16 weights need bf16 compute and refuse ZeRO; the optimizer step
# inside backward needs max_grad_norm = 0 and refuses ZeRO-2).
MEMORY_SWEEP = """
base = "{base}"
[grid]
"training.optimizer_in_backward" = [false, true]
"training.max_grad_norm" = [0.0, 1.0]
"training.master_weights" = ["fp32", "none"]
"training.dtype" = ["fp32", "bf16"]
"parallel.zero_stage" = [0, 2, 3]
"parallel.dp_shard" = [2]
nproc_per_node = [2]
"""


def test_memory_technique_keys_expand_as_the_trainer_accepts(tmp_path):
    points = expand_against_the_trainer(tmp_path, MEMORY_SWEEP)
    assert len(points) == 2 * 2 * 2 * 2 * 3
    reasons = " ".join(pt["reason"] for pt in points)
    for needle in ("max_grad_norm = 0", "but training.dtype is fp32", "ZeRO's shards are fp32",
                   "ZeRO stage 2 does not"):
        assert needle in reasons, needle
    assert any(pt["valid"] for pt in points if "training.optimizer_in_backward=true" in pt["args"])
    # distinct points have distinct tags
    assert len({pt["tag"] for pt in points}) == len(points)


# training.cuda_graphs in a sweep grid: refused with more than one rank, in expand's verdict as
# in the trainer's (on the CPU too: test_memory_techniques.py); its tag differs where it is on.
GRAPHS_SWEEP = """
base = "{base}"
[grid]
"training.cuda_graphs" = [false, true]
nproc_per_node = [1, 2]
"""


def test_cuda_graphs_key_expands_as_the_trainer_accepts(tmp_path):
    points = expand_against_the_trainer(tmp_path, GRAPHS_SWEEP)
    assert len(points) == 2 * 2
    graphs = [pt for pt in points if "training.cuda_graphs=true" in pt["args"]]
    assert [(pt["world_size"], pt["valid"]) for pt in graphs] == [(1, True), (2, False)]
    assert "this run has 2 ranks" in graphs[1]["reason"]
    assert len({pt["tag"] for pt in points}) == len(points)
