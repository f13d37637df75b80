#!/usr/bin/env python3
"""scripts/test_tp.py: tensor parallelism (--tp, llmc/tensor_parallel.cuh), sequence parallelism
(--sequence-parallel) and their composition with data parallelism and ZeRO, under mpirun on the
CPU runtime.

A tiny model (4 heads, so --tp 4 leaves one head per rank; width 128; vocabulary 256) trained
on token shards for 4 steps on a global batch of G = 8 sequences (data-parallel ranks x --batch
x --grad-accum; the ranks of a tensor-parallel group read the same sequences). Checks:
1. fp32 against the single process on the same global batch, every grid and optimizer below:
   every step's loss and gradient norm, and the final parameters (the checkpoint's logical
   tensors, whatever the grid) within 1e-5 relative. Only the order of the sums differs: the
   row-parallel products are summed over the group, the softmax statistics combined across the
   vocabulary slices, the replicated tensors' partial gradients all-reduced.
     AdamW: tp 2; tp 4; tp 2 + SP at accumulation 2; tp 4 + SP; dp 2 x tp 2 ZeRO-1;
            dp 2 x tp 2 ZeRO-3 + SP
     Muon with QK-norm and z-loss: tp 2; tp 4 + SP at accumulation 2; dp 2 x tp 2 ZeRO-1;
            dp 2 x tp 2 ZeRO-3
     Lion: tp 2; dp 2 x tp 2 ZeRO-2 + SP
2. bf16: tp 2 and tp 2 + SP against the bf16 single process: each step's loss within BF16_LOSS
   (see below), and every rank of a run ends with the same model (the trainer's hash check).
3. Resume on another grid: the step-2 checkpoint of the tp 2 Muon run continued with tp 4 + SP,
   with one process, and with dp 2 x tp 2 ZeRO-3; the single process's resumed with tp 2:
   each within 1e-5 of the uninterrupted run.
4. What the ranks hold (log header, rank 0): the parameter table's elements of cut tensors are
   1/tp of one process's (tp_elements.sharded x tp equals it), the replicated ones the same, and
   so are the bytes of their parameters, gradients and optimizer state (tp_cut_bytes); with
   sequence parallelism the activations between the parallel regions 1/tp (seq_activation_bytes
   x tp equals the tp run's without it).
5. The tensor-parallel collectives of one step (--comm-stats, tp_comm_calls / tp_comm_bytes),
   each count and size from Megatron's scheme for L blocks, N = B*T tokens of width C:
     without SP: all-reduces 2 per block forward (attn.proj, mlp.proj) and 2 backward (the
       inputs of attn.qkv and mlp.fc), plus the embedding's forward and the lm head's backward:
       4L + 2 of N x C each; 1 all-gather of the softmax statistics (3 floats a row per rank);
     with SP: each of those all-reduces is a reduce-scatter (4L + 2), and the all-gathers are
       ln1, ln2 forward and again backward, the residual gradient twice per block backward, lnf
       forward and backward, the embedding's gradient: 6L + 3 of N x C, plus the statistics; and
       4L + 2 all-reduces of C (the LayerNorms' partial gradients);
     Muon adds 6 all-gathers per block (its matrices, orthogonalized whole); QK-norm 2
     all-reduces of the head size per block; and the step's monitors (train_gpt.cu's Monitors)
     1 all-gather of their vector, L + 10 words of 4 bytes per rank.
   Bytes in the ring convention of llmc/comm.cuh: all-reduce 2(t-1)/t S, the others (t-1)/t S.
6. Validation losses and a sample (temperature 1 over the whole vocabulary, so every rank's
   slice of the logits counts) under tp 2 and tp 2 + SP (generation all-gathers the last
   position's logits) equal the single process's.

Usage: python3 scripts/test_tp.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import os
import shutil
import tempfile

from testlib import (ROOT, check, compare, finish, logged_values, make_data, param_hash, resume, train,
                     val_losses_and_sample)

G, STEPS = 8, 4
L, C, T, HS = 2, 128, 16, 32
MODEL = ["--vocab", "256", "--layers", str(L), "--heads", "4", "--embd", str(C), "--seq", str(T), "--lr", "3e-3",
         "--warmup", "1", "--seed", "5", "--val-every", "0", "--sample-len", "0"]
MUON = ["--optimizer", "muon", "--qk-norm", "--z-loss", "1e-4"]
LION = ["--optimizer", "lion", "--lr", "3e-4"]  # a tenth of AdamW's lr: Lion moves every element by lr
# bf16: the grids sum the row-parallel products' bf16 partial sums (each rounded to 8 bits of
# mantissa, 2^-9 relative) where one process rounds once; over 4 steps the losses of a correct
# run stay within a few of those roundings of 2^-9 = 2e-3 relative, a wrong one (a missed sum, a
# bias added twice) moves them by 1e-2 or more.
BF16_LOSS = 4e-3


def optimizer_label(opt):
    """The name and the description of a run's optimizer flags."""
    return {(): ("adamw", "AdamW"), tuple(MUON): ("muon", "Muon + QK-norm + z-loss"),
            tuple(LION): ("lion", "Lion")}[tuple(opt)]


def grid_args(tp, dp, accum, zero, sp):
    return ["--tp", str(tp), "--zero", str(zero), "--grad-accum", str(accum), "--batch", str(G // (dp * accum))] + \
        (["--sequence-parallel"] if sp else [])


def predicted_tp_traffic(tp, sp, muon, qk_norm, N, elem):
    """{kind: (calls, bytes)} of one step's tensor-parallel collectives (see the docstring)."""
    act = N * C * elem  # one (N, C) activation
    stats = tp * N * 12  # the softmax statistics of every rank
    ar, rs, ag = 2 * (tp - 1) / tp, (tp - 1) / tp, (tp - 1) / tp
    monitors = tp * (L + 10) * 4  # every rank's monitor vector: L + 1 maxima, 9 sums
    calls = {"all_reduce": 0, "reduce_scatter": 0, "all_gather": 2}
    size = {"all_reduce": 0.0, "reduce_scatter": 0.0, "all_gather": ag * (stats + monitors)}
    if not sp:
        calls["all_reduce"] += 4 * L + 2
        size["all_reduce"] += (4 * L + 2) * ar * act
    else:
        calls["reduce_scatter"] += 4 * L + 2
        size["reduce_scatter"] += (4 * L + 2) * rs * act
        calls["all_gather"] += 6 * L + 3
        size["all_gather"] += (6 * L + 3) * ag * act
        calls["all_reduce"] += 4 * L + 2
        size["all_reduce"] += (4 * L + 2) * ar * C * elem
    if muon:  # qkv's Q, K, V, attn.proj, mlp.fc, mlp.proj: C x C, C x C, 4C x C, C x 4C
        calls["all_gather"] += 6 * L
        size["all_gather"] += L * ag * (4 * C * C + 8 * C * C) * elem
    if qk_norm:
        calls["all_reduce"] += 2 * L
        size["all_reduce"] += 2 * L * ar * HS * elem
    return {k: (calls[k], size[k]) for k in calls}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    fp32, bf16 = os.path.join(args.bin_dir, "train_gpt_fp32"), os.path.join(args.bin_dir, "train_gpt")
    work = tempfile.mkdtemp(prefix="test_tp_")
    try:
        data = make_data(os.path.join(work, "data"))
        base = ["--data", data, "--steps", str(STEPS), "--checkpoint-every", "2"]

        # 1: (optimizer flags, tp, dp, accum, zero, sequence parallel)
        runs = [([], 2, 1, 1, 0, False), ([], 4, 1, 1, 0, False), ([], 2, 1, 2, 0, True), ([], 4, 1, 1, 0, True),
                ([], 2, 2, 1, 1, False), ([], 2, 2, 1, 3, True),
                (MUON, 2, 1, 1, 0, False), (MUON, 4, 1, 2, 0, True), (MUON, 2, 2, 1, 1, False),
                (MUON, 2, 2, 1, 3, False), (LION, 2, 1, 1, 0, False), (LION, 2, 2, 1, 2, True)]
        refs, results = {}, {}
        for opt, tp, dp, accum, zero, sp in runs:
            key = (tuple(opt), accum)
            if key not in refs:
                refs[key] = train(fp32, 0, work, f"single_{optimizer_label(opt)[0]}_a{accum}", MODEL,
                                  base + opt + ["--grad-accum", str(accum), "--batch", str(G // accum)])
            name = f"{optimizer_label(opt)[0]}_tp{tp}_dp{dp}_a{accum}_z{zero}{'_sp' if sp else ''}"
            results[name] = train(fp32, tp * dp, work, name, MODEL, base + opt + grid_args(tp, dp, accum, zero, sp))
            compare(f"fp32 {optimizer_label(opt)[1]}, tp {tp} x dp {dp}, accum {accum}, "
                    f"ZeRO-{zero}{', sequence parallel' if sp else ''}", results[name], refs[key], STEPS)

        # 2
        single_bf16 = train(bf16, 0, work, "single_bf16", MODEL, base + ["--batch", str(G)])
        want = logged_values(single_bf16[1])
        for sp in (False, True):
            out, records, _ = train(bf16, 2, work, f"bf16_tp2{'_sp' if sp else ''}", MODEL,
                                    base + grid_args(2, 1, 1, 0, sp))
            got = logged_values(records)
            worst = max(abs(got[k] - want[k]) / abs(want[k]) for k in want if k[0] == "train_loss")
            check(worst <= BF16_LOSS and param_hash(out, 2) is not None,
                  f"bf16 tp 2{' + SP' if sp else ''}: losses within {worst:.1e} <= {BF16_LOSS:.0e} of one process, "
                  f"both ranks end with the same model")

        # 3
        source = results["muon_tp2_dp1_a1_z0"]
        for label, ranks, extra in (("tp 4 + SP", 4, grid_args(4, 1, 1, 0, True)), ("one process", 0, ["--batch", str(G)]),
                                    ("dp 2 x tp 2 ZeRO-3", 4, grid_args(2, 2, 1, 3, False))):
            got = resume(fp32, source, ranks, work, "resume_" + label.replace(" ", "_").replace("+", ""), MODEL,
                         base + MUON + extra)
            compare(f"Muon tp 2 checkpoint at step 2 resumed with {label}", got, source, STEPS, first=3)
        got = resume(fp32, refs[((), 1)], 2, work, "resume_single_tp2", MODEL, base + grid_args(2, 1, 1, 0, False))
        compare("AdamW single-process checkpoint resumed with tp 2", got, refs[((), 1)], STEPS, first=3)

        # 4
        head = lambda result: result[1][0]
        one = head(refs[((), 1)])
        for name, tp in (("adamw_tp2_dp1_a1_z0", 2), ("adamw_tp4_dp1_a1_z0", 4)):
            h = head(results[name])
            cut, same = h["tp_elements"]["sharded"], h["tp_elements"]["replicated"]
            check(cut * tp == one["tp_elements"]["sharded"] and same == one["tp_elements"]["replicated"],
                  f"tp {tp}: rank 0 holds {cut} elements of the cut tensors (x {tp} = "
                  f"{one['tp_elements']['sharded']}, one process's) and {same} replicated (one process: "
                  f"{one['tp_elements']['replicated']})")
            cut_b, same_b = h["tp_cut_bytes"], h["tp_replicated_bytes"]
            check(all(cut_b[k] * tp == one["tp_cut_bytes"][k] for k in cut_b) and same_b == one["tp_replicated_bytes"],
                  f"tp {tp}: its parameter, gradient, master and optimizer bytes of the cut tensors {cut_b} are 1/{tp} "
                  f"of one process's {one['tp_cut_bytes']}, of the replicated ones {same_b} the same")
        plain, seq = head(results["adamw_tp4_dp1_a1_z0"]), head(results["adamw_tp4_dp1_a1_z0_sp"])
        check(seq["seq_activation_bytes"] * 4 == plain["seq_activation_bytes"] and
              seq["activation_bytes"] < plain["activation_bytes"],
              f"tp 4 + SP: the activations between the parallel regions hold {seq['seq_activation_bytes']} bytes, "
              f"1/4 of {plain['seq_activation_bytes']} without SP (all activations {seq['activation_bytes']} vs "
              f"{plain['activation_bytes']})")

        # 5
        for tp, sp, opt in ((2, False, []), (4, False, MUON), (2, True, []), (4, True, MUON)):
            name = f"stats_tp{tp}{'_sp' if sp else ''}{'_muon' if opt else ''}"
            _, records, _ = train(fp32, tp, work, name, MODEL, ["--steps", "1", "--batch", str(G), "--tp", str(tp),
                                                         "--comm-stats"] + (["--sequence-parallel"] if sp else []) + opt)
            line = next(r for r in records if "tp_comm_calls" in r)
            want = predicted_tp_traffic(tp, sp, bool(opt), bool(opt), G * T, 4)
            ok = all(line["tp_comm_calls"][k] == want[k][0] and abs(line["tp_comm_bytes"][k] - want[k][1]) <= 1
                     for k in want)
            check(ok, f"tp {tp}{' + SP' if sp else ''}{' Muon + QK-norm' if opt else ''}: the step's tensor-parallel "
                      f"collectives {dict((k, (line['tp_comm_calls'][k], line['tp_comm_bytes'][k])) for k in want)} "
                      f"are the predicted {dict((k, (v[0], round(v[1]))) for k, v in want.items())}")

        # 6
        show = ["--steps", "2", "--val-every", "2", "--sample-every", "2", "--sample-len", "24", "--temperature", "1", "--top-k", "0",
                "--prompt", "the garden"]
        single = train(fp32, 0, work, "sample_single", MODEL, ["--data", data, "--batch", str(G)] + show)
        want_val, want_sample = val_losses_and_sample(single[0], 2)
        for sp in (False, True):
            got = train(fp32, 2, work, f"sample_tp2{'_sp' if sp else ''}", MODEL,
                        ["--data", data] + grid_args(2, 1, 1, 0, sp) + show)
            got_val, got_sample = val_losses_and_sample(got[0], 2)
            check(got_sample is not None and got_sample == want_sample and len(got_val) == len(want_val) and
                  all(abs(float(a) - float(b)) <= 1e-4 for a, b in zip(got_val, want_val)),
                  f"tp 2{' + SP' if sp else ''}: validation losses {got_val} and sample {got_sample!r} as one "
                  f"process's ({want_val}, {want_sample!r})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("tensor-parallel")


if __name__ == "__main__":
    main()
