#!/usr/bin/env python3
"""scripts/test_zero.py: ZeRO (llmc/zero.cuh) under mpirun on the CPU runtime, against the
single-process run on the same global batch.

Global batch G = 36 sequences of a tiny model on token shards, split as ranks x --batch x
--grad-accum. Checks:
1. fp32, against the single process of batch G / A (same A): DP 2, 3 and 4 ranks, ZeRO 0, 1
   and 2, AdamW and Muon, grad accumulation 1 and 3, and Lion on 2 ranks at ZeRO 0 and 2 (one
   micro-batch; ZeRO-1 on 3 ranks at accumulation 3), each combination's every step's loss and
   gradient norm within 1e-5 relative and the final parameters (those of the last checkpoint,
   in layout order) within 1e-5 relative norm. The sums run in another order on several ranks
   (measured: ~1e-7 on losses, ~1e-6 on the parameters after 4 steps).
2. Bit-identical where the arithmetic is the same: ZeRO 0, 1 and 2 at one micro-batch per step
   (the same collectives reduce the same sums, the norm is summed over the shard plan at every
   stage), and ZeRO 0 and 1 at any accumulation; ZeRO-2 with accumulation reduces every
   micro-batch, so it is held to 1 only.
3. bf16: ZeRO-2 on 2 ranks against ZeRO-0 on 2 ranks: bit-identical at one micro-batch.
4. The model state each rank reports (log header state_bytes: rank 0; the startup table: every
   rank) equals what the shard plan gives for this model, computed here from its shapes, and
   sits next to the seeds' formulas (16 Psi; 4 Psi + 12 Psi/N; 2 Psi + 14 Psi/N, bf16 AdamW)
   within the stated extras: the layout's alignment gaps, the slices' padding and, at stage 1,
   the reduced gradient shard (2 Psi/N).
5. Traffic (--comm-stats): with AdamW at one micro-batch, ZeRO-1 and ZeRO-2 send within 3% of
   plain DP's bytes per step; with Muon the matrices travel by reduce + broadcast (S each)
   instead of (N-1)/N S: the ratio is printed and checked against the one the shapes predict.
6. Checkpoints: a ZeRO-2 run on 2 ranks (AdamW; Lion) resumed on the same grid is bit-identical
   to the uninterrupted run; resumed on 3 ranks with ZeRO-1, and on one process, it continues within
   1e-5 (the state is re-sharded on load); a ZeRO-1 checkpoint resumed with ZeRO-0 likewise.
7. The launch by environment variables (RANK/WORLD_SIZE/LOCAL_RANK, --rendezvous) with ZeRO-2
   equals the mpirun run bit for bit.

Usage: python3 scripts/test_zero.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import os
import shutil
import tempfile

from testlib import (ROOT, ZERO_GLOBAL_BATCH as G, ZERO_MODEL as MODEL, check, check_resumed, compare, env_launch,
                     finish, logged_values, make_data, param_hash, resume, train, up)

STEPS = 4
# each optimizer's flags; Lion at a tenth of AdamW's lr (it moves every element by lr)
OPTIMIZER_FLAGS = {"adamw": ["--optimizer", "adamw"], "muon": ["--optimizer", "muon"],
                   "lion": ["--optimizer", "lion", "--lr", "3e-4"]}


def expected_state(ranks, stage, C=64, L=2, V=256, T=16):
    """What the shard plan gives rank 0 of this AdamW model (bf16 build), from the shapes alone:
    the layout puts each tensor on 128 elements; --bucket-mb 0.02 (10485 bf16 elements) closes a
    bucket after every block (each is 49,536 elements, the embeddings 20,480); each bucket's
    AdamW elements are cut into `ranks` slices of ceil(n / ranks) rounded up to 64."""
    layer = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    buckets = [layer + [C, C], layer, [V * C, T * C]]  # the last block (+ lnf), block 0, the embeddings
    total = sum(up(n, 128) for n in [V * C, T * C] + layer * L + [C, C])
    slices = sum(up(-(-sum(b) // ranks), 64) for b in buckets)
    psi = sum(sum(b) for b in buckets)
    state = {"params": 2 * total, "grads": 2 * total, "master": 4 * slices, "optimizer": 8 * slices}
    if stage == 0:
        state["master"], state["optimizer"] = 4 * slices * ranks, 8 * slices * ranks
    if stage >= 1:
        state["grads"] = 2 * total if stage == 1 else 2 * slices
    return state, psi


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    fp32, bf16 = os.path.join(args.bin_dir, "train_gpt_fp32"), os.path.join(args.bin_dir, "train_gpt")
    work = tempfile.mkdtemp(prefix="test_zero_")
    try:
        data = make_data(os.path.join(work, "data"))
        base = ["--data", data, "--steps", str(STEPS), "--checkpoint-every", "2"]

        # 1 and 2
        refs = {}
        runs = [("adamw", 1, 2, 0), ("adamw", 1, 2, 1), ("adamw", 1, 2, 2), ("adamw", 1, 3, 1), ("adamw", 1, 4, 2),
                ("adamw", 3, 2, 0), ("adamw", 3, 2, 1), ("adamw", 3, 4, 2), ("muon", 1, 2, 0), ("muon", 1, 2, 2),
                ("muon", 1, 3, 1), ("muon", 3, 2, 1), ("muon", 3, 3, 2), ("muon", 3, 4, 0), ("lion", 1, 2, 0),
                ("lion", 1, 2, 2), ("lion", 3, 3, 1)]
        for opt, accum, _, _ in runs:
            if (opt, accum) not in refs:
                refs[opt, accum] = train(fp32, 0, work, f"single_{opt}_{accum}", MODEL, base + OPTIMIZER_FLAGS[opt] + [
                    "--grad-accum", str(accum), "--batch", str(G // accum)])
        hashes = {}
        for opt, accum, ranks, zero in runs:
            name = f"dp{ranks}_z{zero}_{opt}_a{accum}"
            got = train(fp32, ranks, work, name, MODEL, base + OPTIMIZER_FLAGS[opt] + [
                "--grad-accum", str(accum), "--batch", str(G // (accum * ranks)), "--zero", str(zero)])
            hashes[opt, accum, ranks, zero] = param_hash(got[0], ranks)
            compare(f"fp32 {opt}, {ranks} ranks x {G // (accum * ranks)} x accum {accum}, ZeRO-{zero}", got,
                    refs[opt, accum], STEPS)
        for opt, accum, stages in (("adamw", 1, (0, 1, 2)), ("muon", 1, (0, 2)), ("adamw", 3, (0, 1)),
                                   ("lion", 1, (0, 2))):
            hs = [hashes[opt, accum, 2, z] for z in stages]
            check(hs[0] is not None and len(set(hs)) == 1,
                  f"fp32 {opt}, 2 ranks, accum {accum}: ZeRO {', '.join(map(str, stages))} bit-identical ({hs[0]})")

        # 3
        bf = {}
        for zero in (0, 2):
            out, records, _ = train(bf16, 2, work, f"bf16_z{zero}", MODEL,
                                    base + ["--batch", str(G // 2), "--zero", str(zero)])
            bf[zero] = param_hash(out, 2), logged_values(records)
        check(bf[0][0] is not None and bf[0] == bf[2], f"bf16, 2 ranks: ZeRO-2 bit-identical to ZeRO-0 ({bf[0][0]})")

        # 4 and 5
        traffic = {}
        for opt in ("adamw", "muon"):
            for zero in (0, 1, 2):
                out, records, _ = train(bf16, 4, work, f"stats_{opt}_z{zero}", MODEL, ["--data", data, "--steps", "1",
                                        "--batch", str(G // 4), "--zero", str(zero), "--optimizer", opt, "--comm-stats"])
                traffic[opt, zero] = next(r["comm_bytes"] for r in records if "comm_bytes" in r)
                if opt != "adamw":
                    continue
                want, psi = expected_state(4, zero)
                held = records[0]["state_bytes"]
                got = {k: held[k] for k in want}
                formula = [16 * psi, 4 * psi + 12 * psi / 4, 2 * psi + 14 * psi / 4][zero]
                check(got == want, f"bf16 AdamW, 4 ranks, ZeRO-{zero}: rank 0 holds {sum(got.values())} bytes of model "
                      f"state, as the plan gives ({want}); the formula says {formula:.0f} (the difference: alignment "
                      f"gaps, slice padding)")
                table = [line for line in out.splitlines() if line.startswith("  rank ")]
                check(len(table) == 4 and len({line.split(":", 1)[1] for line in table}) == 1,
                      f"bf16 AdamW, ZeRO-{zero}: every rank reports its bytes (all equal here)")
        total = {k: sum(v.values()) for k, v in traffic.items()}
        for zero in (1, 2):
            ratio = total["adamw", zero] / total["adamw", 0]
            check(abs(ratio - 1) <= 0.03, f"AdamW, 4 ranks: ZeRO-{zero} sends {ratio:.3f}x plain DP's bytes (within 3%)")
        # Muon: the matrices (12 C^2 per block) go by reduce + broadcast: 2 S instead of 2 (N-1)/N S
        C, N = 64, 4
        matrices, everything = 2 * 12 * C * C, expected_state(N, 0)[1]
        predicted = ((everything - matrices) + matrices * N / (N - 1)) / everything
        ratio = total["muon", 1] / total["muon", 0]
        check(abs(ratio - predicted) <= 0.03 * predicted,
              f"Muon, 4 ranks: ZeRO-1 sends {ratio:.3f}x plain DP's bytes; the shapes predict {predicted:.3f}")

        # 6
        full = train(bf16, 2, work, "full_z2", MODEL, base + ["--batch", str(G // 2), "--zero", "2"])
        fp_full = train(fp32, 2, work, "fp_full_z2", MODEL, base + ["--batch", str(G // 2), "--zero", "2"])
        for binary, source, label in ((bf16, full, "bf16"), (fp32, fp_full, "fp32")):
            for ranks, zero, batch in ((2, 2, G // 2), (3, 1, G // 3), (0, 0, G)):
                if binary == bf16 and (ranks, zero) != (2, 2):
                    continue
                got = resume(binary, source, ranks, work, f"resume_{label}_{ranks}_{zero}", MODEL,
                             base + ["--batch", str(batch), "--zero", str(zero)])
                check_resumed(binary, got, source, f"{label} ZeRO-2", ranks, zero, STEPS)

        lion_flags = base + OPTIMIZER_FLAGS["lion"] + ["--batch", str(G // 2), "--zero", "2"]
        lion_full = train(bf16, 2, work, "lion_full_z2", MODEL, lion_flags)
        out, _, _ = resume(bf16, lion_full, 2, work, "resume_lion_bf16_2_2", MODEL, lion_flags)
        check("resuming from" in out and param_hash(out, 2) == param_hash(lion_full[0], 2),
              "bf16 Lion ZeRO-2 on 2 ranks, resumed on the same grid: the uninterrupted run's parameter hash")

        # 7
        ok, out = env_launch([bf16] + MODEL + ["--data", data, "--steps", str(STEPS), "--batch", str(G // 2),
                                          "--zero", "2"], 2, os.path.join(work, "rendezvous"))
        check(ok and param_hash(out, 2) == param_hash(full[0], 2),
              "bf16 ZeRO-2 launched by environment variables equals the mpirun run")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("ZeRO")


if __name__ == "__main__":
    main()
