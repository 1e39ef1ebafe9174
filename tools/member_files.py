#!/usr/bin/env python3
"""Fails, naming the file, when the code of src/ or include/ names a member of the family (a
position scheme or a memory mechanism) outside the files the table below gives it: its own files,
the registry, its settings, and the few shared places each entry explains (CONTRIBUTING.md: a new
member is its own file plus its registration and settings). The ctest Style.MembersStayInTheirFiles
runs it; Style.MemberOutsideItsFilesIsCaught checks that it can fail.

  member_files.py --root . src include

Comments are blanked first (a comment may explain a member anywhere); string literals count (a
list of names in a message is a list). A member's files are also held to --max (6, the limit of
issue 45) unless its entry names the debt that keeps it over, which the output repeats.
A new member adds its entry here: the pattern of its names and its files.
"""
import argparse
import os
import re
import sys

REGISTRIES = ["src/modules/positions/registry.cpp", "src/models/memory/registry.cpp"]
ATTN_TYPES = "include/txl/config/enums.h"  # model.attn_type's name table
SETTINGS = ["include/txl/config/config.h", "src/config/fields.cpp", "src/config/validate.cpp"]

# name: (pattern, files besides the registries, debt or None)
MEMBERS = {
    "shaw": (r"shaw", [ATTN_TYPES, "src/modules/positions/shaw.cpp"], None),
    "rope": (r"rope|rotary",
             [ATTN_TYPES, "src/modules/positions/rope.cpp", "include/txl/ops/rotary.h",
              "src/ops/rotary.cpp", "src/config/validate.cpp"], None),
    "alibi": (r"alibi",
              [ATTN_TYPES, "src/modules/positions/alibi.cpp", "include/txl/ops/alibi.h",
               "src/ops/alibi.cpp"], None),
    "t5": (r"\bt5", [ATTN_TYPES, "src/modules/positions/t5.cpp", *SETTINGS], None),
    "vanilla_learned": (r"vanilla_?learned",
                        [ATTN_TYPES, "src/modules/positions/vanilla_learned.cpp",
                         "src/config/validate.cpp",
                         "src/experiment/findings.cpp"],  # the paper's baseline, in the headline
                        None),
    "compressive": (r"compress|cmem",
                    ["src/models/memory/compressive.cpp", "include/txl/models/memory/compressive.h",
                     *SETTINGS], None),
    "knn": (r"knn", ["src/models/memory/knn.cpp", *SETTINGS[:2]], None),
    "memory_tokens": (r"mem_tokens|memory_?tokens|memory tokens",
                      ["src/models/memory/memory_tokens.cpp", *SETTINGS], None),
}

# Files where a member's pattern means something else.
HOMONYMS = {"compressive": ["include/txl/util/sha256.h", "src/util/sha256.cpp"]}  # SHA-256's


def blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


def code(source):
    """The source with comments blanked (string literals kept)."""
    token = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)
    return token.sub(lambda m: m.group(0) if m.group(0).startswith('"') else blank(m), source)


def sources(root, folders):
    for folder in folders:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if name.endswith((".cpp", ".h")):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, root).replace(os.sep, "/"), path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".")
    parser.add_argument("--max", type=int, default=6)
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args()
    texts = {rel: code(open(path, encoding="utf-8").read()) for rel, path in
             sources(args.root, args.folders)}
    failures = []
    for member, (pattern, own, debt) in MEMBERS.items():
        allowed = set(own) | set(REGISTRIES)
        naming = sorted(rel for rel, text in texts.items()
                        if re.search(pattern, text, re.I) and rel not in HOMONYMS.get(member, []))
        for rel in naming:
            if rel not in allowed:
                failures.append(f"{rel}: names {member} outside its files "
                                f"(tools/member_files.py lists them)")
        count = len(naming)
        line = f"{member}: {count} files"
        if count > args.max:
            if debt is None:
                failures.append(f"{member}: named in {count} files, at most {args.max}")
            else:
                line += f" (over {args.max}: {debt})"
        print(line)
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
