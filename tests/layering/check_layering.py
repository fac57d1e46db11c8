#!/usr/bin/env python3
"""Dependencies point one way, common <- launcher, trainer, sweep_tagger.

Checks, and prints the graph it found:
  1. includes: no file under trainer/ includes a sweep_tagger/ or launcher/ header, none under
     sweep_tagger/ a trainer/ or launcher/ one, none under launcher/ a trainer/ or sweep_tagger/
     one, and none under common/ any of the three (quoted and angle includes, also relative
     spellings such as "../trainer/x.h"); toml++ is included only by common/toml.h;
  2. inside trainer/, every include points down TRAINER_STACK (a subfolder includes its own
     files and those of lower levels only; folders sharing a level do not include each other),
     and every subfolder of trainer/ is in the stack;
  3. CMake targets (ftb_targets.tsv, written at configure time by tests/CMakeLists.txt): each
     of the four folders builds exactly one library, every source of a target lies in its
     folder, and the only link edges between the project's targets are
     <folder executable> -> [<an OBJECT library of its folder> ->] <its folder's library> -> ftb_common.

Usage: check_layering.py SOURCE_DIR TARGETS_TSV    (exit 1 and a list on any violation)
       check_layering.py --self-test               (planted violations are all reported)
"""
import os
import re
import sys

FOLDERS = ("common", "trainer", "launcher", "sweep_tagger")
ALLOWED = {  # folder -> folders its files may include
    "common": {"common"},
    "trainer": {"common", "trainer"},
    "launcher": {"common", "launcher"},
    "sweep_tagger": {"common", "sweep_tagger"},
}
# trainer/ bottom to top. "" is the files directly in trainer/ (main, session).
TRAINER_STACK = (
    ("kernels", "data", "metrics"),  # compute kernels, the data pipeline, timers and peaks
    ("comm",),        # the Comm interface and the tensor-parallel ops: the narrow seam
    ("model",),       # the Llama transformer
    ("parallel",),    # process groups, mesh, gradient sync (DDP, ZeRO), parallelize()
    ("optim",),       # optimizers
    ("checkpoint",),  # sharded checkpoints
    ("hf",),          # Hugging Face weights in and out
    ("loop",),        # train(), the step hooks, the step log
    ("", "bench"),    # the session (main.cpp, session.*) and the benchmark tools
)
TRAINER_LEVEL = {sub: i for i, level in enumerate(TRAINER_STACK) for sub in level}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def folder_of(root, path):
    rel = os.path.relpath(os.path.normpath(path), root)
    top = rel.split(os.sep)[0]
    return top if top in FOLDERS else None


def included_path(root, src, target):
    """The included file relative to root, or None for a system or third-party header."""
    top = target.split("/")[0]
    if top in FOLDERS and os.path.exists(os.path.join(root, target)):
        return os.path.normpath(target)
    local = os.path.join(os.path.dirname(src), target)  # "metrics/x.h", "../trainer/x.h"
    if os.path.exists(local):
        return os.path.relpath(os.path.normpath(local), root)
    return None


def trainer_sub(rel):
    """trainer/<sub>/... -> sub; a file directly in trainer/ -> ""."""
    parts = rel.split(os.sep)
    return parts[1] if len(parts) > 2 else ""


def check_trainer_stack(rel, lineno, target, dep_rel):
    """Problems with trainer file `rel` including trainer file `dep_rel` (both root-relative)."""
    sub, dep = trainer_sub(rel), trainer_sub(dep_rel)
    if sub not in TRAINER_LEVEL or dep not in TRAINER_LEVEL:
        return []  # reported once per file by check_includes
    if sub == dep or TRAINER_LEVEL[dep] < TRAINER_LEVEL[sub]:
        return []
    where = "up" if TRAINER_LEVEL[dep] > TRAINER_LEVEL[sub] else "sideways in"
    below = [x or "trainer/ (top)" for lvl in TRAINER_STACK[:TRAINER_LEVEL[sub]] for x in lvl]
    return [f"{rel}:{lineno}: trainer/{sub or '(top)'} includes {target}, {where} the trainer "
            f"stack (trainer/{dep or '(top)'}); it may include its own folder and {below}"]


def check_includes(root):
    problems = []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".hpp", ".cpp", ".cc", ".inl")):
                    continue
                src = os.path.join(dirpath, name)
                rel = os.path.relpath(src, root)
                if folder == "trainer" and trainer_sub(rel) not in TRAINER_LEVEL:
                    problems.append(f"{rel}: trainer/{trainer_sub(rel)}/ is not in the trainer "
                                    "stack (TRAINER_STACK in tests/layering/check_layering.py)")
                with open(src, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(2)
                        if target.startswith("toml++/") and rel != os.path.join("common", "toml.h"):
                            problems.append(f"{rel}:{lineno}: includes <{target}>; include "
                                            "common/toml.h (the one TOML reader) instead")
                        dep_rel = included_path(root, src, target)
                        dep = folder_of(root, os.path.join(root, dep_rel)) if dep_rel else None
                        if dep and dep not in ALLOWED[folder]:
                            problems.append(f"{rel}:{lineno}: {folder}/ includes {target} "
                                            f"({dep}/); allowed: {sorted(ALLOWED[folder])}")
                        if folder == "trainer" and dep == "trainer":
                            problems += check_trainer_stack(rel, lineno, target, dep_rel)
    return problems


def check_targets(root, tsv):
    problems, graph = [], []
    targets = {}  # name -> (folder, type, libs, sources)
    with open(tsv, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            name, ttype, srcdir, libs, srcs = line.rstrip("\n").split("\t")
            targets[name] = (folder_of(root, srcdir), ttype,
                             [x for x in libs.split(";") if x and x != "libs-NOTFOUND"],
                             [x for x in srcs.split(";") if x and x != "srcs-NOTFOUND"], srcdir)
    library = {}
    for name, (folder, ttype, _, _, _) in targets.items():
        if ttype == "STATIC_LIBRARY" or ttype == "SHARED_LIBRARY":
            if folder in library:
                problems.append(f"{folder}/ builds two libraries: {library[folder]} and {name}")
            library[folder] = name
    for folder in FOLDERS:
        if folder not in library and any(t[0] == folder for t in targets.values()):
            problems.append(f"{folder}/ has targets but no library")
    for name, (folder, ttype, libs, srcs, srcdir) in sorted(targets.items()):
        for s in srcs:
            path = s if os.path.isabs(s) else os.path.join(srcdir, s)
            if folder_of(root, path) != folder:
                problems.append(f"target {name} ({folder}/) compiles {path}, outside {folder}/")
        for lib in libs:
            if lib not in targets:
                continue  # third-party (torch, MPI, HDF5, nlohmann_json)
            dep_folder = targets[lib][0]
            graph.append(f"{name} -> {lib}")
            is_lib = ttype.endswith("_LIBRARY")
            # An OBJECT library is a part of its folder's library that not every program of
            # the folder links (trainer/: the CPU and the CUDA build of the CUDA sources).
            dep_is_part = targets[lib][1] == "OBJECT_LIBRARY" and dep_folder == folder
            ok = (dep_folder == "common" and folder != "common") or \
                 (not is_lib and (lib == library.get(folder) or dep_is_part)) or \
                 (ttype == "OBJECT_LIBRARY" and lib == library.get(folder))
            if not ok:
                problems.append(f"target {name} ({folder}/) links {lib} ({dep_folder}/): only "
                                "<folder executable> -> [<folder object library> ->] "
                                "<folder library> -> ftb_common")
    return problems, graph


def self_test():
    """The checker finds a planted violation of each kind (else it would pass vacuously)."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for folder in FOLDERS:
            os.makedirs(os.path.join(root, folder, "sub"))
        for sub in ("model", "loop", "kernels", "data", "comm"):
            os.makedirs(os.path.join(root, "trainer", sub))
        files = {
            "sweep_tagger/y.h": "",
            "trainer/sub/x.cpp": '#include "sweep_tagger/y.h"\n#include <toml++/toml.h>\n',
            "common/c.cpp": '#include "../trainer/sub/x.cpp"\n',
            "launcher/ok.cpp": '#include "common/c.cpp"\n#include <vector>\n',
            # the trainer stack: one include up, one sideways, the rest point down (fine)
            "trainer/data/d.h": "",
            "trainer/comm/ok.h": '#include "trainer/kernels/k.h"\n',
            "trainer/model/m.h": '#include "trainer/comm/ok.h"\n#include "../loop/l.h"\n',
            "trainer/loop/l.h": '#include "trainer/model/m.h"\n#include "trainer/data/d.h"\n',
            "trainer/kernels/k.h": '#include "trainer/data/d.h"\n',
            "trainer/s.cpp": '#include "trainer/loop/l.h"\n#include "trainer/kernels/k.h"\n',
        }
        for rel, text in files.items():
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        found = check_includes(root)
        want = ["trainer/sub/x.cpp:1: trainer/ includes sweep_tagger/y.h",
                "trainer/sub/x.cpp:2: includes <toml++/toml.h>",
                "common/c.cpp:1: common/ includes ../trainer/sub/x.cpp",
                "trainer/sub/x.cpp: trainer/sub/ is not in the trainer stack",
                "trainer/model/m.h:2: trainer/model includes ../loop/l.h, up the trainer stack",
                "trainer/kernels/k.h:1: trainer/kernels includes trainer/data/d.h, sideways in"]
        tsv = os.path.join(root, "t.tsv")
        with open(tsv, "w") as f:
            f.write(f"ftb_common\tSTATIC_LIBRARY\t{root}/common\t\tc.cpp\n"
                    f"ftb_sweep\tSTATIC_LIBRARY\t{root}/sweep_tagger\tftb_common;ftb_trainer_lib\ty.h\n"
                    f"ftb_trainer_lib\tSTATIC_LIBRARY\t{root}/trainer\tftb_common\tsub/x.cpp;../common/c.cpp\n"
                    f"ftb_trainer2\tSTATIC_LIBRARY\t{root}/trainer\tftb_common\tsub/x.cpp\n")
        found += check_targets(root, tsv)[0]
        want += ["target ftb_sweep (sweep_tagger/) links ftb_trainer_lib",
                 "compiles " + os.path.join(root, "trainer", "../common/c.cpp"),
                 "trainer/ builds two libraries"]
        missing = [w for w in want if not any(w in p for p in found)]
        stray = [p for p in found if any(ok in p for ok in (
            "launcher/ok.cpp", "trainer/comm/ok.h", "trainer/loop/l.h", "trainer/s.cpp"))]
        if missing or stray or len(found) != len(want):
            print("self-test failed; missing:", missing, "stray:", stray, "found:", found)
            return 1
    print(f"self-test: the {len(want)} planted violations are reported")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root, tsv = os.path.abspath(sys.argv[1]), sys.argv[2]
    problems = check_includes(root)
    target_problems, graph = check_targets(root, tsv)
    problems += target_problems
    print("target link graph (project targets only):")
    for edge in sorted(graph):
        print("  " + edge)
    if problems:
        print(f"{len(problems)} layering violation(s):")
        for p in problems:
            print("  " + p)
        return 1
    print("layering: includes and targets point one way (common <- launcher, trainer, sweep_tagger)"
          "; inside trainer/ every include points down " +
          " -> ".join("/".join(x or "(top)" for x in lvl) for lvl in TRAINER_STACK))
    return 0


if __name__ == "__main__":
    sys.exit(main())
