"""trainer/README.md's config key table is the output of `trainer --help-config`.

The table starts at the `| key | type | default | meaning |` line and runs to the first line
that is not a table row. Regenerate it after adding a key:
    trainer --help-config   (and paste over the table)
"""
import subprocess

from trainer_util import ROOT, TRAINER

HEADER = "| key | type | default | meaning |"


def test_readme_key_table_equals_help_config():
    lines = (ROOT / "trainer" / "README.md").read_text().splitlines()
    assert lines.count(HEADER) == 1, "exactly one key table"
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    p = subprocess.run([str(TRAINER), "--help-config"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    generated = p.stdout.rstrip("\n").splitlines()
    assert len(generated) > 40  # header, rule and every key
    assert lines[start:end] == generated, (
        "trainer/README.md key table differs from `trainer --help-config`: regenerate it")
