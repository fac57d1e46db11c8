"""`sweep_tagger aggregate` writes every output file (--out, its .constants.csv, the
--plot charts' .dat/.gp/.png/.svg) whole or not at all: a write that fails (full disk,
file size limit) exits 4 naming the file and the OS error and leaves the previous file
as it was; a process killed in the middle of a write leaves the previous file too, never
a truncated table that reads as a complete one. Output on stdout that cannot be written
(`> table.csv` on a full disk) exits 4 too.

Binaries: $FTB_BUILD_DIR/sweep_tagger/{sweep_tagger,ftb_synth_runs}.
"""
import os
import pathlib
import resource
import shutil
import signal
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("FTB_BUILD_DIR", REPO / "build" / "release"))
SWEEP_TAGGER = BUILD / "sweep_tagger" / "sweep_tagger"
SYNTH = BUILD / "sweep_tagger" / "ftb_synth_runs"
OLD = b"tag,status\nold,completed\n"


def synth(path, runs):
    subprocess.run([str(SYNTH), str(path), "--runs", str(runs), "--steps", "6",
                    "--states", "completed"], check=True, capture_output=True, timeout=120)
    return path


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    for exe in (SWEEP_TAGGER, SYNTH):
        if not exe.is_file():
            pytest.fail(f"{exe} not found: build it or set FTB_BUILD_DIR")
    return synth(tmp_path_factory.mktemp("runs") / "results", 40)


def file_size_limit(nbytes, ignore_sigxfsz):
    """preexec_fn: writes past `nbytes` fail with EFBIG (SIGXFSZ ignored) or kill the
    process with SIGXFSZ in the middle of the write (its default action)."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN if ignore_sigxfsz else signal.SIG_DFL)
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    return apply


def aggregate_limited(results, out, ignore_sigxfsz):
    return subprocess.run([str(SWEEP_TAGGER), "aggregate", str(results), "--jobs", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=120,
                          preexec_fn=file_size_limit(4096, ignore_sigxfsz))


def test_the_full_table_is_larger_than_the_limit_used_below(results, tmp_path):
    out = tmp_path / "table.csv"
    p = subprocess.run([str(SWEEP_TAGGER), "aggregate", str(results), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert out.stat().st_size > 3 * 4096  # so the 4 KiB limit cuts the write part-way
    assert len(out.read_text().splitlines()) == 41


def test_failed_write_exits_4_naming_the_file_and_keeps_the_old_table(results, tmp_path):
    out = tmp_path / "table.csv"
    out.write_bytes(OLD)
    p = aggregate_limited(results, out, ignore_sigxfsz=True)
    assert p.returncode == 4, p.stderr
    assert f"cannot write {out}: File too large" in p.stderr
    assert f"{out} is unchanged" in p.stderr
    assert out.read_bytes() == OLD
    assert sorted(x.name for x in tmp_path.iterdir()) == ["table.csv"]  # no temporary left


def test_killed_in_the_middle_of_the_write_leaves_the_old_table(results, tmp_path):
    out = tmp_path / "table.csv"
    out.write_bytes(OLD)
    p = aggregate_limited(results, out, ignore_sigxfsz=False)
    assert p.returncode == -signal.SIGXFSZ, (p.returncode, p.stderr)  # died inside write()
    assert out.read_bytes() == OLD
    # What the killed write left is a temporary name, never the table's.
    assert all(x.name == "table.csv" or x.name.startswith("table.csv.tmp.")
               for x in tmp_path.iterdir())


def snapshot(directory):
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


FULL_DISK = r'''
set -e
disk="$1"; exe="$2"; first="$3"; second="$4"; snap="$5"
mount -t tmpfs -o size=2m tmpfs "$disk"
"$exe" aggregate "$first" --jobs 1 --out "$disk/table.csv" --plot "$disk/plots" 2>/dev/null
cp -a "$disk/." "$snap/before"
head -c 100m /dev/zero > "$disk/filler" 2>/dev/null || true   # the disk is full now
rc=0; "$exe" aggregate "$second" --jobs 1 --out "$disk/table.csv" 2>"$snap/out.err" || rc=$?
echo "$rc" > "$snap/out.rc"
rc=0; "$exe" aggregate "$second" --jobs 1 --plot "$disk/plots" 2>"$snap/plot.err" || rc=$?
echo "$rc" > "$snap/plot.rc"
rm "$disk/filler"
cp -a "$disk/." "$snap/after"
'''


def test_full_disk_leaves_every_previous_output_file_as_it_was(results, tmp_path):
    """ENOSPC on a 2 MiB tmpfs in a private mount namespace (unshare -rm: no root needed
    where user namespaces are allowed)."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rm (user and mount namespaces) is not allowed here")
    if shutil.which("gnuplot") is None:
        pytest.skip("gnuplot not installed")
    second = synth(tmp_path / "second", 12)  # another table: every output would change
    disk, snap = tmp_path / "disk", tmp_path / "snap"
    disk.mkdir()
    snap.mkdir()
    p = subprocess.run(["unshare", "-rm", "sh", "-c", FULL_DISK, "sh", str(disk),
                        str(SWEEP_TAGGER), str(results), str(second), str(snap)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    before = snapshot(snap / "before")
    assert "table.csv" in before and "table.constants.csv" in before
    assert any(k.endswith(".png") for k in before) and any(k.endswith(".dat") for k in before)
    for what in ("out", "plot"):
        err = (snap / f"{what}.err").read_text()
        assert (snap / f"{what}.rc").read_text().strip() == "4", err
        assert "No space left on device" in err and " is unchanged" in err, err
    assert f"cannot write {disk}/table.csv: " in (snap / "out.err").read_text()
    assert f"cannot write {disk}/plots/" in (snap / "plot.err").read_text()
    assert snapshot(snap / "after") == before  # byte for byte, and no file more


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_table_on_a_full_stdout_exits_4_not_0(results):
    """`aggregate RESULTS > table.csv` on a full disk exited 0 with a truncated file."""
    for args in (["aggregate", str(results)], ["aggregate", str(results), "--format", "md"],
                 ["expand", str(REPO / "tests" / "data" / "sweep_tagger" / "sweeps" /
                                "three_axis.toml")]):
        with open("/dev/full", "w") as full:
            p = subprocess.run([str(SWEEP_TAGGER), *args], stdout=full, stderr=subprocess.PIPE,
                               text=True, timeout=120)
        assert p.returncode == 4, (args, p.stderr)
        assert (f"sweep_tagger {args[0]}: cannot write the output to stdout: No space left on "
                "device; what it printed is incomplete") in p.stderr
