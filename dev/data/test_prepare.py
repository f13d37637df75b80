#!/usr/bin/env python3
"""Checks data preparation end to end:

- the R lazy-load reader on the real janeaustenr package: six novels, 73,422 lines in all (the
  row count of janeaustenr's austen_books(), as published), each opening with its title;
  damaged records are rejected with a clear error;
- prepare.py on a folder of small documents, for both tokenizers: shard headers and sizes,
  shards no longer than --shard-tokens, the val fraction, and - re-assembling train and val
  chunks by the documented rule - a stream that is exactly end-of-text + tokens of each
  document, which decodes back to the documents; stale shards of an earlier run removed;
  NUL dropped for the byte tokenizer; an empty folder and a bad --val-frac rejected;
- prepare.py on Jane Austen with gpt2: token count and split sizes.
Plain script: prints one line per check and `N passed, N failed`; exits 1 on any failure.
"""

import array
import gzip
import math
import os
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import corpora  # noqa: E402
import tokenizer as tokenizers  # noqa: E402

CACHE = os.path.join(ROOT, "data", "cache")
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def expect_error(name, fn, needle):
    try:
        fn()
        check(name, False, "no error raised")
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        check(name, needle in str(e), str(e))


def prepare(*args):
    return subprocess.run(
        [sys.executable, os.path.join(HERE, "prepare.py"), *args], capture_output=True, text=True
    )


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    tokens = array.array("H", data[1024:])
    return header, tokens


def shards(out_dir, name, split):
    return sorted(
        os.path.join(out_dir, f)
        for f in os.listdir(out_dir)
        if f.startswith(f"{name}_{split}_") and f.endswith(".bin")
    )


def test_janeausten():
    root = corpora.fetch_debian_package("r-cran-janeaustenr", CACHE)
    data_dir = os.path.join(root, corpora.JANEAUSTEN_DATA)
    books = corpora.read_lazyload_db(data_dir)
    titles = {
        "emma": "EMMA",
        "mansfieldpark": "MANSFIELD PARK",
        "northangerabbey": "NORTHANGER ABBEY",
        "persuasion": "Persuasion",
        "prideprejudice": "PRIDE AND PREJUDICE",
        "sensesensibility": "SENSE AND SENSIBILITY",
    }
    lines = sum(len(v) for v in books.values())
    check(
        "janeaustenr: six novels, 73,422 lines",
        set(books) == set(titles) and lines == 73422,
        f"{sorted(books)}, {lines} lines",
    )
    check(
        "janeaustenr: each novel opens with its title",
        all(books[k][0] == t for k, t in titles.items()),
    )
    chars = sum(len(d) for d in corpora.janeausten_documents(CACHE))
    check("janeaustenr: about 4.0 M characters", 3.9e6 < chars < 4.1e6, f"{chars:,}")

    # Damaged copies of the database.
    with open(os.path.join(data_dir, "Rdata.rdb"), "rb") as f:
        rdb = f.read()
    with open(os.path.join(data_dir, "Rdata.rdx"), "rb") as f:
        rdx = f.read()
    with tempfile.TemporaryDirectory() as tmp:

        def write(name, data):
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)

        write("Rdata.rdx", rdx)
        write("Rdata.rdb", rdb[: len(rdb) // 2])
        expect_error(
            "R reader rejects a truncated .rdb", lambda: corpora.read_lazyload_db(tmp), "truncated"
        )
        size = struct.unpack(">I", rdb[:4])[0]
        write("Rdata.rdb", struct.pack(">I", size + 1) + rdb[4:])
        expect_error(
            "R reader rejects a wrong record length",
            lambda: corpora.read_lazyload_db(tmp),
            "header says",
        )
        write("Rdata.rdb", rdb[:4] + b"\x00" * 8 + rdb[12:])
        expect_error(
            "R reader rejects a broken zlib stream", lambda: corpora.read_lazyload_db(tmp), "zlib"
        )
        raw = zlib.decompress(rdb[4:352043])
        bad = b"A\n" + raw[2:]
        expect_error(
            "R reader rejects a non-XDR serialization",
            lambda: corpora.read_r_serialized(bad, "test"),
            "not an XDR",
        )
        expect_error(
            "R reader rejects a cut serialization",
            lambda: corpora.read_r_serialized(raw[:1000], "test"),
            "truncated",
        )
        write("Rdata.rdx", gzip.compress(zlib.decompress(rdb[4:352043])))
        write("Rdata.rdb", rdb)
        expect_error(
            "R reader rejects an index that is not one",
            lambda: corpora.read_lazyload_db(tmp),
            "not a lazy-load index",
        )


def reassemble(train, val, val_frac, chunk):
    """The stream prepare.py split, rebuilt from its train and val parts by the chunk rule."""
    stream, t, v, c = array.array("H"), 0, 0, 0
    while t < len(train) or v < len(val):
        if math.floor((c + 1) * val_frac) > math.floor(c * val_frac):
            stream.extend(val[v : v + chunk])
            v += chunk
        else:
            stream.extend(train[t : t + chunk])
            t += chunk
        c += 1
    return stream


def test_prepare_folder():
    docs = [
        "First document.\nIt has two lines, and it's short.\n",
        "Second: numbers 1234, unicode café 中文 😀, spaces   and\ttabs.\n" * 20,
        "Third, with a NUL\0 byte inside.\n" * 5,
        "x" * 3000,
    ]
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(os.path.join(src, "sub"))
        paths = [
            os.path.join(src, "a.txt"),
            os.path.join(src, "b.txt"),
            os.path.join(src, "sub", "c.txt"),
            os.path.join(src, "sub", "d.txt"),
        ]
        for p, d in zip(paths, docs):
            with open(p, "w", encoding="utf-8") as f:
                f.write(d)
        for name in ("gpt2", "byte"):
            tok = tokenizers.make_tokenizer(name)
            out = os.path.join(tmp, f"out_{name}")
            os.makedirs(out)
            stale = os.path.join(out, "mine_train_000099.bin")
            open(stale, "wb").close()
            frac, chunk, per_shard = 0.2, 50, 700
            proc = prepare(
                "--input",
                src,
                "--tokenizer",
                name,
                "--out-dir",
                out,
                "--name",
                "mine",
                "--val-frac",
                str(frac),
                "--val-chunk",
                str(chunk),
                "--shard-tokens",
                str(per_shard),
            )
            check(
                f"{name}: prepare.py on a folder succeeds",
                proc.returncode == 0,
                proc.stderr.strip()[-300:] if proc.returncode else "",
            )
            if proc.returncode != 0:
                continue
            check(f"{name}: stale shards of an earlier run are removed", not os.path.exists(stale))
            parts = {}
            headers_ok, sizes_ok = True, True
            for split in ("train", "val"):
                parts[split] = array.array("H")
                for path in shards(out, "mine", split):
                    header, tokens = read_shard(path)
                    headers_ok &= header[:3] == (20240520, 1, len(tokens)) and not any(header[3:])
                    sizes_ok &= 0 < len(tokens) <= per_shard
                    parts[split].extend(tokens)
            check(f"{name}: shard headers are magic, version, count", headers_ok)
            check(
                f"{name}: shards hold at most --shard-tokens",
                sizes_ok and len(shards(out, "mine", "train")) > 1,
                f"{len(shards(out, 'mine', 'train'))} train shards",
            )
            stream = reassemble(parts["train"], parts["val"], frac, chunk)
            expected = array.array("H")
            for d in docs:
                expected.append(tok.eot)
                expected.extend(tok.encode(d.replace("\0", "") if name == "byte" else d))
            check(
                f"{name}: train + val chunks rebuild eot + document tokens exactly",
                stream == expected,
                f"{len(stream)} tokens",
            )
            share = len(parts["val"]) / len(expected)
            check(
                f"{name}: val holds about --val-frac of the tokens",
                abs(share - frac) < chunk / len(expected) + 1e-9,
                f"{share:.3f}",
            )
            pieces = tok.decode(stream).split(tokenizers.EOT_TEXT.encode())
            want = [d.replace("\0", "") if name == "byte" else d for d in docs]
            check(
                f"{name}: decoding gives the documents back",
                pieces == [b""] + [d.encode() for d in want],
            )
            with open(os.path.join(out, "tokenizer.bin"), "rb") as f:
                header = struct.unpack("<16i", f.read(64))
            check(
                f"{name}: tokenizer.bin header",
                header[:6]
                == (
                    tokenizers.TOKENIZER_MAGIC,
                    1,
                    tok.kind,
                    tok.vocab_size,
                    tok.eot,
                    len(tok.merges),
                ),
            )
            if name == "byte":
                check(
                    "byte: the 5 NUL characters are dropped with a warning",
                    "dropped 5 NUL" in proc.stderr,
                )
        os.makedirs(os.path.join(tmp, "empty"))
        proc = prepare("--input", os.path.join(tmp, "empty"), "--out-dir", os.path.join(tmp, "o"))
        check(
            "an empty input folder is rejected",
            proc.returncode != 0 and "holds no files" in proc.stderr,
            proc.stderr.strip().splitlines()[-1],
        )
        proc = prepare(
            "--input", paths[0], "--out-dir", os.path.join(tmp, "o"), "--val-frac", "1.5"
        )
        check(
            "--val-frac 1.5 is rejected",
            proc.returncode != 0 and "--val-frac" in proc.stderr,
            proc.stderr.strip().splitlines()[-1],
        )
        proc = prepare("--input", os.path.join(tmp, "missing"), "--out-dir", os.path.join(tmp, "o"))
        check(
            "a missing --input is rejected",
            proc.returncode != 0 and "no such file" in proc.stderr,
            proc.stderr.strip().splitlines()[-1],
        )


def test_prepare_janeausten():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "austen")
        proc = prepare("--tokenizer", "gpt2", "--out-dir", out, "--cache-dir", CACHE)
        check(
            "janeausten gpt2: prepare.py succeeds",
            proc.returncode == 0,
            proc.stderr.strip()[-300:] if proc.returncode else "",
        )
        if proc.returncode != 0:
            return
        train = sum(len(read_shard(p)[1]) for p in shards(out, "austen", "train"))
        val = sum(len(read_shard(p)[1]) for p in shards(out, "austen", "val"))
        check(
            "janeausten gpt2: ~1.0 M tokens, 5% val",
            0.95e6 < train + val < 1.05e6 and abs(val / (train + val) - 0.05) < 0.005,
            f"{train:,} train + {val:,} val",
        )


def main():
    test_janeausten()
    test_prepare_folder()
    test_prepare_janeausten()
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
