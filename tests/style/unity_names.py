#!/usr/bin/env python3
"""Checks the unity build's contract: no two sources of one batch define a file-scope helper
of the same name.

Usage: unity_names.py BUILD_DIR      exit 1 if a batch has such a name
       unity_names.py --self-test

A unity build (ftb_unity_build, top-level CMakeLists.txt) compiles the sources of a batch
as one translation unit: CMake writes a Unity/unity_N_cxx.cxx per batch that #includes
them. Two helpers of one name at file scope (in an anonymous namespace, or `static`) are
then one overload set: with the same parameters the build fails, with different ones a
call can silently reach the other file's helper. This script reads every batch file under
BUILD_DIR, finds in each included source the functions defined at namespace scope with
internal linkage (brace counting on the source with comments and literals blanked out, as
function_lengths.py), and lists each name defined by more than one source of a batch.
A build without batches (-DFTB_UNITY_BUILD=OFF) has nothing to check (exit 0).
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from function_lengths import blank_literals, classify, function_name  # noqa: E402


# Not function names: keywords a header can start with, and macros (TEST, TEST_F: all capitals).
NOT_NAMES = {"alignas", "static_assert", "decltype", "sizeof", "alignof", "noexcept"}


def internal_functions(text):
    """Names of the functions `text` defines at namespace scope with internal linkage."""
    clean = blank_literals(text)
    names = set()
    stack = []  # kind of each open brace: "anon", "ns", or "other"
    header_start = 0
    paren = 0
    for i, ch in enumerate(clean):
        at_namespace_scope = all(k in ("anon", "ns") for k in stack)
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren -= 1
        elif ch == "{":
            header = " ".join(clean[header_start:i].split())
            kind = "other"
            if at_namespace_scope and paren == 0:
                if re.fullmatch(r"(inline\s+)?namespace", header):
                    kind = "anon"
                elif re.fullmatch(r"(inline\s+)?namespace\s+[\w:]+", header):
                    kind = "ns"
                elif classify(header) == "function":
                    name = function_name(header)
                    internal = "anon" in stack or re.search(r"(^|\s)static\s", header)
                    if internal and "::" not in name and name not in NOT_NAMES \
                            and not re.fullmatch(r"[A-Z0-9_]+", name):
                        names.add(name)
            stack.append(kind)
            header_start = i + 1
        elif ch == "}":
            if stack:
                stack.pop()
            header_start = i + 1
        elif ch == ";" and paren == 0:
            header_start = i + 1
    return names


def batch_sources(unity_file):
    """The sources a CMake batch file #includes."""
    return [Path(m) for m in re.findall(r'^#include "([^"]+)"', unity_file.read_text(), re.M)]


def clashes(sources):
    """{name: [sources defining it]} for names more than one of `sources` defines."""
    where = {}
    for src in sources:
        for name in internal_functions(src.read_text(errors="replace")):
            where.setdefault(name, []).append(src)
    return {n: s for n, s in sorted(where.items()) if len(s) > 1}


SELF_TEST_A = r'''
namespace ftb {
namespace {
std::string trim(const std::string& s) { return s; }
struct S { int size() const { return 1; } };
}  // namespace
static int parse(const char* s) { return 0; }
int exported(int x) { return x; }
void Foo::bar() {}
}  // namespace ftb
'''
SELF_TEST_B = r'''
namespace ftb {
namespace {
std::string trim(std::string s, char c) { return s; }  // another overload: a clash
int size() { return 2; }
}  // namespace
int parse(int x) { return x; }  // external linkage: the linker's business
}  // namespace ftb
'''


def self_test():
    got_a, got_b = internal_functions(SELF_TEST_A), internal_functions(SELF_TEST_B)
    want_a, want_b = {"trim", "parse"}, {"trim", "size"}
    if got_a != want_a or got_b != want_b:
        print(f"self-test FAILED: got {sorted(got_a)} and {sorted(got_b)}, "
              f"want {sorted(want_a)} and {sorted(want_b)}")
        return 1
    common = sorted(got_a & got_b)
    if common != ["trim"]:
        print(f"self-test FAILED: shared names {common}, want ['trim']")
        return 1
    print("self-test ok: trim is defined by both planted sources, size and parse are not shared")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__)
        return 2
    batches = sorted(Path(argv[0]).rglob("Unity/unity_*.cxx"))
    bad = 0
    for batch in batches:
        for name, srcs in clashes(batch_sources(batch)).items():
            bad += 1
            print(f"{batch}: `{name}` is defined at file scope by "
                  + ", ".join(str(s) for s in srcs))
    print(f"{len(batches)} unity batches, {bad} file-scope name(s) defined by more than one "
          "source of a batch" + (": rename them, or share one copy in a header" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
