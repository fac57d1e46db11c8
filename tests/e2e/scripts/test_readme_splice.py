"""scripts/readme_splice.py: a benchmark report's body replaces its README section, and a
report without a section is refused (exit 2) rather than silently dropped."""
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("readme_splice", ROOT / "scripts" / "readme_splice.py")
readme_splice = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_splice)

README = ("# ftbench\n\n## Benchmarks\n\n### A table\n\nold body\n\n#### old subsection\n\n| old |\n\n"
          "### Next\n\nkept\n")


def test_the_report_body_replaces_its_section_only(tmp_path):
    report = tmp_path / "a.md"
    report.write_text("# A table\n\nnew body\n\n#### new subsection\n\n| new |\n")
    out = readme_splice.splice(README, report)
    assert out == ("# ftbench\n\n## Benchmarks\n\n### A table\n\nnew body\n\n#### new subsection\n\n"
                   "| new |\n\n### Next\n\nkept\n")


def test_a_report_without_a_section_exits_2(tmp_path, capsys):
    report = tmp_path / "b.md"
    report.write_text("# Missing table\n\nbody\n")
    with pytest.raises(SystemExit) as e:
        readme_splice.splice(README, report)
    assert e.value.code == 2
    assert "no section '### Missing table'" in capsys.readouterr().err
