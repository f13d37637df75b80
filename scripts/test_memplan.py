#!/usr/bin/env python3
"""scripts/test_memplan.py: the device memory plan (llmc/memplan.h, --plan) against what runs
allocate, the seeds' worked examples, and fitting a batch to a memory limit.

Checks:
1. Runs of several shapes, builds, optimizers, recompute policies and grids (one process;
   mpirun with 2 and 3 ranks under ZeRO 0 to 3, tensor parallelism on 2 ranks, dp 2 x tp 2 with
   sequence parallelism and ZeRO-3, ZeRO-3 with --fp8-allgather; Llama blocks with 1 kv head, an
   untied head, QK-norm and selective recompute, and under tp 2 with sequence parallelism,
   ZeRO-3 and full recompute): the plan in the log header (plan_bytes) and
   the bytes the run allocated (allocated_bytes, measured by cudaMemGetInfo around the model's
   construction, through the CPU runtime's allocator) agree within 1% (under the CPU runtime
   they are equal); --plan for the same configuration prints the same total.
2. The seeds' worked examples, on this program's own model of their shapes, side by side with
   the seeds' numbers: a 7B-class GPT (32 x 4096) on 64 data-parallel ranks under ZeRO 0, 1,
   2, 3 (the seeds: 112.0, 29.3, 15.5, 1.75 GB of model state at Psi = 7e9): our model state
   equals 16 Psi; 4 Psi + 12 Psi / N (+ 2 Psi / N, the reduced shard we keep); 2 Psi + 14 Psi /
   N; 16 Psi / N at our Psi within 0.1% (the layout's padding); and the activations of a
   70B-class GPT (80 x 8192, s = 4096, b = 1; the seeds: ~91 GB without recompute, 34 s b h per
   layer, and ~5.4 GB with full recompute, 2 s b h): a block keeps 32 s b h + its statistics
   without recompute, exactly 2 s b h with full recompute. Under --pp, --plan's line per pipeline
   rank (GPT-2 124M at pp 4): one per rank, spanning the printed range of the ranks' totals, the
   first and last stage (the embeddings) holding more model state than the middle ones.
3. --batch auto with --device-memory (and with CUCC_MEM_LIMIT, the CPU runtime's device size)
   picks a batch that runs, and the plan says the next one would not fit; --recompute auto
   takes the least recompute that fits; --global-batch-tokens sets the accumulation and
   refuses a number that does not divide; a model that does not fit is refused before
   anything is allocated, with the plan's number.

Usage: python3 scripts/test_memplan.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import os
import re
import shutil
import subprocess
import tempfile

from testlib import ROOT, check, finish, make_data, run, train

TINY = ["--vocab", "256", "--layers", "2", "--heads", "2", "--embd", "64", "--seq", "32", "--lr", "1e-3",
        "--steps", "1", "--val-every", "0", "--sample-len", "0"]


def header_and_allocation(records):
    allocated = next(r["allocated_bytes"] for r in records if "allocated_bytes" in r)
    return records[0], allocated


def plan_total(out):
    return int(re.search(r"^  total +(\d+)", out, re.M).group(1))


def model_state(out):
    return int(re.search(r"^  model state +(\d+)", out, re.M).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    bf16, fp32 = os.path.join(args.bin_dir, "train_gpt"), os.path.join(args.bin_dir, "train_gpt_fp32")
    work = tempfile.mkdtemp(prefix="test_memplan_")
    try:
        data = make_data(os.path.join(work, "data"))
        # 1
        runs = [(bf16, 0, ["--batch", "3"]),
                (fp32, 0, ["--batch", "2", "--layers", "3", "--optimizer", "muon", "--qk-norm", "--recompute", "full"]),
                (bf16, 2, ["--batch", "2", "--zero", "1", "--recompute", "selective"]),
                (bf16, 3, ["--batch", "2", "--zero", "2", "--optimizer", "muon"]),
                (bf16, 3, ["--batch", "1", "--zero", "3", "--layers", "4", "--embd", "128"]),
                (fp32, 2, ["--batch", "2", "--zero", "0", "--grad-accum", "2"]),
                (bf16, 2, ["--batch", "2", "--tp", "2", "--optimizer", "muon"]),
                (bf16, 4, ["--batch", "2", "--tp", "2", "--sequence-parallel", "--zero", "3", "--recompute",
                           "selective"]),
                (bf16, 2, ["--batch", "2", "--zero", "3", "--fp8", "tensor", "--fp8-allgather"]),
                (bf16, 0, ["--batch", "2", "--arch", "llama", "--kv-heads", "1", "--tie-embeddings", "0",
                           "--qk-norm", "--recompute", "selective"]),
                (fp32, 2, ["--batch", "2", "--arch", "llama", "--tp", "2", "--sequence-parallel", "--zero", "3",
                           "--recompute", "full"])]
        for i, (binary, ranks, extra) in enumerate(runs):
            _, records, _ = train(binary, ranks, work, f"run{i}", TINY, ["--data", data] + extra, checkpoints=False)
            header, allocated = header_and_allocation(records)
            planned = header["plan_bytes"]["total"]
            plan_out = run([binary] + TINY + extra + ["--plan", "--plan-ranks", str(max(ranks, 1))], f"plan {i}")
            label = f"{os.path.basename(binary)} on {max(ranks, 1)} rank(s) {' '.join(extra)}"
            check(abs(allocated - planned) <= 0.01 * planned and plan_total(plan_out) == planned,
                  f"{label}: planned {planned} bytes, allocated {allocated} ({(allocated - planned) / planned:+.3%}); "
                  f"--plan prints the same total")

        # 2
        seven_b = ["--layers", "32", "--heads", "32", "--embd", "4096", "--vocab", "50257", "--seq", "2048",
                   "--batch", "1", "--plan", "--plan-ranks", "64"]
        seeds = [112.0, 29.3, 15.5, 1.75]
        for zero in range(4):
            out = run([bf16] + seven_b + ["--zero", str(zero)], f"7B plan, ZeRO-{zero}")
            psi = float(re.search(r"Psi = (\d+)", out).group(1))
            N = 64
            formula = [16 * psi, 4 * psi + 12 * psi / N, 2 * psi + 14 * psi / N, 16 * psi / N][zero]
            ours = model_state(out)
            check(abs(ours - formula) <= 1e-3 * formula,
                  f"7B-class on 64 ranks, ZeRO-{zero}: model state {ours / 1e9:.3f} GB, the formula at our Psi = "
                  f"{psi / 1e9:.3f}B {formula / 1e9:.3f} GB; "
                  f"the seed's at Psi = 7B: {seeds[zero]} GB")
        # under --pp, a line per pipeline rank: GPT-2 124M at pp 4 planned for 4 ranks (every rank
        # has a line), its totals spanning the range over the ranks, the embeddings on the ends
        out = run([bf16, "--layers", "12", "--heads", "12", "--embd", "768", "--vocab", "50257", "--seq", "1024",
                   "--batch", "8", "--grad-accum", "8", "--plan", "--plan-ranks", "4", "--pp", "4"], "124M plan, pp 4")
        rows = [tuple(float(x) for x in m.groups()[1:]) for m in
                re.finditer(r"^(\d+) +([\d.]+) +([\d.]+) +([\d.]+)$", out, re.M)]
        span = re.search(r"total per rank over the 4 ranks: (\d+) to (\d+) bytes", out)
        totals = [r[2] for r in rows]
        check(len(rows) == 4 and span is not None and
              abs(min(totals) - int(span.group(1)) / 1e9) < 1e-6 and abs(max(totals) - int(span.group(2)) / 1e9) < 1e-6
              and min(rows[0][0], rows[3][0]) > max(rows[1][0], rows[2][0]),
              f"--plan under --pp 4: {len(rows)} pipeline ranks' lines (model state, activations, total GB: {rows}) "
              f"spanning the ranks' totals {span.group(1) if span else None} to {span.group(2) if span else None} "
              "bytes, the first and last stage holding the embeddings")
        s, h, L = 4096, 8192, 80
        seventy_b = ["--layers", str(L), "--heads", "64", "--embd", str(h), "--vocab", "32000", "--seq", str(s),
                     "--batch", "1", "--plan"]
        for policy, seed_gb in (("none", 91), ("full", 5.4)):
            out = run([bf16] + seventy_b + ["--recompute", policy], f"70B plan, {policy}")
            block = int(re.search(r"a block keeps (\d+) bytes", out).group(1))
            total = int(re.search(r"^  activations +(\d+)", out, re.M).group(1))
            if policy == "none":
                stats = 4 * s * 4 + 64 * s * 4  # ln1 and ln2 mean and rstd, lse (64 heads): float
                ok = block == 32 * s * h + stats
                want = f"32 s b h + statistics = {32 * s * h + stats}; the seed's 34 s b h x L = {34 * s * h * L / 1e9:.1f} GB"
            else:
                ok = block == 2 * s * h
                want = f"2 s b h = {2 * s * h}; the seed's 2 s b h x L = {2 * s * h * L / 1e9:.2f} GB"
            check(ok, f"70B-class activations, recompute {policy}: a block keeps {block} bytes ({want}); ours x L = "
                  f"{block * L / 1e9:.2f} GB, all activations with the logits and scratch {total / 1e9:.2f} GB "
                  f"(seed: ~{seed_gb} GB)")

        # 3
        fit = TINY + ["--data", data, "--seq", "64"]
        for how, extra, env in (("--device-memory 40e6", ["--device-memory", "40e6"], {}),
                                ("CUCC_MEM_LIMIT=45000000", [], {"CUCC_MEM_LIMIT": "45000000"})):
            proc = subprocess.run([bf16] + fit + ["--batch", "auto"] + extra, capture_output=True, text=True,
                                  errors="replace", env=dict(os.environ, **env))
            m = re.search(r"--batch (\d+) --recompute none, planned (\d+) bytes; --batch \d+ would need (\d+)", proc.stdout)
            limit = 0.99 * (40e6 if extra else 45e6)
            check(proc.returncode == 0 and m and int(m.group(2)) <= limit < int(m.group(3)) and "step     1/1" in proc.stdout,
                  f"--batch auto with {how}: picks --batch {m.group(1) if m else '?'}, which runs; the next would need "
                  f"{m.group(3) if m else '?'} > {limit:.0f}")
        # the plans of --batch 24: none 45,167,104 bytes, selective 43,987,456 (99% of 45e6: 44,550,000)
        proc = subprocess.run([bf16] + fit + ["--batch", "24", "--recompute", "auto", "--device-memory", "45e6"],
                              capture_output=True, text=True, errors="replace")
        m = re.search(r"--batch 24 --recompute (\w+)", proc.stdout)
        check(proc.returncode == 0 and m and m.group(1) == "selective" and "step     1/1" in proc.stdout,
              f"--recompute auto, --batch 24 in 45e6 bytes: none does not fit, selective does, and runs "
              f"({m.group(1) if m else '?'})")
        proc = subprocess.run([bf16] + fit + ["--batch", "2", "--global-batch-tokens", "512"], capture_output=True,
                              text=True, errors="replace")
        check(proc.returncode == 0 and "--grad-accum 4" in proc.stdout,
              "--global-batch-tokens 512 with --batch 2 x --seq 64: --grad-accum 4")
        proc = subprocess.run([bf16] + fit + ["--batch", "3", "--global-batch-tokens", "512"], capture_output=True,
                              text=True, errors="replace")
        check(proc.returncode != 0 and "is not a whole number" in proc.stderr,
              "--global-batch-tokens 512 with --batch 3 x --seq 64: refused (not a whole number of micro-batches)")
        proc = subprocess.run([bf16] + fit + ["--batch", "4"], capture_output=True, text=True, errors="replace",
                              env=dict(os.environ, CUCC_MEM_LIMIT="30000000"))
        check(proc.returncode != 0 and re.search(r"the model needs \d+ bytes of device memory", proc.stderr),
              "a model that does not fit is refused before allocating, with the plan's bytes: "
              + (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:120])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("memory plan")


if __name__ == "__main__":
    main()
