#!/usr/bin/env python3
"""Data parallelism of train_gpt, checked against the single-process trainer on the same data.

Runs the CPU-runtime binaries (make cpu: build/cpu/train_gpt_fp32 and build/cpu/train_gpt, built
with -DMULTI_GPU) under mpirun on a tiny model, on token shards this script writes and on random
tokens, and checks:

1. fp32, N ranks of batch B against one process of batch N*B (the same global batches: the loader
   and the random-token generator give rank r rows [r*B, (r+1)*B) of each global batch), N = 2
   with shards and gradient accumulation, N = 3 with random tokens, N = 2 with Muon, QK-norm and
   z-loss: every step's train loss, gradient norm and validation loss agree within LOSS_RTOL;
   AdamW's moments and Muon's momentum after step 1 (the averaged gradient) within GRAD_RTOL and
   the final parameters' change within PARAM_RTOL, in relative norm ||a - b|| / ||b|| (from the
   checkpoints). Only the order of the sums differs.
2. Every rank ends with bit-identical parameters: the trainer gathers a hash of each rank's
   parameters and prints "parameter hash H on each of N ranks" only when all are equal (it
   exits non-zero otherwise); checked for bf16 and fp32, on 2 and 3 ranks.
3. mpirun -np 1 equals the plain run bit for bit (bf16): the same losses in the log, the same
   parameter hash, and identical checkpoint files (testlib's checkpoint_hash: byte for byte
   but each save's random id).
4. Resuming under mpirun -np 2 from a checkpoint (all ranks load the file rank 0 wrote)
   continues exactly: the final checkpoint equals the uninterrupted run's (checkpoint_hash).
5. The gradient buckets and the communication stream (llmc/zero.cuh): one bucket per block
   (--bucket-mb 0.01) and one for everything give the same parameter hash, also when the CPU
   runtime runs the streams' work in random orders (CUCC_SCHEDULE=random, several seeds); and a
   trainer without the communication stream's wait for the backward pass (LLMC_TEST_DROP_WAIT=
   dp-backward in the -DTEST_DROP_WAITS build) gives another result under one of those orders
   (seeds tried until one does, at most six: testlib.missing_wait_exposed), so the test sees a
   missing wait.
6. The launch without MPI (RANK/WORLD_SIZE/LOCAL_RANK and a --rendezvous folder) gives the
   mpirun run's parameter hash, and the folder is empty afterwards.

Usage: python3 scripts/test_dp.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import math
import os
import shutil
import sys
import tempfile

import numpy as np

from testlib import (MPIRUN, ROOT, check, checkpoint_array, checkpoint_hash, env_launch, exposed_text, final_checkpoint,
                     finish, logged_values, make_data, missing_wait_exposed, param_hash, random_order, rel, resume, run,
                     train, drop_waits_binary)

MODEL = ["--vocab", "256", "--layers", "2", "--heads", "2", "--embd", "64", "--seq", "32",
         "--lr", "1e-3", "--warmup", "1", "--seed", "5"]
# fp32 sums in another order differ by a few ulps: ~1e-7 relative in losses, norms and the
# averaged gradient (measured 3e-7 and 4e-7). Parameters differ more: AdamW divides each
# gradient element by its own magnitude, so elements whose gradient is near eps (1e-8) carry
# their relative rounding error into the update undamped (measured 2e-5 to 5e-5, the same as
# a single process accumulating micro-batches in place of ranks). A wrong average, a rank
# reading the wrong rows or a skipped all-reduce moves all of these by 1e-3 or more.
LOSS_RTOL = 1e-6
GRAD_RTOL = 1e-5
PARAM_RTOL = 1e-3

def section(path, name):
    """Section `name` of a checkpoint of the fp32 build, in layout order, as float64."""
    return checkpoint_array(path, name).astype(np.float64)


def compare_with_single(bin_dir, workdir, ranks, batch, accum, extra, steps, label):
    """Checks 1 and 2: `ranks` processes of batch B against one of batch ranks*B."""
    fp32 = os.path.join(bin_dir, "train_gpt_fp32")
    args = extra + ["--steps", str(steps), "--checkpoint-every", "1", "--grad-accum", str(accum)]
    out_dp, log_dp, ckpt_dp = train(fp32, ranks, workdir, f"dp{ranks}", MODEL, args + ["--batch", str(batch)])
    _, log_one, ckpt_one = train(fp32, 0, workdir, f"single{ranks}", MODEL, args + ["--batch", str(ranks * batch)])
    check(param_hash(out_dp, ranks) is not None, f"{label}: parameters bit-identical on all {ranks} ranks")
    a, b = logged_values(log_dp), logged_values(log_one)
    check(a.keys() == b.keys() and len(b) >= 2 * steps, f"{label}: the same {len(b)} logged losses and norms")
    worst = max((abs(a[k] - b[k]) / abs(b[k]) for k in b if k in a), default=math.inf)
    check(worst <= LOSS_RTOL, f"{label}: losses and gradient norms agree, max relative difference {worst:.2e} <= {LOSS_RTOL:.0e}")
    # After one step AdamW's moments are (1 - beta) g and (1 - beta2) g^2 of the averaged gradient
    # g, and Muon's momentum (1 - mu) g.
    first_dp, first_one = final_checkpoint(ckpt_dp, 1), final_checkpoint(ckpt_one, 1)
    for name in ("optimizer.adamw.m", "optimizer.adamw.v", "optimizer.muon.momentum"):
        if not section(first_one, name).any():
            continue  # no Muon tensors
        err = rel(section(first_dp, name), section(first_one, name))
        check(err <= GRAD_RTOL, f"{label}: step 1 {name} (the averaged gradient) relative norm error {err:.2e} <= {GRAD_RTOL:.0e}")
    # Parameters, through their change since initialization (--lr 0 writes the initial ones).
    _, _, ckpt_init = train(fp32, 0, workdir, f"init{ranks}", MODEL,
                            extra + ["--steps", "1", "--lr", "0", "--batch", str(ranks * batch)])
    p0 = section(final_checkpoint(ckpt_init, 1), "params")
    p_one = section(final_checkpoint(ckpt_one, steps), "params")
    err = rel(section(final_checkpoint(ckpt_dp, steps), "params") - p0, p_one - p0)
    check(err <= PARAM_RTOL, f"{label}: step {steps} parameter changes agree, relative norm error {err:.2e} <= {PARAM_RTOL:.0e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"),
                        help="folder with train_gpt and train_gpt_fp32 built by make cpu (default build/cpu)")
    args = parser.parse_args()
    for name in ("train_gpt", "train_gpt_fp32"):
        if not os.path.exists(os.path.join(args.bin_dir, name)):
            sys.exit(f"missing {args.bin_dir}/{name}: build it with make cpu")
    if shutil.which("mpirun") is None:
        sys.exit("missing mpirun: apt-get install openmpi-bin libopenmpi-dev")
    workdir = tempfile.mkdtemp(prefix="test_dp_")
    try:
        data = make_data(os.path.join(workdir, "data"))
        shards = ["--data", data, "--val-every", "3", "--val-steps", "2", "--sample-len", "8"]

        # 1 and 2: against the single-process run on the same global batches.
        compare_with_single(args.bin_dir, workdir, 2, 2, 2, shards, 6, "fp32, shards, 2 ranks x batch 2 x accum 2 vs batch 4")
        compare_with_single(args.bin_dir, workdir, 3, 1, 1, [], 5, "fp32, random tokens, 3 ranks x batch 1 vs batch 3")
        compare_with_single(args.bin_dir, workdir, 2, 2, 1, ["--optimizer", "muon", "--qk-norm", "--z-loss", "1e-3"], 4,
                            "fp32, random tokens, Muon + QK-norm + z-loss, 2 ranks x batch 2 vs batch 4")

        bf16 = os.path.join(args.bin_dir, "train_gpt")
        out, _, _ = train(bf16, 3, workdir, "bf16_3", MODEL, ["--batch", "2", "--steps", "4"])
        check(param_hash(out, 3) is not None, "bf16, random tokens: parameters bit-identical on all 3 ranks")

        # 3: mpirun -np 1 is the plain run, bit for bit.
        one = shards + ["--batch", "3", "--steps", "6", "--checkpoint-every", "3"]
        out_plain, log_plain, ckpt_plain = train(bf16, 0, workdir, "plain", MODEL, one)
        out_np1, log_np1, ckpt_np1 = train(bf16, 1, workdir, "np1", MODEL, one)
        check(logged_values(log_plain) == logged_values(log_np1), "bf16: mpirun -np 1 logs the same losses as the plain run")
        h_plain, h_np1 = param_hash(out_plain, 1), param_hash(out_np1, 1)
        check(h_plain is not None and h_plain == h_np1, f"bf16: the same parameter hash ({h_plain} vs {h_np1})")
        for step in (3, 6):
            same = checkpoint_hash(final_checkpoint(ckpt_plain, step)) == checkpoint_hash(final_checkpoint(ckpt_np1, step))
            check(same, f"bf16: mpirun -np 1 writes the same checkpoint bytes at step {step}")

        # 4: resume on 2 ranks from the step-3 checkpoint of a 2-rank run.
        two = shards + ["--batch", "2", "--steps", "6", "--checkpoint-every", "3"]
        full = train(bf16, 2, workdir, "full2", MODEL, two)
        check(param_hash(full[0], 2) is not None, "bf16, shards: parameters bit-identical on both ranks")
        out_res, _, resumed = resume(bf16, full, 2, workdir, "resumed2", MODEL, two, step=3)
        check("resuming from" in out_res and param_hash(out_res, 2) == param_hash(full[0], 2),
              "bf16: resumed 2-rank run ends with the uninterrupted run's parameter hash")
        same = checkpoint_hash(final_checkpoint(resumed, 6)) == checkpoint_hash(final_checkpoint(full[2], 6))
        check(same, "bf16: resumed 2-rank run writes the uninterrupted run's final checkpoint bytes")

        # 5: buckets and stream order.
        tiny = shards + ["--batch", "2", "--steps", "2", "--val-every", "0"]
        out_one, _, _ = train(bf16, 2, workdir, "one_bucket", MODEL, tiny)
        reference = param_hash(out_one, 2)
        drop = drop_waits_binary()
        bucketed = MODEL + tiny + ["--bucket-mb", "0.01"]
        for seed in (1, 2, 3):
            out = run(MPIRUN + random_order(seed) + ["-np", "2", bf16] + bucketed, f"buckets, random order {seed}")
            check(param_hash(out, 2) == reference,
                  f"bf16: a bucket per block, random stream order (seed {seed}): the one-bucket run's hash {reference}")
        found = missing_wait_exposed(lambda seed: MPIRUN + random_order(seed) + [
            "-x", "LLMC_TEST_DROP_WAIT=dp-backward", "-np", "2", drop] + bucketed, 2, reference)
        check(found is not None, f"bf16: without the wait, random stream order, the result differs "
              f"({exposed_text(found)})")

        # 6: the launch by environment variables, with a rendezvous folder.
        rdv = os.path.join(workdir, "rendezvous")
        ok, out = env_launch([bf16] + MODEL + tiny, 2, rdv)
        check(ok and param_hash(out, 2) == reference and not os.listdir(rdv),
              f"bf16: the environment launch with --rendezvous gives the mpirun run's hash {reference}, folder left empty")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    finish("data-parallel")

if __name__ == "__main__":
    main()
