#!/usr/bin/env python3
"""Prints the final parameter hash of a fixed set of tiny training runs, one line per run, so
that two builds of the trainer (before and after a restructuring) can be compared bit for bit:

    python3 scripts/param_hashes.py --bin-dir build/cpu > after.txt
    python3 scripts/param_hashes.py --bin-dir /elsewhere/build/cpu > before.txt
    diff before.txt after.txt

Each run trains a 2-layer model on random tokens for 3 steps with both builds (bf16 and fp32);
the hash is the trainer's own ("parameter hash H on each of N ranks": the whole model in the
logical layout, equal on every rank). --only NAME runs the configurations whose name contains
NAME.
"""
import argparse
import re
import subprocess
import sys

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np"]
MODEL = ["--vocab", "256", "--layers", "2", "--heads", "2", "--embd", "64", "--seq", "16", "--steps", "3",
         "--lr", "3e-3", "--warmup", "1", "--seed", "7", "--val-every", "0", "--sample-len", "0",
         "--bucket-mb", "0.02", "--batch", "4"]
MUON = ["--optimizer", "muon", "--qk-norm", "--z-loss", "1e-4"]
RUNS = [  # (name, ranks, flags)
    ("adamw", 1, []),
    ("adamw-accum-clip", 1, ["--grad-accum", "2", "--grad-clip", "0.5"]),
    ("muon-qknorm-zloss", 1, MUON),
    ("recompute-full", 1, ["--recompute", "full"]),
    ("recompute-selective-muon", 1, ["--recompute", "selective"] + MUON),
    ("dp2-zero1", 2, ["--zero", "1"]),
    ("dp2-zero2-muon", 2, ["--zero", "2"] + MUON),
    ("dp2-zero3", 2, ["--zero", "3"]),
    ("dp2-zero3-muon-recompute", 2, ["--zero", "3", "--recompute", "full"] + MUON),
    ("tp2-sp", 2, ["--tp", "2", "--sequence-parallel"]),
    ("tp2-sp-muon", 2, ["--tp", "2", "--sequence-parallel"] + MUON),
    ("tp2-dp2-zero2", 4, ["--tp", "2", "--zero", "2"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default="build/cpu")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    failed = 0
    for name, ranks, flags in RUNS:
        if args.only not in name:
            continue
        for build in ("train_gpt", "train_gpt_fp32"):
            cmd = [f"{args.bin_dir}/{build}"] + MODEL + flags
            if ranks > 1:
                cmd = MPIRUN + [str(ranks)] + cmd
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
            found = re.search(r"parameter hash ([0-9a-f]{16}) on each of", proc.stdout)
            if proc.returncode != 0 or not found:
                failed += 1
                print(f"{name:28s} {build:15s} FAILED (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
            else:
                print(f"{name:28s} {build:15s} {found.group(1)}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
