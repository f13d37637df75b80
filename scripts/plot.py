#!/usr/bin/env python3
"""Plots a training log (the JSONL file llmc/logger.h writes) into a PNG.

    python3 scripts/plot.py LOG.jsonl [--out PNG]

Top panel: train loss and validation loss against the step, with a dashed line at the unigram
baseline when the header has "unigram_val_loss" (the loss of a model that ignores context).
Bottom panel: the learning rate against the step. The PNG goes next to the log (LOG.png)
unless --out says otherwise.

The log's first line is the header (the run's configuration, no "step"); every other line has
"step" and any of "train_loss", "lr", "val_loss", "sample". null values (NaN or infinite
numbers) leave a gap. A line that is not a JSON object, or has no step, is an error that names
the line, with one exception: a last line cut short (no newline at its end, and not valid
JSON or UTF-8: the writer was stopped mid-line, e.g. by a full disk or a kill) is skipped with
a warning, so the log up to it still plots. After a rewind (--spike-rewind) the log holds the
abandoned steps and then the same steps trained again (marked "rewinds"): each step is plotted
with the value of its last line, the run as it went on.
"""
import argparse
import json
import math
import os
import sys


def die(message):
    print("plot.py: error: " + message, file=sys.stderr)
    sys.exit(1)


def read_log(path):
    """Returns (header dict, {key: ([steps], [values])}) for the plotted keys."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        die("cannot read log %s: %s" % (path, e.strerror))
    # Every line the logger writes ends with a newline; a last line without one after complete
    # lines may have been cut short. It is kept when it is whole nonetheless.
    cut_at = raw.rfind(b"\n") + 1
    body, tail = (raw[:cut_at], raw[cut_at:]) if cut_at > 0 else (raw, b"")
    try:
        lines = body.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        die("%s is not UTF-8 text (byte %d): is it a training log?" % (path, e.start))
    if tail:
        number = body.count(b"\n") + 1
        try:
            json.loads(tail.decode("utf-8"))
            lines[-1] = tail.decode("utf-8")
        except (UnicodeDecodeError, json.JSONDecodeError):
            print("plot.py: warning: %s:%d: skipping the last line, cut short (%d bytes and no "
                  "newline): %.60r" % (path, number, len(tail), tail), file=sys.stderr)
    header, latest = {}, {key: {} for key in ("train_loss", "val_loss", "lr")}  # key: {step: value}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            die("%s:%d: not valid JSON (%s): %.60s" % (path, number, e.msg, line))
        if not isinstance(obj, dict):
            die("%s:%d: expected a JSON object, got %s" % (path, number, type(obj).__name__))
        if "step" not in obj:
            if number == 1:
                header = obj
                continue
            die("%s:%d: a line without \"step\" (only the first line, the header, has none)"
                % (path, number))
        step = obj["step"]
        if not isinstance(step, int) or isinstance(step, bool):
            die("%s:%d: \"step\" is %r, not an integer" % (path, number, step))
        for key, values in latest.items():
            if key not in obj:
                continue
            value = obj[key]
            if value is not None and (isinstance(value, bool) or
                                      not isinstance(value, (int, float))):
                die("%s:%d: \"%s\" is %r, not a number" % (path, number, key, value))
            values[step] = math.nan if value is None else float(value)
    series = {key: (sorted(values), [values[s] for s in sorted(values)]) for key, values in latest.items()}
    if not series["train_loss"][0] and not series["val_loss"][0]:
        die("%s has no train_loss or val_loss entries to plot" % path)
    return header, series


def plot(header, series, out, title):
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        die("matplotlib is not installed: pip install matplotlib")

    fig, (ax_loss, ax_lr) = plt.subplots(2, 1, figsize=(9, 7), sharex=True,
                                         gridspec_kw={"height_ratios": [3, 1]})
    steps, values = series["train_loss"]
    if steps:
        ax_loss.plot(steps, values, label="train loss", color="tab:blue", linewidth=1)
    steps, values = series["val_loss"]
    if steps:
        ax_loss.plot(steps, values, label="val loss", color="tab:orange", linewidth=1.5,
                     marker="o", markersize=3)
    baseline = header.get("unigram_val_loss")
    if isinstance(baseline, (int, float)) and not isinstance(baseline, bool):
        ax_loss.axhline(baseline, color="gray", linestyle="--", linewidth=1,
                        label="unigram baseline (%.3f)" % baseline)
    ax_loss.set_ylabel("loss (nats per token)")
    ax_loss.set_title(title)
    ax_loss.grid(True, alpha=0.3)
    ax_loss.legend()

    steps, values = series["lr"]
    if steps:
        ax_lr.plot(steps, values, color="tab:green", linewidth=1)
    else:
        ax_lr.text(0.5, 0.5, "no lr in the log", ha="center", va="center",
                   transform=ax_lr.transAxes)
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    ax_lr.grid(True, alpha=0.3)
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))

    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        die("cannot write %s: %s" % (out, e.strerror))
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", help="training log written by train_gpt (JSONL)")
    parser.add_argument("--out", help="PNG to write (default: the log's name with .png)")
    args = parser.parse_args()
    out = args.out or os.path.splitext(args.log)[0] + ".png"
    header, series = read_log(args.log)
    plot(header, series, out, os.path.basename(args.log))
    print("wrote %s" % out)


if __name__ == "__main__":
    main()
