#!/usr/bin/env python3
"""tools/books.py without the network: its reader of R's serialization and lazy-load databases,
the Debian archive, the KJV books, and the corpus it writes (split, metadata, replacement, the
refusals), each on inputs built here by hand."""
import csv
import gzip
import hashlib
import io
import pathlib
import struct
import sys
import tarfile
import tempfile
import zlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import books  # noqa: E402


def i32(v):
    return struct.pack(">i", v)


def charsxp(text):
    if text is None:
        return i32(9) + i32(-1)
    raw = text.encode("utf-8")
    return i32(9) + i32(len(raw)) + raw


def strsxp(items, attr=b""):
    flags = 16 | ((1 << 9) if attr else 0)
    return i32(flags) + i32(len(items)) + b"".join(charsxp(t) for t in items) + attr


def symbol(name):
    return i32(1) + charsxp(name)


def names_attr(names):
    # A pair list holding one tagged cell: names = c(...); then the end of the list.
    return i32(2 | (1 << 10)) + symbol("names") + strsxp(names) + i32(254)


def serialized(body, version=3):
    head = b"X\n" + i32(version) + i32(0x40200) + i32(0x30500)
    if version == 3:
        head += i32(5) + b"UTF-8"
    return head + body


def named_list(mapping):
    items = b"".join(v for v in mapping.values())
    return i32(19 | (1 << 9)) + i32(len(mapping)) + items + names_attr(list(mapping))


def test_r_reader():
    value = books.RReader(serialized(strsxp(["EMMA", "", None, "caf\u00e9"]))).read()
    assert value == ["EMMA", "", None, "caf\u00e9"], value
    # Version 2, a named list, an integer vector, a reference to a symbol read before.
    body = named_list({"a": strsxp(["x"]), "b": i32(13) + i32(2) + i32(7) + i32(-1)})
    assert books.RReader(serialized(body, 2)).read() == {"a": ["x"], "b": [7, -1]}
    pair = i32(2 | (1 << 10)) + symbol("k") + strsxp(["v"]) + \
        i32(2 | (1 << 10)) + i32(255 | (1 << 8)) + strsxp(["w"]) + i32(254)
    assert books.RReader(serialized(pair)).read() == [("k", ["v"]), ("k", ["w"])]
    for bad in (serialized(strsxp(["EMMA"]))[:-2], b"A\n" + serialized(b"")[2:],
                serialized(i32(99))):
        try:
            books.RReader(bad).read()
        except books.BuildError:
            continue
        raise AssertionError(f"accepted {bad!r}")


def lazyload(objects):
    rdb, variables = b"", {}
    for name, body in objects.items():
        raw = serialized(body)
        chunk = struct.pack(">I", len(raw)) + zlib.compress(raw)
        variables[name] = i32(14) + i32(2) + struct.pack(">2d", len(rdb), len(chunk))
        rdb += chunk
    index = named_list({"variables": named_list(variables), "compressed": i32(10) + i32(1) +
                        i32(1)})
    return gzip.compress(serialized(index)), rdb


def test_lazyload():
    rdx, rdb = lazyload({"emma": strsxp(["EMMA", "by Jane"]), "persuasion": strsxp(["P"])})
    assert books.read_r_lazyload(rdx, rdb) == {"emma": ["EMMA", "by Jane"], "persuasion": ["P"]}
    # A chunk whose length header disagrees with its data is refused.
    broken = rdb[:3] + bytes([rdb[3] ^ 1]) + rdb[4:]
    try:
        books.read_r_lazyload(rdx, broken)
    except books.BuildError as e:
        assert "bytes" in str(e), e
    else:
        raise AssertionError("a damaged object was read")


def ar_archive(members):
    out = b"!<arch>\n"
    for name, data in members:
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n"
        out += header.encode("ascii") + data + (b"\n" if len(data) % 2 else b"")
    return out


def test_deb_member():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        data = b"hello"
        info = tarfile.TarInfo("./usr/x.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    deb = ar_archive([("debian-binary", b"2.0\n"), ("control.tar.xz", b"ctl"),
                      ("data.tar.xz", buf.getvalue())])
    assert books.deb_member(deb, "data.tar").extractfile("./usr/x.txt").read() == b"hello"
    for bad in (b"not an archive", ar_archive([("debian-binary", b"2.0\n")])):
        try:
            books.deb_member(bad, "data.tar")
        except books.BuildError:
            continue
        raise AssertionError("accepted a broken package")


def test_checked_names_a_changed_download():
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "p.tar.gz"
        path.write_bytes(b"abc")
        assert books.checked(path, hashlib.sha256(b"abc").hexdigest()) == b"abc"
        try:
            books.checked(path, "0" * 64)
        except books.BuildError as e:
            assert str(path) in str(e) and "changed" in str(e), e
        else:
            raise AssertionError("a changed download was accepted")


def test_kjv_books():
    lines = []
    for b in range(66):
        name = f"{b % 3 + 1}Bk" if b % 2 else f"Book{chr(65 + b % 26)}{b}"
        name = "".join(c for c in name if not c.isdigit() or name.index(c) == 0)
        lines += [f"{name}{b + 1}:1 First verse of {b}.", f"{name}{b + 1}:2 Second."]
    text = "\n".join(lines) + "\n\n"
    got = books.kjv_books(text)
    assert len(got) == 66
    assert got[0][1] == ["First verse of 0.", "Second."]
    for bad in ("\n".join(lines[:-2]), text + "no reference here\n"):
        try:
            books.kjv_books(bad)
        except books.BuildError:
            continue
        raise AssertionError("accepted a wrong bible text")


def test_write_corpus():
    books.VALIDATION, books.TEST = {"v"}, {"t"}
    docs = [("a", "A", "X", "src", "one two\nthree\n\n"), ("v", "V", "", "src", "four"),
            ("t", "T", "", "src", "caf\u00e9 five six")]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "books"
        out.mkdir()
        (out / "stale.txt").write_text("from an earlier build")
        rows = books.write_corpus(docs, str(out))
        assert not (out / "stale.txt").exists(), "the old folder was not replaced"
        assert sorted(p.name for p in out.iterdir()) == ["metadata.csv", "test", "train",
                                                         "validation"]
        assert (out / "train" / "a.txt").read_text() == "one two\nthree\n"
        assert (out / "validation" / "v.txt").read_text() == "four\n"
        meta = list(csv.DictReader(open(out / "metadata.csv", encoding="utf-8")))
        assert [(m["id"], m["split"], m["words"]) for m in meta] == \
            [("a", "train", "3"), ("v", "validation", "1"), ("t", "test", "3")], meta
        assert meta[2]["bytes"] == str(len("caf\u00e9 five six\n".encode("utf-8")))
        assert rows[0][7] == hashlib.sha256(b"one two\nthree\n").hexdigest()
        for bad in (docs + [docs[0]], docs[:1] + docs[2:], docs + [("e", "E", "", "s", "\n \n")]):
            try:
                books.write_corpus(bad, str(out))
            except books.BuildError:
                continue
            raise AssertionError("wrote a corpus it should refuse")
        assert (out / "train" / "a.txt").exists(), "a refused build touched the corpus"
        assert not [p for p in pathlib.Path(tmp).iterdir() if p.name.startswith(".books-")]


if __name__ == "__main__":
    for name, test in list(globals().items()):
        if name.startswith("test_"):
            test()
            print(f"ok {name}")
