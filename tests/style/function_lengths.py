#!/usr/bin/env python3
"""Lists every C++ function longer than a limit in common/ launcher/ trainer/ sweep_tagger/.

Usage: function_lengths.py SOURCE_DIR [--limit 80] [--all]   exit 1 if one is over the limit
       function_lengths.py --self-test

A function's length is the number of lines from the first line of its signature to its
closing brace. Brace counting on the source with comments, string, character and raw
string literals blanked out; preprocessor lines skipped. A `{` opens a function body when
the text before it (since the last `;`, `{` or `}` of the enclosing scope) has a
parenthesised parameter list and is not a namespace, class, struct, union or enum, and
not a variable initialiser (`=` outside parentheses). Lambdas and local classes count
towards the function around them. Bodies inside class bodies are found as well.
"""
import re
import sys
from pathlib import Path

FOLDERS = ("common", "launcher", "trainer", "sweep_tagger")

# Functions allowed over the limit, each with the reason it cannot be split usefully.
# Key: "path:name" (name as printed by this script).
EXEMPT = {
}


def blank_literals(text):
    """The text with comments and literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":  # preprocessor line, with continuations
            j = i
            while j < n and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('"', i + 1) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i and (text[i - 1].isalnum()):  # digit separator 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def classify(header):
    """'container', 'function' or 'other' for the text before a `{`."""
    h = " ".join(header.split())
    if re.search(r"\b(namespace|extern)\b", h) and "(" not in h:
        return "container"
    if re.match(r"^(template\s*<.*>\s*)?(class|struct|union)\b", h) and "(" not in h.split(":")[0]:
        return "container"
    if re.search(r"\benum\b", h):
        return "other"
    if "(" not in h or ")" not in h:
        return "other"
    depth = 0
    for k, ch in enumerate(h):  # '=' outside parentheses: an initialiser, not a body
        if ch in "(<[":
            depth += 1 if ch != "<" else 0
        elif ch in ")]":
            depth -= 1
        elif ch == "=" and depth == 0:
            prev = h[max(0, k - 9):k]
            if "operator" in prev or h[k + 1:k + 2] == "=" or h[k - 1:k] in "=!<>":
                continue
            return "other"
    if re.search(r"\b(if|for|while|switch|catch|return)\s*\(", h.split("(")[0] + "("):
        return "other"
    return "function"


def function_name(header):
    h = " ".join(header.split())
    # the name before the parameter list of the signature (first '(' not in a template)
    m = re.search(r"([~\w:]+(?:operator\s*[^\s(]+)?)\s*\(", h)
    return m.group(1) if m else h[:40]


def functions(text):
    """(name, first_line, last_line) of every function body in `text`."""
    clean = blank_literals(text)
    result = []
    stack = []  # kinds of open braces
    header_start = 0
    paren = 0
    i = 0
    line_of = [0] * (len(clean) + 1)
    ln = 1
    for k, ch in enumerate(clean):
        line_of[k] = ln
        if ch == "\n":
            ln += 1
    line_of[len(clean)] = ln
    func_start = None
    for i, ch in enumerate(clean):
        in_function = any(k == "function" for k, _ in stack)
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren -= 1
        elif ch == "{":
            if in_function or paren > 0:
                stack.append(("other", None))
            else:
                header = clean[header_start:i]
                kind = classify(header)
                if kind == "function":
                    first = header_start + (len(header) - len(header.lstrip()))
                    stack.append(("function", (function_name(header), line_of[first])))
                else:
                    stack.append((kind, None))
            header_start = i + 1
        elif ch == "}":
            if stack:
                kind, info = stack.pop()
                if kind == "function":
                    result.append((info[0], info[1], line_of[i]))
            header_start = i + 1
            paren = 0 if not any(k == "function" for k, _ in stack) else paren
        elif ch == ";" and paren == 0:
            header_start = i + 1
        elif ch == ":" and paren == 0 and not in_function:
            # access specifiers (public:) end a header; '::' does not
            if clean[i - 1:i] != ":" and clean[i + 1:i + 2] != ":":
                before = clean[header_start:i].strip()
                if before in ("public", "private", "protected"):
                    header_start = i + 1
    return result


def scan(source_dir, limit):
    rows = []
    for folder in FOLDERS:
        for path in sorted((Path(source_dir) / folder).rglob("*")):
            if path.suffix not in (".cpp", ".h", ".cc", ".hpp"):
                continue
            rel = path.relative_to(source_dir).as_posix()
            for name, first, last in functions(path.read_text(errors="replace")):
                length = last - first + 1
                if length > limit:
                    rows.append((length, rel, first, name))
    return sorted(rows, reverse=True)


SELF_TEST = r'''
namespace a {
struct S {
  int f() {
    return 1;
  }
  const char* s = "}{";
};
int g(int x) {
  auto l = [&](int y) { return y; };
  // } a comment brace
  const char* r = R"x(}})x";
  if (x) {
    return l(x);
  }
  return '}';
}
const int table[] = {1, 2,
  3};
}  // namespace a
'''


def self_test():
    got = [(n, a, b) for n, a, b in functions(SELF_TEST)]
    want = [("f", 4, 6), ("g", 9, 17)]
    if got != want:
        print(f"self-test FAILED: got {got}, want {want}")
        return 1
    print("self-test ok: " + ", ".join(f"{n} lines {a}-{b}" for n, a, b in got))
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    args = [a for a in argv if not a.startswith("--")]
    limit = 80
    if "--limit" in argv:
        limit = int(argv[argv.index("--limit") + 1])
        args.remove(str(limit))
    if len(args) != 1:
        print(__doc__)
        return 2
    rows = scan(args[0], limit)
    bad = 0
    for length, rel, first, name in rows:
        key = f"{rel}:{name}"
        if key in EXEMPT:
            print(f"{length:5d}  {rel}:{first}  {name}  (exempt: {EXEMPT[key]})")
        else:
            print(f"{length:5d}  {rel}:{first}  {name}")
            bad += 1
    print(f"{bad} function(s) over {limit} lines in {', '.join(FOLDERS)}"
          + (f" ({len(rows) - bad} exempt)" if len(rows) > bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
