#!/usr/bin/env python3
"""scripts/bench_monitors.py: what the step monitors cost (README "Monitors"): the same tiny
training with and without them, interleaved in one run (a benchmark, not a test).

  python3 scripts/bench_monitors.py [--bin-dir build/cpu] [--base-bin-dir DIR] [--build fp32|bf16]
                                    [--rounds R] [--steps N] [--ranks N] [--zero S]

Variants, each a run of --steps steps of the README's CPU model (4 layers, 4 heads, width 128,
vocabulary 256, T 64, B 8 per rank) on random tokens, its step time the median of the logged ms
of the steps after the first:
  base    --base-bin-dir's trainer (a build without the monitors, e.g. the main branch's), when
          given: what the monitors that are always on (the largest attention logit, log Z) cost;
  always  this build without the optional monitors;
  all     this build with --log-attn-logits --log-layer-norms --log-update-ratio --print-monitors.
Each round runs every variant once, in that order; the ratios of each round's ms/step to the
first variant's, and their medians over the rounds, are printed; next to them the same ratios of
the CPU time (user + system) the whole run took (the same steps and start-up for every variant),
which other processes on a shared machine disturb less than the wall-clock step time. --ranks > 1
runs each variant under mpirun with --zero.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ["--layers", "4", "--heads", "4", "--embd", "128", "--vocab", "256", "--seq", "64", "--batch", "8",
         "--val-every", "0", "--sample-len", "0"]
MONITORS = ["--log-attn-logits", "--log-layer-norms", "--log-update-ratio", "--print-monitors"]


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def step_ms(binary, flags, steps, ranks, zero):
    """The median ms of the run's logged steps after the first, and the CPU seconds of the run."""
    with tempfile.TemporaryDirectory() as work:
        log = os.path.join(work, "log.jsonl")
        cmd = [binary] + MODEL + ["--steps", str(steps), "--log", log] + flags
        if ranks > 1:
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + cmd + ["--zero", str(zero)]
        before = cpu_seconds()
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        cpu = cpu_seconds() - before
        with open(log) as f:
            ms = [r["ms"] for r in map(json.loads, f) if "ms" in r]
    return statistics.median(ms[1:]), cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default="build/cpu")
    ap.add_argument("--base-bin-dir", default="", help="a build without the monitors (variant base)")
    ap.add_argument("--build", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--zero", type=int, default=3)
    args = ap.parse_args()
    name = "train_gpt_fp32" if args.build == "fp32" else "train_gpt"
    variants = [("always", os.path.join(args.bin_dir, name), []), ("all", os.path.join(args.bin_dir, name), MONITORS)]
    if args.base_bin_dir:
        variants.insert(0, ("base", os.path.join(args.base_bin_dir, name), []))
    first = variants[0][0]
    ratios = {v[0]: [] for v in variants[1:]}
    cpu_ratios = {v[0]: [] for v in variants[1:]}
    print(f"{args.build} build, {args.ranks} rank(s), {args.steps} steps per run; ms/step and the run's "
          f"CPU seconds per variant, ratios to {first}")
    for r in range(args.rounds):
        got = {v: step_ms(binary, flags, args.steps, args.ranks, args.zero) for v, binary, flags in variants}
        line = " | ".join(f"{v} {got[v][0]:.1f} ms {got[v][1]:.2f} cpu-s" for v, _, _ in variants)
        for v in ratios:
            ratios[v].append(got[v][0] / got[first][0])
            cpu_ratios[v].append(got[v][1] / got[first][1])
        print(f"round {r + 1}: {line} | " + " ".join(
            f"{v}/{first} {ratios[v][-1]:.3f} (cpu {cpu_ratios[v][-1]:.3f})" for v in ratios), flush=True)
    for what, table in (("ms/step", ratios), ("CPU time", cpu_ratios)):
        print(f"median {what} ratio over the rounds: " + ", ".join(
            f"{v}/{first} {statistics.median(x):.3f} (min {min(x):.3f}, max {max(x):.3f})" for v, x in table.items()))


if __name__ == "__main__":
    main()
