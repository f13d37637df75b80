#!/usr/bin/env python3
"""Independent check of a dump written by scripts/reference.py.

test_gpt trusts the dump, so the dump itself is checked here against a second implementation
that shares no code with reference.py: its own file reader, and a GPT written as plain float64
tensor algebra (LayerNorm from mean and variance, attention as explicit matmuls and a masked
softmax, GELU from its tanh formula, cross-entropy from logsumexp), differentiated by autograd.
Starting from the dump's initial parameters and tokens it verifies:
  - the records, dtypes and shapes the format (reference.py's docstring) promises, the tokens
    regenerated from the seed, and the initialization rules (zero padding rows and biases, unit
    LayerNorm gains, weight standard deviations);
  - step0.logits, step0.grad.<p> and every step's loss and grad norm (the later ones from the
    dump's parameters after the previous step): relative norm error below 1e-5 (float32 dump
    against float64);
  - the key-bias gradient is exactly zero in the dump, and negligible in float64;
  - every step's learning rate against the schedule recomputed here;
  - step 0's update: theta_1 - theta_0 from a hand-written float64 AdamW fed the dump's
    gradients, lr and grad norm, within 1e-5 relative norm error per tensor;
  - the bf16.* records exist for every compared quantity and are finite and non-negative.
Prints every check with its error and bound; exits 1 if any fails.
"""

import argparse
import math
import struct
import sys

import torch

TOL = 1e-5  # relative norm error allowed between a float32 result and its float64 recomputation
DTYPES = {0: torch.float32, 1: torch.int32, 2: torch.float64, 3: torch.int64}
ELEM_SIZE = {0: 4, 1: 4, 2: 8, 3: 8}


def read_dump(path):
    """Returns {name: tensor} in file order; raises ValueError on a malformed file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"GPTDUMP1":
        raise ValueError(f"{path}: not a GPTDUMP1 file")
    (n,), pos, out = struct.unpack_from("<I", data, 8), 12, {}
    for _ in range(n):
        (name_len,) = struct.unpack_from("<I", data, pos)
        name = data[pos + 4:pos + 4 + name_len].decode("ascii")
        pos += 4 + name_len
        dtype, ndim = struct.unpack_from("<II", data, pos)
        dims = struct.unpack_from(f"<{ndim}q", data, pos + 8)
        pos += 8 + 8 * ndim
        if dtype not in DTYPES:
            raise ValueError(f"{path}: record {name} has unknown dtype {dtype}")
        count = math.prod(dims)
        nbytes = count * ELEM_SIZE[dtype]
        if pos + nbytes > len(data):
            raise ValueError(f"{path}: record {name} runs past the end of the file")
        raw = bytearray(data[pos:pos + nbytes])
        out[name] = torch.frombuffer(raw, dtype=DTYPES[dtype], count=count).reshape(dims) \
            if count else torch.empty(dims, dtype=DTYPES[dtype])
        pos += nbytes
    if pos != len(data):
        raise ValueError(f"{path}: {len(data) - pos} trailing bytes after {n} records")
    return out


class Report:
    def __init__(self, verbose):
        self.verbose, self.failures, self.count = verbose, [], 0

    def check(self, ok, line):
        self.count += 1
        if not ok:
            self.failures.append(line)
        if self.verbose or not ok:
            print(("ok    " if ok else "FAIL  ") + line)

    def close_to(self, name, got, want, tol=TOL, slack=None):
        """got (from the dump) against want (float64): relative norm error and max abs. slack,
        if given, is a per-element absolute error that the dump's float32 storage cannot avoid;
        it is taken off each element's error before the norm."""
        got, want = got.double(), want.double()
        if got.shape != want.shape:
            self.check(False, f"{name}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
            return
        err = got - want
        max_abs = err.abs().max().item() if got.numel() else 0.0
        if slack is not None:
            err = (err.abs() - slack).clamp(min=0)
        diff = torch.linalg.vector_norm(err).item()
        ref = torch.linalg.vector_norm(want).item()
        rel = diff / ref if ref > 0 else (0.0 if diff == 0 else math.inf)
        ok = math.isfinite(rel) and rel < tol and bool(torch.isfinite(got).all())
        self.check(ok, f"{name}: rel err {rel:.3e} (bound {tol:.0e}), max abs {max_abs:.3e}, "
                       f"norm {ref:.4e}")


def param_names(L):
    names = ["wte", "wpe"]
    for l in range(L):
        names += [f"h{l}.{n}" for n in ("ln1.w", "ln1.b", "attn.qkv.w", "attn.qkv.b",
                                         "attn.proj.w", "attn.proj.b", "ln2.w", "ln2.b",
                                         "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b")]
    return names + ["lnf.w", "lnf.b"]


def expected_shapes(c):
    C, L = c["embd"], c["layers"]
    shapes = {"wte": (c["padded_vocab"], C), "wpe": (c["context"], C),
              "lnf.w": (C,), "lnf.b": (C,)}
    per_layer = {"ln1.w": (C,), "ln1.b": (C,), "attn.qkv.w": (3 * C, C), "attn.qkv.b": (3 * C,),
                 "attn.proj.w": (C, C), "attn.proj.b": (C,), "ln2.w": (C,), "ln2.b": (C,),
                 "mlp.fc.w": (4 * C, C), "mlp.fc.b": (4 * C,), "mlp.proj.w": (C, 4 * C),
                 "mlp.proj.b": (C,)}
    for l in range(L):
        shapes.update({f"h{l}.{n}": s for n, s in per_layer.items()})
    return shapes


def layernorm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def micro_batch_loss(p, c, tok, tgt):
    """float64 logits (B, T, V) and mean cross-entropy; p maps names to float64 tensors."""
    B, T = tok.shape
    C, NH, V = c["embd"], c["heads"], c["vocab"]
    HS = C // NH
    x = p["wte"][tok] + p["wpe"][:T]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for l in range(c["layers"]):
        w = {n: p[f"h{l}.{n}"] for n in ("ln1.w", "ln1.b", "attn.qkv.w", "attn.qkv.b",
                                          "attn.proj.w", "attn.proj.b", "ln2.w", "ln2.b",
                                          "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b")}
        a = layernorm(x, w["ln1.w"], w["ln1.b"])
        qkv = a @ w["attn.qkv.w"].T + w["attn.qkv.b"]
        heads = []
        for h in range(NH):
            q = qkv[..., h * HS:(h + 1) * HS]
            k = qkv[..., C + h * HS:C + (h + 1) * HS]
            v = qkv[..., 2 * C + h * HS:2 * C + (h + 1) * HS]
            s = (q @ k.transpose(1, 2)) / math.sqrt(HS)
            s = s.masked_fill(future, -math.inf)
            e = torch.exp(s - s.max(-1, keepdim=True).values)
            heads.append((e / e.sum(-1, keepdim=True)) @ v)
        x = x + torch.cat(heads, -1) @ w["attn.proj.w"].T + w["attn.proj.b"]
        m = gelu_tanh(layernorm(x, w["ln2.w"], w["ln2.b"]) @ w["mlp.fc.w"].T + w["mlp.fc.b"])
        x = x + m @ w["mlp.proj.w"].T + w["mlp.proj.b"]
    logits = (layernorm(x, p["lnf.w"], p["lnf.b"]) @ p["wte"].T)[..., :V]
    lse = torch.logsumexp(logits, -1)
    picked = logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    return logits, (lse - picked).mean()


def step_loss_and_grads(params, c, tokens, targets):
    """Step loss, float64 gradients of it and the micro-batch logits for one step's tokens
    (A, B, T); the gradient is taken of the mean loss over the A micro-batches in one graph."""
    p = {n: t.double().clone().requires_grad_(True) for n, t in params.items()}
    logits, losses = [], []
    for a in range(tokens.shape[0]):
        lg, loss = micro_batch_loss(p, c, tokens[a].long(), targets[a].long())
        logits.append(lg.detach())
        losses.append(loss)
    loss = torch.stack(losses).mean()
    grads = torch.autograd.grad(loss, list(p.values()))
    return loss.item(), dict(zip(p.keys(), grads)), torch.stack(logits)


def schedule_lr(c, s):
    K, W, lr = c["steps"], c["warmup"], c["lr"]
    lo = lr * c["min_lr_frac"]
    if s < W:
        return lr * (s + 1) / W
    kind = ["cosine", "wsd", "linear", "constant"][c["schedule"]]
    if kind == "constant":
        return lr
    if kind == "wsd":
        n = math.ceil(c["decay_frac"] * K)
        start = K - n
        return lr if s < start else lr - (lr - lo) * (s - start + 1) / n
    frac = (s - W) / max(1, K - 1 - W)
    if kind == "linear":
        return lr - (lr - lo) * frac
    return lo + (lr - lo) * (1 + math.cos(math.pi * frac)) / 2


def adamw_first_step(theta, g, lr, wd, grad_norm, clip):
    """theta_1 - theta_0 of AdamW's first step in float64 (betas 0.9/0.95, eps 1e-8), after
    global-norm clipping: with m = (1-b1) g and v = (1-b2) g^2 the bias corrections divide by
    (1-b1) and (1-b2)."""
    b1, b2, eps = 0.9, 0.95, 1e-8
    if clip > 0:
        g = g * min(1.0, clip / (grad_norm + 1e-6))
    m_hat = (1 - b1) * g / (1 - b1)
    v_hat = (1 - b2) * g * g / (1 - b2)
    return -lr * wd * theta - lr * m_hat / (torch.sqrt(v_hat) + eps)


def check_structure(d, r):
    c = {n[len("config."):]: t.item() for n, t in d.items() if n.startswith("config.")}
    ints = ["vocab", "padded_vocab", "seq", "context", "layers", "heads", "embd", "batch",
            "grad_accum", "steps", "seed", "warmup", "schedule"]
    floats = ["lr", "min_lr_frac", "decay_frac", "weight_decay", "grad_clip"]
    for n in ints + floats:
        want = torch.int64 if n in ints else torch.float64
        if f"config.{n}" not in d or d[f"config.{n}"].dtype != want or d[f"config.{n}"].dim():
            raise ValueError(f"config.{n} is missing or not a {want} scalar")
    r.check(c["padded_vocab"] == (c["vocab"] + 127) // 128 * 128 and c["padded_vocab"] > 0,
            f"config.padded_vocab {c['padded_vocab']} is vocab {c['vocab']} rounded up to 128")
    r.check(c["embd"] % c["heads"] == 0 and c["seq"] <= c["context"],
            f"config: heads {c['heads']} divide embd {c['embd']}, seq {c['seq']} <= context "
            f"{c['context']}")
    K, A, B, T, L = c["steps"], c["grad_accum"], c["batch"], c["seq"], c["layers"]
    shapes = expected_shapes(c)
    expect = {"inputs": (torch.int32, (K, A, B, T)), "targets": (torch.int32, (K, A, B, T)),
              "step0.logits": (torch.float32, (A, B, T, c["vocab"]))}
    for n, s in shapes.items():
        expect[f"init.{n}"] = expect[f"step0.grad.{n}"] = (torch.float32, s)
        for k in range(K):
            expect[f"step{k}.param.{n}"] = (torch.float32, s)
    for k in range(K):
        for n in ("loss", "lr", "grad_norm"):
            expect[f"step{k}.{n}"] = (torch.float64, ())
    for n in list(expect):
        if n not in ("inputs", "targets") and not n.startswith("init."):
            expect[f"bf16.{n}"] = (torch.float64, ())
    wrong = [n for n, (dt, s) in expect.items()
             if n not in d or d[n].dtype != dt or tuple(d[n].shape) != s]
    extra = [n for n in d if n not in expect and not n.startswith("config.")]
    r.check(not wrong and not extra and len(d) == len(expect) + len(ints) + len(floats),
            f"records: {len(d)} present; wrong or missing ({len(wrong)}) {wrong[:5]}, "
            f"unexpected ({len(extra)}) {extra[:5]}")
    if wrong:
        raise ValueError("dump lacks records the remaining checks need")
    return c


def check_data_and_init(d, c, r):
    gen = torch.Generator().manual_seed(c["seed"] + 1)
    tokens = torch.randint(0, c["vocab"], (c["steps"], c["grad_accum"], c["batch"],
                                           c["seq"] + 1), generator=gen, dtype=torch.int32)
    r.check(torch.equal(d["inputs"], tokens[..., :-1])
            and torch.equal(d["targets"], tokens[..., 1:]),
            "inputs and targets are the tokens drawn from seed+1")
    V, C, L = c["vocab"], c["embd"], c["layers"]
    r.check(bool((d["init.wte"][V:] == 0).all()), f"init.wte rows {V}.. (padding) are zero")
    for n in param_names(L):
        t = d[f"init.{n}"]
        if n.endswith(".b"):
            r.check(bool((t == 0).all()), f"init.{n} is zero")
        elif t.dim() == 1:
            r.check(bool((t == 1).all()), f"init.{n} is one")
        else:
            t = t[:V] if n == "wte" else t
            want = 0.02 / math.sqrt(2 * L) if n.endswith("proj.w") else 0.02
            # n normal draws: the sample mean has standard error want/sqrt(n), the sample std a
            # relative one of 1/sqrt(2n); six of those leaves chance failures out of reach
            std, mean, count = t.double().std().item(), t.double().mean().item(), t.numel()
            r.check(abs(std / want - 1) < 6 / math.sqrt(2 * count)
                    and abs(mean) < 6 * want / math.sqrt(count),
                    f"init.{n}: std {std:.5f} mean {mean:.2e} over {count} values, "
                    f"expected N(0, {want:.5f})")


def check_steps(d, c, r):
    names = param_names(c["layers"])
    C, K = c["embd"], c["steps"]
    key_bias = slice(C, 2 * C)
    params = {n: d[f"init.{n}"] for n in names}
    for k in range(K):
        loss, grads, logits = step_loss_and_grads(params, c, d["inputs"][k], d["targets"][k])
        if k == 0:
            r.close_to("step0.logits", d["step0.logits"], logits)
            for n in names:
                want = grads[n].clone()
                if n.endswith("attn.qkv.b"):
                    # analytically zero; float64 leaves ~1e-16 of the other biases' size
                    stray = want[key_bias].abs().max().item()
                    scale = want.abs().max().item()
                    r.check(bool((d[f"step0.grad.{n}"][key_bias] == 0).all()) and
                            stray <= 1e-10 * scale,
                            f"step0.grad.{n}: key bias exactly 0 in the dump; float64 "
                            f"{stray:.1e} vs max {scale:.1e}")
                    want[key_bias] = 0
                r.close_to(f"step0.grad.{n}", d[f"step0.grad.{n}"], want)
        for l in range(c["layers"]):
            grads[f"h{l}.attn.qkv.b"][key_bias] = 0
        norm = math.sqrt(sum((g * g).sum().item() for g in grads.values()))
        r.close_to(f"step{k}.loss", d[f"step{k}.loss"], torch.tensor(loss, dtype=torch.float64))
        r.close_to(f"step{k}.grad_norm", d[f"step{k}.grad_norm"],
                   torch.tensor(norm, dtype=torch.float64))
        lr = schedule_lr(c, k)
        r.close_to(f"step{k}.lr", d[f"step{k}.lr"], torch.tensor(lr, dtype=torch.float64),
                   tol=1e-12)
        params = {n: d[f"step{k}.param.{n}"] for n in names}

    # The dump stores theta_1 in float32, so theta_1 - theta_0 carries the rounding of theta_1:
    # up to half a unit in the last place, ~6e-8 for a LayerNorm gain near 1, against an update
    # of ~lr. That half unit is excused per element; anything beyond it counts.
    for n in names:
        theta0 = d[f"init.{n}"].double()
        wd = c["weight_decay"] if theta0.dim() == 2 else 0.0
        update = adamw_first_step(theta0, d[f"step0.grad.{n}"].double(), d["step0.lr"].item(),
                                  wd, d["step0.grad_norm"].item(), c["grad_clip"])
        theta1 = d[f"step0.param.{n}"]
        half_ulp = 0.5 * (torch.nextafter(theta1.abs(), torch.tensor(math.inf)) - theta1.abs())
        r.close_to(f"step0 update {n} (theta_1 - theta_0, half ulp of theta_1 excused)",
                   theta1.double() - theta0, update, slack=half_ulp.double())


def check_bf16(d, r):
    values = torch.stack([t for n, t in d.items() if n.startswith("bf16.")])
    bad = [n for n, t in d.items() if n.startswith("bf16.") and not t.item() >= 0]
    r.check(not bad and bool(torch.isfinite(values).all()),
            f"bf16.*: {values.numel()} records finite and >= 0 (largest {values.max().item():.2e})"
            + (f"; bad: {bad[:5]}" if bad else ""))
    lr_diffs = [t.item() for n, t in d.items() if n.startswith("bf16.") and n.endswith(".lr")]
    r.check(all(v == 0 for v in lr_diffs), "bf16.step<k>.lr are 0 (the schedule has no arithmetic "
                                           "that bf16 touches)")


def main(argv):
    ap = argparse.ArgumentParser(description="Check a scripts/reference.py dump against an "
                                             "independent float64 model; exits 1 on any failure.")
    ap.add_argument("dump", help="dump file written by scripts/reference.py")
    ap.add_argument("--verbose", action="store_true",
                    help="print every check, not only the failures")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    r = Report(args.verbose)
    try:
        d = read_dump(args.dump)
        c = check_structure(d, r)
        check_data_and_init(d, c, r)
        check_steps(d, c, r)
        check_bf16(d, r)
    except (OSError, ValueError, struct.error) as e:
        print(f"check_reference: {e}")
        return 1
    worst = "; first failure: " + r.failures[0] if r.failures else ""
    print(f"check_reference: {args.dump}: {r.count - len(r.failures)}/{r.count} checks passed"
          + worst)
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
