#!/usr/bin/env python3
"""Fails, naming file:line, for a C++ function longer than --max lines (its header's first line
to its closing brace) in the given folders, and with --max-file for a source file longer than
that (a file of one job: split it along its jobs); the ctests Style.FunctionsFitOneScreen,
Style.FilesDoOneJob and Style.MainsAreShort run it.

  function_lengths.py --max 80 --exempt src/config/fields.cpp:fields_of src tools
  function_lengths.py --max-file 599 --exclude tests/style src include tools tests
  function_lengths.py --max-file 60 --only main.cpp tools

--exempt FILE:NAME leaves out one function that is a declarative table (CONTRIBUTING.md).
--exclude FOLDER leaves out a folder (relative to --root), such as the style checks' own fixtures.
Comments, string literals and preprocessor lines are blanked first; a brace block is a function
when its header has a parameter list and is not a control statement, a lambda or a type.
"""
import argparse
import os
import re
import sys

NOT_A_FUNCTION = re.compile(r"(if|for|while|switch|catch|else|do|namespace|struct|class|enum|union)\b")


def blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


def strip(source):
    """The source with comments, literals and preprocessor lines blanked (lines kept)."""
    token = re.compile(
        r'//[^\n]*|/\*.*?\*/|R"([^(]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
        re.S)
    source = token.sub(blank, source)
    return re.sub(r"(?m)^[ \t]*#.*$", blank, source)


def functions(source):
    """(first line, last line, name) of every function body at any nesting outside functions."""
    text = strip(source)
    stack, start, found = [], 0, []
    for i, c in enumerate(text):
        if c == "{":
            head = text[start:i]
            words = head.strip()
            inside = any(kind == "fn" for kind, _, _ in stack)
            is_fn = (not inside and "(" in words and not NOT_A_FUNCTION.match(words)
                     and not re.search(r"(=|return|\]\s*\([^)]*\)[^{]*)\s*$", words))
            first = text.count("\n", 0, start + len(head) - len(head.lstrip())) + 1
            names = re.findall(r"([A-Za-z_~][\w:~]*)\s*\(", words)
            stack.append(("fn" if is_fn else "block", first, names[0].split("::")[-1] if names else ""))
            start = i + 1
        elif c == "}":
            if stack:
                kind, first, name = stack.pop()
                if kind == "fn":
                    found.append((first, text.count("\n", 0, i) + 1, name))
            start = i + 1
        elif c == ";":
            start = i + 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=80)
    parser.add_argument("--max-file", type=int, default=0, help="lines a file may have (0 = any)")
    parser.add_argument("--only", default="", help="check only the files of this name (main.cpp)")
    parser.add_argument("--exempt", action="append", default=[], help="FILE:NAME")
    parser.add_argument("--root", default=".", help="the paths are relative to this folder")
    parser.add_argument("--exclude", action="append", default=[],
                        help="FOLDER (relative to --root) to leave out; repeatable")
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args()
    exempt = set(args.exempt)
    excluded = {os.path.normpath(os.path.join(args.root, e)) for e in args.exclude}
    long = []
    for folder in args.folders:
        for path, dirs, files in os.walk(os.path.join(args.root, folder)):
            dirs[:] = sorted(d for d in dirs if os.path.normpath(os.path.join(path, d)) not in excluded)
            for name in sorted(files):
                if not name.endswith((".cpp", ".h")) or (args.only and name != args.only):
                    continue
                full = os.path.join(path, name)
                rel = os.path.relpath(full, args.root)
                with open(full, encoding="utf-8", errors="replace") as f:
                    source = f.read()
                    file_lines = source.count("\n")
                    if 0 < args.max_file < file_lines:
                        long.append(f"{rel} is {file_lines} lines (at most {args.max_file}): "
                                    "split it along its jobs")
                    for first, last, fn in functions(source):
                        lines = last - first + 1
                        if lines > args.max and f"{rel}:{fn}" not in exempt:
                            long.append(f"{rel}:{first}: {fn} is {lines} lines (at most {args.max})")
    for line in sorted(long):
        print(line)
    if long:
        print(f"{len(long)} function(s) or file(s) too long: split them into named steps",
              file=sys.stderr)
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
