"""What the docs name in backticks exists: repository paths and script names, config keys
(against `trainer --help-config`) and the flags of trainer, launcher and sweep_tagger (against
each program's --help). The rules, and what they skip, are in scripts/docs_check.py; run it by
hand to list every finding with its page and line.
"""
import pytest

from docs_util import ROOT, docs_check

PAGES = docs_check.markdown_files()


def findings(known):
    return [f"{page}:{line}: `{span}`: {reason}"
            for p in PAGES for page, line, span, reason in docs_check.check_page(p, known)]


def test_every_named_path_exists():
    """Paths need no build: keys and flags are left out (no trainer to ask)."""
    found = findings(docs_check.Known())
    assert not found, "\n".join(found)


def test_every_named_key_and_flag_exists():
    known = docs_check.known_from_build()
    missing = [p for p in docs_check.PROGRAMS if p not in known.flags]
    if missing:
        pytest.skip(f"not built: {', '.join(missing)} (scripts/build.sh, or set FTB_BUILD_DIR)")
    assert len(known.keys) > 40 and all("--help" in f for f in known.flags.values())
    for flag, owner in docs_check.NOT_YET_BUILT_FLAGS.items():
        program = owner.split(":")[0]
        assert flag not in known.flags[program], (
            f"{program} now has {flag}: remove it from NOT_YET_BUILT_FLAGS in scripts/docs_check.py")
    found = findings(known)
    assert not found, "\n".join(found)


PLANTED = """# A page

Real: `trainer/model/llama.h`, `scripts/bench.sh port`, `kernels/fused_ops.h`, `test_layouts.py`,
`tests/e2e/trainer/test_checkpoint.py::test_auto_gemm_route_survives_a_resume`, `training.lr`,
`parallel.pp > 1`, `--training.lr 1e-3`, `trainer --estimate-memory --world-size 8`,
`--dry-run`, `launcher --nproc-per-node 2 -- trainer --config X.toml`, `--signal=USR1@300`,
`slurm/submit_sweep.sh s.toml r --throttle 4`, `sweep.sbatch`, `--key VALUE`.
Skipped: `<run_dir>/metrics/rank_00000.h5`, `OUT/summary.md`, `configs/runs/X.toml`,
`build/release/trainer/trainer`, `/dev/zero`, `model.safetensors`, `results/demo`.

Made up: `trainer/model/nonexistent.h`, `scripts/no_such_script.sh`, `test_no_such_test.py`,
`tests/e2e/trainer/test_checkpoint.py::test_that_does_not_exist`, `training.no_such_key`,
`parallel.pp_no_such=2`, `--no-such-flag`, `trainer --estimate-memory --no-such-trainer-flag`,
`launcher --dry-run -- trainer --no-such-after-separator`, `slurm/submit_sweep.sh --no-such-script-flag`.

```
trainer/model/in_a_fence.h --fenced-flag training.fenced_key
```
"""


def test_the_checker_reports_each_made_up_item_and_no_real_one():
    """Checks a planted page as if it were trainer/docs/planted.md (nothing is written), with
    flag and key lists given here, so it needs no build."""
    page = ROOT / "trainer" / "docs" / "planted.md"
    known = docs_check.Known(
        flags={"trainer": {"--help", "--config", "--estimate-memory", "--world-size"},
               "launcher": {"--help", "--dry-run", "--nproc-per-node"},
               "sweep_tagger": {"--help", "--pending"}},
        keys={"training.lr", "parallel.pp", "model.name", "data.seq_len", "sweep.layout"})
    found = docs_check.check_page(page, known, text=PLANTED)
    reported = {(span, reason) for _, _, span, reason in found}
    assert {span for span, _ in reported} == {
        "trainer/model/nonexistent.h", "scripts/no_such_script.sh", "test_no_such_test.py",
        "tests/e2e/trainer/test_checkpoint.py::test_that_does_not_exist",
        "training.no_such_key", "parallel.pp_no_such=2", "--no-such-flag",
        "trainer --estimate-memory --no-such-trainer-flag",
        "launcher --dry-run -- trainer --no-such-after-separator",
        "slurm/submit_sweep.sh --no-such-script-flag"}, "\n".join(map(str, found))
    reasons = " | ".join(sorted(r for _, r in reported))
    for expected in ("no such file: trainer/model/nonexistent.h",
                     "has no test_that_does_not_exist", "no config key training.no_such_key",
                     "no program or script has the flag --no-such-flag",
                     "trainer has no flag --no-such-trainer-flag",
                     "trainer has no flag --no-such-after-separator"):
        assert expected in reasons
    assert all(line >= 10 for _, line, _, _ in found)  # nothing from the real lines above
