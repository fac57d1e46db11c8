"""Bad input exits 2 naming key and file:line; nothing is written."""
import re
import subprocess

import pytest

from trainer_util import ROOT, TRAINER, base_env, gpus_visible


def run(tmp_path, toml_text, *overrides, world=None):
    cfg = tmp_path / "run.toml"
    cfg.write_text(toml_text)
    out = tmp_path / "out"
    env = base_env()
    if world:
        env.update(RANK="0", WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    p = subprocess.run([str(TRAINER), "--config", str(cfg), "--output-dir", str(out), *overrides],
                       env=env, capture_output=True, text=True, timeout=60)
    assert not out.exists(), "nothing may be written on bad input"
    assert p.stdout == ""
    return p, cfg


BASE = '[model]\nname = "tiny"\n\n[data]\nseq_len = 64\n\n[training]\nmicro_batch_size = 2\n'


def test_unknown_key(tmp_path):
    p, cfg = run(tmp_path, BASE + "learning_rate = 0.1\n")
    assert p.returncode == 2
    assert f"{cfg}:9" in p.stderr and "training.learning_rate" in p.stderr
    assert "unknown key" in p.stderr


def test_wrong_type(tmp_path):
    p, cfg = run(tmp_path, BASE + 'max_steps = "ten"\n')
    assert p.returncode == 2
    assert f"{cfg}:9" in p.stderr and "training.max_steps" in p.stderr
    assert "expected int" in p.stderr


def test_missing_data_file(tmp_path):
    p, cfg = run(tmp_path, BASE.replace("seq_len = 64", 'seq_len = 64\nsource = "/nonexistent/x.jsonl"'))
    assert p.returncode == 2
    assert f"{cfg}:6" in p.stderr and "data.source" in p.stderr and "does not exist" in p.stderr


def test_zero_batch_size(tmp_path):
    p, cfg = run(tmp_path, BASE.replace("micro_batch_size = 2", "micro_batch_size = 0"))
    assert p.returncode == 2
    assert f"{cfg}:8" in p.stderr and "training.micro_batch_size" in p.stderr
    assert "0 is out of range: expected an integer >= 1" in p.stderr


def test_zero_batch_size_override(tmp_path):
    p, _ = run(tmp_path, BASE, "training.micro_batch_size=0")
    assert p.returncode == 2
    assert "override 'training.micro_batch_size=0'" in p.stderr


def test_world_size_does_not_divide_global_batch(tmp_path):
    p, cfg = run(tmp_path, BASE + "global_batch_size = 6\n", world=4)
    assert p.returncode == 2
    assert f"{cfg}:9" in p.stderr and "training.global_batch_size" in p.stderr
    assert re.search(r"global_batch_size\(6\).*world_size\(4\)|data-parallel size\(4\)", p.stderr)


# Bad layouts exit 2 before training, with the numbers in the message.
@pytest.mark.parametrize("overrides,world,needle", [
    (["parallel.tp=2", "parallel.dp_shard=2", "parallel.dp_replicate=2"], 4,
     "dp_replicate(2) * dp_shard(2) * tp(2) = 8 does not equal world_size(4)"),
    (["parallel.tp=3"], 3, "tp(3) does not divide n_heads(4)"),
    (["parallel.tp=4"], 4, "tp(4) does not divide n_kv_heads(2)"),
    (["parallel.tp=2", "model.vocab_size=511"], 2, "tp(2) does not divide vocab_size(511)"),
    (["parallel.zero_stage=4"], 1, "zero_stage"),
    # ZeRO without a shard degree would silently run DDP: refused, naming dp_shard.
    (["parallel.zero_stage=3"], 2, "zero_stage(3) shards over parallel.dp_shard, which is 1"),
    (["parallel.tp=2", "training.optimizer=adafactor"], 2, "tp(2) splits tensors across ranks"),
])
def test_bad_layouts(tmp_path, overrides, world, needle):
    p, _ = run(tmp_path, BASE, *overrides, "training.max_steps=1", world=world if world > 1 else None)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr


def test_negative_preempt_grace_is_refused_naming_the_key(tmp_path):
    p, _ = run(tmp_path, BASE, "checkpoint.preempt_grace_s=-1")
    assert p.returncode == 2
    assert "checkpoint.preempt_grace_s" in p.stderr and ">= 0" in p.stderr, p.stderr


# The first hour of a new user: every kind of bad input names the key (or flag, or file
# and line), says what was expected and gives a hint, exit 2. Before, a wrong type, a
# bad enum value, a TOML syntax error and the overflow check printed no hint, and a
# mistyped flag printed cxxopts' "Option ‘confg’ does not exist" and the whole usage.
@pytest.mark.parametrize("toml_extra,args,needles", [
    ("", ["training.lr=abc"],
     ["key 'training.lr': expected float", "hint: training.lr: peak learning rate"]),
    ("", ["training.optimizer=adamx"],
     ["key 'training.optimizer': expected one of", "hint: training.optimizer:"]),
    ("", ["training.grad_accum_steps=4611686018427387904"],
     ["key 'training.grad_accum_steps'", "overflows",
      "hint: lower training.micro_batch_size or training.grad_accum_steps"]),
    ("max_steps = = 3\n", [], [":9: TOML syntax error", "hint: check that line"]),
    ("", ["--confg", "x"],
     ["key '--confg': unknown option", "hint: did you mean '--config'?"]),
    ("", ["--estimate-memory", "--world-size", "two"],
     ["key '--world-size': expected a number, got 'two'", "hint: --world-size:"]),
])
def test_every_bad_input_names_key_expectation_and_hint(tmp_path, toml_extra, args, needles):
    p, cfg = run(tmp_path, BASE + toml_extra, *args)
    assert p.returncode == 2, p.stderr
    for needle in needles:
        assert needle in p.stderr, (needle, p.stderr)
    assert "Usage:" not in p.stderr, "the error, not the whole usage"


# Before: `--estimate-memory --world-size 0` planned for the environment's world size and
# exited 0; `--generate-data x.txt` wrote JSONL under a name data.source cannot read back.
@pytest.mark.parametrize("args,needles", [
    (["--estimate-memory", "--world-size", "0"],
     ["key '--world-size': must be >= 1, got 0", "hint:"]),
    (["--generate-data", "GEN/x.txt"],
     ["key '--generate-data'", "ends in neither .jsonl nor .bin", "hint: name the file"]),
])
def test_planning_and_generate_flags_refuse_bad_values(tmp_path, args, needles):
    args = [a.replace("GEN", str(tmp_path)) for a in args]
    p, _ = run(tmp_path, BASE, *args)
    assert p.returncode == 2, p.stderr
    for needle in needles:
        assert needle in p.stderr, (needle, p.stderr)
    assert not (tmp_path / "x.txt").exists(), "nothing written"


@pytest.mark.skipif(gpus_visible(), reason="a GPU is visible: these are the errors of a machine without one")
@pytest.mark.parametrize("args,key,needle", [
    (('training.device="cuda"',), "training.device",
     '"cuda" resolves to cuda:0 but 0 CUDA device(s) are visible (no GPU on this machine'),
    (('training.device="cuda:1"',), "training.device", "resolves to cuda:1 but 0 CUDA device(s)"),
    (('parallel.backend="nccl"',), "training.device", '(backend nccl) but 0 CUDA device(s) are visible'),
    (('parallel.backend="nccl"', 'training.device="cpu"'), "parallel.backend",
     '"nccl" reduces CUDA tensors only'),
], ids=["cuda", "cuda1", "nccl_auto", "nccl_cpu"])
def test_gpu_requests_without_a_gpu_exit_2_naming_the_key(tmp_path, args, key, needle):
    p, _ = run(tmp_path, BASE, *args)
    assert p.returncode == 2, p.stderr
    assert f"key '{key}'" in p.stderr and needle in p.stderr, p.stderr
