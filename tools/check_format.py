#!/usr/bin/env python3
"""Fails, naming each file, when a C++ file under the given folders is not laid out as
.clang-format says (clang-format --dry-run --Werror); the ctest Style.LayoutIsClangFormats runs it.

  check_format.py --root . src include tools tests

The layout is that of Debian bookworm's clang-format 14 (tools/setup.sh installs it); another
major version formats some lines otherwise, so with one the check says so and exits 77, which
ctest counts as skipped. --exclude FOLDER leaves out a folder (relative to --root), such as the
style checks' own fixtures.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

MAJOR = 14
SKIPPED = 77


def clang_format():
    for name in (f"clang-format-{MAJOR}", "clang-format"):
        path = shutil.which(name)
        if path:
            version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
            found = re.search(r"version (\d+)\.", version)
            if found and int(found.group(1)) == MAJOR:
                return path, None
            return None, version.strip()
    return None, "no clang-format on PATH"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".")
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args()
    tool, why = clang_format()
    if tool is None:
        print(f"skipped: the layout is clang-format {MAJOR}'s; found: {why}")
        return SKIPPED
    excluded = {os.path.normpath(os.path.join(args.root, e)) for e in args.exclude}
    files = []
    for folder in args.folders:
        for path, dirs, names in os.walk(os.path.join(args.root, folder)):
            dirs[:] = sorted(d for d in dirs if os.path.normpath(os.path.join(path, d)) not in excluded)
            files += [os.path.join(path, n) for n in sorted(names) if n.endswith((".cpp", ".h"))]
    style = "--style=file"  # the .clang-format above each file: the root's
    bad = []
    for i in range(0, len(files), 64):
        batch = files[i:i + 64]
        run = subprocess.run([tool, style, "--dry-run", "--Werror"] + batch,
                             capture_output=True, text=True)
        if run.returncode != 0:
            for f in batch:
                if f in run.stderr:
                    bad.append(os.path.relpath(f, args.root))
    for f in bad:
        print(f"{f}: not in .clang-format's layout (fix: clang-format -i {f})")
    if bad:
        print(f"{len(bad)} file(s) not formatted", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
