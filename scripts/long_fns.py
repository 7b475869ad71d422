#!/usr/bin/env python3
"""Lists Rust functions longer than a limit and files longer than a limit.

Usage: scripts/long_fns.py [--fn-lines 80] [--file-lines 600] [paths...]
A function's length is counted from its `fn` line to its closing brace, both included.
"""
import argparse
import os
import re
import sys

FN_START = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def code_only(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        m = re.match(r'b?r(#*)"', text[i:i + 80])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * m.end())
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = code_only(text).split("\n")
    for start, line in enumerate(lines):
        m = FN_START.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for k in range(start, len(lines)):
            for ch in lines[k]:
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not opened and depth == 0:
                    break  # a declaration without a body
            else:
                if opened and depth == 0:
                    yield m.group(1), start + 1, k - start + 1
                    break
                continue
            break


def rust_files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, _, names in os.walk(p):
            for name in sorted(names):
                if name.endswith(".rs"):
                    yield os.path.join(root, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fn-lines", type=int, default=80)
    ap.add_argument("--file-lines", type=int, default=600)
    ap.add_argument("paths", nargs="*", default=["src", "tests", "examples", "benches"])
    args = ap.parse_args()
    found = 0
    for path in rust_files(args.paths):
        with open(path, encoding="utf-8") as f:
            count = sum(1 for _ in f)
        if count > args.file_lines and path.startswith("src"):
            print(f"file {path}: {count} lines")
            found += 1
        for name, line, length in functions(path):
            if length > args.fn_lines:
                print(f"fn   {path}:{line} {name}: {length} lines")
                found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
