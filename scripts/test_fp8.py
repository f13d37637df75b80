#!/usr/bin/env python3
"""scripts/test_fp8.py: the FP8 recipes of the trainer (--fp8, llmc/fp8_linear.cuh) in the bf16
build on the CPU runtime: training, the grids, resuming, the memory plan and the refusals.
(Their arithmetic against PyTorch is test_gpt's, on scripts/reference.py --fp8 dumps.)

A tiny model (2 blocks, 4 heads of 32, width 128, vocabulary 256, T 16) trained on token shards
for 4 steps on a global batch of G = 8 sequences. Checks:
1. Every recipe trains: each step's loss within FP8_LOSS of the bf16 run's (the recipes
   quantize every input, weight and gradient of 24 matmuls to 3 or 2 mantissa bits; a wrong
   scale, a transposed operand or a missing term moves the loss by far more), the startup
   report names the recipe, and the memory plan equals what the run allocated, byte for byte
   (the CPU runtime's allocator; the plan counts every FP8 copy and scale).
2. The grids reproduce one process running the same recipe on the same global batch, within
   the bf16 bound of the tensor-parallel tests (BF16_LOSS, scripts/test_tp.py): every recipe on
   tp 2 (the amaxes of the cut tensors reduced over the group, so each rank quantizes as one
   process would: dev/cuda/fp8_tensor_parallel.cu checks that byte for byte), row-wise and block
   with sequence parallelism, the per-tensor recipes on dp 2 with ZeRO-3 against one process
   accumulating 2 micro-batches (delayed scaling's amaxes reduced over the ranks); every rank of
   a run ends with the same model (the trainer's hash check).
   Block scaling needs each rank's cut at a 128 boundary: its grid runs use width 256. MXFP8
   runs on the CPU runtime's simulated Blackwell (CUCC_COMPUTE_CAPABILITY=10.0).
3. Delayed scaling's state (amax histories and scales) is in the checkpoint: a run on 2 ranks
   resumed from its step-2 checkpoint ends with the uninterrupted run's parameter hash.
4. Refusals, each with its message: --fp8 mx on a device without MXFP8 (the simulated Hopper
   names its architecture), --fp8 block where cuBLASLt has no block scales (a simulated
   Blackwell); --fp8 block under tp 2 where a rank's cut is not a multiple of
   128; --fp8 in the fp32 build; a micro-batch whose rows are not a multiple of 16;
   --fp8-allgather without --zero 3, without --fp8, with rowwise, block or mx, and with
   --fp8 tensor under tp 2.
5. --fp8-allgather (llmc/zero_fp8.cuh) on dp 2 with ZeRO-3: --fp8 tensor, --fp8 delayed and
   --fp8 tensor with Muon (its matrices broadcast as FP8 bytes) end with the parameter hash of
   the same run gathering bf16 (the scales are the whole weights', so the gathered bytes are
   those of quantizing the gathered bf16 weights, bit for bit), and the plan equals what the run
   allocated. Traffic (--comm-stats, one step; with 2 blocks every unit is gathered once per
   step; less the monitors' one all-gather of L + 10 words a rank): the all-gathers' and
   broadcasts' bytes equal those the shard plan predicts from the
   shapes (gather_traffic: a block's contribution is each rank's bf16 elements at 2 bytes and
   FP8 elements at 1, padded to the largest rank's, a multiple of 128 bytes), next to the
   seeds' per-element formula (1 byte per FP8 weight element + 2 per other element, + a 4-byte
   amax per weight with --fp8 tensor, against 2 bytes per element; printed, the difference
   being slice padding); --fp8 tensor adds one all-reduce of the 4 weights' amaxes per block
   gather, delayed none.
6. The Llama block (--arch llama, 2 of 4 kv heads, SwiGLU of 256 hidden units, an untied head):
   its FP8 layers read [q | k | v] (256 rows, not 3C) and [gate | up] (2 x 256) as one matrix
   each. Every recipe trains within FP8_LOSS of the Llama bf16 run with the plan equal to the
   allocation; --fp8 rowwise on tp 2 (one kv head a rank; and with --kv-heads 1, the one kv head
   on both ranks, against one process with 1 kv head) and --fp8 tensor on dp 2 with ZeRO-3
   reproduce one process within BF16_LOSS; --fp8-allgather as part 5 (tensor, delayed, tensor
   with Muon: the bf16 gather's parameter hash, the plan, the traffic; q, k and v land in the one
   [q | k | v] FP8 weight, gate and up in [gate | up], so a block's --fp8 tensor gather reduces 4
   amaxes, as GPT-2's); --fp8 delayed with --fp8-lm-head (the untied head's history too)
   resumed at step 2 on 2 ranks ends with the uninterrupted run's parameter hash.

Usage: python3 scripts/test_fp8.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import os
import shutil
import subprocess
import tempfile

from testlib import (MPIRUN, ROOT, check, check_resumed, finish, logged_values, make_data, param_hash,
                     resume, train, up)

G, STEPS = 8, 4
MODEL = ["--vocab", "256", "--layers", "2", "--heads", "4", "--embd", "128", "--seq", "16", "--lr", "3e-3",
         "--warmup", "1", "--seed", "5", "--val-every", "0", "--sample-len", "0"]
WIDE = MODEL[:4] + ["--heads", "8", "--embd", "256"] + MODEL[8:]
RECIPES = ["tensor", "delayed", "rowwise", "block", "mx"]
LLAMA = MODEL + ["--arch", "llama", "--kv-heads", "2", "--mlp-hidden", "256", "--tie-embeddings", "0"]
C, V, T, L = 128, 256, 16, 2  # MODEL's shapes
BF16_LOSS = 4e-3  # scripts/test_tp.py's bound for a grid against one process in bf16
FP8_LOSS = 2e-2


def worst_loss_diff(got, want):
    a, b = logged_values(got[1]), logged_values(want[1])
    return max(abs(a[k] - b[k]) / abs(b[k]) for k in b if k[0] == "train_loss")


def planned_and_allocated(records):
    header = records[0]
    allocated = next(r["allocated_bytes"] for r in records if "allocated_bytes" in r)
    return header["plan_bytes"]["total"], allocated


def unit_tensors(llama=False):
    """The units ZeRO-3 gathers (llmc/zero.cuh), each a list of (elements, an FP8 weight?) in
    layout order: the last block with the final LayerNorm, the other block, the embeddings.
    llama: LLAMA's (ln1, q, k and v of 2 kv heads of 32, proj, ln2, gate and up of 256, down;
    lnf.w; wte and the untied lm head)."""
    if llama:
        block = [(C, 0), (C * C, 1), (64 * C, 1), (64 * C, 1), (C * C, 1), (C, 0), (256 * C, 1), (256 * C, 1),
                 (256 * C, 1)]
        return [block + [(C, 0)], block, [(V * C, 0), (V * C, 0)]]
    block = [(C, 0), (C, 0), (3 * C * C, 1), (3 * C, 0), (C * C, 1), (C, 0), (C, 0), (C, 0), (4 * C * C, 1),
             (4 * C, 0), (4 * C * C, 1), (C, 0)]
    return [block + [(C, 0), (C, 0)], block, [(V * C, 0), (T * C, 0)]]


def gather_traffic(ranks, fp8, muon, llama=False):
    """Bytes one step's ZeRO-3 gathers send from a rank (ring convention: an all-gather (N-1)/N of
    all ranks' contributions, a broadcast its bytes), every unit gathered once: (all-gather,
    broadcast). A unit's element-wise tensors (under Muon the weights are matrices, broadcast by
    their owners) are packed and cut into `ranks` slices of ceil(n / ranks) rounded up to 64
    elements; a bf16 gather sends 2 bytes per slice element; with --fp8-allgather a unit with
    FP8 weights sends from each rank its bf16 elements (2 bytes) and FP8 elements (1 byte),
    padded to the largest rank's, rounded up to 128 bytes."""
    all_gather = broadcast = 0
    for tensors in unit_tensors(llama):
        elementwise = [(n, w) for n, w in tensors if not (muon and w)]
        packed = sum(n for n, _ in elementwise)
        slice_ = up(-(-packed // ranks), 64)
        contribution = 2 * slice_
        if fp8 and any(w for _, w in tensors):
            sizes = []
            for r in range(ranks):
                lo, hi, at, size = r * slice_, min((r + 1) * slice_, packed), 0, 0
                for n, w in elementwise:
                    size += max(0, min(hi, at + n) - max(lo, at)) * (1 if w else 2)
                    at += n
                sizes.append(size)
            contribution = up(max(sizes), 128)
        all_gather += (ranks - 1) * contribution
        broadcast += sum(n for n, w in tensors if muon and w) * (1 if fp8 else 2)
    return all_gather, broadcast


def simulate(recipe):
    """MXFP8 runs on a simulated Blackwell (the CPU runtime's CUCC_COMPUTE_CAPABILITY), the other
    recipes on its default Hopper, where cuBLASLt offers row-wise and block scales."""
    if recipe == "mx":
        os.environ["CUCC_COMPUTE_CAPABILITY"] = "10.0"
    else:
        os.environ.pop("CUCC_COMPUTE_CAPABILITY", None)


def refused(cmd, text, label):
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", cwd=ROOT, timeout=300)
    out = proc.stdout + proc.stderr
    said = next((line for line in out.splitlines() if text in line), out.strip()[-200:])
    check(proc.returncode != 0 and text in out, label, said)


def check_allgather(bf16, work, z3, model, label, want, llama):
    """Part 5's check of one --fp8-allgather run (label: the recipe, "muon" at its end for Muon)
    on dp 2 with ZeRO-3 (z3: the run's flags with --comm-stats) of `model` against `want`, the
    same run gathering bf16: the parameter hash, the plan, the traffic against gather_traffic."""
    recipe, muon = label.split()[0], label.endswith("muon")
    name = ("llama " if llama else "") + label
    simulate(recipe)
    got = train(bf16, 2, work, f"{name.replace(' ', '_')}_z3_allgather", model,
                z3 + ["--fp8", recipe, "--fp8-allgather"] + (["--optimizer", "muon"] if muon else []),
                checkpoints=False)
    planned, allocated = planned_and_allocated(got[1])
    ours, theirs = param_hash(got[0], 2), param_hash(want[0], 2)
    check(ours is not None and ours == theirs and planned == allocated and "in FP8 (--fp8-allgather)" in got[0],
          f"{'--arch llama ' if llama else ''}--fp8 {label}, dp 2, ZeRO-3: --fp8-allgather ends with parameter "
          f"hash {ours}, the bf16 gather's {theirs}; planned {planned} bytes = allocated {allocated}")
    # the step's all-gathers include the monitors' vector (train_gpt.cu's Monitors: L + 10
    # words from every rank), which is not ZeRO's
    monitors = (2 - 1) * (L + 10) * 4
    sent, sent_bf16 = ({**c, "all_gather": c["all_gather"] - monitors} for c in
                       (next(r["comm_bytes"] for r in run[1] if "comm_bytes" in r) for run in (got, want)))
    predicted, predicted_bf16 = gather_traffic(2, True, muon, llama), gather_traffic(2, False, muon, llama)
    # one amax a weight of a block (Llama's [q | k | v] and [gate | up] one each: 4 a block)
    amax_bytes = L * 2 * (2 - 1) / 2 * 4 * 4 if recipe == "tensor" else 0
    measured = (sent["all_gather"], sent["broadcast"], sent["all_reduce"] - sent_bf16["all_reduce"])
    # the blocks' gathers (the embeddings' are bf16 in both) against the seeds' formula
    emb = (2 - 1) * 2 * up(-(-sum(n for n, _ in unit_tensors(llama)[2]) // 2), 64)
    weights = sum(n for u in unit_tensors(llama)[:2] for n, w in u if w)
    other = sum(n for u in unit_tensors(llama)[:2] for n, w in u if not w)
    fp8_sent = sent["all_gather"] + sent["broadcast"] - emb + measured[2]
    bf16_sent = sent_bf16["all_gather"] + sent_bf16["broadcast"] - emb
    formula = (weights + 2 * other + 4 * 4 * L * (recipe == "tensor")) / (2 * (weights + other))
    check(measured == predicted + (amax_bytes,) and (sent_bf16["all_gather"], sent_bf16["broadcast"]) ==
          predicted_bf16,
          f"{'--arch llama ' if llama else ''}--fp8 {label}: all-gather {sent['all_gather']} + broadcast "
          f"{sent['broadcast']} bytes (bf16 gather: {sent_bf16['all_gather']} + {sent_bf16['broadcast']}), the plan "
          f"predicts {predicted[0]} + {predicted[1]} ({predicted_bf16[0]} + {predicted_bf16[1]}); the amax "
          f"all-reduces {measured[2]:.0f} bytes (predicted {amax_bytes:.0f}). The blocks' gathers: {fp8_sent:.0f} "
          f"bytes against {bf16_sent} in bf16, {fp8_sent / bf16_sent:.4f}x; the seeds' formula (1 byte per FP8 "
          f"weight element + 2 per other + tensor's 4-byte amax per weight, over 2 per element) {formula:.4f}")


def check_llama(bf16, work, base):
    """Part 6: the Llama block's FP8 layers, alone and on the grids, and resuming."""
    simulate("tensor")
    plain = train(bf16, 0, work, "llama_bf16", LLAMA, base + ["--batch", str(G)], checkpoints=False)
    single = {}
    for recipe in RECIPES:
        simulate(recipe)
        single[recipe] = train(bf16, 0, work, f"llama_{recipe}", LLAMA, base + ["--batch", str(G), "--fp8", recipe],
                               checkpoints=False)
        worst = worst_loss_diff(single[recipe], plain)
        planned, allocated = planned_and_allocated(single[recipe][1])
        check(worst <= FP8_LOSS and f"fp8: recipe {recipe}," in single[recipe][0] and planned == allocated,
              f"--arch llama --fp8 {recipe}: losses within {worst:.1e} <= {FP8_LOSS:.0e} of bf16, planned {planned} "
              f"bytes = allocated {allocated}")
    simulate("tensor")
    accum2 = train(bf16, 0, work, "llama_tensor_a2", LLAMA,
                   base + ["--fp8", "tensor", "--batch", str(G // 2), "--grad-accum", "2"], checkpoints=False)
    # 1 kv head on both ranks of tp 2 (replicated kv heads): against one process with 1 kv head
    mqa = ["--kv-heads", "1", "--fp8", "rowwise", "--batch", str(G)]
    single_mqa = train(bf16, 0, work, "llama_rowwise_mqa", LLAMA, base + mqa, checkpoints=False)
    z3 = ["--zero", "3", "--batch", str(G // 2), "--comm-stats"]
    zero3 = {}
    for recipe, grid, ref, label in (("rowwise", ["--tp", "2", "--batch", str(G)], single["rowwise"], "tp 2"),
                                     ("rowwise", mqa + ["--tp", "2"], single_mqa, "tp 2 with 1 kv head on both ranks"),
                                     ("tensor", z3, accum2, "dp 2, ZeRO-3")):
        simulate(recipe)
        got = train(bf16, 2, work, f"llama_{recipe}_grid{len(grid)}", LLAMA, base + ["--fp8", recipe] + grid,
                    checkpoints=False)
        zero3[recipe] = got
        worst = worst_loss_diff(got, ref)
        planned, allocated = planned_and_allocated(got[1])
        check(worst <= BF16_LOSS and param_hash(got[0], 2) is not None and planned == allocated,
              f"--arch llama --fp8 {recipe}, {label}: losses within {worst:.1e} <= {BF16_LOSS:.0e} of one process; "
              f"every rank the same model; planned {planned} bytes = allocated {allocated}")
    # --fp8-allgather: as part 5, against the same runs gathering bf16
    for label, flags in (("delayed", ["--fp8", "delayed"]), ("tensor muon", ["--fp8", "tensor", "--optimizer", "muon"])):
        simulate(label.split()[0])
        zero3[label] = train(bf16, 2, work, f"llama_{label.replace(' ', '_')}_z3", LLAMA, base + z3 + flags,
                             checkpoints=False)
    for label in ("tensor", "delayed", "tensor muon"):
        check_allgather(bf16, work, base + z3, LLAMA, label, zero3[label], True)
    simulate("delayed")
    delayed = ["--fp8", "delayed", "--fp8-lm-head", "--zero", "1", "--batch", str(G // 2), "--checkpoint-every", "2"]
    source = train(bf16, 2, work, "llama_delayed_dp2", LLAMA, base + delayed)
    got = resume(bf16, source, 2, work, "llama_delayed_dp2_resumed", LLAMA, base + delayed)
    check_resumed(bf16, got, source, "--arch llama --fp8 delayed --fp8-lm-head ZeRO-1", 2, 1, STEPS)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    bf16, fp32 = os.path.join(args.bin_dir, "train_gpt"), os.path.join(args.bin_dir, "train_gpt_fp32")
    work = tempfile.mkdtemp(prefix="test_fp8_")
    os.environ.pop("CUCC_COMPUTE_CAPABILITY", None)
    try:
        data = make_data(os.path.join(work, "data"))
        base = ["--data", data, "--steps", str(STEPS)]

        # 1
        plain = train(bf16, 0, work, "bf16", MODEL, base + ["--batch", str(G)], checkpoints=False)
        single = {}
        for recipe in RECIPES:
            simulate(recipe)
            single[recipe] = train(bf16, 0, work, f"single_{recipe}", MODEL,
                                   base + ["--batch", str(G), "--fp8", recipe], checkpoints=False)
            worst = worst_loss_diff(single[recipe], plain)
            planned, allocated = planned_and_allocated(single[recipe][1])
            check(worst <= FP8_LOSS and f"fp8: recipe {recipe}," in single[recipe][0] and planned == allocated,
                  f"--fp8 {recipe}: losses within {worst:.1e} <= {FP8_LOSS:.0e} of bf16, planned {planned} "
                  f"bytes = allocated {allocated}")

        # 2: (recipe, tp, dp, accum, zero, sequence parallel)
        grids = [("tensor", 2, 1, 1, 0, False), ("delayed", 2, 1, 1, 0, False), ("rowwise", 2, 1, 1, 0, True),
                 ("block", 2, 1, 1, 0, True), ("mx", 2, 1, 1, 0, False), ("tensor", 1, 2, 1, 3, False),
                 ("delayed", 1, 2, 1, 3, False)]
        # one process at one micro-batch on MODEL is part 1's run of the recipe (block's grids use WIDE)
        refs = {(recipe, 1): single[recipe] for recipe in RECIPES if recipe != "block"}
        zero3 = {}
        for recipe, tp, dp, accum, zero, sp in grids:
            simulate(recipe)
            model = WIDE if recipe == "block" else MODEL
            local_accum = accum * (2 if dp > 1 else 1)
            key = (recipe, local_accum)
            if key not in refs:
                refs[key] = train(bf16, 0, work, f"ref_{recipe}_a{local_accum}", model,
                                  base + ["--fp8", recipe, "--batch", str(G // local_accum), "--grad-accum",
                                          str(local_accum)], checkpoints=False)
            name = f"{recipe}_tp{tp}_dp{dp}_z{zero}{'_sp' if sp else ''}"
            got = train(bf16, tp * dp, work, name, model,
                        base + ["--fp8", recipe, "--tp", str(tp), "--zero", str(zero), "--batch",
                                str(G // (dp * accum)), "--grad-accum", str(accum)] +
                        (["--sequence-parallel"] if sp else []) + (["--comm-stats"] if zero == 3 else []),
                        checkpoints=False)
            if zero == 3:
                zero3[recipe] = got
            worst = worst_loss_diff(got, refs[key])
            check(worst <= BF16_LOSS and param_hash(got[0], tp * dp) is not None,
                  f"--fp8 {recipe}, tp {tp} x dp {dp}, ZeRO-{zero}{' + SP' if sp else ''}: losses within "
                  f"{worst:.1e} <= {BF16_LOSS:.0e} of one process accumulating {local_accum}; every rank the "
                  f"same model")

        # 3
        simulate("delayed")
        delayed = ["--fp8", "delayed", "--zero", "1", "--batch", str(G // 2), "--checkpoint-every", "2"]
        source = train(bf16, 2, work, "delayed_dp2", MODEL, base + delayed)
        got = resume(bf16, source, 2, work, "delayed_dp2_resumed", MODEL, base + delayed)
        check_resumed(bf16, got, source, "--fp8 delayed ZeRO-1", 2, 1, STEPS)

        # 4
        tiny = [bf16] + MODEL + ["--steps", "1", "--batch", "2"]
        refused(tiny + ["--fp8", "mx"], "this device is sm_90", "--fp8 mx on the simulated Hopper is refused")
        os.environ["CUCC_COMPUTE_CAPABILITY"] = "10.0"
        refused(tiny + ["--fp8", "block"], "this device is sm_100",
                "--fp8 block on the simulated Blackwell is refused (cuBLASLt: Hopper only)")
        os.environ.pop("CUCC_COMPUTE_CAPABILITY")
        refused(MPIRUN + ["-np", "2"] + tiny + ["--fp8", "block", "--tp", "2"],
                "a multiple of 128", "--fp8 block with a 64-wide cut under tp 2 is refused")
        refused([fp32] + MODEL + ["--steps", "1", "--fp8", "tensor"], "needs the bf16 build",
                "--fp8 in the fp32 build is refused")
        refused(tiny[:-1] + ["1", "--seq", "8", "--fp8", "rowwise"], "multiple of 16",
                "--fp8 with 8 rows a micro-batch is refused")
        refused(tiny + ["--fp8", "tensor", "--zero", "2", "--fp8-allgather"], "--fp8-allgather needs --zero 3",
                "--fp8-allgather under ZeRO-2 is refused")
        refused(tiny + ["--zero", "3", "--fp8-allgather"], "--fp8-allgather needs --fp8 tensor or delayed",
                "--fp8-allgather without --fp8 is refused")
        for recipe in ("rowwise", "block", "mx"):
            refused(tiny + ["--zero", "3", "--fp8", recipe, "--fp8-allgather"], "takes the per-tensor recipes only",
                    f"--fp8-allgather with --fp8 {recipe} is refused")
        refused(tiny + ["--zero", "3", "--tp", "2", "--fp8", "tensor", "--fp8-allgather"],
                "--fp8 tensor under --tp 2 is not implemented", "--fp8-allgather with --fp8 tensor under tp 2 is refused")

        # 5
        z3 = base + ["--zero", "3", "--batch", str(G // 2), "--comm-stats"]
        simulate("tensor")
        zero3["tensor muon"] = train(bf16, 2, work, "tensor_muon_z3", MODEL,
                                     z3 + ["--fp8", "tensor", "--optimizer", "muon"], checkpoints=False)
        for label in ("tensor", "delayed", "tensor muon"):
            check_allgather(bf16, work, z3, MODEL, label, zero3[label], False)

        # 6
        check_llama(bf16, work, base)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("FP8 training")


if __name__ == "__main__":
    main()
