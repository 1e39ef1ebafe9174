#!/usr/bin/env python3
"""Checks that ctest runs every GoogleTest suite of the test binaries (cmake/test_suites.cmake):
a suite that the discovery's pattern missed would never run, and nothing else would say so.

    tools/check_suites.py --build build      # lists each build/bin/*_test and `ctest -N`
    tools/check_suites.py --listing L --ctest-json J   # the same from saved outputs

A suite is covered by an entry that runs its binary with --gtest_filter=Suite.* or one case of it
(Suite.Case, the PER_TEST binaries). Prints each suite that no entry runs and exits 1; else 0.
"""
import argparse
import json
import pathlib
import subprocess
import sys


def suites_of(listing):
    """The suites of a --gtest_list_tests output: lines in column 0, the name before its dot."""
    out = []
    for line in listing.splitlines():
        if line and not line[0].isspace() and not line.startswith("#") and "." in line:
            name = line.split(" ", 1)[0]
            if name.endswith("."):
                out.append(name[:-1])
    return out


def covered(tests):
    """(binary name, suite) pairs that ctest's entries run, from `ctest --show-only=json-v1`."""
    pairs = set()
    for test in tests:
        command = test.get("command") or []
        if not command:
            continue
        binary = pathlib.Path(command[0]).name
        for arg in command[1:]:
            if arg.startswith("--gtest_filter="):
                pattern = arg[len("--gtest_filter="):]
                if not pattern.startswith("-"):
                    pairs.add((binary, pattern.split(".", 1)[0]))
    return pairs


def missing(listings, tests):
    """Suites of `listings` ({binary name: listing}) that no entry of `tests` runs."""
    runs = covered(tests)
    return [f"{binary}: {suite}" for binary, listing in sorted(listings.items())
            for suite in suites_of(listing) if (binary, suite) not in runs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", help="the build folder: its bin/*_test and ctest's entries")
    parser.add_argument("--listing", help="a JSON object {binary: its --gtest_list_tests output}")
    parser.add_argument("--ctest-json", help="a saved `ctest --show-only=json-v1`")
    args = parser.parse_args()
    if args.build:
        build = pathlib.Path(args.build).resolve()
        listings = {}
        for binary in sorted((build / "bin").glob("*_test")):
            run = subprocess.run([str(binary), "--gtest_list_tests"], capture_output=True,
                                 text=True, timeout=300, cwd=build)
            if run.returncode != 0:
                print(f"{binary.name}: cannot list its tests (exit {run.returncode})")
                return 1
            listings[binary.name] = run.stdout
        shown = subprocess.run(["ctest", "--show-only=json-v1"], capture_output=True, text=True,
                               timeout=600, cwd=build, check=True)
        tests = json.loads(shown.stdout)["tests"]
    else:
        listings = json.loads(pathlib.Path(args.listing).read_text())
        tests = json.loads(pathlib.Path(args.ctest_json).read_text())["tests"]
    lost = missing(listings, tests)
    for line in lost:
        print(f"{line}: no ctest entry runs this suite")
    if not lost:
        print(f"every suite of {len(listings)} test binaries has a ctest entry")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
