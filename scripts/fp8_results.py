#!/usr/bin/env python3
"""scripts/fp8_results.py: the README's FP8 results table. Trains the default corpus (Jane
Austen's novels, prepared as scripts/train_austen.sh prepares them) once in the bf16 build and
once per FP8 recipe, same model, steps, data and seed, and prints each run's final validation
loss against the bf16 run's, with the time a step took (a ratio to bf16 measured in this run).

  python3 scripts/fp8_results.py [--gpu] [--steps N] [--recipes tensor,delayed,...] [--binary B]
                                 [--out DIR]

Without --gpu: the CPU runtime (build/cpu/train_gpt), bytes as tokens and train_austen.sh's CPU
model (4 layers, width 128, T 64, B 32); MXFP8 on the runtime's simulated Blackwell
(CUCC_COMPUTE_CAPABILITY=10.0), the other recipes on its default Hopper. With --gpu: ./train_gpt,
GPT-2's tokenizer and train_austen.sh's GPU model (MXFP8 only where the GPU has it).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = ["tensor", "delayed", "rowwise", "block", "mx"]
CPU = {"data": "data/austen_byte", "prepare": ["--tokenizer", "byte"], "binary": "build/cpu/train_gpt",
       "model": ["--layers", "4", "--heads", "4", "--embd", "128", "--seq", "64", "--batch", "32"],
       "run": ["--lr", "3e-3", "--warmup", "30", "--val-every", "50", "--val-steps", "16"]}
GPU = {"data": "data/austen", "prepare": [], "binary": "train_gpt",
       "model": ["--layers", "8", "--heads", "8", "--embd", "512", "--seq", "512", "--batch", "16"],
       "run": ["--lr", "1e-3", "--warmup", "40", "--val-every", "25", "--val-steps", "20"]}


def train(setup, steps, fp8, out, env):
    """Runs one training; returns (final val loss, median ms per step)."""
    log = os.path.join(out, f"{fp8}.jsonl")
    cmd = [setup["binary"], "--data", setup["data"]] + setup["model"] + setup["run"] + \
        ["--steps", str(steps), "--fp8", fp8, "--sample-every", "0", "--sample-len", "0", "--log", log]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(log) as f:
        records = [json.loads(line) for line in f]
    val = [r["val_loss"] for r in records if "val_loss" in r]
    ms = sorted(r["ms"] for r in records if "ms" in r)
    return val[-1], ms[len(ms) // 2] if ms else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", action="store_true", help="the GPU build and model")
    ap.add_argument("--steps", type=int, default=400, help="training steps (train_austen.sh's 400)")
    ap.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated FP8 recipes")
    ap.add_argument("--binary", help="the trainer to run (default: build/cpu/train_gpt, or ./train_gpt with --gpu)")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "fp8_results"), help="folder for the logs")
    args = ap.parse_args()
    setup = dict(GPU if args.gpu else CPU)
    if args.binary:
        setup["binary"] = os.path.abspath(args.binary)
    os.makedirs(args.out, exist_ok=True)
    if not os.path.exists(os.path.join(ROOT, setup["data"], "tokenizer.bin")):
        subprocess.run([sys.executable, "dev/data/prepare.py", "--out-dir", setup["data"]] + setup["prepare"],
                       cwd=ROOT, check=True)
    base_env = dict(os.environ)
    base_env.pop("CUCC_COMPUTE_CAPABILITY", None)
    rows = [("off",) + train(setup, args.steps, "off", args.out, base_env)]
    for recipe in args.recipes.split(","):
        env = dict(base_env)
        if recipe == "mx" and not args.gpu:
            env["CUCC_COMPUTE_CAPABILITY"] = "10.0"
        rows.append((recipe,) + train(setup, args.steps, recipe, args.out, env))
    bf16_loss, bf16_ms = rows[0][1], rows[0][2]
    print(f"\n{'CPU runtime' if not args.gpu else 'GPU'}, {args.steps} steps, final validation loss:")
    print("| --fp8 | val loss | vs bf16 | ms/step vs bf16 |")
    print("| --- | --- | --- | --- |")
    for name, loss, ms in rows:
        print(f"| {name} | {loss:.4f} | {100 * (loss - bf16_loss) / bf16_loss:+.2f}% | {ms / bf16_ms:.2f}x |")


if __name__ == "__main__":
    main()
