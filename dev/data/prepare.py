#!/usr/bin/env python3
"""Turns text into token shards the trainer reads (llm.c's shard format), plus a tokenizer file.

    python3 dev/data/prepare.py --tokenizer gpt2 --out-dir data/austen            # Jane Austen
    python3 dev/data/prepare.py --corpus fortunes --tokenizer byte --out-dir data/fortunes
    python3 dev/data/prepare.py --input my_texts/ --tokenizer gpt2 --out-dir data/mine

Writes into --out-dir (NAME = the folder's name unless --name):
    NAME_train_000000.bin, ...   training shards
    NAME_val_000000.bin, ...     validation shards
    tokenizer.bin                the tokenizer file (format: dev/data/tokenizer.py)
A shard is a header of 256 int32 (little-endian): [0] 20240520 magic, [1] 1 version, [2] number
of tokens, the rest 0; then that many uint16 tokens.

Token stream: every document is preceded by the end-of-text token (gpt2: 50256 <|endoftext|>;
byte: 0), so documents are separated by it and the first one starts like all the others
(a sample generated from a lone end-of-text token starts a new document). Text that happens
to spell "<|endoftext|>" is encoded as ordinary text, never as the separator.

Train/val split: the stream is cut into consecutive chunks of C tokens, C = --val-chunk (or
less when the stream is small, so that val gets a chunk at all), and chunk c goes to val when
floor((c+1) * f) > floor(c * f), f = --val-frac: every (1/f)-th chunk, spread evenly over the
whole corpus (every book contributes), the rest to train in order. Each split is then cut into
shards of at most --shard-tokens tokens.
"""

import argparse
import array
import math
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpora  # noqa: E402
import tokenizer as tokenizers  # noqa: E402

SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_INTS = 20240520, 1, 256
MAX_SHARD_TOKENS = 2**31 - 1  # the header stores the count as an int32


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def write_atomically(path, parts):
    """Writes the byte strings in parts to path through a temporary file and a rename, so an
    interrupted run never leaves a partial file under the final name."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for p in parts:
            f.write(p)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_shard(path, tokens):
    header = [SHARD_MAGIC, SHARD_VERSION, len(tokens)] + [0] * (SHARD_HEADER_INTS - 3)
    body = array.array("H", tokens)
    if sys.byteorder != "little":
        body.byteswap()
    write_atomically(path, [struct.pack(f"<{SHARD_HEADER_INTS}i", *header), body.tobytes()])


def tokenize_documents(docs, tok):
    """The token stream: eot, doc 0, eot, doc 1, ... as an array of uint16."""
    total_chars = sum(len(d) for d in docs)
    stream = array.array("H")
    done_chars, dropped_nul, last_report, start = 0, 0, 0.0, time.time()
    for i, doc in enumerate(docs):
        if tok.kind == tokenizers.KIND_BYTE and "\0" in doc:
            dropped_nul += doc.count("\0")
            doc = doc.replace("\0", "")
        stream.append(tok.eot)
        stream.extend(tok.encode(doc))
        done_chars += len(doc)
        now = time.time()
        if now - last_report > 2.0 or i == len(docs) - 1:
            last_report = now
            log(
                f"  tokenized {i + 1}/{len(docs)} documents, {done_chars / 1e6:.1f}/"
                f"{total_chars / 1e6:.1f} M characters, {len(stream):,} tokens "
                f"({done_chars / 1e6 / max(now - start, 1e-9):.2f} M chars/s)"
            )
    if dropped_nul:
        log(
            f"warning: dropped {dropped_nul} NUL characters (token 0 separates documents in the "
            f"byte tokenizer)"
        )
    return stream


def split_stream(stream, val_frac, val_chunk):
    """(train, val) arrays, by the chunk rule in this file's docstring."""
    chunk = max(1, min(val_chunk, math.floor(len(stream) * val_frac)))
    train, val = array.array("H"), array.array("H")
    for c in range(math.ceil(len(stream) / chunk)):
        piece = stream[c * chunk : (c + 1) * chunk]
        (val if math.floor((c + 1) * val_frac) > math.floor(c * val_frac) else train).extend(piece)
    return train, val


def write_split(out_dir, name, split, tokens, shard_tokens):
    """Writes NAME_SPLIT_000000.bin, ... of at most shard_tokens tokens each."""
    paths = []
    for k, first in enumerate(range(0, len(tokens), shard_tokens)):
        path = os.path.join(out_dir, f"{name}_{split}_{k:06d}.bin")
        write_shard(path, tokens[first : first + shard_tokens])
        log(f"wrote {path}: {min(shard_tokens, len(tokens) - first):,} tokens")
        paths.append(path)
    return paths


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the top of dev/data/prepare.py for the formats.",
    )
    p.add_argument(
        "--corpus",
        choices=["janeausten", "fortunes"],
        default="janeausten",
        help="built-in corpus, fetched from Debian (default janeausten)",
    )
    p.add_argument(
        "--input",
        metavar="PATH",
        help="a text file (one document) or a folder (one document per file) "
        "instead of a built-in corpus",
    )
    p.add_argument(
        "--tokenizer",
        choices=["gpt2", "byte"],
        default="gpt2",
        help="gpt2: GPT-2 BPE, vocab 50257; byte: vocab 256 (default gpt2)",
    )
    p.add_argument("--out-dir", required=True, help="output folder, e.g. data/austen")
    p.add_argument("--name", help="shard name prefix (default: the output folder's name)")
    p.add_argument(
        "--val-frac",
        type=float,
        default=0.05,
        help="fraction of tokens for validation, 0 < f < 1 (default 0.05)",
    )
    p.add_argument(
        "--val-chunk", type=int, default=4096, help="tokens per train/val chunk (default 4096)"
    )
    p.add_argument(
        "--shard-tokens",
        type=int,
        default=100_000_000,
        help="most tokens in one shard (default 100000000)",
    )
    p.add_argument(
        "--cache-dir",
        default="data/cache",
        help="where Debian packages are downloaded and unpacked (default data/cache)",
    )
    args = p.parse_args(argv)
    if not 0 < args.val_frac < 1:
        p.error(f"--val-frac must be between 0 and 1 (exclusive), got {args.val_frac}")
    if args.val_chunk < 1:
        p.error(f"--val-chunk must be positive, got {args.val_chunk}")
    if not 1 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        p.error(f"--shard-tokens must be in 1..{MAX_SHARD_TOKENS}, got {args.shard_tokens}")
    return args


def main(argv=None):
    args = parse_args(argv)
    name = args.name or os.path.basename(os.path.normpath(args.out_dir))
    t0 = time.time()
    try:
        tok = tokenizers.make_tokenizer(args.tokenizer)
        if args.input:
            log(f"reading {args.input}")
            docs = corpora.path_documents(args.input)
        else:
            log(f"reading the {args.corpus} corpus")
            docs = (
                corpora.janeausten_documents
                if args.corpus == "janeausten"
                else corpora.fortunes_documents
            )(args.cache_dir)
    except (OSError, ValueError, RuntimeError) as e:
        log(f"error: {e}")
        return 1
    log(
        f"{len(docs)} documents, {sum(len(d) for d in docs) / 1e6:.2f} M characters; "
        f"tokenizing with {args.tokenizer} (vocab {tok.vocab_size}, end-of-text {tok.eot})"
    )
    stream = tokenize_documents(docs, tok)
    train, val = split_stream(stream, args.val_frac, args.val_chunk)
    if not train or not val:
        log(f"error: {len(stream)} tokens are too few to split into train and val")
        return 1

    os.makedirs(args.out_dir, exist_ok=True)
    # Shards of an earlier run would match the trainer's pattern: remove them first.
    stale = [
        f
        for f in os.listdir(args.out_dir)
        if f.startswith((f"{name}_train_", f"{name}_val_")) and f.endswith(".bin")
    ]
    for f in stale:
        os.remove(os.path.join(args.out_dir, f))
    if stale:
        log(f"removed {len(stale)} shards of an earlier run from {args.out_dir}")
    write_split(args.out_dir, name, "train", train, args.shard_tokens)
    write_split(args.out_dir, name, "val", val, args.shard_tokens)
    tok_path = os.path.join(args.out_dir, "tokenizer.bin")
    write_atomically(tok_path, [tokenizers.tokenizer_file_bytes(tok)])
    log(f"wrote {tok_path}")
    log(
        f"done in {time.time() - t0:.1f} s: {len(train):,} train tokens, {len(val):,} val tokens "
        f"({len(val) / len(stream):.1%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
