#!/usr/bin/env python3
"""Checks scripts/plot.py:

- a log in llmc/logger.h's format (header with unigram_val_loss, train lines with lr, val
  lines, sample lines, a null loss) gives a PNG: the file exists, has the PNG signature, an
  IHDR chunk whose CRC is right and whose size is the figure's (900 x 700 at 100 dpi), an IEND
  chunk at the end, and a plausible size for a drawn figure;
- the default output name is the log's with .png; a log with only val lines still plots;
- malformed logs fail with a message naming the line (bad JSON, a non-object, a line without
  a step after the header, a step that is not an integer, a loss that is not a number, a
  corrupt last line that ends with a newline), and so do a missing file, a binary file and a
  log with nothing to plot;
- a last line cut short (no newline; cut inside the JSON or inside a UTF-8 character) is
  skipped with a warning naming it and the rest plots; a whole last line without its newline
  is plotted, without a warning;
- a log with a rewind plots each step once, with the value of its last line (the steps trained
  again);
- without matplotlib (an import that fails, forced with a stub package on PYTHONPATH) it says
  to pip install matplotlib.
Plain script: prints one line per check and `N passed, N failed`; exits 1 on any failure.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import zlib

from testlib import FAILED, PASSED, check

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "plot.py")


def run_plot(args, env=None):
    proc = subprocess.run([sys.executable, PLOT] + args, capture_output=True, text=True,
                          env=env, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def write_log(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def png_problems(path, width, height):
    """What is wrong with the PNG at path (empty list: nothing)."""
    data = open(path, "rb").read()
    problems = []
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return ["no PNG signature"]
    length, kind = struct.unpack(">I4s", data[8:16])
    if kind != b"IHDR" or length != 13:
        return ["first chunk is %r, not IHDR" % kind]
    body = data[16:29]
    (crc,) = struct.unpack(">I", data[29:33])
    if zlib.crc32(kind + body) != crc:
        problems.append("IHDR CRC mismatch")
    w, h = struct.unpack(">II", body[:8])
    if (w, h) != (width, height):
        problems.append("size %dx%d, want %dx%d" % (w, h, width, height))
    if data[-12:] != b"\x00\x00\x00\x00IEND\xaeB`\x82":
        problems.append("no IEND chunk at the end")
    if not 15000 < len(data) < 2000000:
        problems.append("implausible file size %d bytes" % len(data))
    return problems


def sample_log(steps):
    lines = [{"model": "gpt2", "layers": 2, "unigram_val_loss": 7.3}]
    for s in range(steps):
        lr = 6e-4 * min(1.0, (s + 1) / 10) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / steps)))
        loss = 10.8 * math.exp(-s / 40) + 3.2
        lines.append({"step": s, "train_loss": None if s == 57 else loss, "lr": lr,
                      "grad_norm": 1.0, "ms": 12.5, "tok_per_s": 40000, "mfu": 0.31})
        if s % 20 == 0:
            lines.append({"step": s, "val_loss": loss + 0.1})
        if s % 50 == 0:
            lines.append({"step": s, "sample": "It is a truth universally \u2019 acknowledged\n\ufffd"})
    return lines


def run_checks(tmp):
    log = os.path.join(tmp, "run.jsonl")
    write_log(log, sample_log(200))
    out = os.path.join(tmp, "figure.png")
    rc, output = run_plot([log, "--out", out])
    check(rc == 0 and os.path.exists(out), "plot.py draws a log", output.strip())
    if os.path.exists(out):
        problems = png_problems(out, 900, 700)
        check(not problems, "the PNG is valid, 900x700, %d bytes" % os.path.getsize(out),
              "; ".join(problems))
    rc, output = run_plot([log])
    default = os.path.join(tmp, "run.png")
    check(rc == 0 and os.path.exists(default) and not png_problems(default, 900, 700),
          "the default output is the log's name with .png", output.strip())
    val_only = os.path.join(tmp, "val_only.jsonl")
    write_log(val_only, [{"run": "x"}, {"step": 0, "val_loss": 5.0}, {"step": 10, "val_loss": 4.0}])
    rc, output = run_plot([val_only, "--out", os.path.join(tmp, "v.png")])
    check(rc == 0, "a log with only val_loss lines plots", output.strip())
    # a rewound run: steps 1-4, the rewind to step 2, steps 3-5 again (marked "rewinds": 1)
    rewound = os.path.join(tmp, "rewound.jsonl")
    write_log(rewound, [{"run": "x"}] + [{"step": s, "train_loss": 10.0 + s} for s in range(1, 5)] +
              [{"step": 2, "rewinds": 1, "rewind_from": 4}] +
              [{"step": s, "rewinds": 1, "train_loss": 20.0 + s} for s in range(3, 6)])
    sys.path.insert(0, HERE)
    import plot
    steps, values = plot.read_log(rewound)[1]["train_loss"]
    check(steps == [1, 2, 3, 4, 5] and values == [11.0, 12.0, 23.0, 24.0, 25.0],
          "after a rewind each step is plotted with its last line's value: %s %s" % (steps, values))

    good = [json.dumps(x) for x in sample_log(5)]
    bad_logs = [
        ("bad JSON", good[:3] + ['{"step": 3, "train_loss": 2.0'] + good[3:], ":4: not valid JSON"),
        ("a list instead of an object", good[:2] + ["[1, 2]"], ":3: expected a JSON object"),
        ("a line without step", good[:2] + ['{"train_loss": 2.0}'], ":3: a line without \"step\""),
        ("a fractional step", good[:2] + ['{"step": 1.5, "train_loss": 2.0}'], ":3: \"step\" is 1.5"),
        ("a loss that is a string", good[:2] + ['{"step": 1, "train_loss": "2.0"}'],
         ":3: \"train_loss\" is '2.0', not a number"),
        ("nothing to plot", [good[0], '{"step": 1, "lr": 0.1}'], "no train_loss or val_loss"),
        ("a corrupt last line with its newline", good + ['{"step": 9, "train_lo'],
         ":%d: not valid JSON" % (len(good) + 1)),
    ]
    for what, lines, message in bad_logs:
        path = os.path.join(tmp, "bad.jsonl")
        write_log(path, lines)
        rc, output = run_plot([path, "--out", os.path.join(tmp, "bad.png")])
        check(rc != 0 and "plot.py: error:" in output and message in output and
              "Traceback" not in output, "rejects %s" % what, output.strip())
    whole = "".join(line + "\n" for line in good).encode()
    sample_line = json.dumps({"step": 4, "sample": "caf\u00e9 \u2019"}, ensure_ascii=False).encode()
    cut_logs = [
        ("inside the JSON", whole + b'{"step": 5, "train_loss": 2.'),
        ("inside a UTF-8 character", whole + sample_line[:sample_line.index(b"\xe2") + 2]),
    ]
    for what, data in cut_logs:
        path = os.path.join(tmp, "cut.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        png = os.path.join(tmp, "cut.png")
        rc, output = run_plot([path, "--out", png])
        check(rc == 0 and "warning: %s:%d: skipping the last line, cut short" % (path, len(good) + 1)
              in output and not png_problems(png, 900, 700),
              "skips a last line cut %s, with a warning, and plots the rest" % what, output.strip())
    path = os.path.join(tmp, "no_newline.jsonl")
    with open(path, "wb") as f:
        f.write(whole + b'{"step": 5, "train_loss": "x"}')
    rc, output = run_plot([path, "--out", os.path.join(tmp, "nl.png")])
    check(rc != 0 and ":%d: \"train_loss\" is 'x'" % (len(good) + 1) in output,
          "reads a whole last line without its newline (its bad value is an error)", output.strip())
    with open(path, "wb") as f:
        f.write(whole + b'{"step": 5, "train_loss": 2.5}')
    rc, output = run_plot([path, "--out", os.path.join(tmp, "nl.png")])
    check(rc == 0 and "warning" not in output, "plots a whole last line without its newline",
          output.strip())
    rc, output = run_plot([os.path.join(tmp, "absent.jsonl")])
    check(rc != 0 and "cannot read log" in output and "No such file" in output,
          "rejects a missing file", output.strip())
    binary = os.path.join(tmp, "binary.jsonl")
    with open(binary, "wb") as f:
        f.write(b"GPT-CKPT\x01\x00\x00\x00\xff\xfe")
    rc, output = run_plot([binary])
    check(rc != 0 and "is not UTF-8 text" in output, "rejects a binary file", output.strip())

    stub = os.path.join(tmp, "stub")
    os.makedirs(os.path.join(stub, "matplotlib"))
    with open(os.path.join(stub, "matplotlib", "__init__.py"), "w") as f:
        f.write("raise ImportError('No module named matplotlib (stub)')\n")
    env = dict(os.environ, PYTHONPATH=stub)
    rc, output = run_plot([log, "--out", os.path.join(tmp, "none.png")], env=env)
    check(rc != 0 and "pip install matplotlib" in output and "Traceback" not in output,
          "without matplotlib it says how to install it", output.strip())



def main():
    with tempfile.TemporaryDirectory(prefix="test_plot_") as tmp:
        run_checks(tmp)
    print("%d passed, %d failed" % (len(PASSED), len(FAILED)))
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
