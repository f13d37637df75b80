#!/usr/bin/env python3
"""scripts/test_monitors.py: the monitors of a training step (train_gpt.cu's Monitors, README
"Monitors") against an independent computation in PyTorch, and across grids.

A tiny model (2 blocks, 2 heads of 32, vocabulary 256, T 32, batch 2 x 2 micro-batches, QK-norm
and z-loss, random tokens) trained for 3 steps with a checkpoint after every step and every
monitor on (--log-attn-logits --log-layer-norms --log-update-ratio). Step 3 is recomputed in
PyTorch (scripts/reference.py's model) from the step-2 checkpoint's parameters and step 3's
tokens (the trainer's random-token generator, splitmix64, reproduced here):
1. fp32 build (attention on the CUDA-core kernels): the largest attention logit q.k/sqrt(HS) of
   each layer (post QK-norm, over the causal positions of every head and micro-batch; PyTorch's
   attention wrapped to take the max of the masked scores), log Z's mean and max over the
   batch (torch.logsumexp of the logits), the gradient norm and each layer's (blocks, the
   embeddings, lnf) from autograd, whether --grad-clip clipped, and the update/weight ratio per
   tensor group from the step-2 and step-3 checkpoints, each within the bound printed.
2. bf16 build (attention on the tensor-core kernels): the same against PyTorch in fp32 from the
   bf16 parameters, within bf16 bounds; the update ratio from the fp32 master weights.
3. The same fp32 run with --recompute full (the block forward rerun in the backward pass must not
   touch the values): every monitor bit-identical; and without the optional flags: the values
   always logged bit-identical (the monitors change nothing of what they watch).
4. mpirun -np 2 with --zero 3 (data parallel, the batch split, the gradients and the weights
   sharded: the layer norms and update sums reduced over the shards) and with --tp 2 (heads and
   the vocabulary split: the attention maxima and log Z combined over the group): every monitor
   of step 1 against the single process, the rest within 1e-5 relative (sums in another order)
   but the largest attention logits bit-identical where the arithmetic is the same: of each layer
   under --zero 3 (the same per sequence and head), of the first layer only under --tp 2 (a
   row-parallel projection sums its rank's partial products, then the ranks', so the next
   layers' inputs differ in their last bits; their maxima with them, for some seeds). Step 1 only: the same parameters on every grid; the steps after it start from
   parameters that already differ in their last bits (the gradients summed in another order),
   which the optimizer amplifies in tiny gradient elements (measured: maxima 1e-4 apart by step 3
   under --tp 2 at this learning rate), so they measure the trajectories, not the monitors.

Usage: python3 scripts/test_monitors.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import math
import os
import re
import shutil
import sys
import tempfile
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
from testlib import RTOL, check, checkpoint_array, final_checkpoint, finish, train  # noqa: E402

V, L, NH, C, T, B, A, SEED, STEPS, CLIP = 256, 2, 2, 64, 32, 2, 2, 3, 3, 1.0
MODEL = ["--vocab", str(V), "--layers", str(L), "--heads", str(NH), "--embd", str(C), "--seq", str(T),
         "--grad-accum", str(A), "--lr", "1e-2", "--warmup", "1", "--seed", str(SEED), "--val-every", "0",
         "--sample-len", "0", "--steps", str(STEPS), "--qk-norm", "--z-loss", "1e-4", "--grad-clip", str(CLIP),
         "--checkpoint-every", "1"]
MONITORS = ["--log-attn-logits", "--log-layer-norms", "--log-update-ratio"]
GROUPS = ["embeddings", "attention", "mlp", "norms_biases"]
ALWAYS = ["attn_logit_max", "log_z_mean", "log_z_max", "grad_norm"]
LISTS = ["attn_logit_max_layers", "grad_norm_layers"]
# fp32 against PyTorch (float32 on the CPU, other summation orders): relative, as every fp32
# comparison with the reference; bf16 against PyTorch in fp32 from the same bf16 parameters: the
# trainer rounds every activation to bf16 (2^-9 = 0.2% relative each) and attention's
# probabilities too, a few roundings deep
FP32_BOUND, BF16_BOUND = 1e-5, 1e-2


def random_tokens(step):
    """The global batch of step `step` (1-based) of a random-token run: (A, B, T) inputs and
    targets, as train_run.cuh's train_data_next draws them (splitmix64 from seed ^ constant, each
    row T + 1 tokens, micro-batch after micro-batch)."""
    mask = (1 << 64) - 1
    state = SEED ^ 0x5851F42D4C957F2D
    rows = []
    for _ in range(step * A * B):
        row = []
        for _ in range(T + 1):
            state = (state + 0x9E3779B97F4A7C15) & mask
            z = state
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
            row.append((z ^ (z >> 31)) % V)
        rows.append(row)
    last = torch.tensor(rows[-A * B:], dtype=torch.int64).view(A, B, T + 1)
    return last[..., :-1], last[..., 1:]


def checkpoint_params(manifest, bf16):
    """name -> float32 tensor of the checkpoint's parameters (the bf16 ones widened)."""
    if bf16:
        raw = checkpoint_array(manifest, "params", np.uint16).astype(np.uint32) << 16
        flat = raw.view(np.float32)
    else:
        flat = checkpoint_array(manifest, "params")
    return split_layout(flat)


def split_layout(flat):
    cfg = config()
    params, offset = {}, 0
    for name, shape in reference.param_shapes(cfg):
        n = math.prod(shape)
        params[name] = torch.from_numpy(np.array(flat[offset:offset + n], dtype=np.float32)).reshape(shape)
        offset += (n + 127) // 128 * 128  # TENSOR_ALIGN
    return params


def config():
    return types.SimpleNamespace(arch="gpt2", vocab=V, context=T, layers=L, heads=NH, embd=C, qk_norm=True, z_loss=1e-4,
                                 grad_accum=A, optimizer="adamw", fp8_lm_head=0)


def reference_monitors(params, inputs, targets):
    """The step's monitors in PyTorch (float32): per-layer max attention logit, log Z mean and
    max, the gradient norm and the per-entry gradient norms."""
    cfg = config()
    maxima = [-math.inf] * L
    calls = [0]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def watched(q, k, v, is_causal):  # q, k: (B, NH, T, HS), after QK-norm
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        layer = calls[0] % L
        maxima[layer] = max(maxima[layer], float(scores.detach().masked_fill(~causal, -math.inf).max()))
        calls[0] += 1
        return sdpa(q, k, v, is_causal=is_causal)

    reference.F.scaled_dot_product_attention = watched
    try:
        p = reference.leaves(cfg, params)
        _, _, logits, norm = reference.forward_backward(cfg, p, inputs, targets, autocast=False)
    finally:
        reference.F.scaled_dot_product_attention = sdpa
    log_z = torch.logsumexp(logits.double(), -1)
    entries = {f"h{l}.": 0.0 for l in range(L)}
    entries.update({"emb": 0.0, "lnf": 0.0})
    for name, t in p.items():
        key = name[:name.index(".") + 1] if name.startswith("h") else ("lnf" if name.startswith("lnf") else "emb")
        entries[key] += float((t.grad.double() ** 2).sum())
    return {"attn_logit_max_layers": maxima, "attn_logit_max": max(maxima), "log_z_mean": float(log_z.mean()),
            "log_z_max": float(log_z.max()), "grad_norm": float(norm),
            "grad_norm_layers": [math.sqrt(entries[k]) for k in list(entries)]}


def group_of(name):
    if name in ("wte", "wpe"):
        return "embeddings"
    if name.endswith((".attn.qkv.w", ".attn.proj.w")):
        return "attention"
    if name.endswith((".mlp.fc.w", ".mlp.proj.w")):
        return "mlp"
    return "norms_biases"


def reference_update_ratio(before, after):
    dw = {g: 0.0 for g in GROUPS}
    w = {g: 0.0 for g in GROUPS}
    for name in after:
        a, b = after[name].double(), before[name].double()
        dw[group_of(name)] += float(((a - b) ** 2).sum())
        w[group_of(name)] += float((a ** 2).sum())
    return {g: math.sqrt(dw[g] / w[g]) for g in GROUPS}


def worst_rel(got, ref):
    got, ref = np.atleast_1d(np.asarray(got, np.float64)), np.atleast_1d(np.asarray(ref, np.float64))
    return float(np.max(np.abs(got - ref) / np.abs(ref)))


def against_reference(label, records, ck, bf16, bound):
    step = STEPS
    rec = next(r for r in records if r.get("step") == step and "train_loss" in r)
    params = checkpoint_params(final_checkpoint(ck, step - 1), bf16)
    inputs, targets = random_tokens(step)
    ref = reference_monitors(params, inputs, targets)
    for key in ["attn_logit_max_layers", "attn_logit_max", "log_z_mean", "log_z_max", "grad_norm",
                "grad_norm_layers"]:
        err = worst_rel(rec[key], ref[key])
        check(err <= bound, f"{label}: {key} against PyTorch",
              f"got {np.round(rec[key], 6).tolist()}, PyTorch {np.round(ref[key], 6).tolist()}, "
              f"worst relative error {err:.2e} (bound {bound:g})")
    check(rec["clipped"] == (ref["grad_norm"] > CLIP),
          f"{label}: clipped says whether the norm before clipping exceeds --grad-clip {CLIP}",
          f"clipped {rec['clipped']}, PyTorch's norm {ref['grad_norm']:.4f}")
    # the update: fp32 weights of record before and after step 3 (bf16 build: the master weights)
    section = "master" if bf16 else "params"
    before = split_layout(checkpoint_array(final_checkpoint(ck, step - 1), section))
    after = split_layout(checkpoint_array(final_checkpoint(ck, step), section))
    ref_ratio = reference_update_ratio(before, after)
    got = [rec["update_ratio"][g] for g in GROUPS]
    err = worst_rel(got, [ref_ratio[g] for g in GROUPS])
    check(err <= FP32_BOUND, f"{label}: update_ratio per group from the step-{step - 1} and step-{step} checkpoints",
          f"got {np.round(got, 7).tolist()}, numpy {np.round([ref_ratio[g] for g in GROUPS], 7).tolist()}, "
          f"worst relative error {err:.2e} (bound {FP32_BOUND:g})")


def steps_of(records):
    return [r for r in records if "train_loss" in r]


def same_monitors(label, got, ref, exact_keys, keys=ALWAYS + LISTS + ["update_ratio"], steps=STEPS):
    """The monitors of the first `steps` steps of run `got` against run `ref`: exact_keys bit for
    bit (the log's float32 text round-trips; "key[i]": element i of a list bit for bit, the list
    within RTOL), the others within RTOL."""
    worst, exact = 0.0, True
    pairs = list(zip(steps_of(got), steps_of(ref)))[:steps]
    for g, r in pairs:
        for key in keys:
            a = list(g[key].values()) if key == "update_ratio" else g[key]
            b = list(r[key].values()) if key == "update_ratio" else r[key]
            if key in exact_keys:
                exact &= np.array_equal(np.asarray(a), np.asarray(b))
                continue
            for element in exact_keys:
                m = re.fullmatch(re.escape(key) + r"\[(\d+)\]", element)
                if m:
                    exact &= a[int(m.group(1))] == b[int(m.group(1))]
            worst = max(worst, worst_rel(a, b))
    detail = f"{len(pairs)} step(s); worst relative difference {worst:.2e} (bound {RTOL:g})"
    if exact_keys:
        detail += f"; {', '.join(exact_keys)} bit-identical: {exact}"
    check(exact and worst <= RTOL and len(steps_of(got)) == STEPS and len(pairs) == steps, label, detail)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default="build/cpu")
    args = ap.parse_args()
    fp32 = os.path.join(args.bin_dir, "train_gpt_fp32")
    bf16 = os.path.join(args.bin_dir, "train_gpt")
    work = tempfile.mkdtemp(prefix="test_monitors_")
    try:
        one = MODEL + ["--batch", str(B)] + MONITORS
        out, base, ck = train(fp32, 0, work, "fp32", one, [])
        check("CUDA cores" in out, "fp32 build: attention on the CUDA-core kernels")
        against_reference("fp32", base, ck, False, FP32_BOUND)
        out, recs, ck = train(bf16, 0, work, "bf16", one, [])
        check("tensor cores" in out, "bf16 build: attention on the tensor-core kernels")
        against_reference("bf16", recs, ck, True, BF16_BOUND)

        _, recs, _ = train(fp32, 0, work, "recompute", one, ["--recompute", "full"], checkpoints=False)
        same_monitors("fp32 --recompute full: every monitor bit-identical", recs, base,
                      ALWAYS + LISTS + ["update_ratio"])
        _, recs, _ = train(fp32, 0, work, "plain", MODEL + ["--batch", str(B)], [], checkpoints=False)
        same_monitors("fp32 without the optional monitors: the ones always logged bit-identical", recs, base,
                      ALWAYS, keys=ALWAYS)
        _, recs, _ = train(fp32, 2, work, "zero3", MODEL + ["--batch", str(B // 2)] + MONITORS,
                           ["--zero", "3", "--bucket-mb", "0.02"], checkpoints=False)
        same_monitors("fp32 mpirun -np 2 --zero 3 against one process, step 1", recs, base,
                      ["attn_logit_max", "attn_logit_max_layers"], steps=1)
        _, recs, _ = train(fp32, 2, work, "tp2", one, ["--tp", "2"], checkpoints=False)
        same_monitors("fp32 mpirun -np 2 --tp 2 against one process, step 1", recs, base,
                      ["attn_logit_max_layers[0]"], steps=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("monitor")


if __name__ == "__main__":
    main()
