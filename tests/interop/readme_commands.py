#!/usr/bin/env python3
"""Every tools/*.py that README.md runs as a command (a line of a code block that starts with
`tools/<name>.py`) can be run so: it is executable in the working tree and in git's index (mode
100755, what a clone gets), and its first line is `#!/usr/bin/env python3`. Needs no torch and
no txl program.

usage: readme_commands.py [--root REPO]. Exit 0 pass, 1 fail.
"""
import argparse
import os
import re
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHEBANG = "#!/usr/bin/env python3"


def readme_commands(readme):
    """The tools/<name>.py paths that start a line inside a ``` code block of the README."""
    found, inside = [], False
    with open(readme, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                inside = not inside
                continue
            m = re.match(r"\s*(tools/[A-Za-z0-9_]+\.py)(\s|$)", line) if inside else None
            if m and m.group(1) not in found:
                found.append(m.group(1))
    return found


def index_modes(root, paths):
    """{path: git's index mode} of the paths, or None where this is not a git checkout."""
    try:
        r = subprocess.run(["git", "-C", root, "ls-files", "-s", "--", *paths], capture_output=True, text=True)
    except OSError:
        return None
    if r.returncode != 0:
        return None
    modes = {}
    for line in r.stdout.splitlines():  # "<mode> <blob> <stage>\t<path>"
        meta, _, path = line.partition("\t")
        modes[path] = meta.split()[0]
    return modes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=os.path.join(HERE, "..", ".."))
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    commands = readme_commands(os.path.join(root, "README.md"))
    if not commands:
        print("FAIL: README.md runs no tools/*.py in its code blocks (has its layout changed?)")
        return 1
    modes = index_modes(root, commands)
    if modes is None:
        print("note: not a git checkout; only the working tree's modes are checked")
    ok = True
    for path in commands:
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            print(f"FAIL: {path}: README.md runs it, but there is no such file")
            ok = False
            continue
        problems = []
        mode = os.stat(full).st_mode
        if not mode & stat.S_IXUSR:
            problems.append(f"not executable (mode {stat.S_IMODE(mode):o}; chmod +x {path})")
        if modes is not None and modes.get(path) != "100755":
            problems.append(f"git records mode {modes.get(path, 'none')}, not 100755 "
                            f"(git update-index --chmod=+x {path})")
        with open(full, encoding="utf-8") as f:
            first = f.readline().rstrip("\n")
        if first != SHEBANG:
            problems.append(f"first line {first!r}, not {SHEBANG!r}")
        print(f"{path}: " + ("; ".join(problems) if problems else "executable, with the shebang"))
        ok &= not problems
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
