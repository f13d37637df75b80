#!/usr/bin/env python3
"""scripts/bench_cpu_step.py: one training step on the CPU runtime against PyTorch eager on the
same shapes and the same number of threads, interleaved in one run (a benchmark, not a test:
the suite's speed checks are ratios inside the tests themselves).

  python3 scripts/bench_cpu_step.py [--model default|gpt2] [--steps N] [--rounds R]
                                    [--threads T] [--bin-dir build/cpu] [--baseline-bin-dir DIR]
                                    [--cpu-time]

Models: default is the README's CPU model (4 layers, 4 heads, width 128, vocabulary 256, T 64,
B 32); gpt2 is GPT-2 124M's shapes (12 layers, 12 heads, width 768, vocabulary 50257) at T 64,
B 4. Ours: build/cpu/train_gpt_fp32 on random tokens, AdamW, CUCC_THREADS=T; its step time is
the median of the logged steps after the first. PyTorch: the same model in fp32
(scripts/reference.py's forward pass: F.layer_norm, F.scaled_dot_product_attention, F.gelu,
F.cross_entropy) with torch.optim.AdamW, torch.set_num_threads(T), the median of the steps
after the first. Each round runs ours then PyTorch; the ratio of each round and their median
are printed. --baseline-bin-dir DIR adds another build's train_gpt_fp32 (the runtime before a
change) to each round, timed the same way, with its ratio to PyTorch and to ours. --cpu-time
times CPU instead of wall time, for a machine that other work loads (where wall times follow the
load more than the programs): ours is the CPU time of a run of N steps less that of a 1-step run,
over N - 1; PyTorch's is the process's CPU time per step. With one thread both count only work;
with more, both also count their threads' waiting (OpenMP's spinning in PyTorch).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"default": dict(layers=4, heads=4, embd=128, vocab=256, seq=64, batch=32),
          "gpt2": dict(layers=12, heads=12, embd=768, vocab=50257, seq=64, batch=4)}


def ours_run(binary, m, steps, threads):
    """Runs train_gpt_fp32 for `steps` steps: its logged step times (ms) and its CPU seconds."""
    with tempfile.TemporaryDirectory() as work:
        log = os.path.join(work, "log.jsonl")
        cmd = [binary, "--layers", str(m["layers"]), "--heads", str(m["heads"]), "--embd", str(m["embd"]),
               "--vocab", str(m["vocab"]), "--seq", str(m["seq"]), "--batch", str(m["batch"]),
               "--steps", str(steps), "--val-every", "0", "--sample-len", "0", "--log", log]
        before = os.times()
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, CUCC_THREADS=str(threads)))
        after = os.times()
        with open(log) as f:
            ms = [r["ms"] for r in map(json.loads, f) if "ms" in r]
    return ms, (after.children_user + after.children_system) - (before.children_user + before.children_system)


def ours_ms(binary, m, steps, threads, cpu_time):
    """The median ms of train_gpt_fp32's logged steps after the first; with cpu_time, the CPU ms
    per step instead: the difference between a run of `steps` steps and one of 1 step (start-up,
    initialization and the first step), divided by steps - 1."""
    ms, cpu = ours_run(binary, m, steps, threads)
    if not cpu_time:
        return statistics.median(ms[1:])
    _, cpu_one = ours_run(binary, m, 1, threads)
    return 1e3 * (cpu - cpu_one) / (steps - 1)


def torch_ms(m, steps, threads, cpu_time):
    """The median ms of PyTorch eager fp32 steps (forward, backward, AdamW) after the first; with
    cpu_time, the median of their CPU ms (the process's, every thread)."""
    clock = time.process_time if cpu_time else time.perf_counter
    torch.set_num_threads(threads)
    cfg = types.SimpleNamespace(vocab=m["vocab"], context=m["seq"], layers=m["layers"], heads=m["heads"],
                                embd=m["embd"], qk_norm=False, z_loss=0.0, seed=1, arch="gpt2")
    params = {k: v.requires_grad_() for k, v in reference.init_params(cfg).items()}
    opt = torch.optim.AdamW(params.values(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    g = torch.Generator().manual_seed(2)
    times = []
    for _ in range(steps):
        tokens = torch.randint(0, m["vocab"], (m["batch"], m["seq"] + 1), generator=g)
        start = clock()
        opt.zero_grad(set_to_none=True)
        _, loss, _ = reference.forward_loss(params, cfg, tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        times.append(1e3 * (clock() - start))
    return statistics.median(times[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="default")
    ap.add_argument("--steps", type=int, default=6, help="steps per run (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved pairs of runs")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of both programs")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    ap.add_argument("--baseline-bin-dir", help="also time this build's train_gpt_fp32 in each round")
    ap.add_argument("--cpu-time", action="store_true",
                    help="CPU time per step instead of wall time (on a machine other work loads)")
    args = ap.parse_args()
    m = MODELS[args.model]
    binary = os.path.join(args.bin_dir, "train_gpt_fp32")
    baseline = os.path.join(args.baseline_bin_dir, "train_gpt_fp32") if args.baseline_bin_dir else None
    print(f"{args.model}: L {m['layers']} NH {m['heads']} C {m['embd']} V {m['vocab']} T {m['seq']} "
          f"B {m['batch']}, {args.threads} thread(s), {args.steps} steps a run, fp32, "
          f"{'CPU' if args.cpu_time else 'wall'} time")
    ratios, baseline_ratios = [], []
    for r in range(args.rounds):
        ours, theirs = (ours_ms(binary, m, args.steps, args.threads, args.cpu_time),
                        torch_ms(m, args.steps, args.threads, args.cpu_time))
        ratios.append(ours / theirs)
        line = (f"round {r + 1}: train_gpt {ours:.1f} ms/step, PyTorch eager {theirs:.1f} ms/step, "
                f"ratio {ours / theirs:.2f}")
        if baseline:
            before = ours_ms(baseline, m, args.steps, args.threads, args.cpu_time)
            baseline_ratios.append(before / theirs)
            line += f"; baseline {before:.1f} ms/step, ratio {before / theirs:.2f} ({before / ours:.2f}x ours)"
        print(line, flush=True)
    print(f"median ratio train_gpt / PyTorch eager: {statistics.median(ratios):.2f}")
    if baseline:
        print(f"median ratio baseline / PyTorch eager: {statistics.median(baseline_ratios):.2f}")


if __name__ == "__main__":
    main()
