#!/usr/bin/env python3
"""PyTorch reference for train_gpt.cu: trains a small GPT-2-style model from a seed and writes a
dump of every number test_gpt.cu compares against.

Written independently of the CUDA code and built from PyTorch's own operators and optimizer
(F.layer_norm, F.scaled_dot_product_attention, F.gelu, F.cross_entropy, clip_grads_with_norm_,
torch.optim.AdamW), so that agreement between the two programs means something. This docstring
is the one place the model, the training step and the dump format are specified.

MODEL (float32). V = --vocab, Vp = V rounded up to a multiple of 128, T = --seq, maxT = --context
(default T; T <= maxT), L = --layers, NH = --heads, C = --embd, HS = C / NH.
Parameters, with the names used in the dump and PyTorch's row-major shapes:
  wte (Vp, C)                      token embedding, also the lm_head (tied); rows V..Vp-1 are 0
  wpe (maxT, C)                    position embedding
  h{l}.ln1.w (C), h{l}.ln1.b (C)
  h{l}.attn.qkv.w (3C, C), h{l}.attn.qkv.b (3C)  output features ordered [q | k | v], each
                                   (NH, HS); the key bias (slice C..2C of qkv.b) is 0
  h{l}.attn.proj.w (C, C), h{l}.attn.proj.b (C)
  h{l}.ln2.w (C), h{l}.ln2.b (C)
  h{l}.mlp.fc.w (4C, C), h{l}.mlp.fc.b (4C)
  h{l}.mlp.proj.w (C, 4C), h{l}.mlp.proj.b (C)
  lnf.w (C), lnf.b (C)
Init: torch.manual_seed(--seed), then each tensor drawn in the order listed: weights of linear
layers and embeddings N(0, 0.02), attn.proj.w and mlp.proj.w N(0, 0.02/sqrt(2L)); biases 0;
LayerNorm weights 1 and biases 0; the padding rows of wte set to 0 after drawing.
Forward: x = wte[tok] + wpe[pos]; per block x += attn.proj(attn(ln1(x))), then
x += mlp.proj(gelu_tanh(mlp.fc(ln2(x)))); LayerNorm eps 1e-5; causal attention with softmax
scale 1/sqrt(HS); logits = lnf(x) @ wte^T (Vp columns; the loss and the dump use only the first
V: padding columns are excluded from the softmax); loss = mean cross-entropy over the B*T
positions of a micro-batch.

DATA. torch.Generator seeded with seed+1 draws randint(0, V, (K, A, B, T+1)) as int32, with
K = --steps, A = --grad-accum, B = --batch; inputs = [..., :T], targets = [..., 1:].

STEP s (0-based) of K. A micro-batches of B sequences; the step loss is the mean of the A
micro-batch losses and the gradients are those of that mean (each micro-batch backpropagates
loss/A). The key-bias gradient is set to exactly 0 (softmax ignores a per-query constant, so it
is analytically zero). Grad norm = global L2 norm of all gradients, before clipping (summed
in float64). With --grad-clip G > 0 the gradients are multiplied by min(1, G/(norm+1e-6)),
clip_grad_norm_'s rule.
AdamW: betas (0.9, 0.95), eps 1e-8, decoupled weight decay WD on the 2-D tensors (wte, wpe and
every .w of a linear layer), none on biases and LayerNorm parameters.
Learning rate, peak LR = --lr, floor = F*LR with F = --min-lr-frac, W = --warmup:
  s < W (takes precedence):  LR*(s+1)/W
  cosine:   floor + (LR-floor)*0.5*(1+cos(pi*p)),  p = (s-W)/max(1, K-1-W)
  linear:   LR + (floor-LR)*p, p as for cosine
  wsd:      n = ceil(D*K) with D = --decay-frac; LR for s < K-n, else
            LR + (floor-LR)*p with p = (s-(K-n)+1)/n (the floor at step K-1)
  constant: LR

DUMP FILE (little-endian): 8 bytes "GPTDUMP1", uint32 n_records, then n_records records, each
  uint32 name_len, name (ASCII, no NUL), uint32 dtype (0 f32, 1 i32, 2 f64, 3 i64),
  uint32 ndim, int64 dims[ndim], data (product of dims elements; ndim 0 holds 1 element).
Records, in this order:
  config.vocab config.padded_vocab config.seq config.context config.layers config.heads
  config.embd config.batch config.grad_accum config.steps config.seed config.warmup   i64
  config.schedule                  i64: 0 cosine, 1 wsd, 2 linear, 3 constant
  config.lr config.min_lr_frac config.decay_frac config.weight_decay config.grad_clip  f64
  inputs, targets                  i32 (K, A, B, T)
  init.<param>                     f32, every parameter at initialization (theta_{-1})
  step0.logits                     f32 (A, B, T, V), every micro-batch of step 0
  then for k = 0..K-1 (the fp32 run, theta_k = parameters after the update of step k):
  step<k>.loss step<k>.lr step<k>.grad_norm   f64 scalars (loss is the step loss)
  step<k>.grad.<param>             f32, the accumulated gradient of step k, before clipping
  step<k>.param.<param>            f32, theta_k
  step<k>.adam_m.<param>           f32, AdamW's first moment (exp_avg) after step k
  step<k>.adam_v.<param>           f32, AdamW's second moment (exp_avg_sq) after step k
  then how far bf16 arithmetic alone moves each quantity, as f64 scalars ||b-f||/||f|| (0/0
  gives 0, x/0 gives inf) between a bf16 value b computed under torch.autocast(bfloat16) and
  the fp32 run's value f:
  bf16.step0.logits                step 0's logits, from init
  bf16.step0.param.<param>         theta_0 - init after one AdamW step from init on the bf16
                                   gradients, against the fp32 run's theta_0 - init
  then for k = 0..K-1, teacher-forced: the bf16 forward and backward of step k run at the fp32
  run's theta_{k-1}, so these measure one step's arithmetic, not a drifting trajectory:
  bf16.step<k>.loss bf16.step<k>.grad_norm
  bf16.step<k>.grad.<param>
"""

import argparse
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

SCHEDULES = ["cosine", "wsd", "linear", "constant"]
DTYPE_CODES = {np.dtype("<f4"): 0, np.dtype("<i4"): 1, np.dtype("<f8"): 2, np.dtype("<i8"): 3}


def padded_vocab(V):
    return (V + 127) // 128 * 128


def param_shapes(cfg):
    """Every parameter's name and shape, in the order of the dump and of initialization."""
    C, Vp = cfg.embd, padded_vocab(cfg.vocab)
    shapes = [("wte", (Vp, C)), ("wpe", (cfg.context, C))]
    for l in range(cfg.layers):
        shapes += [
            (f"h{l}.ln1.w", (C,)), (f"h{l}.ln1.b", (C,)),
            (f"h{l}.attn.qkv.w", (3 * C, C)), (f"h{l}.attn.qkv.b", (3 * C,)),
            (f"h{l}.attn.proj.w", (C, C)), (f"h{l}.attn.proj.b", (C,)),
            (f"h{l}.ln2.w", (C,)), (f"h{l}.ln2.b", (C,)),
            (f"h{l}.mlp.fc.w", (4 * C, C)), (f"h{l}.mlp.fc.b", (4 * C,)),
            (f"h{l}.mlp.proj.w", (C, 4 * C)), (f"h{l}.mlp.proj.b", (C,)),
        ]
    shapes += [("lnf.w", (C,)), ("lnf.b", (C,))]
    return shapes


def init_params(cfg):
    torch.manual_seed(cfg.seed)
    residual_std = 0.02 / math.sqrt(2 * cfg.layers)
    params = {}
    for name, shape in param_shapes(cfg):
        if name.endswith((".attn.proj.w", ".mlp.proj.w")):
            t = torch.normal(0.0, residual_std, shape)
        elif len(shape) == 2:  # embeddings and the other linear weights
            t = torch.normal(0.0, 0.02, shape)
        elif name.endswith(".w"):  # the 1-D weights are LayerNorm gains
            t = torch.ones(shape)
        else:  # biases
            t = torch.zeros(shape)
        params[name] = t
    params["wte"][cfg.vocab:] = 0.0
    return params


def forward_loss(p, cfg, idx, targets):
    """Logits (B, T, V) and mean cross-entropy of one micro-batch; idx, targets (B, T) int64."""
    B, T = idx.shape
    C, NH = cfg.embd, cfg.heads
    x = p["wte"][idx] + p["wpe"][:T]
    for l in range(cfg.layers):
        h = f"h{l}."
        a = F.layer_norm(x, (C,), p[h + "ln1.w"], p[h + "ln1.b"], eps=1e-5)
        qkv = F.linear(a, p[h + "attn.qkv.w"], p[h + "attn.qkv.b"])
        # (B, T, 3C) -> three (B, NH, T, HS)
        q, k, v = qkv.view(B, T, 3, NH, C // NH).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p[h + "attn.proj.w"], p[h + "attn.proj.b"])
        m = F.layer_norm(x, (C,), p[h + "ln2.w"], p[h + "ln2.b"], eps=1e-5)
        m = F.gelu(F.linear(m, p[h + "mlp.fc.w"], p[h + "mlp.fc.b"]), approximate="tanh")
        x = x + F.linear(m, p[h + "mlp.proj.w"], p[h + "mlp.proj.b"])
    x = F.layer_norm(x, (C,), p["lnf.w"], p["lnf.b"], eps=1e-5)
    # under autocast the matmul yields bf16 logits; the softmax and the loss stay in fp32
    logits = F.linear(x, p["wte"])[..., :cfg.vocab].float()
    loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))
    return logits, loss


def learning_rate(cfg, s):
    K, W, lr = cfg.steps, cfg.warmup, cfg.lr
    floor = cfg.min_lr_frac * lr
    if s < W:
        return lr * (s + 1) / W
    if cfg.schedule == "constant":
        return lr
    if cfg.schedule == "wsd":
        n_decay = math.ceil(cfg.decay_frac * K)
        if s < K - n_decay:
            return lr
        return lr + (floor - lr) * (s - (K - n_decay) + 1) / n_decay
    p = (s - W) / max(1, K - 1 - W)
    if cfg.schedule == "cosine":
        return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * p))
    return lr + (floor - lr) * p


def leaves(params):
    """Fresh float32 leaf tensors holding a copy of params (name -> tensor)."""
    return {n: t.detach().clone().requires_grad_(True) for n, t in params.items()}


def forward_backward(cfg, p, inputs, targets, autocast):
    """Forward and backward of one step's A micro-batches; p: name -> leaf tensor, whose .grad
    receives the accumulated gradient (key bias zeroed). Returns the step loss, the logits
    (A, B, T, V) and the global gradient norm (a float64 tensor). autocast=True runs the forward
    under bfloat16 autocast."""
    for t in p.values():
        t.grad = None
    A = cfg.grad_accum
    step_loss, logits = 0.0, []
    for a in range(A):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            lg, loss = forward_loss(p, cfg, inputs[a], targets[a])
        (loss / A).backward()
        step_loss += loss.item() / A
        logits.append(lg.detach())
    # The key bias adds q.b_k to a query's scores at every key, which softmax cancels: its
    # gradient is zero up to rounding, and Adam would turn that rounding into lr-sized steps.
    for l in range(cfg.layers):
        p[f"h{l}.attn.qkv.b"].grad[cfg.embd:2 * cfg.embd] = 0.0
    # PyTorch's float32 CPU norm drifts by ~6e-6 relative on a 590k-element tensor, too close
    # to the 1e-5 the dump is held to, so the norm is taken in float64.
    norm = torch.nn.utils.get_total_norm([t.grad.double() for t in p.values()])
    return step_loss, torch.stack(logits), norm


def make_adamw(cfg, p):
    decay = [t for t in p.values() if t.dim() == 2]
    no_decay = [t for t in p.values() if t.dim() != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)


def adamw_step(cfg, opt, p, norm, lr):
    """Clips the gradients in p by the float64 norm (clip_grad_norm_'s rule, through PyTorch's
    own clipping) and takes one AdamW step at learning rate lr."""
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grads_with_norm_(list(p.values()), cfg.grad_clip, norm)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()


def train_fp32(cfg, init, inputs, targets):
    """The fp32 run: K steps from init. Returns the step-0 logits and, per step, a dict with
    loss, lr, grad_norm and the tensors grad (before clipping), param, adam_m, adam_v."""
    p = leaves(init)
    opt = make_adamw(cfg, p)
    steps = []
    for s in range(cfg.steps):
        loss, logits, norm = forward_backward(cfg, p, inputs[s], targets[s], autocast=False)
        if s == 0:
            logits0 = logits
        grad = {n: t.grad.clone() for n, t in p.items()}
        lr = learning_rate(cfg, s)
        adamw_step(cfg, opt, p, norm, lr)
        steps.append({"loss": loss, "lr": lr, "grad_norm": norm.item(), "grad": grad,
                      "param": {n: t.detach().clone() for n, t in p.items()},
                      "adam_m": {n: opt.state[t]["exp_avg"].clone() for n, t in p.items()},
                      "adam_v": {n: opt.state[t]["exp_avg_sq"].clone() for n, t in p.items()}})
    return logits0, steps


def train_bf16_teacher_forced(cfg, init, inputs, targets, fp32_steps):
    """bf16-autocast runs of each step k from the fp32 run's theta_{k-1} (init for k = 0).
    Returns the step-0 logits, theta_0 after one AdamW step from init on the bf16 gradients, and
    per step a dict with loss, grad_norm and grad (before clipping)."""
    steps = []
    for s in range(cfg.steps):
        p = leaves(init if s == 0 else fp32_steps[s - 1]["param"])
        loss, logits, norm = forward_backward(cfg, p, inputs[s], targets[s], autocast=True)
        steps.append({"loss": loss, "grad_norm": norm.item(),
                      "grad": {n: t.grad.clone() for n, t in p.items()}})
        if s == 0:
            logits0 = logits
            adamw_step(cfg, make_adamw(cfg, p), p, norm, learning_rate(cfg, 0))
            theta0 = {n: t.detach().clone() for n, t in p.items()}
    return logits0, theta0, steps


def rel_diff(b, f):
    """||b - f|| / ||f|| in float64; 0/0 gives 0, x/0 gives inf."""
    f = torch.as_tensor(f, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    num, den = torch.linalg.vector_norm(b - f).item(), torch.linalg.vector_norm(f).item()
    return 0.0 if num == 0.0 else (math.inf if den == 0.0 else num / den)


def records(cfg, inputs, targets, init, fp32, bf16):
    """The dump's records as (name, numpy array) in file order."""
    out = []
    config_i64 = [("vocab", cfg.vocab), ("padded_vocab", padded_vocab(cfg.vocab)),
                  ("seq", cfg.seq), ("context", cfg.context), ("layers", cfg.layers),
                  ("heads", cfg.heads), ("embd", cfg.embd), ("batch", cfg.batch),
                  ("grad_accum", cfg.grad_accum), ("steps", cfg.steps), ("seed", cfg.seed),
                  ("warmup", cfg.warmup), ("schedule", SCHEDULES.index(cfg.schedule))]
    out += [("config." + n, np.array(v, dtype="<i8")) for n, v in config_i64]
    config_f64 = [("lr", cfg.lr), ("min_lr_frac", cfg.min_lr_frac),
                  ("decay_frac", cfg.decay_frac), ("weight_decay", cfg.weight_decay),
                  ("grad_clip", cfg.grad_clip)]
    out += [("config." + n, np.array(v, dtype="<f8")) for n, v in config_f64]
    out += [("inputs", inputs.numpy().astype("<i4")), ("targets", targets.numpy().astype("<i4"))]

    def f32(t):
        return t.numpy().astype("<f4")

    def f64(x):
        return np.array(x, dtype="<f8")

    (logits_f, steps_f), (logits_b, theta0_b, steps_b) = fp32, bf16
    out += [("init." + n, f32(t)) for n, t in init.items()]
    out.append(("step0.logits", f32(logits_f)))
    for k, s in enumerate(steps_f):
        out += [(f"step{k}.{n}", f64(s[n])) for n in ("loss", "lr", "grad_norm")]
        for kind in ("grad", "param", "adam_m", "adam_v"):
            out += [(f"step{k}.{kind}.{n}", f32(t)) for n, t in s[kind].items()]
    out.append(("bf16.step0.logits", f64(rel_diff(logits_b, logits_f))))
    out += [(f"bf16.step0.param.{n}", f64(rel_diff(theta0_b[n] - t, steps_f[0]["param"][n] - t)))
            for n, t in init.items()]
    for k, (f, b) in enumerate(zip(steps_f, steps_b)):
        out += [(f"bf16.step{k}.{n}", f64(rel_diff(b[n], f[n]))) for n in ("loss", "grad_norm")]
        out += [(f"bf16.step{k}.grad.{n}", f64(rel_diff(b["grad"][n], t)))
                for n, t in f["grad"].items()]
    return out


def write_dump(path, recs):
    """Writes the records to path through a temporary file and a rename, so that a reader never
    sees a partial dump."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(b"GPTDUMP1")
            f.write(struct.pack("<I", len(recs)))
            for name, arr in recs:
                raw = name.encode("ascii")
                f.write(struct.pack("<I", len(raw)) + raw)
                f.write(struct.pack("<II", DTYPE_CODES[arr.dtype], arr.ndim))
                f.write(struct.pack(f"<{arr.ndim}q", *arr.shape))
                f.write(np.ascontiguousarray(arr).tobytes())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# The command line: flag, metavar, type, default, help. --help is generated from this table.
FLAGS = [
    ("--seed", "S", int, 1337, "initialization seed; the data uses seed+1"),
    ("--vocab", "V", int, 313, "vocabulary size V"),
    ("--seq", "T", int, 24, "sequence length T"),
    ("--context", "N", int, None, "model context maxT, rows of wpe (default: --seq)"),
    ("--layers", "L", int, 2, "transformer blocks L"),
    ("--heads", "H", int, 2, "attention heads NH"),
    ("--embd", "C", int, 64, "model width C"),
    ("--batch", "B", int, 2, "micro-batch B: sequences per forward pass"),
    ("--grad-accum", "A", int, 2, "micro-batches A accumulated per step"),
    ("--steps", "K", int, 3, "optimizer steps K"),
    ("--lr", "LR", float, 1e-3, "peak learning rate"),
    ("--warmup", "W", int, 0, "linear warmup steps W; 0 for none"),
    ("--schedule", "{" + ",".join(SCHEDULES) + "}", str, "cosine", "learning rate after warmup"),
    ("--min-lr-frac", "F", float, 0.1, "floor of the schedule as a fraction of --lr"),
    ("--decay-frac", "D", float, 0.2, "wsd: fraction of the steps spent decaying"),
    ("--weight-decay", "WD", float, 0.1, "AdamW decoupled weight decay on 2-D tensors"),
    ("--grad-clip", "G", float, 1.0, "clip the global gradient norm to this; 0 disables"),
]


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Train a small GPT in PyTorch from a seed and write the dump that test_gpt "
                    "checks against (format in this script's docstring).")
    ap.add_argument("--out", metavar="FILE", required=True, help="dump file to write")
    for flag, metavar, kind, default, text in FLAGS:
        if default is not None:
            text += f" (default {default})"
        choices = SCHEDULES if flag == "--schedule" else None
        ap.add_argument(flag, metavar=metavar, type=kind, default=default, choices=choices,
                        help=text)
    cfg = ap.parse_args(argv)
    if cfg.context is None:
        cfg.context = cfg.seq
    for flag in ("vocab", "seq", "context", "layers", "heads", "embd", "batch", "grad_accum",
                 "steps"):
        if getattr(cfg, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(cfg, flag)}")
    if not 0 <= cfg.seed < 2**63 - 1:
        ap.error(f"--seed must be in [0, 2^63-2] (the data uses seed+1), got {cfg.seed}")
    if cfg.vocab < 2:
        ap.error("--vocab must be at least 2: with one token the loss and every gradient are 0")
    if cfg.vocab > 2**31 - 1:
        ap.error(f"--vocab {cfg.vocab} does not fit the dump's int32 tokens")
    if cfg.seq > cfg.context:
        ap.error(f"--seq {cfg.seq} is longer than the model's --context {cfg.context}")
    if cfg.embd % cfg.heads != 0:
        ap.error(f"--heads {cfg.heads} does not divide --embd {cfg.embd}")
    if cfg.warmup < 0:
        ap.error(f"--warmup must be >= 0, got {cfg.warmup}")
    for flag in ("lr", "weight_decay", "grad_clip"):
        value = getattr(cfg, flag)
        if not (math.isfinite(value) and value >= 0):
            ap.error(f"--{flag.replace('_', '-')} must be finite and >= 0, got {value}")
    for flag in ("min_lr_frac", "decay_frac"):
        value = getattr(cfg, flag)
        if not 0.0 <= value <= 1.0:
            ap.error(f"--{flag.replace('_', '-')} must be in [0, 1], got {value}")
    return cfg


def main(argv):
    cfg = parse_args(argv)
    torch.set_num_threads(2)
    t0 = time.time()
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    tokens = torch.randint(0, cfg.vocab, (cfg.steps, cfg.grad_accum, cfg.batch, cfg.seq + 1),
                           generator=gen, dtype=torch.int32)
    inputs, targets = tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()
    init = init_params(cfg)
    fp32 = train_fp32(cfg, init, inputs.long(), targets.long())
    bf16 = train_bf16_teacher_forced(cfg, init, inputs.long(), targets.long(), fp32[1])
    recs = records(cfg, inputs, targets, init, fp32, bf16)
    try:
        write_dump(cfg.out, recs)
    except OSError as e:
        sys.exit(f"reference: cannot write {cfg.out}: {e.strerror}")
    steps = fp32[1]
    bf16_logits = next(a.item() for n, a in recs if n == "bf16.step0.logits")
    print(f"reference: wrote {cfg.out} ({len(recs)} records, {os.path.getsize(cfg.out)} bytes): "
          f"V={cfg.vocab} Vp={padded_vocab(cfg.vocab)} T={cfg.seq} maxT={cfg.context} "
          f"L={cfg.layers} NH={cfg.heads} C={cfg.embd} B={cfg.batch} A={cfg.grad_accum} "
          f"K={cfg.steps} {cfg.schedule}; loss {steps[0]['loss']:.6f} -> {steps[-1]['loss']:.6f}, "
          f"bf16 logits rel diff {bf16_logits:.2e}, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
