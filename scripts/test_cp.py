#!/usr/bin/env python3
"""scripts/test_cp.py: context parallelism (--cp, llmc/context_parallel.cuh: ring attention with
the causal load balance) and its composition with tensor and data parallelism and ZeRO, under
mpirun on the CPU runtime.

A tiny model (2 blocks of width 64, 2 heads of 32, so --tp 2 leaves one head per rank;
vocabulary 256; T 16, so --cp 4 leaves chunks of 2 positions) trained on token shards for 3 steps
on a global batch of G = 8 sequences (data-parallel ranks x --batch x --grad-accum; the ranks of
a context-parallel group read the same sequences and keep their positions), validated at step 2
and at the end. Checks:
1. fp32 against one process on the same global batch: every step's loss and gradient norm, the
   validation losses, and the final parameters (the checkpoint's logical tensors) within 1e-5
   relative. Only the order of the sums differs: each query's attention is merged from blocks of
   keys (the log-sum-exp merge), dK/dV summed around the ring, the parameter gradients averaged
   over the dp x cp ranks.
     AdamW: cp 2; cp 4; cp 2 at accumulation 2; cp 2 x tp 2; cp 2 x dp 2 ZeRO-3;
            cp 2 x tp 2 + sequence parallel; cp 2 with --recompute full
     Muon with QK-norm and z-loss: cp 2; cp 4; cp 2 x tp 2; cp 2 x dp 2 ZeRO-3
     Llama blocks (--arch llama, one kv head: RoPE at each row's real position, the ring's K/V
     one head wide): cp 2 with AdamW; cp 4 with Muon, QK-norm and z-loss
   and each run's step-3 text sample (40 tokens, longer than T, so the window slides), generated
   through the ring, is one process's text from the same seed.
2. bf16 (the tensor-core attention kernels): cp 2 and cp 2 x tp 2 against the bf16 single process:
   each step's loss within BF16_LOSS, and every rank ends with the same model (the hash check).
   Chunks longer than the kernels' tiles, T 320 with one head of 64 (random tokens, 2 steps):
   fp32 cp 4 (chunks of 40: two 32-row tiles of the CUDA-core kernels) within 1e-5 as in 1, bf16
   cp 2 (chunks of 80: two 64-row blocks of the tensor-core kernels) within BF16_LOSS.
3. Checkpoints stay logical: the Muon cp 2 run's step-2 checkpoint resumed on one process and on
   cp 4, the cp 2 x dp 2 ZeRO-3 run's (sharded over dp x cp) on one process, and one process's
   resumed on cp 2 x tp 2, each within 1e-5 of its source's uninterrupted run.
4. The ring (--comm-stats, the runs of 1 on their first step): the bytes a rank sends around it,
   cp_ring_bytes, equal the formula L x A x (3 cp - 2) x S with S = B (T/cp) 2 (C/tp) x 4 bytes
   (forward cp-1 K/V blocks, backward cp-1 K/V blocks and cp dK/dV accumulators; under
   --recompute full the forward pass's cp-1 again); the key/query
   pairs each rank computes (cp_pairs) are the same on every rank (within 5%, the bound the
   issue sets; the layout makes them equal) and add up to one process's causal count
   L x A x B x heads x T(T+1)/2.
5. Memory (log header, rank 0): the plan equals what was allocated; the activation tables' bytes
   at cp 2 are one process's at --seq T/2 (every activation is per position, attention's lse
   too), and the plan's activations exactly the ring's five blocks of S more (two K/V buffers,
   three dK/dV: the step's, the last step's being sent, the accumulator arriving).
6. The refusals, by message: --seq not a multiple of 2 x --cp, --cp not dividing the ranks,
   --cp with --pp.
7. A rank killed mid-run (--inject-fault 2:kill:1) ends the job within --comm-timeout, rank 0
   naming the wait it was in.

Usage: python3 scripts/test_cp.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time

from testlib import (MPIRUN, ROOT, check, compare, finish, logged_values, make_data, param_hash, resume, train,
                     val_losses_and_sample)

G, STEPS = 8, 3
L, C, T, V, NH = 2, 64, 16, 256, 2
MODEL = ["--vocab", str(V), "--layers", str(L), "--heads", str(NH), "--embd", str(C), "--seq", str(T), "--lr",
         "3e-3", "--warmup", "1", "--seed", "5", "--val-every", "2", "--val-steps", "1", "--sample-len", "0"]
MUON = ["--optimizer", "muon", "--qk-norm", "--z-loss", "1e-4"]
LLAMA = ["--arch", "llama", "--kv-heads", "1", "--mlp-multiple-of", "32"]
# bf16: each query's output is merged from cp blocks (each rounded to bf16 once more) and dK/dV
# summed around the ring in bf16; a correct run stays within a few bf16 roundings (2^-9) of one
# process, as test_tp's BF16_LOSS argues; a wrong merge or a missed block moves the loss by 1e-2
BF16_LOSS = 4e-3
# a text sample at the end of the runs of check 1: longer than T, so the window slides
SAMPLE = ["--sample-len", "40"]


def grid_args(cp, tp=1, dp=1, accum=1, zero=0):
    return ["--cp", str(cp), "--tp", str(tp), "--zero", str(zero), "--grad-accum", str(accum), "--batch",
            str(G // (dp * accum)), "--comm-stats"]


def ring_check(label, records, cp, tp, dp, accum, forwards, kv_heads=NH):
    """Checks 4 on a run's --comm-stats record; forwards: the attention forward passes per block and
    micro-batch (2 under --recompute full, which reruns it before the backward pass); kv_heads: the
    model's key/value heads (the ring carries their width, C / NH per head)."""
    stats = next(r for r in records if "cp_ring_bytes" in r)
    B, rows, kv_att = G // (dp * accum), T // cp, kv_heads * (C // NH) // tp
    S = B * rows * 2 * kv_att * 4
    want_bytes = L * accum * (forwards * (cp - 1) + (cp - 1) + cp) * S
    pairs = [stats["cp_pairs"][str(r)] for r in range(cp)]
    n = T // (2 * cp)
    want_rank = forwards * L * accum * B * (NH // tp) * (2 * cp * n * n + n)
    whole = forwards * L * accum * B * (NH // tp) * T * (T + 1) // 2
    spread = max(pairs) / min(pairs) - 1
    check(stats["cp_ring_bytes"] == want_bytes,
          f"{label}: the ring's bytes sent per rank {stats['cp_ring_bytes']} = L A ({forwards} (cp-1) + (cp-1) + cp) S "
          f"= {want_bytes}")
    check(spread <= 0.05 and all(p == want_rank for p in pairs) and sum(pairs) == whole,
          f"{label}: key/query pairs per rank {pairs} (spread {spread:.1%} <= 5%; each 2 cp n^2 + n per sequence and "
          f"head = {want_rank}), summing to one process's causal {whole}")


def refused(cmd, pattern, label):
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, errors="replace", timeout=120)
    out = proc.stdout + proc.stderr
    found = re.search(pattern, out)
    check(proc.returncode != 0 and found is not None,
          f"refused: {label}: {found.group(0) if found else out.strip().splitlines()[-1:]!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    fp32, bf16 = os.path.join(args.bin_dir, "train_gpt_fp32"), os.path.join(args.bin_dir, "train_gpt")
    work = tempfile.mkdtemp(prefix="test_cp_")
    try:
        data = make_data(os.path.join(work, "data"))
        base = ["--data", data, "--steps", str(STEPS), "--checkpoint-every", "2"]

        # 1 (and 4, 5 on the same runs): (optimizer flags, cp, tp, dp, accum, zero, other flags)
        SP, FULL = ["--sequence-parallel"], ["--recompute", "full"]
        runs = [([], 2, 1, 1, 1, 0, []), ([], 4, 1, 1, 1, 0, []), ([], 2, 1, 1, 2, 0, []), ([], 2, 2, 1, 1, 0, []),
                ([], 2, 1, 2, 1, 3, []), ([], 2, 2, 1, 1, 0, SP), ([], 2, 1, 1, 1, 0, FULL),
                (MUON, 2, 1, 1, 1, 0, []), (MUON, 4, 1, 1, 1, 0, []), (MUON, 2, 2, 1, 1, 0, []),
                (MUON, 2, 1, 2, 1, 3, []), (LLAMA, 2, 1, 1, 1, 0, []), (LLAMA + MUON, 4, 1, 1, 1, 0, [])]
        refs, results = {}, {}
        for opt, cp, tp, dp, accum, zero, other in runs:
            key = (tuple(opt), accum)
            optname = ("llama_" if "llama" in opt else "") + ("muon" if "muon" in opt else "adamw")
            if key not in refs:
                refs[key] = train(fp32, 0, work, f"single_{optname}_a{accum}", MODEL,
                                  base + opt + SAMPLE + ["--grad-accum", str(accum), "--batch", str(G // accum)])
            name = f"{optname}_cp{cp}_tp{tp}_dp{dp}_a{accum}_z{zero}{''.join(other).replace('-', '_')}"
            label = (f"fp32 {'Llama, ' if 'llama' in opt else ''}"
                     f"{'Muon + QK-norm + z-loss' if 'muon' in opt else 'AdamW'}, cp {cp}"
                     f"{f' x tp {tp}' if tp > 1 else ''}{f' x dp {dp}' if dp > 1 else ''}, accum {accum}, ZeRO-{zero}"
                     f"{' ' + ' '.join(other) if other else ''}")
            results[name] = train(fp32, cp * tp * dp, work, name, MODEL,
                                  base + opt + SAMPLE + grid_args(cp, tp, dp, accum, zero) + other)
            compare(label, results[name], refs[key], STEPS)
            sample = val_losses_and_sample(results[name][0], STEPS)[1]
            want = val_losses_and_sample(refs[key][0], STEPS)[1]
            check(sample is not None and sample == want, f"{label}: the step-{STEPS} sample ({SAMPLE[1]} tokens "
                  f"through the ring) is one process's text, {ascii(sample)}")
            ring_check(label, results[name][1], cp, tp, dp, accum, 2 if other == FULL else 1,
                       1 if "llama" in opt else NH)

        # 5
        half = train(fp32, 0, work, "single_half_seq", MODEL[:MODEL.index("--seq")] + ["--seq", str(T // 2)] +
                     MODEL[MODEL.index("--seq") + 2:], ["--steps", "1", "--batch", str(G)], False)[1][0]
        two = results["adamw_cp2_tp1_dp1_a1_z0"][1][0]
        ring = 5 * (G * (T // 2) * 2 * C * 4)  # two K/V blocks, three dK/dV, of B (T/2) 2C fp32
        plan = next(r for r in results["adamw_cp2_tp1_dp1_a1_z0"][1] if "planned_bytes" in r)
        check(plan["planned_bytes"] == plan["allocated_bytes"],
              f"cp 2: the memory plan {plan['planned_bytes']} bytes = allocated {plan['allocated_bytes']}")
        check(two["activation_bytes"] == half["activation_bytes"] and
              two["plan_bytes"]["activations"] - half["plan_bytes"]["activations"] == ring,
              f"cp 2: the activation tables hold {two['activation_bytes']} bytes, one process's at --seq {T // 2} "
              f"{half['activation_bytes']}; the plan's activations {two['plan_bytes']['activations']} bytes, "
              f"{two['plan_bytes']['activations'] - half['plan_bytes']['activations']} more = the ring's "
              f"5 B (T/2) 2C x 4 = {ring}")

        # 2
        single_bf16 = train(bf16, 0, work, "single_bf16", MODEL, base + ["--batch", str(G)])
        want = logged_values(single_bf16[1])
        for cp, tp in ((2, 1), (2, 2)):
            out, records, _ = train(bf16, cp * tp, work, f"bf16_cp{cp}_tp{tp}", MODEL, base + grid_args(cp, tp))
            got = logged_values(records)
            worst = max(abs(got[k] - want[k]) / abs(want[k]) for k in want if k[0] == "train_loss")
            check(worst <= BF16_LOSS and param_hash(out, cp * tp) is not None,
                  f"bf16 cp {cp}{f' x tp {tp}' if tp > 1 else ''}: losses within {worst:.1e} <= {BF16_LOSS:.0e} of "
                  f"one process, every rank ends with the same model")

        # 2b: chunks longer than the kernels' tiles (the tile loops and masks of full and diagonal blocks):
        # T 320, so cp 2 chunks of 80 rows (two 64-row blocks of the tensor-core kernels) and cp 4 chunks of
        # 40 (two 32-row tiles of the CUDA-core kernels); head size 64
        long = MODEL[:MODEL.index("--seq")] + ["--seq", "320", "--context", "320"] + MODEL[MODEL.index("--seq") + 2:]
        long = long[:long.index("--heads")] + ["--heads", "1"] + long[long.index("--heads") + 2:]
        long_base = ["--steps", "2", "--checkpoint-every", "2", "--batch", "2", "--val-every", "0"]
        one = train(fp32, 0, work, "long_single", long, long_base)
        compare("fp32 T 320, head size 64, cp 4 (chunks of 40)",
                train(fp32, 4, work, "long_cp4", long, long_base + ["--cp", "4"]), one, 2)
        want = logged_values(train(bf16, 0, work, "long_single_bf16", long, long_base)[1])
        out, records, _ = train(bf16, 2, work, "long_bf16_cp2", long, long_base + ["--cp", "2"])
        got = logged_values(records)
        worst = max(abs(got[k] - want[k]) / abs(want[k]) for k in want if k[0] == "train_loss")
        check(worst <= BF16_LOSS and param_hash(out, 2) is not None,
              f"bf16 T 320, head size 64, cp 2 (chunks of 80): losses within {worst:.1e} <= {BF16_LOSS:.0e} of one "
              f"process, both ranks end with the same model")

        # 3
        source = results["muon_cp2_tp1_dp1_a1_z0"]
        for label, ranks, extra in (("one process", 0, ["--batch", str(G)]), ("cp 4", 4, grid_args(4))):
            got = resume(fp32, source, ranks, work, "resume_" + label.replace(" ", "_"), MODEL, base + MUON + extra)
            compare(f"Muon cp 2 checkpoint at step 2 resumed on {label}", got, source, STEPS, first=3)
        got = resume(fp32, results["muon_cp2_tp1_dp2_a1_z3"], 0, work, "resume_zero3_single", MODEL,
                     base + MUON + ["--batch", str(G)])
        compare("Muon cp 2 x dp 2 ZeRO-3 checkpoint (sharded over the 4 ranks) at step 2 resumed on one process", got,
                results["muon_cp2_tp1_dp2_a1_z3"], STEPS, first=3)
        got = resume(fp32, refs[(tuple(MUON), 1)], 4, work, "resume_single_cp2_tp2", MODEL,
                     base + MUON + grid_args(2, 2))
        compare("Muon one-process checkpoint at step 2 resumed on cp 2 x tp 2", got, refs[(tuple(MUON), 1)], STEPS,
                first=3)

        # 6
        cmd = [fp32] + MODEL
        refused(MPIRUN + ["-np", "4"] + cmd + ["--cp", "4", "--seq", "12"],
                r"--seq 12 is not a multiple of 8", "--seq 12 with --cp 4")
        refused(MPIRUN + ["-np", "3"] + cmd + ["--cp", "2"],
                r"3 ranks cannot be cut into replicas of --cp 2", "--cp 2 on 3 ranks")
        refused(MPIRUN + ["-np", "4"] + cmd + ["--cp", "2", "--pp", "2"],
                r"context parallelism \(--cp 2\) with pipeline parallelism \(--pp 2\) is not built", "--cp with --pp")

        # 7
        timeout = 10
        start = time.time()
        proc = subprocess.run(MPIRUN + ["-np", "2", fp32] + MODEL + ["--data", data] + grid_args(2) +
                              ["--steps", "100", "--comm-timeout", str(timeout), "--inject-fault", "2:kill:1"],
                              capture_output=True, text=True, cwd=ROOT, errors="replace", timeout=120)
        seconds = time.time() - start
        # rank 0 is usually in the step-2 forward pass's first K/V exchange with rank 1; on a loaded machine it
        # can still be in step 1's last waits on the group (the loss's mean, the gradient norm)
        named = re.search(r"error: rank 0: [^\n]*", proc.stdout + proc.stderr)
        check(proc.returncode != 0 and named is not None and seconds <= timeout + 10,
              f"rank 1 killed at step 2: the job ends in {seconds:.1f} s (--comm-timeout {timeout}), rank 0 naming "
              f"the wait: {named.group(0) if named else None!r}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("context-parallel")


if __name__ == "__main__":
    main()
