#!/usr/bin/env python3
"""Peak memory and speed of txl-prepare and txl-train as the corpus grows (issue 29, item 5).

Builds PG-19-layout corpora of about the given sizes by repeating the train books of the books
corpus (data/corpora/books, built by tools/setup.sh) under new ids; validation and test stay the
books' own. For each size it runs, with a fresh cache:
  txl-prepare  word tokenizer: reads, builds the vocabulary, encodes, writes the cache
  txl-train    a few steps of a small model on that cache, then validation
and reports each program's peak resident memory (the kernel's ru_maxrss of that child, what
/usr/bin/time -v prints as "Maximum resident set size") and the encoding speed txl-prepare
reports. Programs are run without a shell.

  python3 tools/measure_streaming.py --sizes 0.1 1 4 --work /tmp/txl-stream

With --ranks N, txl-train runs as N data-parallel processes on this machine (torchrun's
variables set by this script, Gloo) and the table gives the largest peak RSS of a rank.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOKS = ROOT / "data" / "corpora" / "books"


def build_corpus(out: Path, gigabytes: float) -> int:
    """A PG-19 layout of about `gigabytes` GB of train books; returns the train bytes."""
    target = int(gigabytes * 1e9)
    stamp = out / ".txl-size"
    if stamp.exists() and stamp.read_text() == str(target):
        return sum(f.stat().st_size for f in (out / "train").iterdir())
    if out.exists():
        shutil.rmtree(out)
    books = sorted((BOOKS / "train").glob("*.txt"))
    if not books:
        sys.exit(f"no books in {BOOKS}/train: run tools/setup.sh first")
    for split in ("validation", "test"):
        shutil.copytree(BOOKS / split, out / split)
    (out / "train").mkdir(parents=True)
    written, copy = 0, 0
    while written < target:
        for index, book in enumerate(books):
            if written >= target:
                break
            name = out / "train" / f"{copy * 1000 + index + 1}.txt"
            shutil.copyfile(book, name)
            written += name.stat().st_size
        copy += 1
    stamp.write_text(str(target))
    return written


def run(argv, log: Path, ranks: int = 1, port: int = 29517):
    """Runs argv (no shell) as `ranks` processes of one job; returns (the largest peak RSS of a
    process in bytes, seconds, rank 0's output)."""
    start = time.monotonic()
    children, outputs = [], []
    for rank in range(ranks):
        env = dict(os.environ)
        if ranks > 1:
            env.update(RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port))
        path = log if rank == 0 else log.with_suffix(f".rank{rank}.log")
        outputs.append(open(path, "w"))
        children.append(subprocess.Popen(argv, stdout=outputs[-1], stderr=subprocess.STDOUT,
                                         cwd=ROOT, env=env))
    peak, failed = 0, []
    for rank, child in enumerate(children):
        _, status, usage = os.wait4(child.pid, 0)
        outputs[rank].close()
        peak = max(peak, usage.ru_maxrss * 1024)
        if os.waitstatus_to_exitcode(status) != 0:
            failed.append(rank)
    seconds = time.monotonic() - start
    text = log.read_text()
    if failed:
        sys.exit(f"{argv[0]} failed on rank(s) {failed} (see {log}):\n{text[-2000:]}")
    return peak, seconds, text


def settings(corpus: Path, cache: Path, run_dir: Path):
    return [
        "--set", "data.corpus=pg19", "--set", f"data.path={corpus}",
        "--set", f"data.cache_dir={cache}", "--set", "data.tokenizer.type=word",
        "--set", "data.tokenizer.min_count=2", "--set", f"run.output_dir={run_dir}",
        "--set", "train.max_steps=20", "--set", "train.eval_interval=20",
        "--set", "train.eval_max_tokens=2000", "--set", "train.checkpoint_interval=20",
        "--set", "train.warmup_steps=5", "--set", "eval.max_tokens=2000",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.1, 1.0, 4.0],
                        help="corpus sizes in GB (default 0.1 1 4)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/txl-stream"),
                        help="folder for the corpora, caches and runs (default /tmp/txl-stream)")
    parser.add_argument("--build", type=Path, default=ROOT / "build", help="txl build folder")
    parser.add_argument("--config", type=Path, default=ROOT / "experiments" / "pg19_base.yaml")
    parser.add_argument("--ranks", type=int, default=1,
                        help="txl-train as this many data-parallel processes (default 1)")
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        corpus = args.work / f"corpus-{size:g}gb"
        train_bytes = build_corpus(corpus, size)
        cache = args.work / f"cache-{size:g}gb"
        shutil.rmtree(cache, ignore_errors=True)
        run_dir = args.work / f"run-{size:g}gb"
        shutil.rmtree(run_dir, ignore_errors=True)
        common = ["--config", str(args.config)] + settings(corpus, cache, run_dir)
        prep_rss, prep_s, out = run([str(args.build / "bin" / "txl-prepare")] + common,
                                    args.work / f"prepare-{size:g}gb.log")
        encoding = re.search(r"encoding\s+(\d+) tokens in ([\d.]+) s \((\d+) tokens/s", out)
        train_rss, train_s, _ = run([str(args.build / "bin" / "txl-train")] + common,
                                    args.work / f"train-{size:g}gb.log", args.ranks)
        rows.append((size, train_bytes, prep_rss, prep_s, encoding, train_rss, train_s))
        print(f"{size:g} GB done", file=sys.stderr, flush=True)
    ranks = "" if args.ranks == 1 else f", the largest of {args.ranks} ranks"
    print("| corpus (train bytes) | txl-prepare peak RSS | time | tokens | encoding | "
          f"txl-train peak RSS (20 steps{ranks}) | time |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, train_bytes, prep_rss, prep_s, enc, train_rss, train_s in rows:
        tokens = f"{int(enc.group(1)):,}" if enc else "?"
        speed = f"{int(enc.group(3)) / 1e6:.1f}M tokens/s" if enc else "?"
        print(f"| {size:g} GB ({train_bytes:,}) | {prep_rss / 2**20:,.0f} MiB | {prep_s:.0f} s | "
              f"{tokens} | {speed} | {train_rss / 2**20:,.0f} MiB | {train_s:.0f} s |")


if __name__ == "__main__":
    main()
