"""scripts/readme_splice.py: a benchmark report's body replaces its section of
results/bench/README.md, and a report without a section is refused (exit 2) rather than
silently dropped."""
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


def test_the_reports_go_into_the_benchmarks_readme():
    assert readme_splice.TARGET == ROOT / "results" / "bench" / "README.md"


def test_every_committed_report_is_in_the_benchmarks_readme_verbatim():
    """Splicing every results/bench/<name>.md into results/bench/README.md changes nothing:
    the page a user reads holds each report as generated, none missing or edited by hand."""
    target = readme_splice.TARGET
    text = target.read_text()
    reports = sorted(p for p in target.parent.glob("*.md") if p != target)
    assert reports, "no benchmark reports in results/bench/"
    for report in reports:
        text = readme_splice.splice(text, report)
    assert text == target.read_text()


def test_main_skips_the_target_among_its_reports(tmp_path):
    """`scripts/readme_splice.py results/bench/*.md` names the README itself too."""
    target = tmp_path / "README.md"
    target.write_text(README)
    report = tmp_path / "a.md"
    report.write_text("# A table\n\nnew body\n")
    assert readme_splice.main([str(target), str(report)], target=target) == 0
    assert "new body" in target.read_text() and "old body" not in target.read_text()


def test_a_refused_report_leaves_the_target_unchanged(tmp_path):
    target = tmp_path / "README.md"
    target.write_text(README)
    good, bad = tmp_path / "a.md", tmp_path / "b.md"
    good.write_text("# A table\n\nnew body\n")
    bad.write_text("# Missing table\n\nbody\n")
    with pytest.raises(SystemExit) as e:
        readme_splice.main([str(good), str(bad)], target=target)
    assert e.value.code == 2
    assert target.read_text() == README
