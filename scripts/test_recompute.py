#!/usr/bin/env python3
"""scripts/test_recompute.py: activation recompute (--recompute, train_gpt.cu's activation
table) changes memory, never results.

A tiny model of 3 blocks on token shards. Checks:
1. One process, fp32 and bf16, AdamW, and Muon with QK-norm, z-loss and grad accumulation:
   --recompute selective and full give the same per-step losses and gradient norms, bit for
   bit, and the same parameter hash as none (the backward pass reruns the forward pass's own
   kernels on the same inputs).
2. Under mpirun, bf16: 2 ranks with ZeRO-1 and with ZeRO-3 (whose backward pass recomputes
   from gathered parameters), tensor parallelism on 2 ranks, and 4 ranks of dp 2 x tp 2 with
   sequence parallelism, QK-norm and ZeRO-3 (full recompute reruns the tensor-parallel
   collectives): the same parameter hash for every policy.
3. The memory saved, as the log header reports it (recompute_saved_bytes, and
   activation_bytes against none's), is what the policies say, computed here from the shapes:
   every block but the first (which holds the buffers all blocks share) saves its LayerNorm
   and GELU outputs (selective), or everything but its output (full); each step's log record
   names the policy.
4. Validation and samples (forward passes of other shapes) are unchanged by the policy.

Usage: python3 scripts/test_recompute.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import os
import shutil
import tempfile

from testlib import ROOT, check, finish, make_data, param_hash, run, train, up, val_losses_and_sample

C, L, NH, V, T, B = 64, 3, 2, 256, 16, 4
MODEL = ["--vocab", str(V), "--layers", str(L), "--heads", str(NH), "--embd", str(C), "--seq", str(T),
         "--batch", str(B), "--lr", "3e-3", "--warmup", "1", "--seed", "5", "--steps", "3", "--val-every", "0",
         "--sample-len", "0"]
POLICIES = ("none", "selective", "full")


def saved_bytes(policy, floatx_bytes, qk_norm):
    """Bytes a policy saves: blocks 1..L-1 drop their own copies of what it does not keep
    (widths per row of N = B*T rows: floatX values, then float ones)."""
    N = B * T
    if policy == "none":
        return 0
    if policy == "selective":
        floatx, floats = [C, C, 4 * C], []  # ln1, ln2, fch_gelu
    else:  # everything but residual3
        floatx = [C, 3 * C, C, C, C, 4 * C, 4 * C] + ([2 * C] if qk_norm else [])
        floats = [1, 1, NH, 1, 1] + ([2 * NH] if qk_norm else [])
    per_block = sum(up(N * w) for w in floatx) * floatx_bytes + sum(up(N * w) for w in floats) * 4
    return (L - 1) * per_block


def steps_of(records):
    """Every step's train loss and gradient norm in a log."""
    return [(r["train_loss"], r["grad_norm"]) for r in records if "train_loss" in r]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="test_recompute_")
    try:
        data = make_data(os.path.join(work, "data"))
        configs = [("AdamW", []), ("Muon, QK-norm, z-loss, accum 2",
                                   ["--optimizer", "muon", "--qk-norm", "--z-loss", "1e-3", "--grad-accum", "2"])]
        for build, floatx_bytes in (("train_gpt_fp32", 4), ("train_gpt", 2)):
            binary = os.path.join(args.bin_dir, build)
            for label, extra in configs:
                results = {}
                for policy in POLICIES:
                    name = f"{build}_{len(extra)}_{policy}"
                    results[policy] = train(binary, 0, work, name, MODEL,
                                            ["--data", data, "--recompute", policy] + extra, checkpoints=False)
                out, header, _ = results["none"]
                for policy in ("selective", "full"):
                    out_p, records, _ = results[policy]
                    same = param_hash(out, 1) is not None and param_hash(out_p, 1) == param_hash(out, 1)
                    check(steps_of(records) == steps_of(header) and same,
                          f"{build}, {label}: --recompute {policy} gives none's losses, norms and parameters, "
                          f"bit for bit ({param_hash(out, 1)})")
                    want = saved_bytes(policy, floatx_bytes, "--qk-norm" in extra)
                    got = records[0]["recompute_saved_bytes"]
                    drop = header[0]["activation_bytes"] - records[0]["activation_bytes"]
                    named = all(r.get("recompute") == policy for r in records if "train_loss" in r)
                    check(got == want and drop == want and named,
                          f"{build}, {label}: {policy} saves {got} of {header[0]['activation_bytes']} activation "
                          f"bytes ({want} by the shapes); each step's record names the policy")

        bf16 = os.path.join(args.bin_dir, "train_gpt")
        # (ranks, ZeRO stage, tensor-parallel flags)
        for ranks, zero, tp in ((2, 1, []), (2, 3, []), (2, 0, ["--tp", "2"]),
                                (4, 3, ["--tp", "2", "--sequence-parallel", "--qk-norm"])):
            hashes = []
            for policy in POLICIES:
                out, _, _ = train(bf16, ranks, work, f"dp{ranks}_z{zero}_{'_'.join(tp)}_{policy}", MODEL,
                                  ["--data", data, "--zero", str(zero), "--optimizer", "muon", "--recompute", policy]
                                  + tp, checkpoints=False)
                hashes.append(param_hash(out, ranks))
            check(hashes[0] is not None and len(set(hashes)) == 1,
                  f"bf16, {ranks} ranks, ZeRO-{zero} {' '.join(tp)}: none, selective and full give one parameter "
                  f"hash ({hashes[0]})")

        texts = {}
        for policy in ("none", "full"):
            out = run([bf16] + MODEL + ["--data", data, "--steps", "2", "--val-every", "1", "--sample-len", "12",
                                        "--recompute", policy], f"samples, {policy}")
            texts[policy] = val_losses_and_sample(out, 2)
        check(len(texts["none"][0]) == 3 and texts["full"] == texts["none"],
              f"bf16: validation losses and the sample are the same under full recompute ({texts['none'][0]})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("recompute")


if __name__ == "__main__":
    main()
