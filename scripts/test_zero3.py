#!/usr/bin/env python3
"""scripts/test_zero3.py: ZeRO-3 (llmc/zero.cuh: parameters sharded, each block gathered before
it runs and prefetched under the one before) under mpirun on the CPU runtime.

A tiny model of 4 blocks (so the backward pass gathers blocks again: the forward pass leaves
the last two gathered, which the backward pass starts with), the global batch G = 36 sequences
split as ranks x --batch x --grad-accum. Checks:
1. fp32, against the single process on the same global batch: DP 2, 3 and 4 with ZeRO-3, AdamW
   and Muon, grad accumulation 1 and 3: every step's loss and gradient norm within 1e-5
   relative, the final parameters within 1e-5 relative norm.
2. Bit-identical to ZeRO-2 on the same grid at any accumulation (the gradients are reduced
   and the optimizers run exactly as at stage 2; only where the passes read the parameters
   from differs), and to ZeRO-0 at one micro-batch (as stage 2 is).
3. bf16: ZeRO-3 on 2 ranks bit-identical to ZeRO-2 at accumulation 3, also when the CPU runtime
   runs the streams' work in random orders (CUCC_SCHEDULE=random); and the trainer without the
   wait before a gather overwrites a buffer (LLMC_TEST_DROP_WAIT=zero3-gather in the
   -DTEST_DROP_WAITS build) or without the compute stream's wait for a gather (zero3-compute)
   gives other results under one of those orders (testlib.missing_wait_exposed); the launch by
   environment variables (RANK/WORLD_SIZE/LOCAL_RANK, --rendezvous) gives the same bits.
4. The model state rank 0 reports (log header state_bytes) is what the shard plan gives: the
   shards (params 2, grads 2, master 4, optimizer 8 bytes per owned element: 16 Psi / N plus
   slice padding) and, apart, the gather buffers (two of the largest block, one of the
   embeddings) and the gradient buckets in flight.
5. Traffic (--comm-stats, one step at one micro-batch, 4 ranks): AdamW and Muon against plain
   DP, each ratio against the one the shapes predict (forward: every unit gathered; backward:
   every block but the last two gathered again; the gradients reduce-scattered once; Muon's
   matrices by broadcast and reduce, S bytes each).
6. Checkpoints: ZeRO-3 on 2 ranks resumed on the same grid is bit-identical to the
   uninterrupted run; resumed with ZeRO-2 on 3 ranks, ZeRO-0 on one process, and a ZeRO-1
   checkpoint resumed with ZeRO-3 on 4 ranks, each continues within 1e-5.
7. A run with validation and samples under ZeRO-3 (every rank runs the forward passes) prints
   the same validation losses and sample as ZeRO-0.

Usage: python3 scripts/test_zero3.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import os
import shutil
import sys
import tempfile

from testlib import (MPIRUN, ROOT, ZERO_GLOBAL_BATCH as G, ZERO_MODEL as MODEL, check, check_resumed, compare,
                     env_launch, exposed_text, finish, make_data, missing_wait_exposed, param_hash, random_order, resume,
                     run, train, up, val_losses_and_sample, drop_waits_binary)

STEPS = 4
C, L, V, T = 64, 4, 256, 16
SHAPE = ["--layers", str(L)]  # ZERO_MODEL (test_zero's) with more blocks


def units():
    """The AdamW model's units (llmc/zero.cuh) in the backward pass's order, each a list of its
    tensors' sizes and the unit's range in the layout (tensors on multiples of 128 elements):
    the last block with the final LayerNorm, the blocks down to the first, the embeddings."""
    block = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    span = sum(up(n, 128) for n in block)
    return [(block + [C, C], span + 2 * up(C, 128))] + [(block, span)] * (L - 1) + \
        [([V * C, T * C], up(V * C, 128) + up(T * C, 128))]


def expected_state(ranks):
    """Rank 0's state bytes under ZeRO-3 with AdamW in the bf16 build, from the shapes: every
    unit is a bucket, its elements cut into `ranks` slices of ceil(n / ranks) rounded up to 64."""
    us = units()
    slices = [up(-(-sum(sizes) // ranks), 64) for sizes, _ in us]
    owned = sum(slices)
    block_span = max(span for _, span in us[:-1])
    state = {"params": 2 * owned, "grads": 2 * owned, "master": 4 * owned, "optimizer": 8 * owned,
             # gather buffers: two blocks and the embeddings; buckets: two gradient slots and
             # the embeddings', the staging buffer (a padded bucket), the accumulator (a slice)
             "gather_buffers": 2 * (2 * block_span + us[-1][1]),
             "buckets": 2 * (2 * block_span + us[-1][1] + max(s * ranks for s in slices) + max(slices))}
    psi = sum(sum(sizes) for sizes, _ in us)
    return state, psi


def predicted_ratio(ranks, muon):
    """Bytes ZeRO-3 sends in one step over plain DP's, at one micro-batch, from the shapes. A
    unit's element-wise part costs (N-1)/N of its padded bucket per all-gather or
    reduce-scatter; Muon's matrices (then not element-wise) S per broadcast or reduce; DP
    all-reduces each unit's layout range: 2 (N-1)/N S."""
    N = ranks
    dp = zero3 = 0.0
    for index, (sizes, span) in enumerate(units()):
        matrices = [3 * C * C, C * C, 4 * C * C, 4 * C * C] if muon and index < L else []
        elementwise = sum(sizes) - sum(matrices)
        padded = up(-(-elementwise // N), 64) * N
        gathers = 1 if index < 2 or index == L else 2  # the last two blocks and the embeddings once
        zero3 += (gathers + 1) * (N - 1) / N * 2 * padded + (gathers + 1) * 2 * sum(matrices)
        dp += 2 * (N - 1) / N * 2 * span
    return zero3 / dp


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    fp32, bf16 = os.path.join(args.bin_dir, "train_gpt_fp32"), os.path.join(args.bin_dir, "train_gpt")
    work = tempfile.mkdtemp(prefix="test_zero3_")
    try:
        data = make_data(os.path.join(work, "data"))
        base = SHAPE + ["--data", data, "--steps", str(STEPS), "--checkpoint-every", "2"]

        # 1 and 2
        refs = {}
        for opt in ("adamw", "muon"):
            for accum in (1, 3):
                refs[opt, accum] = train(fp32, 0, work, f"single_{opt}_{accum}", MODEL,
                                         base + ["--optimizer", opt, "--grad-accum", str(accum), "--batch", str(G // accum)])
        runs = [("adamw", 1, 2, 3), ("adamw", 1, 2, 0), ("adamw", 3, 3, 3), ("adamw", 3, 3, 2), ("adamw", 1, 4, 3),
                ("muon", 1, 3, 3), ("muon", 1, 3, 2), ("muon", 3, 2, 3), ("muon", 3, 2, 2), ("muon", 3, 4, 3)]
        hashes = {}
        for opt, accum, ranks, zero in runs:
            name = f"dp{ranks}_z{zero}_{opt}_a{accum}"
            got = train(fp32, ranks, work, name, MODEL, base + [
                "--optimizer", opt, "--grad-accum", str(accum), "--batch", str(G // (accum * ranks)), "--zero", str(zero)])
            hashes[opt, accum, ranks, zero] = param_hash(got[0], ranks)
            if zero == 3:
                compare(f"fp32 {opt}, {ranks} ranks x {G // (accum * ranks)} x accum {accum}, ZeRO-3", got,
                        refs[opt, accum], STEPS)
        for opt, accum, ranks, other in (("adamw", 1, 2, 0), ("adamw", 3, 3, 2), ("muon", 1, 3, 2), ("muon", 3, 2, 2)):
            a, b = hashes[opt, accum, ranks, 3], hashes[opt, accum, ranks, other]
            check(a is not None and a == b,
                  f"fp32 {opt}, {ranks} ranks, accum {accum}: ZeRO-3 bit-identical to ZeRO-{other} ({a})")

        # 3
        bf = ["--batch", "6", "--grad-accum", "3"]
        out2, _, _ = train(bf16, 2, work, "bf16_z2", MODEL, base + bf + ["--zero", "2"])
        reference = param_hash(out2, 2)
        out3, _, _ = train(bf16, 2, work, "bf16_z3", MODEL, base + bf + ["--zero", "3"])
        check(reference is not None and param_hash(out3, 2) == reference,
              f"bf16, 2 ranks, accum 3: ZeRO-3 bit-identical to ZeRO-2 ({reference})")
        drop_waits = drop_waits_binary()
        short_run = MODEL + SHAPE + ["--data", data, "--steps", "2"] + bf
        short = param_hash(run(MPIRUN + ["-np", "2", bf16] + short_run + ["--zero", "2"], "bf16 ZeRO-2, 2 steps"), 2)
        cmd3 = short_run + ["--zero", "3"]
        for seed in (1, 2):
            got = param_hash(run(MPIRUN + random_order(seed) + ["-np", "2", bf16] + cmd3, f"random order {seed}"), 2)
            check(got == short, f"bf16 ZeRO-3, random stream order (seed {seed}): ZeRO-2's hash {short}")
        for wait, what in (("zero3-gather", "before a gather overwrites a buffer"),
                           ("zero3-compute", "for a gather before its kernels")):
            found = missing_wait_exposed(lambda seed: MPIRUN + random_order(seed) + [
                "-x", f"LLMC_TEST_DROP_WAIT={wait}", "-np", "2", drop_waits] + cmd3, 2, short)
            check(found is not None, f"bf16 ZeRO-3 without the wait {what}, random stream order: the result "
                  f"differs ({exposed_text(found)})")

        ok, out = env_launch([bf16] + short_run + ["--zero", "3"], 2, os.path.join(work, "rendezvous"))
        check(ok and param_hash(out, 2) == short,
              f"bf16 ZeRO-3 launched by environment variables (--rendezvous): ZeRO-2's hash {short}")

        # 4 and 5
        traffic = {}
        for opt in ("adamw", "muon"):
            for zero in (0, 3):
                out, records, _ = train(bf16, 4, work, f"stats_{opt}_z{zero}", MODEL, SHAPE + [
                    "--data", data, "--steps", "1", "--val-every", "0", "--batch", str(G // 4), "--zero", str(zero),
                    "--optimizer", opt, "--comm-stats"])
                traffic[opt, zero] = sum(next(r["comm_bytes"] for r in records if "comm_bytes" in r).values())
                if opt != "adamw" or zero != 3:
                    continue
                want, psi = expected_state(4)
                held = records[0]["state_bytes"]
                got = {k: held.get(k) for k in want}
                model_state = sum(got[k] for k in ("params", "grads", "master", "optimizer"))
                check(got == want, f"bf16 AdamW, 4 ranks, ZeRO-3: rank 0 holds {model_state} bytes of model state "
                      f"(16 Psi / N = {16 * psi / 4:.0f}; the difference: slice padding), gather buffers "
                      f"{got['gather_buffers']}, buckets {got['buckets']}, as the plan gives ({want})")
                table = [line for line in out.splitlines() if line.startswith("  rank ")]
                check(len(table) == 4 and all("gather buffers" in line for line in table),
                      "bf16 AdamW, ZeRO-3: every rank reports its bytes and its gather buffers")
        for opt in ("adamw", "muon"):
            ratio, predicted = traffic[opt, 3] / traffic[opt, 0], predicted_ratio(4, opt == "muon")
            check(abs(ratio - predicted) <= 0.03 * predicted,
                  f"{opt}, 4 ranks: ZeRO-3 sends {ratio:.3f}x plain DP's bytes per step; the shapes predict {predicted:.3f}")

        # 6
        full = train(bf16, 2, work, "full_z3", MODEL, base + ["--batch", str(G // 2), "--zero", "3"])
        fp_full = train(fp32, 2, work, "fp_full_z3", MODEL, base + ["--batch", str(G // 2), "--zero", "3"])
        fp_z1 = train(fp32, 2, work, "fp_full_z1", MODEL, base + ["--batch", str(G // 2), "--zero", "1"])
        cases = [(bf16, full, 2, 3, "bf16 ZeRO-3"), (fp32, fp_full, 3, 2, "fp32 ZeRO-3"),
                 (fp32, fp_full, 0, 0, "fp32 ZeRO-3"), (fp32, fp_z1, 4, 3, "fp32 ZeRO-1")]
        for binary, source, ranks, zero, label in cases:
            got = resume(binary, source, ranks, work, f"resume_{label.replace(' ', '_')}_{ranks}_{zero}", MODEL,
                         base + ["--batch", str(G // max(ranks, 1)), "--zero", str(zero)])
            check_resumed(binary, got, source, label, ranks, zero, STEPS)

        # 7
        texts = {}
        for zero in (0, 3):
            out = run(MPIRUN + ["-np", "2", bf16] + MODEL + SHAPE + [
                "--data", data, "--steps", "2", "--batch", "4", "--val-every", "1", "--val-steps", "2",
                "--sample-len", "12", "--zero", str(zero)], f"samples, ZeRO-{zero}")
            texts[zero] = val_losses_and_sample(out, 2)
        check(len(texts[0][0]) == 3 and texts[0][1] is not None and texts[3] == texts[0],
              f"bf16, 2 ranks: validation and samples under ZeRO-3 print ZeRO-0's ({texts[0][0]}, {texts[0][1]!r})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("ZeRO-3")


if __name__ == "__main__":
    main()
