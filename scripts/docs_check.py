#!/usr/bin/env python3
"""Checks what the Markdown docs name in backticks against the repository and the programs.

    scripts/docs_check.py [FILE.md ...]     (default: every user doc; exit 1 on a finding)

The user docs are every *.md of the repository except under results/ (generated reports,
written by scripts/bench.sh; results/README.md and results/bench/README.md are read for links
only), build*/ and hidden folders (.venv, .git). Only inline code spans count: fenced blocks
hold real output, and generated blocks (scripts/gen_docs.py) are checked against their command
instead. A span is split into words and checked by these rules:

- path: a word with a '/' whose first component is a top-level entry of the repository
  (`trainer/model/llama.h`, `scripts/bench.sh`), or any word with a '/' or none that ends in
  a source suffix (.h .cpp .py .sh .sbatch), must exist: at the root, else under the page's
  component (`kernels/fused_ops.h` on a trainer page is trainer/kernels/fused_ops.h), else
  beside the page; a bare file name (`test_layouts.py`) anywhere in the repository.
  `FILE.py::name` must also hold `name`. Skipped: placeholders (a component in capitals such
  as OUT/ or X.toml, `<run_dir>`, `{...}`, `*`, `NNN`, `...`), absolute paths, `~` and `$`,
  outputs that a checkout does not hold (build/, .venv/, the programs inside a build
  directory such as `trainer/trainer`, results/ outside its reports), and NOT_OURS.
- config key: a word `section.key` (also `section.key=VALUE` and `--section.key`) whose
  section is one of `trainer --help-config` must be a key of that table; not a file name
  (`sweep.sbatch`: the word after the dot is a FILE_SUFFIXES entry) nor one of NOT_KEYS.
- flag: a word `--flag` (`--flag=VALUE`) in a span that starts with `trainer`, `launcher` or
  `sweep_tagger` must be one of that program's flags, as its --help and its subcommands'
  --help list them; in a span that starts with a shell script of the repository
  (`slurm/submit_sweep.sh --throttle 4`), one that the script's text names. After a bare `--`
  the rest is the started program's command line. A span of flags alone (`--dry-run`) may
  name a flag of any of the three programs or scripts, or of a tool in OTHER_TOOLS_FLAGS.
  Spans starting with another program (mpirun, srun, pip) are skipped, and so are
  PATTERN_FLAGS and NOT_YET_BUILT_FLAGS. '-' and '_' count as the same character (the
  launcher accepts both, as torchrun does).
"""
import functools
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("FTB_BUILD_DIR", ROOT / "build" / "release"))
PROGRAMS = {"trainer": BUILD / "trainer" / "trainer", "launcher": BUILD / "launcher" / "launcher",
            "sweep_tagger": BUILD / "sweep_tagger" / "sweep_tagger"}
# Subcommands with a --help of their own.
SUBCOMMANDS = {"trainer": ["export", "logits"], "launcher": ["ctl"],
               "sweep_tagger": ["tag", "expand", "aggregate"]}
SOURCE_SUFFIXES = (".h", ".cpp", ".py", ".sh", ".sbatch")
# Outputs a checkout does not hold (paths under them name what a run or build writes); under
# results/ a checkout holds only the reports (*.md, *.json, *.csv; see results/README.md).
NOT_IN_CHECKOUT = ("build/", ".venv/")
REPORT_SUFFIXES = (".md", ".json", ".csv")
# The programs' paths inside a build directory (`FTB_BUILD_DIR` holds `trainer/trainer`).
BUILD_OUTPUTS = {"trainer/trainer", "launcher/launcher", "sweep_tagger/sweep_tagger"}
# Source file names the docs name that belong to other projects.
NOT_OURS = {"train.py": "torchtitan's training script"}
# A `section.word` whose word is one of these is a file name (`sweep.sbatch`), not a key.
FILE_SUFFIXES = {"sbatch", "toml", "json", "jsonl", "safetensors", "md", "py", "sh", "h5", "bin",
                 "txt", "csv", "cpp", "h", "lock", "log", "out", "err"}
# Other `section.word` spans that are not config keys.
NOT_KEYS = {
    "lora.base": "a checkpoint manifest's compat key (the base model's identity)",
    "model.norm": "a Hugging Face tensor name",
    "model.embed_tokens": "a Hugging Face tensor name",
    "training.warmup_steps": "the old name of metrics.skip_first_steps, documented as refused",
}
# Flags the docs use as a pattern, not as a flag.
PATTERN_FLAGS = {"--key": "`--key VALUE`: the torchtitan spelling of any key=value override"}
# Flags a program gains in work that is not built yet, with the program: accepted unchecked
# (remove an entry once the program has the flag).
NOT_YET_BUILT_FLAGS: dict = {}
# Flags of other tools that the docs name in a span of flags alone, with the tool.
OTHER_TOOLS_FLAGS = {
    "--cpus-per-task": "sbatch/srun", "--exclusive": "sbatch", "--hold": "sbatch",
    "--output": "sbatch", "--nodelist": "sbatch/srun",
    "--signal": "sbatch/srun", "--mpi": "srun", "--export": "sbatch/srun", "--batch": "scancel",
    "--gpus-per-node": "sbatch", "--ntasks-per-node": "srun", "--array": "sbatch",
    "--requeue": "sbatch", "--allow-run-as-root": "mpirun", "--mca": "mpirun",
    "--map-by": "mpirun", "--bind-to": "mpirun", "--no-deps": "pip",
    "--output_format": "spm_encode", "--extra_options": "spm_encode", "--open-mode": "sbatch",
    "--kill-on-bad-exit": "srun", "--overlap": "srun", "--nodes": "sbatch/srun",
    "--time": "sbatch", "--dependency": "sbatch", "--wrap": "sbatch", "--parsable": "sbatch",
}
PLACEHOLDER = re.compile(r"<|>|\{|\}|\*|NNN|\.\.\.|\$|~|\|")
CAPS = re.compile(r"^[A-Z][A-Z0-9_]*(\.[A-Za-z0-9]+)?$")
KEY = re.compile(r"^(?:--)?([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)(?:=.*)?$")
FLAG = re.compile(r"^(--[A-Za-z][A-Za-z0-9_-]*)(?:=.*)?$")


def markdown_files(root=ROOT):
    """The user docs: every *.md outside results/, build*/ and hidden folders, sorted."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.startswith("build")
                         and not (rel == Path(".") and d == "results"))
        out += [Path(dirpath) / f for f in sorted(files) if f.endswith(".md")]
    return out


def strip_fences(text):
    """The text with fenced blocks and generated blocks blanked (line numbers kept)."""
    out, fence, generated = [], False, False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            out.append("")
            continue
        if line.startswith("<!-- generated by:"):
            generated = True
        elif line.startswith("<!-- end generated -->"):
            generated = False
        out.append("" if fence or generated else line)
    return out


def code_spans(text):
    """(line number, span) for every inline code span outside fenced and generated blocks."""
    for n, line in enumerate(strip_fences(text), 1):
        for m in re.finditer(r"(`+)(.+?)\1", line):
            yield n, m.group(2).strip()


@dataclass
class Known:
    """What the docs may name: program flags (None: that program is not built) and keys."""
    flags: dict = field(default_factory=dict)  # program -> set of flags, '_' as '-'
    keys: set = None                            # None: no trainer to ask

    @property
    def sections(self):
        return {k.split(".")[0] for k in self.keys or ()}


def help_flags(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return set(re.findall(r"(?<![\w-])--[A-Za-z][A-Za-z0-9_-]*", p.stdout + p.stderr))


def known_from_build():
    """Flags and keys from the built programs' --help and --help-config (missing: None)."""
    k = Known()
    for prog, exe in PROGRAMS.items():
        if not exe.exists():
            continue
        flags = help_flags([str(exe), "--help"])
        for sub in SUBCOMMANDS[prog]:
            flags |= help_flags([str(exe), sub, "--help"])
        k.flags[prog] = {f.replace("_", "-") for f in flags} | {"--help"}
    if PROGRAMS["trainer"].exists():
        out = subprocess.run([str(PROGRAMS["trainer"]), "--help-config"], capture_output=True,
                             text=True, timeout=60).stdout
        k.keys = set(re.findall(r"^\| `([a-z_]+\.[a-z0-9_]+)` \|", out, flags=re.M))
    return k


@functools.lru_cache(maxsize=None)
def files_named(root):
    """Every file of the repository by its name (hidden and build* folders left out)."""
    index = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
        for f in files:
            index.setdefault(f, []).append(Path(dirpath) / f)
    return index


def check_path(word, page, root):
    """None when `word` names an existing file (or is not a path), else the reason."""
    path, _, member = word.partition("::")
    path = path.rstrip(",;:.")
    if not path or path.startswith(("/", "http")) or PLACEHOLDER.search(path):
        return None
    parts = path.rstrip("/").split("/")
    if any(CAPS.match(p) for p in parts) or path.startswith(NOT_IN_CHECKOUT) \
            or path in BUILD_OUTPUTS or path in NOT_OURS \
            or (parts[0] == "results" and not path.endswith(REPORT_SUFFIXES)):
        return None
    top = (root / parts[0]).exists() and len(parts) > 1
    if not top and not path.endswith(SOURCE_SUFFIXES):
        return None
    rel = page.relative_to(root)
    bases = [root, root / rel.parts[0], page.parent] if len(rel.parts) > 1 else [root]
    hits = [b / path for b in bases if (b / path).exists()]
    if not hits and "/" not in path:
        hits = files_named(root).get(path, [])
    if not hits:
        return f"no such file: {path}"
    if member and not any(re.search(rf"\b{re.escape(member)}\b", h.read_text()) for h in hits
                          if h.is_file()):
        return f"{path} has no {member}"
    return None


def check_key(word, known):
    m = KEY.match(word)
    if not m or known.keys is None or m.group(1) not in known.sections:
        return None
    key = f"{m.group(1)}.{m.group(2)}"
    if key in known.keys or key in NOT_KEYS or m.group(2) in FILE_SUFFIXES:
        return None
    return f"no config key {key} (trainer --help-config)"


@functools.lru_cache(maxsize=None)
def script_flags(script):
    """The flags a shell script reads: every --flag its text names (usage, case labels)."""
    return {f.replace("_", "-") for f in
            re.findall(r"(?<![\w-])--[A-Za-z][A-Za-z0-9_-]*", script.read_text())}


def shell_scripts():
    return sorted((ROOT / "scripts").glob("*.sh")) + sorted((ROOT / "slurm").glob("*.s*"))


def check_flags(words, known):
    """Reasons for the flags of one span; see the module's rules."""
    found, prog, allowed = [], None, None
    script = ROOT / words[0]
    if words[0] in PROGRAMS:
        prog, allowed = words[0], known.flags.get(words[0])
    elif words[0].endswith((".sh", ".sbatch")) and script.is_file():
        prog, allowed = words[0], script_flags(script)
    elif not words[0].startswith("--"):
        return found
    for i, w in enumerate(words):
        if w == "--":  # the rest is the started program's command line
            return found + (check_flags(words[i + 1:], known) if i + 1 < len(words) else [])
        m = FLAG.match(w)
        if not m or KEY.match(w):
            continue
        flag = m.group(1).replace("_", "-")
        if not known.flags or flag in PATTERN_FLAGS or flag in NOT_YET_BUILT_FLAGS:
            continue
        if prog is not None:
            if allowed is not None and flag not in allowed:
                found.append(f"{prog} has no flag {m.group(1)} ({prog} --help)")
        elif not any(flag in f for f in known.flags.values()) \
                and not any(flag in script_flags(s) for s in shell_scripts()) \
                and m.group(1) not in OTHER_TOOLS_FLAGS:
            found.append(f"no program or script has the flag {m.group(1)} "
                         f"({', '.join(sorted(known.flags))} --help, scripts/*.sh, slurm/*)")
    return found


def check_page(page, known, root=ROOT, text=None):
    """Findings of one page: (path relative to root, line, span, reason). `text`: the page's
    content when it is not read from `page` (a page planted at a path of the repository)."""
    findings = []
    rel = page.relative_to(root)
    for line, span in code_spans(page.read_text() if text is None else text):
        words = span.split()
        if not words:
            continue
        reasons = check_flags(words, known)
        for w in words:
            reasons += [r for r in (check_key(w, known),) if r]
            if not FLAG.match(w):
                r = check_path(w, page, root)
                if r:
                    reasons.append(r)
        findings += [(str(rel), line, span, r) for r in reasons]
    return findings


def main(argv):
    known = known_from_build()
    missing = [p for p in PROGRAMS if p not in known.flags]
    if missing:
        print(f"docs_check: not built, their flags unchecked: {', '.join(missing)} "
              f"(FTB_BUILD_DIR={BUILD})", file=sys.stderr)
    pages = [Path(a).resolve() for a in argv] or markdown_files()
    findings = [f for p in pages for f in check_page(p, known)]
    for page, line, span, reason in findings:
        print(f"{page}:{line}: `{span}`: {reason}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
