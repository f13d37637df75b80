#!/usr/bin/env python3
"""Writes the inputs of the C++ data tests (dev/cpu/tests/data_*.cu) into --out.

--what tokenizer (for data_tokenizer.cu):
    gpt2.tok, byte.tok        tokenizer files, as prepare.py writes them
    gpt2_cases.bin            texts and the token ids our Python GPT-2 encoder gives them
    byte_cases.bin            the same for the byte tokenizer
--what prepared (for data_loader.cu):
    prepared/                 prepare.py's output for a small folder of text (byte tokenizer,
                              small shards), and prepared/stream.bin: its train split as
                              int32, for the dataloader test to compare with

Cases file: uint32 count, then per case: uint32 name length, name, uint32 text length, text,
uint32 token count, int32 tokens (all little-endian). The texts are tokenizer_cases.py's, plus
byte strings that are not valid UTF-8: Python reads them with errors="surrogateescape", so each
invalid byte becomes one lone surrogate, which the pattern treats as an "other" symbol - the
rule llmc/tokenizer.h follows for invalid bytes.
"""

import argparse
import array
import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer as tokenizers  # noqa: E402
import tokenizer_cases  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

INVALID_UTF8 = [
    b"ab\xffcd",
    b"\xff\xfe",
    b" \x80x",
    b"caf\xc3",
    b"\xe4\xb8A \xe4\xb8\xad",
    b"\xed\xa0\x80 surrogate",
    b"\xc0\xaf overlong",
    b"\xf4\x90\x80\x80 too big",
    b"it\xe2\x80s",
    b"'\xffs",
    b"  \xff",
    b"x\n\xfe\n",
]


def random_bytes(seed=99, count=200):
    """Byte strings mixing ASCII, valid multi-byte characters and stray bytes."""
    rng = random.Random(seed)
    pieces = [
        b"a",
        b"Z",
        b"7",
        b" ",
        b" ",
        b"\n",
        b"'",
        b"s",
        b".",
        "é".encode(),
        "中".encode(),
        "😀".encode(),
        b"\x80",
        b"\xc3",
        b"\xe4\xb8",
        b"\xff",
        b"\xf0\x9f",
    ]
    return [b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(count)]


def encode_bytes(tok, raw):
    """Our Python encoder on raw bytes, invalid UTF-8 included (see the docstring)."""
    if tok.kind == tokenizers.KIND_BYTE:
        return list(raw)
    return tok.encode(raw.decode("utf-8", errors="surrogateescape"), errors="surrogateescape")


def write_cases(path, tok, cases):
    parts = [struct.pack("<I", len(cases))]
    for name, raw in cases:
        ids = encode_bytes(tok, raw)
        parts += [
            struct.pack("<I", len(name)),
            name.encode(),
            struct.pack("<I", len(raw)),
            raw,
            struct.pack("<I", len(ids)),
            struct.pack(f"<{len(ids)}i", *ids),
        ]
    with open(path, "wb") as f:
        f.write(b"".join(parts))


def write_tokenizer_inputs(args):
    cases = [(n, t.encode("utf-8")) for n, t in tokenizer_cases.all_texts(args.cache_dir)]
    cases += [(f"invalid utf-8 {i}", b) for i, b in enumerate(INVALID_UTF8)]
    cases += [(f"random bytes {i}", b) for i, b in enumerate(random_bytes())]
    for name, tok in (("gpt2", tokenizers.Gpt2Tokenizer()), ("byte", tokenizers.ByteTokenizer())):
        with open(os.path.join(args.out, f"{name}.tok"), "wb") as f:
            f.write(tokenizers.tokenizer_file_bytes(tok))
        # The byte tokenizer's cases skip the novels: they add nothing to a 1:1 map but time.
        write_cases(
            os.path.join(args.out, f"{name}_cases.bin"),
            tok,
            [c for c in cases if name == "gpt2" or not c[0].startswith("janeausten")],
        )
    print(f"wrote {args.out}: {len(cases)} tokenizer cases")


def write_prepared_inputs(args):
    texts = os.path.join(args.out, "texts")
    os.makedirs(texts, exist_ok=True)
    for i, t in enumerate(tokenizer_cases.TRICKY):
        with open(os.path.join(texts, f"{i:03d}.txt"), "w", encoding="utf-8") as f:
            f.write(t * 7)
    prepared = os.path.join(args.out, "prepared")
    subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "prepare.py"),
            "--input",
            texts,
            "--tokenizer",
            "byte",
            "--out-dir",
            prepared,
            "--name",
            "tiny",
            "--val-frac",
            "0.1",
            "--val-chunk",
            "64",
            "--shard-tokens",
            "1000",
        ],
        check=True,
        stderr=subprocess.DEVNULL,
    )
    train = array.array("i")
    for f in sorted(os.listdir(prepared)):
        if f.startswith("tiny_train_"):
            with open(os.path.join(prepared, f), "rb") as fh:
                train.extend(array.array("H", fh.read()[1024:]).tolist())
    with open(os.path.join(prepared, "stream.bin"), "wb") as f:
        f.write(train.tobytes())
    print(f"wrote {prepared}: {len(train)} train tokens")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--what",
        choices=["tokenizer", "prepared"],
        required=True,
        help="which test's inputs to write",
    )
    p.add_argument(
        "--cache-dir",
        default=os.path.join(ROOT, "data", "cache"),
        help="Debian package cache (Jane Austen)",
    )
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.what == "tokenizer":
        write_tokenizer_inputs(args)
    else:
        write_prepared_inputs(args)


if __name__ == "__main__":
    main()
