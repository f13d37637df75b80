#!/usr/bin/env python3
"""Independent check of a dump written by scripts/reference.py.

test_gpt trusts the dump, so the dump itself is checked here against a second implementation
that shares no code with reference.py: its own file reader, and a GPT written as plain float64
tensor algebra (LayerNorm from mean and variance, QK-norm from the root mean square, attention
as explicit matmuls and a masked softmax, GELU from its tanh formula, cross-entropy and z-loss
from logsumexp), differentiated by autograd, and its own float64 AdamW, Muon and Lion.
Starting from the dump's initial parameters and tokens it verifies:
  - the records, dtypes and shapes the format (reference.py's docstring) promises, the tokens
    regenerated from the seed, and the initialization rules (zero padding rows and biases, unit
    LayerNorm gains, weight standard deviations);
  - for every step k, from the dump's own parameters theta_{k-1} (init for k = 0), so that an
    error cannot cascade from one step into the next: step k's loss, z-loss, grad norm and
    every gradient step<k>.grad.<p>, and for k = 0 the logits: relative norm error below 1e-5
    (float32 dump against float64);
  - without QK-norm, the key-bias gradient of every step is exactly zero in the dump, and
    negligible in float64 (with QK-norm it is an ordinary gradient, compared as one);
  - every step's learning rates (AdamW's and Muon's) against the schedule recomputed here;
  - every step's update: a hand-written float64 AdamW (AdamW tensors), Muon (Muon tensors:
    momentum, Nesterov, Newton-Schulz in float64, the shape-adjusted lr, decoupled weight
    decay) and Lion (Lion tensors: the sign of the interpolated momentum, decoupled weight
    decay) fed the dump's theta_{k-1}, optimizer state of step k-1 (zeros for k = 0),
    step<k>.grad, lr and grad norm reproduces the dump's theta_k - theta_{k-1} and the new
    state (m_k and v_k, the momentum, or Lion's m) within 1e-5 relative norm error per tensor
    (the float32 roundings of the stored theta excused per element, see check_steps; for Muon's
    update, plus 4x how far float32 arithmetic moves our own Newton-Schulz on that input; for
    Lion's, 2 lr for an element whose sign float32 may decide otherwise);
  - Muon's step<k>.update_bf16.<p> (torch's bf16 step from the bf16 build's inputs) is within
    the dump's own bf16 measures of the float64 update (triangle inequality);
  - the bf16.* and fp32.* records exist for every compared quantity and are finite and
    non-negative.
FP8 dumps (--fp8): the model's four linear layers of every block (and the lm head with
--fp8-lm-head) quantize their operands as the recipe defines them, modelled here in float64:
FP8 values from their exponent and mantissa bits (fp8_round, not torch's casts), scale groups
from an element-to-tile index (not reshapes), the scale and its reciprocal rounded to float32
where the recipe computes them in float32, operands rounded to float32 first (what the fp32
program quantizes). Quantization is discontinuous: the dump's float32 run and any float64 run
quantize an element near a rounding boundary differently, so no fixed bound relates them. The
dump records its own float64 run's distance, exact.<name> = ||exact - dump|| / ||dump||; this
model is an independent float64 run of the same definition, so its distance from the dump must
equal that record within 1e-5 (measured: 1e-16 between the two float64 runs' gradients). A
recipe error in either program (a tile shape, a scale rule) moves the distances apart by the
size of an FP8 rounding (~1e-2). Delayed scaling: each step's amax histories and scales in the
dump follow from the previous step's with the model's amaxes, within 1e-5. Each FP8 layer's
recorded products (fp8.layer*: the bf16 run's operands, its products rounded to bf16) lie,
element by element, within one bf16 spacing plus the float32 sum's rounding bound of this
model's float64 products of the same operands (measured: at most 0.5 of it, the rounding
itself). bf16.free.* and bf16.fp8.* records: finite and non-negative, with the other bf16.*.
Llama dumps (config.arch 1, reference.py's docstring LLAMA): the model here is its own float64
Llama: RMSNorm from the root mean square, q, k, v per head with query head h reading kv head
h // (NH/KVH) (explicit indexing, no enable_gqa), RoPE from its definition (each dimension i <
HS/2 turned with i + HS/2 by pos * theta^(-2i/HS), the frequencies under llama3 scaling
rescaled here from the rule in float64), SwiGLU as g / (1 + exp(-g)) * u, the untied lm head
when the dump has one; the same records, init rules and update checks as GPT-2's. With FP8 its
layers are [q | k | v] (the three weights concatenated), attn.proj, [gate | up] and mlp.proj,
without biases.
Prints each failed check (with --verbose every check) with its error and bound, and a summary
line per dump; exits 1 if any fails. Usage: check_reference.py [--verbose] DUMP [DUMP ...]: the
dumps are checked in turn in this one process (run_each), one start of PyTorch for them all.
"""

import argparse
import contextlib
import math
import struct
import sys
import time
import traceback

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

    def close_to(self, name, got, want, tol=TOL, slack=None, exact=None):
        """got (from the dump) against want (float64): relative norm error and max abs. slack,
        if given, is a per-element absolute error that the dump's float32 storage cannot avoid;
        it is taken off each element's error before the norm. exact (FP8 dumps): the dump's own
        exact.<name>, ||exact run - got|| / ||got||; the same measure of want must then equal it
        within tol (want is that run, recomputed here)."""
        got, want = got.double(), want.double()
        if got.shape != want.shape:
            self.check(False, f"{name}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
            return
        err = got - want
        max_abs = err.abs().max().item() if got.numel() else 0.0
        if slack is not None:
            err = (err.abs() - slack).clamp(min=0)
        diff = torch.linalg.vector_norm(err).item()
        ref = torch.linalg.vector_norm(want if exact is None else got).item()
        rel = diff / ref if ref > 0 else (0.0 if diff == 0 else math.inf)
        excess = rel if exact is None else abs(rel - exact)
        ok = math.isfinite(rel) and excess < tol and bool(torch.isfinite(got).all())
        against = "" if exact is None else f" against the dump's exact run's {exact:.3e}"
        self.check(ok, f"{name}: rel err {rel:.3e}{against} (bound {tol:.0e}), max abs "
                       f"{max_abs:.3e}, norm {ref:.4e}")


BLOCK_TENSORS = ("ln1.w", "ln1.b", "attn.qkv.w", "attn.qkv.b", "attn.proj.w", "attn.proj.b",
                 "ln2.w", "ln2.b", "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b")
QK_NORM_TENSORS = ("attn.q_norm.w", "attn.k_norm.w")
MUON_MATRICES = ("attn.qkv.w", "attn.proj.w", "mlp.fc.w", "mlp.proj.w", "attn.q.w", "attn.k.w",
                 "attn.v.w", "mlp.gate.w", "mlp.up.w")
LLAMA_BLOCK_TENSORS = ("ln1.w", "attn.q.w", "attn.k.w", "attn.v.w", "attn.proj.w", "ln2.w",
                       "mlp.gate.w", "mlp.up.w", "mlp.proj.w")


def is_llama(c):
    return c["arch"] == 1


def param_names(c):
    if is_llama(c):
        names = ["wte"] + ([] if c["tie_embeddings"] else ["lm_head"])
        block = LLAMA_BLOCK_TENSORS + (QK_NORM_TENSORS if c["qk_norm"] else ())
        for l in range(c["layers"]):
            names += [f"h{l}.{n}" for n in block]
        return names + ["lnf.w"]
    names = ["wte", "wpe"]
    block = BLOCK_TENSORS + (QK_NORM_TENSORS if c["qk_norm"] else ())
    for l in range(c["layers"]):
        names += [f"h{l}.{n}" for n in block]
    return names + ["lnf.w", "lnf.b"]


def muon_tensor(c, name):
    """Whether the dump's Muon updates the tensor (the hidden matrices, with optimizer 1)."""
    return c["optimizer"] == 1 and name.startswith("h") and name.split(".", 1)[1] in MUON_MATRICES


def lion_tensor(c, name):
    """Whether the dump's Lion updates the tensor (every tensor, with optimizer 2)."""
    return c["optimizer"] == 2


def state_kinds(c, name):
    """The dump's optimizer state records of a tensor, by its optimizer."""
    if muon_tensor(c, name):
        return ("muon_momentum",)
    return ("lion_m",) if lion_tensor(c, name) else ("adam_m", "adam_v")


def expected_shapes(c):
    C, L, HS = c["embd"], c["layers"], c["embd"] // c["heads"]
    KV, H = c["kv_heads"] * HS, c["mlp_hidden"]
    shapes = {"wte": (c["padded_vocab"], C), "wpe": (c["context"], C),
              "lm_head": (c["padded_vocab"], C), "lnf.w": (C,), "lnf.b": (C,)}
    per_layer = {"ln1.w": (C,), "ln1.b": (C,), "attn.qkv.w": (3 * C, C), "attn.qkv.b": (3 * C,),
                 "attn.proj.w": (C, C), "attn.proj.b": (C,), "ln2.w": (C,), "ln2.b": (C,),
                 "mlp.fc.w": (4 * C, C), "mlp.fc.b": (4 * C,), "mlp.proj.w": (C, 4 * C),
                 "mlp.proj.b": (C,), "attn.q_norm.w": (HS,), "attn.k_norm.w": (HS,)}
    if is_llama(c):
        per_layer.update({"attn.q.w": (C, C), "attn.k.w": (KV, C), "attn.v.w": (KV, C),
                          "mlp.gate.w": (H, C), "mlp.up.w": (H, C), "mlp.proj.w": (C, H)})
    shapes = {n: s for n, s in shapes.items() if n in param_names(c)}
    for n in param_names(c):
        shapes[n] = per_layer[n.split(".", 1)[1]] if n.startswith("h") else shapes[n]
    return shapes


# =============================================================================================
# FP8 (reference.py's docstring, FP8), modelled here in float64 from the recipes' definitions:
# FP8 values by their exponent and mantissa bits, not torch's float8 casts.

FP8_FORMAT = {  # name: (mantissa bits, smallest normal exponent, largest finite value, MX emax)
    "e4m3": (3, -6, 448.0, 8), "e5m2": (2, -14, 57344.0, 15)}
FP8_RECIPE_NAMES = ["off", "tensor", "delayed", "rowwise", "block", "mx"]


def to_fp32(x):
    """x (float64) rounded to the nearest float32, back in float64."""
    return x.float().double()


def fp8_round(v, fmt):
    """float64 values already within +-max rounded to the nearest value of the FP8 format, ties
    to even: the spacing is 2^(e - mantissa bits) for |v| in [2^e, 2^(e+1)), e at least the
    smallest normal exponent (subnormals share its spacing)."""
    mbits, emin, _, _ = FP8_FORMAT[fmt]
    exponent = (torch.frexp(v.abs()).exponent - 1).clamp(min=emin)
    spacing = torch.pow(2.0, (exponent - mbits).double())
    return torch.round(v / spacing) * spacing  # torch.round: half to even; v / spacing exact


def tile_of(recipe, rows, cols, weight):
    """(tile rows, tile cols) of one scale group of an operand (rows, cols), cols reduced."""
    return {"tensor": (rows, cols), "delayed": (rows, cols), "rowwise": (1, cols),
            "block": (128, 128) if weight else (1, 128), "mx": (1, 32)}[recipe]


def group_index(rows, cols, tile):
    """Each element's scale group, numbered row-major over the grid of tiles."""
    tr, tc = tile
    r = torch.arange(rows).unsqueeze(1) // tr
    c = torch.arange(cols).unsqueeze(0) // tc
    return r * ((cols + tc - 1) // tc) + c


def fp8_qdq(m, fmt, recipe, weight, delayed_scale=None):
    """The operand m (float64 holding float32 values) quantized by the recipe and dequantized
    (float64), and its amax over the whole operand."""
    _, _, fmax, emax = FP8_FORMAT[fmt]
    group = group_index(*m.shape, tile_of(recipe, *m.shape, weight))
    mag = torch.nan_to_num(m.abs(), nan=0.0)
    amax = torch.zeros(int(group.max()) + 1, dtype=torch.float64).scatter_reduce(
        0, group.flatten(), mag.flatten(), "amax")[group]
    if recipe == "mx":
        exponent = (torch.frexp(amax).exponent - 1 - emax).clamp(-127, 127)
        scale = torch.where(amax > 0, torch.pow(2.0, exponent.double()), 2.0 ** -127)
        return fp8_round((m / scale).clamp(-fmax, fmax), fmt) * scale, mag.max()
    if delayed_scale is not None:
        s = torch.full_like(m, delayed_scale)
    else:  # float32 arithmetic where the recipe has it: the scale and its reciprocal
        s = to_fp32(fmax / amax.clamp(min=to_fp32(torch.tensor(1e-12)).item()))
        s = torch.where((amax == 0) | torch.isinf(amax), 1.0, s)
    q = fp8_round(to_fp32(m * s).clamp(-fmax, fmax), fmt)
    return to_fp32(q * to_fp32(1.0 / s)), mag.max()


class Fp8Model:
    """The FP8 side of the float64 model: recipe, gradients' format, the delayed scales of the
    step (slot, tensor) from the dump and the step's amaxes as they accumulate."""

    def __init__(self, c, scales):
        self.recipe = FP8_RECIPE_NAMES[c["fp8"]]
        self.grad_fmt = "e5m2" if c["fp8_grad_e5m2"] else "e4m3"
        self.scales = scales
        self.amax = torch.zeros(4 * c["layers"] + c["fp8_lm_head"], 3, dtype=torch.float64)

    def qdq(self, m, slot, tensor, weight, record):
        """Operand `tensor` (0 x, 1 w, 2 g) of the slot, from m rounded to float32 (the values
        the fp32 program quantizes)."""
        fmt = self.grad_fmt if tensor == 2 else "e4m3"
        scale = self.scales[slot, tensor].item() if self.recipe == "delayed" else None
        out, amax = fp8_qdq(to_fp32(m), fmt, self.recipe, weight, scale)
        if record:
            self.amax[slot, tensor] = max(self.amax[slot, tensor].item(), amax.item())
        return out


class Fp8Matmul(torch.autograd.Function):
    """x w^T with FP8 operands: forward q(x) q(w), backward dx = q(g) q(w^T), dw = q(g^T) q(x^T),
    products of the dequantized values in float64."""

    @staticmethod
    def forward(ctx, x, w, model, slot):
        X = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(X, w)
        ctx.model, ctx.slot, ctx.x_shape = model, slot, x.shape
        y = model.qdq(X, slot, 0, False, True) @ model.qdq(w, slot, 1, True, True).T
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        X, w = ctx.saved_tensors
        model, slot = ctx.model, ctx.slot
        G = dy.reshape(-1, w.shape[0])
        dx = model.qdq(G, slot, 2, False, True) @ model.qdq(w.T, slot, 1, True, False).T
        dw = model.qdq(G.T, slot, 2, False, False) @ model.qdq(X.T, slot, 0, False, False).T
        return dx.reshape(ctx.x_shape), dw, None, None


def matmul_t(x, w, fp8, slot):
    """x w^T, through the FP8 model when fp8 is given."""
    return x @ w.T if fp8 is None else Fp8Matmul.apply(x, w, fp8, slot)


def layernorm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rms_norm(x, w):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def rms_norm_eps(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope_frequencies(c, HS):
    """theta^(-2i/HS) for i < HS/2 in float64, under llama3 scaling (rope_scaling 1) divided by
    the factor where the wavelength exceeds original/low_freq_factor, kept where it is below
    original/high_freq_factor, and interpolated as (1 - s) f / factor + s f between, with
    s = (original / wavelength - low) / (high - low)."""
    out = []
    for i in range(HS // 2):
        f = c["rope_theta"] ** (-2.0 * i / HS)
        if c["rope_scaling"] == 1:
            old, low, high = c["rope_original_context"], c["rope_low_freq_factor"], \
                c["rope_high_freq_factor"]
            wavelength = 2 * math.pi / f
            if wavelength > old / low:
                f = f / c["rope_factor"]
            elif wavelength >= old / high:
                s = (old / wavelength - low) / (high - low)
                f = (1 - s) * f / c["rope_factor"] + s * f
        out.append(f)
    return torch.tensor(out, dtype=torch.float64)


def rotate(x, freqs):
    """x (B, T, HS): dimension i and i + HS/2 of the row at position t turned by t * freqs[i]."""
    half = x.shape[-1] // 2
    angle = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * freqs[None, :]
    cos, sin = torch.cos(angle), torch.sin(angle)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


def llama_micro_batch_loss(p, c, tok, tgt, fp8=None):
    """micro_batch_loss for a Llama dump (float64; fp8: the step's Fp8Model or None)."""
    B, T = tok.shape
    C, NH, KVH, V, eps = c["embd"], c["heads"], c["kv_heads"], c["vocab"], c["norm_eps"]
    HS = C // NH
    freqs = rope_frequencies(c, HS)
    x = p["wte"][tok]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for l in range(c["layers"]):
        w = {n: p[f"h{l}.{n}"]
             for n in LLAMA_BLOCK_TENSORS + (QK_NORM_TENSORS if c["qk_norm"] else ())}
        a = rms_norm_eps(x, w["ln1.w"], eps)
        qkv = matmul_t(a, torch.cat([w["attn.q.w"], w["attn.k.w"], w["attn.v.w"]]), fp8, 4 * l)
        q_all, k_all, v_all = qkv.split([NH * HS, KVH * HS, KVH * HS], -1)
        heads = []
        for h in range(NH):
            kv = h // (NH // KVH)
            q = q_all[..., h * HS:(h + 1) * HS]
            k = k_all[..., kv * HS:(kv + 1) * HS]
            v = v_all[..., kv * HS:(kv + 1) * HS]
            if c["qk_norm"]:
                q, k = rms_norm(q, w["attn.q_norm.w"]), rms_norm(k, w["attn.k_norm.w"])
            q, k = rotate(q, freqs), rotate(k, freqs)
            s = (q @ k.transpose(1, 2)) / math.sqrt(HS)
            s = s.masked_fill(future, -math.inf)
            e = torch.exp(s - s.max(-1, keepdim=True).values)
            heads.append((e / e.sum(-1, keepdim=True)) @ v)
        x = x + matmul_t(torch.cat(heads, -1), w["attn.proj.w"], fp8, 4 * l + 1)
        m = rms_norm_eps(x, w["ln2.w"], eps)
        g, u = matmul_t(m, torch.cat([w["mlp.gate.w"], w["mlp.up.w"]]), fp8, 4 * l + 2).chunk(2, -1)
        x = x + matmul_t(g / (1 + torch.exp(-g)) * u, w["mlp.proj.w"], fp8, 4 * l + 3)
    head = p["wte"] if c["tie_embeddings"] else p["lm_head"]
    head_fp8 = fp8 if c["fp8"] and c["fp8_lm_head"] else None
    logits = matmul_t(rms_norm_eps(x, p["lnf.w"], eps), head, head_fp8, 4 * c["layers"])[..., :V]
    lse = torch.logsumexp(logits, -1)
    picked = logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    return logits, (lse - picked).mean(), c["z_loss"] * (lse * lse).mean()


def micro_batch_loss(p, c, tok, tgt, fp8=None):
    """float64 logits (B, T, V), mean cross-entropy and z-loss term; p maps names to float64
    tensors; fp8: the step's Fp8Model or None."""
    if is_llama(c):
        return llama_micro_batch_loss(p, c, tok, tgt, fp8)
    B, T = tok.shape
    C, NH, V, L = c["embd"], c["heads"], c["vocab"], c["layers"]
    HS = C // NH
    x = p["wte"][tok] + p["wpe"][:T]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for l in range(c["layers"]):
        w = {n: p[f"h{l}.{n}"] for n in BLOCK_TENSORS + (QK_NORM_TENSORS if c["qk_norm"] else ())}
        a = layernorm(x, w["ln1.w"], w["ln1.b"])
        qkv = matmul_t(a, w["attn.qkv.w"], fp8, 4 * l) + w["attn.qkv.b"]
        heads = []
        for h in range(NH):
            q = qkv[..., h * HS:(h + 1) * HS]
            k = qkv[..., C + h * HS:C + (h + 1) * HS]
            v = qkv[..., 2 * C + h * HS:2 * C + (h + 1) * HS]
            if c["qk_norm"]:
                q, k = rms_norm(q, w["attn.q_norm.w"]), rms_norm(k, w["attn.k_norm.w"])
            s = (q @ k.transpose(1, 2)) / math.sqrt(HS)
            s = s.masked_fill(future, -math.inf)
            e = torch.exp(s - s.max(-1, keepdim=True).values)
            heads.append((e / e.sum(-1, keepdim=True)) @ v)
        x = x + matmul_t(torch.cat(heads, -1), w["attn.proj.w"], fp8, 4 * l + 1) \
            + w["attn.proj.b"]
        m = gelu_tanh(matmul_t(layernorm(x, w["ln2.w"], w["ln2.b"]), w["mlp.fc.w"], fp8,
                               4 * l + 2) + w["mlp.fc.b"])
        x = x + matmul_t(m, w["mlp.proj.w"], fp8, 4 * l + 3) + w["mlp.proj.b"]
    head = fp8 if c["fp8"] and c["fp8_lm_head"] else None
    logits = matmul_t(layernorm(x, p["lnf.w"], p["lnf.b"]), p["wte"], head, 4 * L)[..., :V]
    lse = torch.logsumexp(logits, -1)
    picked = logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    return logits, (lse - picked).mean(), c["z_loss"] * (lse * lse).mean()


def step_loss_and_grads(params, c, tokens, targets, fp8=None):
    """Step loss and z-loss, float64 gradients of their sum and the micro-batch logits for one
    step's tokens (A, B, T); the gradient is taken of the mean over the A micro-batches in one
    graph. fp8: the step's Fp8Model (it collects the step's amaxes) or None."""
    p = {n: t.double().clone().requires_grad_(True) for n, t in params.items()}
    logits, losses, z_losses = [], [], []
    for a in range(tokens.shape[0]):
        lg, loss, z = micro_batch_loss(p, c, tokens[a].long(), targets[a].long(), fp8)
        logits.append(lg.detach())
        losses.append(loss)
        z_losses.append(z)
    loss, z = torch.stack(losses).mean(), torch.stack(z_losses).mean()
    grads = torch.autograd.grad(loss + z, list(p.values()))
    return loss.item(), z.item(), dict(zip(p.keys(), grads)), torch.stack(logits)


def schedule_lr(c, s, lr):
    K, W = c["steps"], c["warmup"]
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


def adamw(theta, m, v, g, t, lr, decay_factor, grad_scale):
    """AdamW step t (1-based) in float64 (betas 0.9/0.95, eps 1e-8) on the gradient g times
    grad_scale, with decoupled weight decay theta *= decay_factor; returns theta_t - theta_{t-1},
    m_t, v_t."""
    b1, b2, eps = 0.9, 0.95, 1e-8
    g = g * grad_scale
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
    return (decay_factor - 1) * theta - lr * m_hat / (torch.sqrt(v_hat) + eps), m, v


def lion64(theta, m, g, c, lr, decay_factor, grad_scale):
    """One Lion step in float64 on the gradient g times grad_scale, with decoupled weight decay
    theta *= decay_factor; returns theta_t - theta_{t-1}, m_t and the slack of the update: 2 lr
    where the interpolation b1*m + (1-b1)*g is within float32 rounding (1e-6 of its terms) of
    zero, so that the dump's float32 sign may be the other one."""
    b1, b2 = c["lion_beta1"], c["lion_beta2"]
    g = g * grad_scale
    interp = b1 * m + (1 - b1) * g
    near_zero = interp.abs() < 1e-6 * (b1 * m.abs() + (1 - b1) * g.abs())
    update = (decay_factor - 1) * theta - lr * torch.sign(interp)
    return update, b2 * m + (1 - b2) * g, torch.where(near_zero, 2 * lr, 0.0)


def newton_schulz(u, steps, dtype, eps=1e-7):
    """Muon's orthogonalization in `dtype` (float64 for the check; float32 to measure how far
    float32 arithmetic moves it): the quintic iteration X <- a X + (b A + c A^2) X, A = X X^T,
    from X = u / max(||u||_F, eps), on the wide orientation of u (transposed while it has more
    rows than columns). Returns float64."""
    a, b, cc = 3.4445, -4.7750, 2.0315
    tall = u.shape[0] > u.shape[1]
    x = (u.T if tall else u).to(dtype)
    x = x / max(torch.linalg.matrix_norm(x).item(), eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + cc * gram @ gram) @ x
    return (x.T if tall else x).double()


def muon64(theta, buf, g, c, lr, decay_factor, grad_scale):
    """One Muon step of a matrix in float64 on the gradient g times grad_scale; attn.qkv.w is
    passed as its three (C, C) units by the caller. Returns theta_t - theta_{t-1}, the new
    momentum and how far float32 arithmetic moves the Newton-Schulz result (relative)."""
    mu = c["muon_momentum"]
    g = g * grad_scale
    buf = buf + (1 - mu) * (g - buf)
    u = g + mu * (buf - g) if c["muon_nesterov"] else buf
    A, B = theta.shape
    scale = math.sqrt(max(1.0, A / B)) if c["muon_adjust"] == 0 else 0.2 * math.sqrt(max(A, B))
    o = newton_schulz(u, c["muon_ns_steps"], torch.float64)
    fp32_drift = (torch.linalg.vector_norm(newton_schulz(u, c["muon_ns_steps"], torch.float32) - o)
                  / torch.linalg.vector_norm(o)).item()
    return (decay_factor - 1) * theta - lr * scale * o, buf, fp32_drift


def half_ulp(x):
    """Half a unit in the last place of each element of the float32 tensor x, as float64."""
    x = x.abs()
    return 0.5 * (torch.nextafter(x, torch.tensor(math.inf)) - x).double()


def check_structure(d, r):
    c = {n[len("config."):]: t.item() for n, t in d.items() if n.startswith("config.")}
    ints = ["vocab", "padded_vocab", "seq", "context", "layers", "heads", "embd", "batch",
            "grad_accum", "steps", "seed", "warmup", "schedule", "optimizer", "muon_nesterov",
            "muon_ns_steps", "muon_adjust", "qk_norm", "fp8", "fp8_grad_e5m2", "fp8_lm_head",
            "fp8_amax_history", "fp8_margin", "arch", "kv_heads", "mlp_hidden",
            "tie_embeddings", "rope_original_context", "rope_scaling"]
    floats = ["lr", "min_lr_frac", "decay_frac", "weight_decay", "grad_clip", "muon_lr",
              "muon_momentum", "z_loss", "lion_beta1", "lion_beta2", "norm_eps", "rope_theta",
              "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor"]
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
        muon = muon_tensor(c, n)
        expect[f"init.{n}"] = (torch.float32, s)
        expect[f"bf16.step0.param.{n}"] = (torch.float64, ())
        for k in range(K):
            for kind in ("grad", "param") + state_kinds(c, n) + (("update_bf16",) if muon
                                                                 else ()):
                expect[f"step{k}.{kind}.{n}"] = (torch.float32, s)
            expect[f"bf16.step{k}.grad.{n}"] = (torch.float64, ())
            if c["fp8"]:
                expect[f"exact.step{k}.grad.{n}"] = (torch.float64, ())
                expect[f"exact.step0.param.{n}"] = (torch.float64, ())
            if muon:
                for kind in ("bf16.step{k}.update", "bf16.step{k}.update_bf16_grad",
                             "bf16.step{k}.update_order", "fp32.step{k}.update"):
                    expect[f"{kind.format(k=k)}.{n}"] = (torch.float64, ())
    expect["bf16.step0.logits"] = (torch.float64, ())
    for k in range(K):
        for n in ("loss", "z_loss", "lr", "muon_lr", "grad_norm"):
            expect[f"step{k}.{n}"] = (torch.float64, ())
        for n in ("loss", "z_loss", "grad_norm"):
            expect[f"bf16.step{k}.{n}"] = (torch.float64, ())
            if c["fp8"]:
                expect[f"exact.step{k}.{n}"] = (torch.float64, ())
                if k > 0:
                    expect[f"bf16.free.step{k}.{n}"] = (torch.float64, ())
        if c["fp8"] == FP8_RECIPE_NAMES.index("delayed"):
            slots = 4 * L + c["fp8_lm_head"]
            expect[f"fp8.step{k}.amax_history"] = (torch.float32,
                                                   (slots, 3, c["fp8_amax_history"]))
            expect[f"fp8.step{k}.scale"] = (torch.float32, (slots, 3))
            if k > 0:
                expect[f"bf16.fp8.step{k}.amax_history"] = (torch.float64, ())
                expect[f"bf16.fp8.step{k}.scale"] = (torch.float64, ())
    if c["fp8"]:
        expect["exact.step0.logits"] = (torch.float64, ())
        for slot, (rows, cols) in enumerate(fp8_layer_shapes(c)):
            N = B * T
            shapes = {"x": (N, cols), "w": (rows, cols), "b": (rows,), "y": (N, rows),
                      "g": (N, rows), "dx": (N, cols), "dw": (rows, cols)}
            for n, s in shapes.items():
                if n != "b" or (slot < 4 * L and not is_llama(c)):  # the lm head has no bias
                    expect[f"fp8.layer{slot}.{n}"] = (torch.float32, s)
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
    if "init.lm_head" in d:
        r.check(bool((d["init.lm_head"][V:] == 0).all()),
                f"init.lm_head rows {V}.. (padding) are zero")
    for n in param_names(c):
        t = d[f"init.{n}"]
        if n.endswith(".b"):
            r.check(bool((t == 0).all()), f"init.{n} is zero")
        elif t.dim() == 1:
            r.check(bool((t == 1).all()), f"init.{n} is one")
        else:
            t = t[:V] if n in ("wte", "lm_head") else t
            want = 0.02 / math.sqrt(2 * L) if n.endswith("proj.w") else 0.02
            # n normal draws: the sample mean has standard error want/sqrt(n), the sample std a
            # relative one of 1/sqrt(2n); six of those leaves chance failures out of reach
            std, mean, count = t.double().std().item(), t.double().mean().item(), t.numel()
            r.check(abs(std / want - 1) < 6 / math.sqrt(2 * count)
                    and abs(mean) < 6 * want / math.sqrt(count),
                    f"init.{n}: std {std:.5f} mean {mean:.2e} over {count} values, "
                    f"expected N(0, {want:.5f})")


def check_steps(d, c, r):
    names = param_names(c)
    C, K = c["embd"], c["steps"]
    key_bias = slice(C, 2 * C)
    prev_amax = None  # delayed scaling: the float64 model's amaxes of step k-1
    for k in range(K):
        # theta_{k-1} and the optimizer state of step k-1: what step k starts from (zeros for
        # k = 0); AdamW's m, v for AdamW tensors, Muon's momentum for Muon tensors, Lion's m
        # for Lion tensors
        if k == 0:
            theta = {n: d[f"init.{n}"] for n in names}
            state = {n: [torch.zeros_like(theta[n], dtype=torch.float64)] * 2 for n in names}
        else:
            theta = {n: d[f"step{k - 1}.param.{n}"] for n in names}
            state = {n: [d[f"step{k - 1}.{kind}.{n}"].double() for kind in state_kinds(c, n)]
                     for n in names}
        fp8 = None
        if c["fp8"]:
            delayed = c["fp8"] == FP8_RECIPE_NAMES.index("delayed")
            fp8 = Fp8Model(c, d[f"fp8.step{k}.scale"] if delayed else None)
        loss, z_loss, grads, logits = step_loss_and_grads(theta, c, d["inputs"][k],
                                                          d["targets"][k], fp8)

        def exact(name):  # FP8 dumps: the dump's own exact-run distance (Report.close_to)
            return d[f"exact.{name}"].item() if fp8 else None

        if fp8 and fp8.recipe == "delayed":
            check_delayed_state(d, c, r, k, prev_amax)
            prev_amax = fp8.amax
        if k == 0:
            r.close_to("step0.logits", d["step0.logits"], logits, exact=exact("step0.logits"))
        for n in names:
            want = grads[n].clone()
            if n.endswith("attn.qkv.b") and not c["qk_norm"]:
                # analytically zero; float64 leaves ~1e-16 of the other biases' size
                stray = want[key_bias].abs().max().item()
                scale = want.abs().max().item()
                r.check(bool((d[f"step{k}.grad.{n}"][key_bias] == 0).all()) and
                        stray <= 1e-10 * scale,
                        f"step{k}.grad.{n}: key bias exactly 0 in the dump; float64 "
                        f"{stray:.1e} vs max {scale:.1e}")
                want[key_bias] = 0
            grads[n] = want
            r.close_to(f"step{k}.grad.{n}", d[f"step{k}.grad.{n}"], want,
                       exact=exact(f"step{k}.grad.{n}"))
        norm = math.sqrt(sum((g * g).sum().item() for g in grads.values()))
        r.close_to(f"step{k}.loss", d[f"step{k}.loss"], torch.tensor(loss, dtype=torch.float64),
                   exact=exact(f"step{k}.loss"))
        if c["z_loss"] > 0:
            r.close_to(f"step{k}.z_loss", d[f"step{k}.z_loss"],
                       torch.tensor(z_loss, dtype=torch.float64), exact=exact(f"step{k}.z_loss"))
        else:
            r.check(d[f"step{k}.z_loss"].item() == 0.0, f"step{k}.z_loss is 0 without z-loss")
        r.close_to(f"step{k}.grad_norm", d[f"step{k}.grad_norm"],
                   torch.tensor(norm, dtype=torch.float64), exact=exact(f"step{k}.grad_norm"))
        for key, peak in (("lr", c["lr"]), ("muon_lr", c["muon_lr"])):
            r.close_to(f"step{k}.{key}", d[f"step{k}.{key}"],
                       torch.tensor(schedule_lr(c, k, peak), dtype=torch.float64), tol=1e-12)

        # The update, from the dump's own inputs. PyTorch's float32 arithmetic leaves two marks
        # on it that float64 must model or excuse: the weight decay multiplies by 1 - lr*wd
        # rounded to float32 (a Python scalar times a float32 tensor; the rounding, up to 6e-8
        # relative, is the same sign for every element, so it is modelled here, not excused),
        # and theta is stored in float32 twice, once decayed and once updated, each costing up
        # to half a unit in the last place: ~6e-8 for a LayerNorm gain near 1, against an
        # update of ~lr. Those half units are excused per element; anything beyond them counts.
        # Muon's update is lr * adjust * NS(u) with NS in float32 in the dump: its float64
        # recomputation here differs by the float32 rounding of 15 matrix products, which the
        # 1e-5 bound covers (measured: below 1e-6 on the suite's dumps).
        dump_norm = d[f"step{k}.grad_norm"].item()
        grad_scale = min(1.0, c["grad_clip"] / (dump_norm + 1e-6)) if c["grad_clip"] > 0 else 1.0
        for n in names:
            theta0 = theta[n].double()
            muon = muon_tensor(c, n)
            lr_k = d[f"step{k}.{'muon_lr' if muon else 'lr'}"].item()
            wd = c["weight_decay"] if theta0.dim() == 2 else 0.0
            decay = torch.tensor(1 - lr_k * wd, dtype=torch.float32)
            g = d[f"step{k}.grad.{n}"].double()
            tol = TOL
            slack = half_ulp(d[f"step{k}.param.{n}"])
            if muon:  # attn.qkv.w is Q, K and V: three (C, C) matrices
                rows = C if n.endswith("attn.qkv.w") else theta0.shape[0]
                parts = [muon64(t0, b0, g0, c, lr_k, decay.item(), grad_scale) for t0, b0, g0 in
                         zip(theta0.split(rows), state[n][0].split(rows), g.split(rows))]
                update = torch.cat([u for u, _, _ in parts])
                new_state = {"muon_momentum": torch.cat([b for _, b, _ in parts])}
                # Newton-Schulz amplifies rounding along directions of tiny singular values
                # (by up to 3.4445 per step), so float32 arithmetic alone can move the update by
                # more than 1e-5 (a gradient of few tokens, many steps): that drift, measured
                # here with our own float32 iteration, joins the bound with a factor of 4
                tol = TOL + 4 * max(drift for _, _, drift in parts)
                check_muon_records(d, r, k, n, update, tol)
            elif lion_tensor(c, n):
                update, m_k, flip = lion64(theta0, state[n][0], g, c, lr_k, decay.item(),
                                           grad_scale)
                new_state = {"lion_m": m_k}
                slack = slack + flip
            else:
                update, m_k, v_k = adamw(theta0, state[n][0], state[n][1], g, k + 1, lr_k,
                                         decay.item(), grad_scale)
                new_state = {"adam_m": m_k, "adam_v": v_k}
            theta1 = d[f"step{k}.param.{n}"]
            if decay.item() != 1.0:
                slack += half_ulp(theta[n] * decay)
            r.close_to(f"step{k} update {n} (theta_k - theta_k-1, stored roundings excused)",
                       theta1.double() - theta0, update, tol=tol, slack=slack)
            for kind, want in new_state.items():
                r.close_to(f"step{k}.{kind}.{n}", d[f"step{k}.{kind}.{n}"], want)


def fp8_layer_shapes(c):
    """The weight shape (OC, IC) of each FP8 layer, by slot: 4 per block, then the lm head."""
    C = c["embd"]
    if is_llama(c):
        HS, H = C // c["heads"], c["mlp_hidden"]
        shapes = [(C + 2 * c["kv_heads"] * HS, C), (C, C), (2 * H, C), (C, H)] * c["layers"]
    else:
        shapes = [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)] * c["layers"]
    return shapes + ([(c["padded_vocab"], C)] if c["fp8_lm_head"] else [])


def check_fp8_layers(d, c, r):
    """Each FP8 layer's products in the dump (step K-1's first micro-batch of the bf16 run, from
    its bfloat16 operands) against the float64 model on the same operands: the dump rounds a
    float32 sum to bfloat16, so each element lies within one bfloat16 spacing of the exact value
    plus the float32 sum's own rounding bound (K 2^-24 sum |terms|)."""
    delayed = c["fp8"] == FP8_RECIPE_NAMES.index("delayed")
    fp8 = Fp8Model(c, d[f"fp8.step{c['steps'] - 1}.scale"] if delayed else None)

    def within(name, got, qa, qb, extra=None):
        want = qa @ qb.T + (0.0 if extra is None else extra)
        spacing = torch.pow(2.0, (torch.frexp(want.abs()).exponent - 8).double())
        bound = spacing + qa.shape[1] * 2.0 ** -24 * (qa.abs() @ qb.abs().T)
        worst = ((got.double() - want).abs() / bound).max().item()
        r.check(worst <= 1, f"fp8.layer{name}: every element within a bfloat16 spacing (plus "
                            f"the float32 sum's bound) of the float64 model: worst error "
                            f"{worst:.3f} of its bound")

    for slot in range(len(fp8_layer_shapes(c))):
        t = {n: d[f"fp8.layer{slot}.{n}"].double() for n in ("x", "w", "g", "y", "dx", "dw")}
        bias = d[f"fp8.layer{slot}.b"].double() if f"fp8.layer{slot}.b" in d else None
        within(f"{slot}.y", t["y"], fp8.qdq(t["x"], slot, 0, False, False),
               fp8.qdq(t["w"], slot, 1, True, False), bias)
        within(f"{slot}.dx", t["dx"], fp8.qdq(t["g"], slot, 2, False, False),
               fp8.qdq(t["w"].T, slot, 1, True, False))
        within(f"{slot}.dw", t["dw"], fp8.qdq(t["g"].T, slot, 2, False, False),
               fp8.qdq(t["x"].T, slot, 0, False, False))


def check_delayed_state(d, c, r, k, prev_amax):
    """Delayed scaling: step k's history and scales in the dump are the start state (zeros and
    ones) for k = 0, and for k > 0 the dump's state of step k-1 with prev_amax (step k-1's
    amaxes in the float64 model, max over its micro-batches) pushed at position k-1 mod H and
    the scales recomputed from the history's max (fp8_max / max / 2^margin where the max is > 0
    and finite, else kept). float64 amaxes of float32 activations land within 1e-5 relative of
    the dump's float32 ones; scales likewise."""
    hist, scale = d[f"fp8.step{k}.amax_history"].double(), d[f"fp8.step{k}.scale"].double()
    if k == 0:
        r.check(bool((hist == 0).all() and (scale == 1).all()),
                "fp8.step0: amax histories all zero, scales all one")
        return
    want = d[f"fp8.step{k - 1}.amax_history"].double().clone()
    want[:, :, (k - 1) % c["fp8_amax_history"]] = prev_amax
    top = want.amax(dim=2)
    fmax = torch.tensor([448.0, 448.0, 57344.0 if c["fp8_grad_e5m2"] else 448.0],
                        dtype=torch.float64)
    fresh = fmax / top / 2.0 ** c["fp8_margin"]
    want_scale = torch.where((top > 0) & torch.isfinite(top), fresh,
                             d[f"fp8.step{k - 1}.scale"].double())
    r.close_to(f"fp8.step{k}.amax_history", hist, want)
    r.close_to(f"fp8.step{k}.scale", scale, want_scale)


def check_muon_records(d, r, k, n, update, tol):
    """step<k>.update_bf16.<n>, torch's bf16 Muon step on the bf16-rounded gradient, against the
    float64 update: by the triangle inequality it is within the sum of the dump's own measures,
    bf16.step<k>.update (bf16 against fp32 Newton-Schulz) and .update_bf16_grad (the gradient's
    rounding under bf16), of the fp32 update, which is within tol of the float64 one."""
    db = d[f"bf16.step{k}.update.{n}"].item()
    dg = d[f"bf16.step{k}.update_bf16_grad.{n}"].item()
    bound = (db + dg * (1 + db)) * (1 + tol) + tol
    r.close_to(f"step{k}.update_bf16.{n} (torch's bf16 step from the bf16 build's inputs)",
               d[f"step{k}.update_bf16.{n}"], update, tol=bound)


def check_bf16(d, r):
    for prefix in ("bf16.", "fp32."):
        values = [t for n, t in d.items() if n.startswith(prefix)]
        if not values:
            continue
        values = torch.stack(values)
        bad = [n for n, t in d.items() if n.startswith(prefix) and not t.item() >= 0]
        r.check(not bad and bool(torch.isfinite(values).all()),
                f"{prefix}*: {values.numel()} records finite and >= 0 (largest "
                f"{values.max().item():.2e})" + (f"; bad: {bad[:5]}" if bad else ""))


def check(path, verbose=False):
    """Checks the dump at path (the module docstring's list): prints the failures (every check
    with verbose) and a summary line; returns 1 if any check fails, else 0."""
    r = Report(verbose)
    try:
        d = read_dump(path)
        c = check_structure(d, r)
        check_data_and_init(d, c, r)
        check_steps(d, c, r)
        if c["fp8"]:
            check_fp8_layers(d, c, r)
        check_bf16(d, r)
    except (OSError, ValueError, struct.error) as e:
        print(f"check_reference: {e}")
        return 1
    worst = "; first failure: " + r.failures[0] if r.failures else ""
    print(f"check_reference: {path}: {r.count - len(r.failures)}/{r.count} checks passed"
          + worst)
    return 1 if r.failures else 0


def run_each(items, run, name):
    """Calls run(item) for each item in turn, in this process: one start of PyTorch for them all
    (scripts/run_tests.py checks its configurations so, in batches). Each run's output lies
    between the lines `NAME: run I of N: ITEM` and `NAME: run I of N exits STATUS (S s)`, its
    stderr sent to stdout to keep it there; an exception or sys.exit ends that run alone, with
    status 1 (or sys.exit's number), and the next one starts. Returns 1 if any run's status is
    not 0, else 0."""
    failed = False
    for i, item in enumerate(items, 1):
        print(f"{name}: run {i} of {len(items)}: {item}", flush=True)
        t0 = time.time()
        try:
            with contextlib.redirect_stderr(sys.stdout):
                status = run(item)
        except SystemExit as e:  # argparse's errors, sys.exit(message)
            if isinstance(e.code, str):
                print(e.code)
            status = e.code if isinstance(e.code, int) else int(e.code is not None)
        except Exception:
            traceback.print_exc(file=sys.stdout)
            status = 1
        print(f"{name}: run {i} of {len(items)} exits {status} ({time.time() - t0:.1f} s)",
              flush=True)
        failed |= status != 0
    return int(failed)


def main(argv):
    ap = argparse.ArgumentParser(description="Check scripts/reference.py dumps against an "
                                             "independent float64 model, each in turn in this "
                                             "process (run_each); exits 1 on any failure.")
    ap.add_argument("dump", nargs="+", help="dump file written by scripts/reference.py")
    ap.add_argument("--verbose", action="store_true",
                    help="print every check, not only the failures")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    return run_each(args.dump, lambda dump: check(dump, args.verbose), "check_reference")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
