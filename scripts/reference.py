#!/usr/bin/env python3
"""PyTorch reference for train_gpt.cu: trains a small GPT-2-style model (or with --arch llama a
Llama-style one: section LLAMA) from a seed and writes a dump of every number test_gpt.cu
compares against.

Written independently of the CUDA code and built from PyTorch's own operators and optimizers
(F.layer_norm, F.rms_norm, F.scaled_dot_product_attention, F.gelu, F.cross_entropy,
torch.logsumexp, clip_grads_with_norm_, torch.optim.AdamW, torch.optim.Muon), so that agreement
between the two programs means something. This docstring is the one place the model, the
training step and the dump format are specified. With --runs FILE one process (one start of
PyTorch) writes several dumps in turn, each byte for byte as its own process would.

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
  h{l}.attn.q_norm.w (HS), h{l}.attn.k_norm.w (HS)   with --qk-norm only: QK-norm's scales
  lnf.w (C), lnf.b (C)
Init: torch.manual_seed(--seed), then each tensor drawn in the order listed: weights of linear
layers and embeddings N(0, 0.02), attn.proj.w and mlp.proj.w N(0, 0.02/sqrt(2L)); biases 0;
LayerNorm weights and QK-norm scales 1, LayerNorm biases 0 (none of these draw from the
generator); the padding rows of wte set to 0 after drawing.
Forward: x = wte[tok] + wpe[pos]; per block x += attn.proj(attn(ln1(x))), then
x += mlp.proj(gelu_tanh(mlp.fc(ln2(x)))); LayerNorm eps 1e-5; causal attention with softmax
scale 1/sqrt(HS); with --qk-norm each head's q and k are first replaced by
F.rms_norm(., (HS,), q_norm.w or k_norm.w, eps=1e-6) (RMSNorm over the head's HS dimensions,
the scale shared by the layer's heads), before the softmax scale. logits = lnf(x) @ wte^T (Vp
columns; the loss and the dump use only the first V: padding columns are excluded from the
softmax); loss = mean cross-entropy over the B*T positions of a micro-batch; z_loss =
--z-loss * mean over the positions of logsumexp(logits over the V columns)^2 (0 without it).
The objective a micro-batch backpropagates is loss + z_loss.

LLAMA (--arch llama). KVH = --kv-heads (dividing NH; default NH), H =
--mlp-hidden (default int(2/3 * 4C) rounded up to --mlp-multiple-of, default 256), eps =
--norm-eps (default 1e-5). Parameters (no biases, no wpe):
  wte (Vp, C); lm_head (Vp, C) with --tie-embeddings 0 only (else wte is the lm head)
  h{l}.ln1.w (C)                   the attention's RMSNorm scale
  h{l}.attn.q.w (NH*HS, C), h{l}.attn.k.w (KVH*HS, C), h{l}.attn.v.w (KVH*HS, C)
  h{l}.attn.proj.w (C, C)
  h{l}.ln2.w (C)                   the MLP's RMSNorm scale
  h{l}.mlp.gate.w (H, C) (w1), h{l}.mlp.up.w (H, C) (w3), h{l}.mlp.proj.w (C, H) (w2)
  h{l}.attn.q_norm.w (HS), h{l}.attn.k_norm.w (HS)   with --qk-norm only
  lnf.w (C)
Init as above (drawn in this order; mlp.proj.w and attn.proj.w N(0, 0.02/sqrt(2L)); the padding
rows of wte and lm_head set to 0). Forward: x = wte[tok]; per block
a = F.rms_norm(x, (C,), ln1.w, eps); q, k, v = a q.w^T, a k.w^T, a v.w^T as (B, NH|KVH, T, HS);
with --qk-norm q, k = F.rms_norm over HS with q_norm.w, k_norm.w (eps 1e-6), then RoPE (so the
norm's per-dimension scale acts before the rotation); RoPE as transformers' Llama applies it:
inv_freq = 1 / theta^(arange(0, HS, 2)/HS) (theta = --rope-theta), with --rope-scaling llama3
rescaled as transformers' _compute_llama3_parameters (--rope-factor, --rope-low-freq-factor,
--rope-high-freq-factor, --rope-original-context); angles pos * inv_freq (pos = 0..T-1),
cos/sin of cat(angles, angles); q' = q cos + rotate_half(q) sin, rotate_half(x) = cat(-x2, x1)
for x = cat(x1, x2) halves of HS; y = F.scaled_dot_product_attention(q', k', v, is_causal=True,
enable_gqa=True) (query head h uses kv head h // (NH/KVH)); x += y attn.proj.w^T;
m = F.rms_norm(x, (C,), ln2.w, eps); x += (F.silu(m gate.w^T) * (m up.w^T)) proj.w^T.
logits = F.rms_norm(x, (C,), lnf.w, eps) @ (lm_head or wte)^T. Muon takes attn.q.w, attn.k.w,
attn.v.w, attn.proj.w, mlp.gate.w, mlp.up.w, mlp.proj.w (each a matrix of its own).
With --fp8 the four FP8 layers of a block are [q | k | v] (attn.q.w, attn.k.w and attn.v.w
concatenated: one (NH*HS + 2 KVH*HS, C) weight, as the trainer holds them adjacent), attn.proj,
[gate | up] (one (2H, C) weight) and mlp.proj; the lm head is lm_head or wte.

FP8 (--fp8 tensor|delayed|rowwise|block|mx; the contract with train_gpt.cu). The four linear
layers of every block (and with --fp8-lm-head 1 the lm head, logits = lnf(x) @ wte^T) run
through Fp8Linear, a torch.autograd.Function. For X (N, IC) its input, W (OC, IC) its weight
and G = dY (N, OC):
  forward  Y  = q(X) q(W)^T + b     groups of X and W along IC
  dX       dX = q(G) q(W^T)^T       groups of G and W^T along OC
  dW       dW = q(G^T) q(X^T)^T     groups of G^T and X^T along N
  db = column sums of G.
q(M) quantizes the operand M (rows along its reduction dimension) to FP8 and decodes it again:
X, W and their transposes in E4M3 (torch.float8_e4m3fn, max 448), G and G^T in --fp8-grad
(default e5m2 for tensor and delayed, e4m3 otherwise; E5M2 torch.float8_e5m2, max 57344). The
dequantized operands are multiplied in float32 and the product, plus the bias in float32,
rounded once to the activations' dtype. A group with amax = max |x| over its elements (NaN
ignored) gets, in float32, s = fp8_max / max(amax, 1e-12), or 1 when amax is 0 or Inf;
q = cast(clamp(x * s, -fp8_max, fp8_max)) (clamped first: torch's cast does not saturate as
CUDA's does; round to nearest even, NaN stays NaN), decoded as q * (1/s), 1/s in float32.
Groups:
  tensor   the whole operand, scaled from its own amax (X^T, W^T, G^T: the same scale as X, W, G)
  delayed  the whole operand with a scale from history, per linear layer and tensor (X, W, G):
           a history of the last H = --fp8-amax-history per-step amaxes (zeros at start) and a
           scale (1 at start). Step s runs with the scale set after step s-1: its amax (max
           over the step's micro-batches) goes to history position s mod H, and the scale
           becomes fp8_max / max(history) / 2^--fp8-margin when that max is > 0 and finite
           (else it stays)
  rowwise  each row of the operand as the product reads it (X: rows of X, W^T: columns of W, ...)
  block    1x128 tiles along the reduction dimension for X, G, X^T, G^T; 128x128 blocks for W
           and W^T (the same blocks transposed); partial tiles at the edges
  mx       1x32 blocks along the reduction dimension for all six operands, scale =
           2^(floor(log2 amax) - emax) (emax 8 E4M3, 15 E5M2; exponent clamped to [-127, 127],
           2^-127 for an all-zero block; a torch.float8_e8m0fnu value), q = cast(clamp(x /
           scale)), decoded as q * scale; needs C and B*T multiples of 32
Under bf16 autocast the operands are the bfloat16 activations and the bfloat16 copy of W (the
bf16 build's), and Y, dX, dW are rounded to bfloat16. The exact run (records exact.*) holds
parameters and activations in float64, rounds each operand to float32 before quantizing it
(what the fp32 program quantizes) and sums the products in float64.

DATA. torch.Generator seeded with seed+1 draws randint(0, V, (K, A, B, T+1)) as int32, with
K = --steps, A = --grad-accum, B = --batch; inputs = [..., :T], targets = [..., 1:].

STEP s (0-based) of K. A micro-batches of B sequences; the step loss (and z_loss) is the mean of
the A micro-batch losses (z_losses) and the gradients are those of the mean objective (each
micro-batch backpropagates (loss + z_loss)/A). Without --qk-norm the key-bias gradient is set
to exactly 0 (softmax ignores a per-query constant, so it is analytically zero; with QK-norm
the bias is inside the normalization and its gradient is kept). Grad norm = global L2 norm of
all gradients, before clipping (summed in float64). With --grad-clip G > 0 the gradients are
multiplied by min(1, G/(norm+1e-6)), clip_grad_norm_'s rule.
OPTIMIZERS. --optimizer adamw: torch.optim.AdamW for every tensor. --optimizer muon:
torch.optim.Muon for the hidden matrices (h{l}.attn.qkv.w, attn.proj.w, mlp.fc.w, mlp.proj.w),
torch.optim.AdamW for the rest (wte, wpe, biases, LayerNorm and QK-norm parameters).
--optimizer lion: Lion (below) for every tensor.
  AdamW: betas (0.9, 0.95), eps 1e-8, decoupled weight decay WD on its 2-D tensors (wte, wpe
  and, without Muon, every .w of a linear layer), none on biases and norm parameters.
  Muon: lr = --muon-lr (default --lr) under the same schedule, weight_decay WD, momentum
  --muon-momentum, nesterov --muon-nesterov, ns_steps --muon-ns-steps, adjust_lr_fn
  --muon-adjust, torch's default coefficients and eps. Muon orthogonalizes whole parameters, so
  each attn.qkv.w is three (C, C) parameters here, its q, k and v rows, concatenated for the
  forward pass: Q, K and V are orthogonalized as separate matrices (the dump holds them
  concatenated again, as attn.qkv.w). torch's Newton-Schulz (_zeropower_via_newtonschulz)
  casts to bfloat16; the fp32 run below substitutes newton_schulz_fp32, a copy of that one
  function with float32 in place of bfloat16 (the same operations in the same order), and is
  otherwise torch's Muon unchanged. The bf16 measurements use torch's own bfloat16 one.
  Lion ("Symbolic Discovery of Optimization Algorithms", Chen et al. 2023; PyTorch has none, so
  the class Lion below is the paper's pseudocode): lr = --lr under the schedule, betas
  (--lion-beta1, --lion-beta2), decoupled weight decay WD on the 2-D tensors (AdamW's rule):
  c = b1*m + (1-b1)*g; theta = theta*(1 - lr*WD) - lr*sign(c) (sign(0) = 0);
  m = b2*m + (1-b2)*g.
Learning rate, peak LR = --lr (AdamW, Lion; Muon: --muon-lr), floor = F*LR with F = --min-lr-frac,
W = --warmup:
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
  config.optimizer                 i64: 0 adamw, 1 muon, 2 lion
  config.muon_nesterov config.muon_ns_steps config.qk_norm (0/1)                    i64
  config.fp8                       i64: 0 off, 1 tensor, 2 delayed, 3 rowwise, 4 block, 5 mx
  config.fp8_grad_e5m2 config.fp8_lm_head (0/1) config.fp8_amax_history config.fp8_margin  i64
  config.muon_adjust               i64: 0 original, 1 match_rms_adamw
  config.arch                      i64: 0 gpt2, 1 llama
  config.kv_heads config.mlp_hidden config.tie_embeddings config.rope_original_context  i64
                                   (llama's; gpt2: NH, 4C, 1, 0)
  config.rope_scaling              i64: 0 none, 1 llama3
  config.lr config.min_lr_frac config.decay_frac config.weight_decay config.grad_clip
  config.muon_lr config.muon_momentum config.z_loss config.lion_beta1 config.lion_beta2  f64
  config.norm_eps config.rope_theta config.rope_factor config.rope_low_freq_factor
  config.rope_high_freq_factor     f64 (llama's settings)
  inputs, targets                  i32 (K, A, B, T)
  init.<param>                     f32, every parameter at initialization (theta_{-1})
  step0.logits                     f32 (A, B, T, V), every micro-batch of step 0
  then for k = 0..K-1 (the fp32 run, theta_k = parameters after the update of step k):
  step<k>.loss step<k>.z_loss step<k>.lr step<k>.muon_lr step<k>.grad_norm   f64 scalars
                                   (loss and z_loss are the step's; lr AdamW's and Lion's,
                                   muon_lr Muon's)
  step<k>.grad.<param>             f32, the accumulated gradient of step k, before clipping
  step<k>.param.<param>            f32, theta_k
  step<k>.adam_m.<param>           f32, AdamW's first moment (exp_avg) after step k  } AdamW
  step<k>.adam_v.<param>           f32, AdamW's second moment (exp_avg_sq)           } tensors
  step<k>.muon_momentum.<param>    f32, Muon's momentum_buffer after step k (Muon tensors)
  step<k>.lion_m.<param>           f32, Lion's momentum m after step k (Lion tensors)
  then how far bf16 arithmetic alone moves each quantity, as f64 scalars ||b-f||/||f|| (0/0
  gives 0, x/0 gives inf) between a bf16 value b computed under torch.autocast(bfloat16) and
  the fp32 run's value f:
  bf16.step0.logits                step 0's logits, from init
  bf16.step0.param.<param>         theta_0 - init after one optimizer step from init on the
                                   bf16 gradients (AdamW, Lion; Muon with its own bfloat16
                                   Newton-Schulz), against the fp32 run's theta_0 - init
  then for k = 0..K-1, teacher-forced: the bf16 forward and backward of step k run at the fp32
  run's theta_{k-1}, so these measure one step's arithmetic, not a drifting trajectory:
  bf16.step<k>.loss bf16.step<k>.z_loss bf16.step<k>.grad_norm
  bf16.step<k>.grad.<param>
  Muon tensors, teacher-forced: torch's Muon from the fp32 run's theta_{k-1}, momentum_{k-1},
  step<k>.grad, lr and clipping, in float64 tensors so that theta_k - theta_{k-1} (the update U)
  carries only the Newton-Schulz arithmetic: with torch's bfloat16 Newton-Schulz (U_bf16), with
  it on the gradient rounded to bfloat16 (U_bf16g: what the bf16 build's gradient buffer
  holds), with newton_schulz_fp32 (U_fp32) and with the same function in float64 (U_fp64):
  bf16.step<k>.update.<param>            ||U_bf16 - U_fp32|| / ||U_fp32||
  bf16.step<k>.update_bf16_grad.<param>  ||U_bf16g - U_bf16|| / ||U_bf16||
  bf16.step<k>.update_order.<param>      ||U_bf16o - U_bf16g|| / ||U_bf16g||, U_bf16o from the
                                   inputs of U_bf16g with newton_schulz_bf16_reordered: how far a
                                   second correct bf16 run (other summation order) lands
  With --fp8 the fp32 run and the bf16 runs run the recipe (FP8 section), the bf16 runs'
  delayed scales being the fp32 run's of that step.
then, Muon tensors:
  step<k>.update_bf16.<param>      f32, U_bf16g itself: torch's bf16 step from the bf16 build's
                                   inputs
  fp32.step<k>.update.<param>      f64, ||U_fp32 - U_fp64|| / ||U_fp64||: how far float32
                                   arithmetic alone moves the Newton-Schulz update
then, with --fp8 only: how far the exact run (FP8 section; teacher-forced from the fp32 run's
theta_{k-1} and delayed state) lands from the fp32 run, ||e - f|| / ||f|| as for bf16.*: a
second correct run of the same FP8 arithmetic, whose quantizations flip where an input lies
within rounding of a boundary:
  exact.step0.logits exact.step0.param.<param>
  exact.step<k>.loss exact.step<k>.z_loss exact.step<k>.grad_norm exact.step<k>.grad.<param>
then, with --fp8 delayed only, for k = 1..K-1: how far the delayed state after the bf16 run's
step k-1 (teacher-forced, from the fp32 run's state of step k-1 and its own amaxes) lies from
the fp32 run's state of step k, as max |b - f| / |f| over the entries (their sizes differ by
orders of magnitude; 0/0 gives 0):
  bf16.fp8.step<k>.amax_history bf16.fp8.step<k>.scale
then, with --fp8 only, for k = 1..K-1: how far PyTorch's free-running bf16 run of the recipe
(K steps from init under autocast, its own delayed state, torch's own Muon) moves the step
losses and gradient norms of the fp32 run (as bf16.*; its parameters drift from step 0 on):
  bf16.free.step<k>.loss bf16.free.step<k>.z_loss bf16.free.step<k>.grad_norm
then, with --fp8 delayed only, for k = 0..K-1, the fp32 run's state at the start of step k, by
linear layer (slot 4l + 0 qkv, 1 attn.proj, 2 mlp.fc, 3 mlp.proj; slot 4L the lm head with
--fp8-lm-head) and tensor (0 X, 1 W, 2 G); the next history position written is k mod H:
  fp8.step<k>.amax_history         f32 (slots, 3, H)
  fp8.step<k>.scale                f32 (slots, 3)
then, with --fp8, for each FP8 layer (slot as above) its first micro-batch of step K-1 in the
bf16 run (teacher-forced, delayed: step K-1's scales): the operands as that run holds them,
bfloat16 values, and the layer's products from them (Fp8Linear: Y with the bias, dX, dW alone),
rounded to bfloat16 as the bf16 build rounds them; N = B*T:
  fp8.layer<slot>.x (N, IC)  .w (OC, IC)  .b (OC; GPT-2's blocks only)  .y (N, OC)
  fp8.layer<slot>.g (N, OC)  .dx (N, IC)  .dw (OC, IC)                   f32
"""

import argparse
import math
import os
import shlex
import struct
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F

SCHEDULES = ["cosine", "wsd", "linear", "constant"]
OPTIMIZERS = ["adamw", "muon", "lion"]
MUON_ADJUST = ["original", "match_rms_adamw"]
ARCHS = ["gpt2", "llama"]
ROPE_SCALINGS = ["none", "llama3"]
QKV_PARTS = ("q", "k", "v")  # the three (C, C) Muon parameters of an attn.qkv.w
DTYPE_CODES = {np.dtype("<f4"): 0, np.dtype("<i4"): 1, np.dtype("<f8"): 2, np.dtype("<i8"): 3}
# The default generator's state in a new process, restored at the start of each run: --runs makes
# several runs in one process, and each must compute what it would alone.
FRESH_RNG_STATE = torch.random.get_rng_state()


def padded_vocab(V):
    return (V + 127) // 128 * 128


def param_shapes(cfg):
    """Every parameter's name and shape, in the order of the dump and of initialization."""
    C, Vp = cfg.embd, padded_vocab(cfg.vocab)
    if cfg.arch == "llama":
        return llama_param_shapes(cfg)
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
        if cfg.qk_norm:
            shapes += [(f"h{l}.attn.q_norm.w", (C // cfg.heads,)),
                       (f"h{l}.attn.k_norm.w", (C // cfg.heads,))]
    shapes += [("lnf.w", (C,)), ("lnf.b", (C,))]
    return shapes


def llama_param_shapes(cfg):
    C, Vp, HS, H = cfg.embd, padded_vocab(cfg.vocab), cfg.embd // cfg.heads, cfg.mlp_hidden
    shapes = [("wte", (Vp, C))] + ([] if cfg.tie_embeddings else [("lm_head", (Vp, C))])
    for l in range(cfg.layers):
        shapes += [
            (f"h{l}.ln1.w", (C,)), (f"h{l}.attn.q.w", (C, C)),
            (f"h{l}.attn.k.w", (cfg.kv_heads * HS, C)), (f"h{l}.attn.v.w", (cfg.kv_heads * HS, C)),
            (f"h{l}.attn.proj.w", (C, C)), (f"h{l}.ln2.w", (C,)),
            (f"h{l}.mlp.gate.w", (H, C)), (f"h{l}.mlp.up.w", (H, C)), (f"h{l}.mlp.proj.w", (C, H)),
        ]
        if cfg.qk_norm:
            shapes += [(f"h{l}.attn.q_norm.w", (HS,)), (f"h{l}.attn.k_norm.w", (HS,))]
    return shapes + [("lnf.w", (C,))]


def rope_inv_freq(cfg):
    """RoPE's inverse frequencies (HS/2,) float32, as transformers' Llama computes them
    (_compute_default_rope_parameters, and _compute_llama3_parameters for --rope-scaling llama3)."""
    HS = cfg.embd // cfg.heads
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, HS, 2, dtype=torch.int64).float() / HS))
    if cfg.rope_scaling == "llama3":
        factor, low, high = cfg.rope_factor, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
        old = cfg.rope_original_context
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    return inv_freq


def rope(x, inv_freq):
    """x (B, heads, T, HS) rotated as transformers' apply_rotary_pos_emb (rotate_half pairing)."""
    T = x.shape[2]
    angles = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :].float()
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def llama_forward(p, cfg, idx, fp8=None):
    """The final RMSNorm's output (B, T, C) of the Llama model (docstring, LLAMA); fp8: the
    Fp8Run of the linear layers (slots as forward_loss's), None without FP8."""
    B, T = idx.shape
    C, NH, KVH, eps = cfg.embd, cfg.heads, cfg.kv_heads, cfg.norm_eps
    HS = C // NH
    inv_freq = rope_inv_freq(cfg)
    x = p["wte"][idx]
    for l in range(cfg.layers):
        h = f"h{l}."
        a = F.rms_norm(x, (C,), p[h + "ln1.w"], eps=eps)
        qkv_w = torch.cat([p[h + "attn.q.w"], p[h + "attn.k.w"], p[h + "attn.v.w"]])
        q, k, v = linear(a, qkv_w, None, fp8, 4 * l).split([NH * HS, KVH * HS, KVH * HS], -1)
        q = q.reshape(B, T, NH, HS).transpose(1, 2)
        k = k.reshape(B, T, KVH, HS).transpose(1, 2)
        v = v.reshape(B, T, KVH, HS).transpose(1, 2)
        if cfg.qk_norm:
            q = F.rms_norm(q, (HS,), p[h + "attn.q_norm.w"], eps=1e-6)
            k = F.rms_norm(k, (HS,), p[h + "attn.k_norm.w"], eps=1e-6)
        q, k = rope(q, inv_freq), rope(k, inv_freq)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + linear(y.transpose(1, 2).reshape(B, T, C), p[h + "attn.proj.w"], None, fp8,
                       4 * l + 1)
        m = F.rms_norm(x, (C,), p[h + "ln2.w"], eps=eps)
        fc_w = torch.cat([p[h + "mlp.gate.w"], p[h + "mlp.up.w"]])
        gate, up = linear(m, fc_w, None, fp8, 4 * l + 2).chunk(2, -1)
        x = x + linear(F.silu(gate) * up, p[h + "mlp.proj.w"], None, fp8, 4 * l + 3)
    return F.rms_norm(x, (C,), p["lnf.w"], eps=eps)


def is_muon(cfg, name):
    """Whether Muon updates the tensor: with --optimizer muon, the 2-D tensors of the blocks."""
    return cfg.optimizer == "muon" and name.startswith("h") and name.endswith(
        (".attn.qkv.w", ".attn.proj.w", ".mlp.fc.w", ".mlp.proj.w", ".attn.q.w", ".attn.k.w",
         ".attn.v.w", ".mlp.gate.w", ".mlp.up.w"))


def qkv_weight(p, h):
    """A block's attn.qkv.w: the tensor itself, or its q, k and v parameters concatenated."""
    name = h + "attn.qkv.w"
    return p[name] if name in p else torch.cat([p[f"{name}[{x}]"] for x in QKV_PARTS])


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
    if "lm_head" in params:
        params["lm_head"][cfg.vocab:] = 0.0
    return params


# =============================================================================================
# FP8 linear layers (docstring, FP8): each operand quantized and dequantized as the recipe says,
# the dequantized operands multiplied in float32.

FP8_RECIPES = ["off", "tensor", "delayed", "rowwise", "block", "mx"]
# format: (torch dtype, largest finite value, emax of the OCP MX scale rule)
FP8_FORMATS = {"e4m3": (torch.float8_e4m3fn, 448.0, 8), "e5m2": (torch.float8_e5m2, 57344.0, 15)}


def fp8_grad_default(recipe):
    """--fp8-grad's default: E5M2 for the per-tensor recipes, E4M3 for the fine-grained ones."""
    return "e5m2" if recipe in ("tensor", "delayed") else "e4m3"


def fp8_tile(recipe, shape, weight):
    """The (rows, columns) of one scale group of an operand of `shape` (R, K), K its reduction
    dimension: the whole tensor (tensor, delayed), a row (rowwise), 1x128 tiles of activations
    and gradients and 128x128 blocks of weights (block), 1x32 blocks (mx)."""
    R, K = shape
    if recipe in ("tensor", "delayed"):
        return R, K
    if recipe == "rowwise":
        return 1, K
    if recipe == "block":
        return (128, 128) if weight else (1, 128)
    return 1, 32


def group_amax(m, tile):
    """max |m| (NaN ignored) over each tile of the float32 matrix m; edge tiles are partial.
    Returns (ceil(R/tr), ceil(K/tc))."""
    (R, K), (tr, tc) = m.shape, tile
    a = torch.where(torch.isnan(m), 0.0, m.abs())
    a = F.pad(a, (0, -K % tc, 0, -R % tr))
    return a.view(a.shape[0] // tr, tr, a.shape[1] // tc, tc).amax(dim=(1, 3))


def per_element(t, tile, shape):
    """A per-tile tensor (ceil(R/tr), ceil(K/tc)) spread over the elements of `shape`."""
    return t.repeat_interleave(tile[0], 0).repeat_interleave(tile[1], 1)[:shape[0], :shape[1]]


def fp8_dequantize(m, fmt, recipe, weight, scale=None):
    """The operand m (R, K) quantized to FP8 format `fmt` by the recipe's groups and decoded
    again: float32 values q * scale_inv. scale: the delayed recipe's float32 scale (a 0-d
    tensor); otherwise each group's scale comes from its own amax."""
    dtype, fmax, emax = FP8_FORMATS[fmt]
    m = m.float()
    tile = fp8_tile(recipe, m.shape, weight)
    amax = group_amax(m, tile)
    if recipe == "mx":
        # 2^(floor(log2 amax) - emax): frexp gives amax = f 2^e with f in [0.5, 1)
        exponent = (torch.frexp(amax).exponent - 1 - emax).clamp(-127, 127)
        exponent = torch.where(amax == 0, -127, exponent)
        scale = torch.ldexp(torch.ones_like(amax, dtype=torch.float64), exponent).float()
        assert torch.equal(scale.to(torch.float8_e8m0fnu).float(), scale)  # an E8M0 value
        s = per_element(scale, tile, m.shape)
        return (m / s).clamp(-fmax, fmax).to(dtype).float() * s
    if scale is None:
        scale = torch.tensor(fmax, dtype=torch.float32) / amax.clamp(min=1e-12)
        scale = torch.where((amax == 0) | torch.isinf(amax), 1.0, scale)
    s = per_element(scale.expand(amax.shape), tile, m.shape)
    q = (m * s).clamp(-fmax, fmax).to(dtype).float()
    return q * (1.0 / s)


class Fp8Run:
    """The FP8 side of one run: the recipe, the gradients' format and the delayed recipe's
    state: per linear layer (slot) and tensor (x, w, g) the amax history, the scale in use and
    the amaxes of the current step so far. Slots: 4l + (0 qkv, 1 attn.proj, 2 fc, 3 mlp.proj),
    then the lm head (4L) with --fp8-lm-head."""

    def __init__(self, cfg, state=None, capture=False):
        self.recipe, self.grad_fmt, self.margin = cfg.fp8, cfg.fp8_grad, cfg.fp8_margin
        # capture: {slot: {x, w, b, g, y, dx, dw}} of each layer's first forward and backward
        self.captured = {} if capture else None
        slots = 4 * cfg.layers + cfg.fp8_lm_head
        if state is None:
            self.history = torch.zeros(slots, 3, cfg.fp8_amax_history)
            self.scale = torch.ones(slots, 3)
        else:
            self.history, self.scale = state["history"].clone(), state["scale"].clone()
        self.step_amax = torch.zeros(slots, 3)

    def state(self):
        return {"history": self.history.clone(), "scale": self.scale.clone()}

    def operand(self, m, slot, tensor, weight, record):
        """m dequantized as the recipe quantizes operand `tensor` (0 x, 1 w, 2 g) of the slot;
        record: count its amax into the step's (once per tensor and micro-batch)."""
        fmt = self.grad_fmt if tensor == 2 else "e4m3"
        if self.recipe != "delayed":
            return fp8_dequantize(m, fmt, self.recipe, weight)
        if record:
            amax = group_amax(m.float(), m.shape)[0, 0]
            self.step_amax[slot, tensor] = torch.maximum(self.step_amax[slot, tensor], amax)
        return fp8_dequantize(m, fmt, self.recipe, weight, self.scale[slot, tensor])

    def end_step(self, s):
        """Delayed scaling after optimizer step s: the step's amaxes into the history (ring
        position s mod H), then each scale from the history's max where it is > 0 and finite."""
        if self.recipe != "delayed":
            return
        self.history[:, :, s % self.history.shape[2]] = self.step_amax
        top = self.history.amax(dim=2)
        fmax = torch.tensor([448.0, 448.0, FP8_FORMATS[self.grad_fmt][1]])
        fresh = fmax / top / 2.0 ** self.margin
        self.scale = torch.where((top > 0) & torch.isfinite(top), fresh, self.scale)
        self.step_amax.zero_()


def fp8_product(a, b, dtype):
    """a b^T of dequantized float32 operands a (R, K), b (C, K), summed in float32 (float64
    when the activations are float64: the exact run of the docstring) and returned in the
    activations' dtype."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return (a.to(acc) @ b.to(acc).T).to(dtype)


class Fp8Linear(torch.autograd.Function):
    """y = x w^T + b with FP8 operands (docstring, FP8): forward q(X) q(W); backward dX from
    q(G) q(W^T), dW from q(G^T) q(X^T), the bias gradient the column sums of G. Products in
    float32 (float64 in the exact run), rounded once to the activations' dtype (x's)."""

    @staticmethod
    def forward(ctx, x, w, b, run, slot):
        X = x.reshape(-1, x.shape[-1])
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        with torch.autocast("cpu", enabled=False):
            y = fp8_product(run.operand(X, slot, 0, False, True),
                            run.operand(w, slot, 1, True, True), acc)
            if b is not None:
                y = y + b.to(acc)
        ctx.save_for_backward(X, w)
        ctx.run, ctx.slot, ctx.x_shape = run, slot, x.shape
        ctx.bias_dtype = b is not None and b.dtype
        y = y.to(x.dtype)
        if run.captured is not None and slot not in run.captured:
            run.captured[slot] = {"x": X, "w": w, "b": b, "y": y}
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        X, w = ctx.saved_tensors
        run, slot = ctx.run, ctx.slot
        G = dy.reshape(-1, w.shape[0])
        acc = torch.float64 if X.dtype == torch.float64 else torch.float32
        with torch.autocast("cpu", enabled=False):
            dx = fp8_product(run.operand(G, slot, 2, False, True),
                             run.operand(w.T, slot, 1, True, False), acc)
            dw = fp8_product(run.operand(G.T, slot, 2, False, False),
                             run.operand(X.T, slot, 0, False, False), acc)
            db = G.to(acc).sum(0).to(ctx.bias_dtype) if ctx.bias_dtype else None
        dx, dw = dx.to(X.dtype), dw.to(w.dtype)
        if run.captured is not None and "g" not in run.captured[slot]:
            run.captured[slot].update(g=G, dx=dx, dw=dw)
        return dx.reshape(ctx.x_shape), dw, db, None, None


def linear(x, w, b, fp8, slot):
    """F.linear, or with an Fp8Run its FP8 emulation on operands in the activations' dtype
    (bfloat16 under autocast, as the bf16 build holds them; x's otherwise)."""
    if fp8 is None:
        return F.linear(x, w, b)
    dtype = torch.bfloat16 if torch.is_autocast_enabled("cpu") else x.dtype
    return Fp8Linear.apply(x.to(dtype), w.to(dtype), None if b is None else b.to(dtype), fp8,
                           slot)


def forward_loss(p, cfg, idx, targets, fp8=None):
    """Logits (B, T, V), mean cross-entropy and z-loss term of one micro-batch; idx, targets
    (B, T) int64. p maps the parameter names to tensors (attn.qkv.w possibly as its three
    parts, see qkv_weight). fp8: the Fp8Run of the linear layers, None without FP8."""
    B, T = idx.shape
    C, NH = cfg.embd, cfg.heads
    head_fp8 = fp8 if fp8 is not None and cfg.fp8_lm_head else None
    if cfg.arch == "llama":
        head = p["wte"] if cfg.tie_embeddings else p["lm_head"]
        x = llama_forward(p, cfg, idx, fp8)
        return logits_and_losses(cfg, linear(x, head, None, head_fp8, 4 * cfg.layers), targets)
    x = p["wte"][idx] + p["wpe"][:T]
    for l in range(cfg.layers):
        h = f"h{l}."
        a = F.layer_norm(x, (C,), p[h + "ln1.w"], p[h + "ln1.b"], eps=1e-5)
        qkv = linear(a, qkv_weight(p, h), p[h + "attn.qkv.b"], fp8, 4 * l)
        # (B, T, 3C) -> three (B, NH, T, HS)
        q, k, v = qkv.view(B, T, 3, NH, C // NH).permute(2, 0, 3, 1, 4)
        if cfg.qk_norm:
            q = F.rms_norm(q, (C // NH,), p[h + "attn.q_norm.w"], eps=1e-6)
            k = F.rms_norm(k, (C // NH,), p[h + "attn.k_norm.w"], eps=1e-6)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, p[h + "attn.proj.w"], p[h + "attn.proj.b"], fp8, 4 * l + 1)
        m = F.layer_norm(x, (C,), p[h + "ln2.w"], p[h + "ln2.b"], eps=1e-5)
        m = F.gelu(linear(m, p[h + "mlp.fc.w"], p[h + "mlp.fc.b"], fp8, 4 * l + 2),
                   approximate="tanh")
        x = x + linear(m, p[h + "mlp.proj.w"], p[h + "mlp.proj.b"], fp8, 4 * l + 3)
    x = F.layer_norm(x, (C,), p["lnf.w"], p["lnf.b"], eps=1e-5)
    # under autocast the matmul yields bf16 logits; the softmax and the loss stay in fp32
    # (float64 in the exact run)
    return logits_and_losses(cfg, linear(x, p["wte"], None, head_fp8, 4 * cfg.layers), targets)


def logits_and_losses(cfg, logits, targets):
    """The first V columns of the lm head's output, the mean cross-entropy and the z-loss term."""
    logits = logits[..., :cfg.vocab]
    logits = logits if logits.dtype == torch.float64 else logits.float()
    loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))
    z_loss = cfg.z_loss * (torch.logsumexp(logits, -1) ** 2).mean()
    return logits, loss, z_loss


def learning_rate(cfg, s, lr=None):
    """The schedule at step s for the peak lr (default --lr; Muon's is --muon-lr)."""
    K, W, lr = cfg.steps, cfg.warmup, cfg.lr if lr is None else lr
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


def leaves(cfg, params):
    """Fresh float32 leaf tensors holding a copy of params (name -> tensor), each Muon
    attn.qkv.w as three leaves name[q], name[k], name[v] (its rows 0..C, C..2C, 2C..3C)."""
    out = {}
    for n, t in params.items():
        if is_muon(cfg, n) and n.endswith(".attn.qkv.w"):
            for x, part in zip(QKV_PARTS, t.chunk(3)):
                out[f"{n}[{x}]"] = part.detach().clone().requires_grad_(True)
        else:
            out[n] = t.detach().clone().requires_grad_(True)
    return out


def joined(cfg, tensors):
    """name -> tensor in the dump's names and order: the q, k, v parts of an attn.qkv.w
    concatenated again. tensors: keyed like leaves(); the names it lacks are left out."""
    out = {}
    for n, _ in param_shapes(cfg):
        if n in tensors:
            out[n] = tensors[n]
        elif f"{n}[q]" in tensors:
            out[n] = torch.cat([tensors[f"{n}[{x}]"] for x in QKV_PARTS])
    return out


def forward_backward(cfg, p, inputs, targets, autocast, fp8=None):
    """Forward and backward of one step's A micro-batches; p: name -> leaf tensor, whose .grad
    receives the accumulated gradient (key bias zeroed without QK-norm). Returns the step loss,
    the step z-loss, the logits (A, B, T, V) and the global gradient norm (a float64 tensor).
    autocast=True runs the forward under bfloat16 autocast; fp8: the run's Fp8Run or None."""
    for t in p.values():
        t.grad = None
    A = cfg.grad_accum
    step_loss, step_z, logits = 0.0, 0.0, []
    for a in range(A):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            lg, loss, z_loss = forward_loss(p, cfg, inputs[a], targets[a], fp8)
        ((loss + z_loss) / A).backward()
        step_loss += loss.item() / A
        step_z += z_loss.item() / A
        logits.append(lg.detach())
    # The key bias adds q.b_k to a query's scores at every key, which softmax cancels: its
    # gradient is zero up to rounding, and Adam would turn that rounding into lr-sized steps.
    # With QK-norm the bias is normalized with the key and its gradient is real.
    if not cfg.qk_norm and cfg.arch == "gpt2":  # (Llama has no biases)
        for l in range(cfg.layers):
            p[f"h{l}.attn.qkv.b"].grad[cfg.embd:2 * cfg.embd] = 0.0
    # PyTorch's float32 CPU norm drifts by ~6e-6 relative on a 590k-element tensor, too close
    # to the 1e-5 the dump is held to, so the norm is taken in float64.
    norm = torch.nn.utils.get_total_norm([t.grad.double() for t in p.values()])
    return step_loss, step_z, torch.stack(logits), norm


def newton_schulz_in(dtype):
    """torch.optim._muon._zeropower_via_newtonschulz with `dtype` where it casts to bfloat16:
    the same operations in the same order (transpose a tall matrix, divide by the clamped
    Frobenius norm, ns_steps quintic iterations through addmm, transpose back)."""
    def newton_schulz(grad, ns_coefficients, ns_steps, eps):
        a, b, c = ns_coefficients
        x = grad.to(dtype=dtype, copy=True)
        tall = grad.size(0) > grad.size(1)
        if tall:
            x = x.T
        x.div_(x.norm().clamp(min=eps))
        for _ in range(ns_steps):
            gram = x @ x.T
            poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)
            x = torch.addmm(x, poly, x, beta=a)
        return x.T if tall else x
    return newton_schulz


newton_schulz_fp32 = newton_schulz_in(torch.float32)


def bf16_product(a, b, c=None, alpha=1.0, beta=0.0):
    """alpha a b + beta c for bfloat16 matrices as a bfloat16 GEMM with float32 accumulation
    computes it (one rounding at the end), with the inner dimension summed as two halves, the
    second first: another summation order than torch's own bfloat16 matmul."""
    h = a.shape[1] // 2
    acc = a[:, h:].float() @ b[h:].float() + a[:, :h].float() @ b[:h].float()
    return (alpha * acc + (beta * c.float() if c is not None else 0.0)).bfloat16()


def newton_schulz_bf16_reordered(grad, ns_coefficients, ns_steps, eps):
    """torch's bfloat16 Newton-Schulz with every product summed in another order
    (bf16_product): a second correct bfloat16 run of the same iteration. How far it lands from
    torch's own measures how much the iteration amplifies a rounding that goes the other way."""
    a, b, c = ns_coefficients
    x = grad.to(dtype=torch.bfloat16, copy=True)
    tall = grad.size(0) > grad.size(1)
    if tall:
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = bf16_product(x, x.T)
        poly = bf16_product(gram, gram, gram, alpha=c, beta=b)
        x = bf16_product(poly, x, x, beta=a)
    return x.T if tall else x


class NewtonSchulzAs:
    """Within the block, torch.optim.Muon runs the given Newton-Schulz function (the module-level
    one its step calls) instead of its own bfloat16 one; None keeps torch's."""

    def __init__(self, function):
        self.function = function

    def __enter__(self):
        self.saved = torch.optim._muon._zeropower_via_newtonschulz
        if self.function is not None:
            torch.optim._muon._zeropower_via_newtonschulz = self.function

    def __exit__(self, *exc):
        torch.optim._muon._zeropower_via_newtonschulz = self.saved


class Lion(torch.optim.Optimizer):
    """Lion as the paper's pseudocode writes it (Chen et al. 2023, Algorithm 2), per parameter:
    c = b1*m + (1-b1)*g; theta = theta - lr*(sign(c) + wd*theta), the decay applied first as
    theta *= 1 - lr*wd (as AdamW's decoupled decay here); m = b2*m + (1-b2)*g. State: exp_avg
    (m), zeros before the first step. Arithmetic in the parameters' dtype."""

    def __init__(self, params, lr, betas, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if not self.state[p]:
                    self.state[p]["exp_avg"] = torch.zeros_like(p)
                m, g = self.state[p]["exp_avg"], p.grad
                c = m * b1 + g * (1 - b1)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(torch.sign(c), alpha=-group["lr"])
                m.mul_(b2).add_(g, alpha=1 - b2)


def make_optimizers(cfg, p):
    """torch.optim.AdamW for the AdamW tensors and, with --optimizer muon, torch.optim.Muon for
    the others; with --optimizer lion, Lion for every tensor; p: leaves(). Returns
    {"adamw": opt or None, "muon": opt or None, "lion": opt or None}."""
    muon = [t for n, t in p.items() if is_muon(cfg, n.split("[")[0])]
    rest = [(n, t) for n, t in p.items() if not is_muon(cfg, n.split("[")[0])]
    decay = [t for n, t in rest if t.dim() == 2]
    no_decay = [t for n, t in rest if t.dim() != 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    opts = {"adamw": None, "muon": None, "lion": None}
    if cfg.optimizer == "lion":
        opts["lion"] = Lion(groups, lr=cfg.lr, betas=(cfg.lion_beta1, cfg.lion_beta2))
        return opts
    opts["adamw"] = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)
    if muon:
        opts["muon"] = torch.optim.Muon(muon, lr=cfg.muon_lr, weight_decay=cfg.weight_decay,
                                        momentum=cfg.muon_momentum,
                                        nesterov=bool(cfg.muon_nesterov),
                                        ns_steps=cfg.muon_ns_steps, adjust_lr_fn=cfg.muon_adjust)
    return opts


def optimizer_step(cfg, opts, p, norm, s):
    """Clips the gradients in p by the float64 norm (clip_grad_norm_'s rule, through PyTorch's
    own clipping) and takes one step of each optimizer at its scheduled lr for step s."""
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grads_with_norm_(list(p.values()), cfg.grad_clip, norm)
    for kind, peak in (("adamw", cfg.lr), ("muon", cfg.muon_lr), ("lion", cfg.lr)):
        if opts[kind] is None:
            continue
        for group in opts[kind].param_groups:
            group["lr"] = learning_rate(cfg, s, peak)
        opts[kind].step()


def optimizer_state(cfg, opts, p):
    """The state after a step, keyed like the dump: adam_m, adam_v (AdamW tensors),
    muon_momentum (Muon tensors) and lion_m (Lion tensors), each name -> tensor."""
    state = {"adam_m": {}, "adam_v": {}, "muon_momentum": {}, "lion_m": {}}
    for n, t in p.items():
        if opts["lion"] is not None:
            state["lion_m"][n] = opts["lion"].state[t]["exp_avg"].clone()
        elif is_muon(cfg, n.split("[")[0]):
            state["muon_momentum"][n] = opts["muon"].state[t]["momentum_buffer"].clone()
        else:
            state["adam_m"][n] = opts["adamw"].state[t]["exp_avg"].clone()
            state["adam_v"][n] = opts["adamw"].state[t]["exp_avg_sq"].clone()
    return {kind: joined(cfg, tensors) for kind, tensors in state.items()}


def train(cfg, init, inputs, targets, autocast=False):
    """The fp32 run (Muon with newton_schulz_fp32; with --fp8 its linear layers in FP8), or with
    autocast the free-running bf16 run (torch's own Muon): K steps from init. Returns the step-0
    logits and, per step, a dict with loss, z_loss, lr, muon_lr, grad_norm, the tensors grad
    (before clipping), param, adam_m, adam_v, muon_momentum, lion_m (name -> tensor, dump names)
    and fp8 (the Fp8Run's state the step started from, or None)."""
    p = leaves(cfg, init)
    opts = make_optimizers(cfg, p)
    fp8 = Fp8Run(cfg) if cfg.fp8 != "off" else None
    steps = []
    for s in range(cfg.steps):
        fp8_state = fp8.state() if fp8 else None
        loss, z_loss, logits, norm = forward_backward(cfg, p, inputs[s], targets[s], autocast,
                                                      fp8)
        if fp8:
            fp8.end_step(s)
        if s == 0:
            logits0 = logits
        grad = joined(cfg, {n: t.grad.clone() for n, t in p.items()})
        with NewtonSchulzAs(None if autocast else newton_schulz_fp32):
            optimizer_step(cfg, opts, p, norm, s)
        steps.append({"loss": loss, "z_loss": z_loss, "lr": learning_rate(cfg, s),
                      "muon_lr": learning_rate(cfg, s, cfg.muon_lr), "grad_norm": norm.item(),
                      "grad": grad, "param": joined(cfg, {n: t.detach().clone()
                                                          for n, t in p.items()}),
                      "fp8": fp8_state, **optimizer_state(cfg, opts, p)})
    return logits0, steps


def muon_updates(cfg, fp32_steps, init, newton_schulz, bf16_grads):
    """Per step k, torch's Muon from the fp32 run's theta_{k-1} and momentum_{k-1} on step<k>.grad
    (rounded to bfloat16 first if bf16_grads, as the bf16 build's gradient buffer holds it),
    with the fp32 run's clipping and lr, its Newton-Schulz being `newton_schulz` (None: torch's
    own bfloat16 one). Parameters, gradients and momentum are float64 here, so theta_k -
    theta_{k-1} carries only the arithmetic of the Newton-Schulz run (no float32 storage of
    theta). Returns per step {Muon tensor name: theta_k - theta_{k-1}} (dump names)."""
    out = []
    for k, f in enumerate(fp32_steps):
        theta = init if k == 0 else fp32_steps[k - 1]["param"]
        muon = {n: t.double() for n, t in theta.items() if is_muon(cfg, n)}
        if not muon:
            out.append({})
            continue
        p = leaves(cfg, muon)
        grads = {n: f["grad"][n] for n in muon}
        if bf16_grads:
            grads = {n: g.bfloat16() for n, g in grads.items()}
        grads = leaves(cfg, {n: g.double() for n, g in grads.items()})
        for n, t in p.items():
            t.grad = grads[n].detach().clone()
        opt = make_optimizers(cfg, p)["muon"]
        if k > 0:
            momentum = leaves(cfg, {n: fp32_steps[k - 1]["muon_momentum"][n].double()
                                    for n in muon})
            for n, t in p.items():
                opt.state[t]["momentum_buffer"] = momentum[n].detach().clone()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grads_with_norm_(list(p.values()), cfg.grad_clip,
                                                 torch.tensor(f["grad_norm"], dtype=torch.float64))
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, k, cfg.muon_lr)
        with torch.no_grad(), NewtonSchulzAs(newton_schulz):
            opt.step()
        after = joined(cfg, {n: t.detach() for n, t in p.items()})
        out.append({n: after[n] - muon[n] for n in muon})
    return out


def train_teacher_forced(cfg, init, inputs, targets, fp32_steps, autocast):
    """Runs of each step k from the fp32 run's theta_{k-1} (init for k = 0) and, with --fp8, its
    FP8 state of step k: bf16-autocast runs (autocast), or else the exact run of the docstring
    (float64 parameters and activations, Muon's Newton-Schulz in float64). Returns the step-0
    logits, theta_0 after one optimizer step from init on that run's gradients (Muon under
    autocast: torch's own bfloat16 Newton-Schulz), and per step a dict with loss, z_loss,
    grad_norm and grad (before clipping), fp8_next (the FP8 state after the step: delayed
    scaling's history and scales from that run's amaxes) and, for the bf16 run's last step,
    fp8_layers: each FP8 layer's operands and products in its first micro-batch."""
    steps = []
    for s in range(cfg.steps):
        theta = init if s == 0 else fp32_steps[s - 1]["param"]
        p = leaves(cfg, theta if autocast else {n: t.double() for n, t in theta.items()})
        capture = autocast and s == cfg.steps - 1
        fp8 = Fp8Run(cfg, fp32_steps[s]["fp8"], capture) if cfg.fp8 != "off" else None
        loss, z_loss, logits, norm = forward_backward(cfg, p, inputs[s], targets[s], autocast,
                                                      fp8)
        if fp8:
            fp8.end_step(s)
        steps.append({"loss": loss, "z_loss": z_loss, "grad_norm": norm.item(),
                      "grad": joined(cfg, {n: t.grad.clone() for n, t in p.items()}),
                      "fp8_layers": fp8.captured if fp8 else None,
                      "fp8_next": fp8.state() if fp8 else None})
        if s == 0:
            logits0 = logits
            with NewtonSchulzAs(None if autocast else newton_schulz_in(torch.float64)):
                optimizer_step(cfg, make_optimizers(cfg, p), p, norm, 0)
            theta0 = joined(cfg, {n: t.detach().clone() for n, t in p.items()})
    return logits0, theta0, steps


def rel_diff(b, f):
    """||b - f|| / ||f|| in float64; 0/0 gives 0, x/0 gives inf."""
    f = torch.as_tensor(f, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    num, den = torch.linalg.vector_norm(b - f).item(), torch.linalg.vector_norm(f).item()
    return 0.0 if num == 0.0 else (math.inf if den == 0.0 else num / den)


def max_rel_diff(b, f):
    """max over the elements of |b - f| / |f| in float64 (0/0 gives 0, x/0 gives inf): for
    tensors whose entries differ in size by orders of magnitude (the delayed state)."""
    b, f = b.double(), f.double()
    return torch.where(b == f, 0.0, (b - f).abs() / f.abs()).max().item()


def measured(prefix, init, fp32, run, k):
    """The records prefix.<quantity>: how far a teacher-forced run (train_teacher_forced) moves
    each quantity from the fp32 run's, for step k (k = 0: also the logits and theta_0 - init)."""
    (logits_f, steps_f), (logits_r, theta0_r, steps_r) = fp32, run
    f, r = steps_f[k], steps_r[k]
    out = []
    if k == 0:
        out.append((f"{prefix}.step0.logits", rel_diff(logits_r, logits_f)))
        out += [(f"{prefix}.step0.param.{n}", rel_diff(theta0_r[n] - t, f["param"][n] - t))
                for n, t in init.items()]
    out += [(f"{prefix}.step{k}.{n}", rel_diff(r[n], f[n])) for n in ("loss", "z_loss",
                                                                        "grad_norm")]
    out += [(f"{prefix}.step{k}.grad.{n}", rel_diff(r["grad"][n], t))
            for n, t in f["grad"].items()]
    return [(n, np.array(v, dtype="<f8")) for n, v in out]


def records(cfg, inputs, targets, init, fp32, bf16, exact, free, muon):
    """The dump's records as (name, numpy array) in file order; exact: the exact FP8 run
    (train_teacher_forced) or None; free: the free-running bf16 run (train) or None."""
    out = []
    config_i64 = [("vocab", cfg.vocab), ("padded_vocab", padded_vocab(cfg.vocab)),
                  ("seq", cfg.seq), ("context", cfg.context), ("layers", cfg.layers),
                  ("heads", cfg.heads), ("embd", cfg.embd), ("batch", cfg.batch),
                  ("grad_accum", cfg.grad_accum), ("steps", cfg.steps), ("seed", cfg.seed),
                  ("warmup", cfg.warmup), ("schedule", SCHEDULES.index(cfg.schedule)),
                  ("optimizer", OPTIMIZERS.index(cfg.optimizer)),
                  ("muon_nesterov", cfg.muon_nesterov), ("muon_ns_steps", cfg.muon_ns_steps),
                  ("muon_adjust", MUON_ADJUST.index(cfg.muon_adjust)),
                  ("qk_norm", int(cfg.qk_norm)), ("fp8", FP8_RECIPES.index(cfg.fp8)),
                  ("fp8_grad_e5m2", int(cfg.fp8_grad == "e5m2")),
                  ("fp8_lm_head", cfg.fp8_lm_head), ("fp8_amax_history", cfg.fp8_amax_history),
                  ("fp8_margin", cfg.fp8_margin), ("arch", ARCHS.index(cfg.arch)),
                  ("kv_heads", cfg.kv_heads), ("mlp_hidden", cfg.mlp_hidden),
                  ("tie_embeddings", cfg.tie_embeddings),
                  ("rope_original_context", cfg.rope_original_context),
                  ("rope_scaling", ROPE_SCALINGS.index(cfg.rope_scaling))]
    out += [("config." + n, np.array(v, dtype="<i8")) for n, v in config_i64]
    config_f64 = [("lr", cfg.lr), ("min_lr_frac", cfg.min_lr_frac),
                  ("decay_frac", cfg.decay_frac), ("weight_decay", cfg.weight_decay),
                  ("grad_clip", cfg.grad_clip), ("muon_lr", cfg.muon_lr),
                  ("muon_momentum", cfg.muon_momentum), ("z_loss", cfg.z_loss),
                  ("lion_beta1", cfg.lion_beta1), ("lion_beta2", cfg.lion_beta2),
                  ("norm_eps", cfg.norm_eps), ("rope_theta", cfg.rope_theta),
                  ("rope_factor", cfg.rope_factor),
                  ("rope_low_freq_factor", cfg.rope_low_freq_factor),
                  ("rope_high_freq_factor", cfg.rope_high_freq_factor)]
    out += [("config." + n, np.array(v, dtype="<f8")) for n, v in config_f64]
    out += [("inputs", inputs.numpy().astype("<i4")), ("targets", targets.numpy().astype("<i4"))]

    def f32(t):
        return t.numpy().astype("<f4")

    def f64(x):
        return np.array(x, dtype="<f8")

    logits_f, steps_f = fp32
    out += [("init." + n, f32(t)) for n, t in init.items()]
    out.append(("step0.logits", f32(logits_f)))
    for k, s in enumerate(steps_f):
        out += [(f"step{k}.{n}", f64(s[n]))
                for n in ("loss", "z_loss", "lr", "muon_lr", "grad_norm")]
        for kind in ("grad", "param", "adam_m", "adam_v", "muon_momentum", "lion_m"):
            out += [(f"step{k}.{kind}.{n}", f32(t)) for n, t in s[kind].items()]
    for k in range(cfg.steps):
        out += measured("bf16", init, fp32, bf16, k)
        for n, u in muon["bf16"][k].items():
            out.append((f"bf16.step{k}.update.{n}", f64(rel_diff(u, muon["fp32"][k][n]))))
            out.append((f"bf16.step{k}.update_bf16_grad.{n}",
                        f64(rel_diff(muon["bf16_grad"][k][n], u))))
            out.append((f"bf16.step{k}.update_order.{n}",
                        f64(rel_diff(muon["bf16_order"][k][n], muon["bf16_grad"][k][n]))))
    for k, updates in enumerate(muon["bf16_grad"]):
        out += [(f"step{k}.update_bf16.{n}", f32(u.float())) for n, u in updates.items()]
    for k, updates in enumerate(muon["fp32"]):
        out += [(f"fp32.step{k}.update.{n}", f64(rel_diff(u, muon["fp64"][k][n])))
                for n, u in updates.items()]
    for k in range(cfg.steps if exact else 0):
        out += measured("exact", init, fp32, exact, k)
    for k in range(1, cfg.steps if cfg.fp8 == "delayed" else 0):
        out += [(f"bf16.fp8.step{k}.{n}", f64(max_rel_diff(bf16[2][k - 1]["fp8_next"][key],
                                                            steps_f[k]["fp8"][key])))
                for n, key in (("amax_history", "history"), ("scale", "scale"))]
    for k in range(1, cfg.steps if free else 0):
        out += [(f"bf16.free.step{k}.{n}", f64(rel_diff(free[1][k][n], steps_f[k][n])))
                for n in ("loss", "z_loss", "grad_norm")]
    for k, s in enumerate(steps_f if cfg.fp8 == "delayed" else []):
        out += [(f"fp8.step{k}.amax_history", f32(s["fp8"]["history"])),
                (f"fp8.step{k}.scale", f32(s["fp8"]["scale"]))]
    layers = bf16[2][-1]["fp8_layers"] or {}
    for slot in sorted(layers):
        out += [(f"fp8.layer{slot}.{n}", f32(t.detach().float()))
                for n, t in layers[slot].items() if t is not None]
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
    ("--optimizer", "{" + ",".join(OPTIMIZERS) + "}", str, "adamw",
     "muon: torch.optim.Muon for the hidden matrices, AdamW for the rest; lion: Lion for every "
     "tensor"),
    ("--muon-lr", "LR", float, None, "Muon's peak learning rate (default: --lr)"),
    ("--muon-momentum", "MU", float, 0.95, "Muon's momentum"),
    ("--muon-nesterov", "{0,1}", int, 1, "Muon's Nesterov momentum"),
    ("--muon-ns-steps", "N", int, 5, "Muon's Newton-Schulz iterations"),
    ("--muon-adjust", "{" + ",".join(MUON_ADJUST) + "}", str, "match_rms_adamw",
     "Muon's adjust_lr_fn"),
    ("--lion-beta1", "B1", float, 0.9, "Lion's beta1 (the sign's interpolation)"),
    ("--lion-beta2", "B2", float, 0.99, "Lion's beta2 (the momentum's decay)"),
    ("--qk-norm", None, bool, False, "RMSNorm of each head's q and k with learned scales"),
    ("--z-loss", "COEF", float, 0.0, "z-loss coefficient; 0 disables"),
    ("--fp8", "{" + ",".join(FP8_RECIPES) + "}", str, "off",
     "FP8 recipe of the blocks' linear layers (docstring, FP8)"),
    ("--fp8-grad", "{e4m3,e5m2}", str, None,
     "FP8 format of the gradients (default: e5m2 for tensor and delayed, e4m3 otherwise)"),
    ("--fp8-lm-head", "{0,1}", int, 0, "the lm head in FP8 too"),
    ("--fp8-amax-history", "H", int, 16, "delayed scaling: amax history length"),
    ("--fp8-margin", "M", int, 0, "delayed scaling: scales divided by 2^M"),
    ("--arch", "{" + ",".join(ARCHS) + "}", str, "gpt2", "the block (docstring, LLAMA)"),
    ("--kv-heads", "KVH", int, None, "llama: key/value heads (default: --heads)"),
    ("--mlp-hidden", "H", int, None, "llama: SwiGLU hidden units (default: the rule)"),
    ("--mlp-multiple-of", "M", int, 256, "llama: the rule's rounding"),
    ("--norm-eps", "EPS", float, 1e-5, "llama: RMSNorm's eps"),
    ("--rope-theta", "THETA", float, 10000.0, "llama: RoPE's base"),
    ("--rope-scaling", "{" + ",".join(ROPE_SCALINGS) + "}", str, "none",
     "llama: RoPE's frequency scaling"),
    ("--rope-factor", "F", float, 8.0, "llama3 scaling: factor"),
    ("--rope-low-freq-factor", "F", float, 1.0, "llama3 scaling: low_freq_factor"),
    ("--rope-high-freq-factor", "F", float, 4.0, "llama3 scaling: high_freq_factor"),
    ("--rope-original-context", "N", int, 8192,
     "llama3 scaling: original_max_position_embeddings"),
    ("--tie-embeddings", "{0,1}", int, 1, "llama: 1 the lm head is wte"),
]
CHOICES = {"--schedule": SCHEDULES, "--optimizer": OPTIMIZERS, "--muon-adjust": MUON_ADJUST,
           "--muon-nesterov": [0, 1], "--fp8": FP8_RECIPES, "--fp8-grad": list(FP8_FORMATS),
           "--fp8-lm-head": [0, 1], "--arch": ARCHS, "--rope-scaling": ROPE_SCALINGS,
           "--tie-embeddings": [0, 1]}


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Train a small GPT in PyTorch from a seed and write the dump that test_gpt "
                    "checks against (format in this script's docstring).")
    ap.add_argument("--out", metavar="FILE", help="dump file to write (required)")
    ap.add_argument("--check", action="store_true",
                    help="then confirm the dump with scripts/check_reference.py's independent "
                         "float64 model, in this process (one start of PyTorch, not two); exits "
                         "with the check's status")
    ap.add_argument("--runs", metavar="FILE",
                    help="instead of one run, one per line of FILE (each line a command line of "
                         "this script: --out, --check, the flags), in turn in this process: one "
                         "start of PyTorch for them all, each run computed as a new process would "
                         "compute it, its output between `reference: run I of N` lines "
                         "(check_reference.run_each); exits 1 if any fails")
    for flag, metavar, kind, default, text in FLAGS:
        if kind is bool:
            ap.add_argument(flag, action="store_true", help=text)
            continue
        if default is not None:
            text += f" (default {default})"
        ap.add_argument(flag, metavar=metavar, type=kind, default=default,
                        choices=CHOICES.get(flag), help=text)
    cfg = ap.parse_args(argv)
    if cfg.runs is not None:
        if argv not in (["--runs", cfg.runs], ["--runs=" + cfg.runs]):
            ap.error("--runs FILE takes no other arguments: each line of FILE has its own")
        return cfg
    if cfg.out is None:
        ap.error("the following arguments are required: --out")
    if cfg.context is None:
        cfg.context = cfg.seq
    if cfg.muon_lr is None:
        cfg.muon_lr = cfg.lr
    if cfg.fp8_grad is None:
        cfg.fp8_grad = fp8_grad_default(cfg.fp8)
    if cfg.arch == "gpt2":  # the record's values for GPT-2's block
        if cfg.kv_heads is not None or cfg.mlp_hidden is not None or not cfg.tie_embeddings:
            ap.error("--kv-heads, --mlp-hidden and --tie-embeddings 0 are for --arch llama")
        cfg.kv_heads, cfg.mlp_hidden, cfg.rope_original_context = cfg.heads, 4 * cfg.embd, 0
        cfg.rope_scaling = "none"
        cfg.norm_eps = cfg.rope_theta = cfg.rope_factor = 0.0
        cfg.rope_low_freq_factor = cfg.rope_high_freq_factor = 0.0
    else:
        if cfg.kv_heads is None:
            cfg.kv_heads = cfg.heads
        if cfg.mlp_hidden is None:
            M = cfg.mlp_multiple_of
            cfg.mlp_hidden = (int(2 * 4 * cfg.embd / 3) + M - 1) // M * M
        if cfg.kv_heads < 1 or cfg.heads % cfg.kv_heads:
            ap.error(f"--kv-heads {cfg.kv_heads} must divide --heads {cfg.heads}")
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
    if not 0 <= cfg.muon_ns_steps < 100:
        ap.error(f"--muon-ns-steps must be in [0, 99] (torch.optim.Muon's limit), got "
                 f"{cfg.muon_ns_steps}")
    if not 0.0 <= cfg.muon_momentum <= 1.0:
        ap.error(f"--muon-momentum must be in [0, 1], got {cfg.muon_momentum}")
    for flag in ("lion_beta1", "lion_beta2"):
        if not 0.0 <= getattr(cfg, flag) <= 1.0:
            ap.error(f"--{flag.replace('_', '-')} must be in [0, 1], got {getattr(cfg, flag)}")
    for flag in ("lr", "weight_decay", "grad_clip", "muon_lr", "z_loss"):
        value = getattr(cfg, flag)
        if not (math.isfinite(value) and value >= 0):
            ap.error(f"--{flag.replace('_', '-')} must be finite and >= 0, got {value}")
    for flag in ("min_lr_frac", "decay_frac"):
        value = getattr(cfg, flag)
        if not 0.0 <= value <= 1.0:
            ap.error(f"--{flag.replace('_', '-')} must be in [0, 1], got {value}")
    if not 1 <= cfg.fp8_amax_history <= 1024 or not 0 <= cfg.fp8_margin <= 64:
        ap.error(f"--fp8-amax-history must be in [1, 1024] and --fp8-margin in [0, 64], got "
                 f"{cfg.fp8_amax_history} and {cfg.fp8_margin}")
    if cfg.fp8 == "mx" and (cfg.embd % 32 or cfg.batch * cfg.seq % 32):
        ap.error(f"--fp8 mx needs --embd ({cfg.embd}) and --batch * --seq "
                 f"({cfg.batch * cfg.seq}) multiples of 32 (its 32-element blocks)")
    return cfg


def run(cfg):
    """One run (parse_args's cfg, not --runs): writes the dump, prints its summary and with
    --check confirms it; returns the exit status (the check's, else 0). Starts from torch's
    global state as a new process has it, so that one of --runs computes what it would alone."""
    torch.random.set_rng_state(FRESH_RNG_STATE)
    torch.set_num_threads(2)
    # F.rms_norm under bf16 autocast (bf16 input, fp32 scale) says it takes the unfused path
    warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")
    t0 = time.time()
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    tokens = torch.randint(0, cfg.vocab, (cfg.steps, cfg.grad_accum, cfg.batch, cfg.seq + 1),
                           generator=gen, dtype=torch.int32)
    inputs, targets = tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()
    init = init_params(cfg)
    fp32 = train(cfg, init, inputs.long(), targets.long())
    bf16 = train_teacher_forced(cfg, init, inputs.long(), targets.long(), fp32[1], True)
    exact = (train_teacher_forced(cfg, init, inputs.long(), targets.long(), fp32[1], False)
             if cfg.fp8 != "off" else None)
    free = train(cfg, init, inputs.long(), targets.long(), True) if cfg.fp8 != "off" else None
    muon = {kind: muon_updates(cfg, fp32[1], init, ns, bf16_grad)
            for kind, ns, bf16_grad in (("fp32", newton_schulz_fp32, False),
                                        ("fp64", newton_schulz_in(torch.float64), False),
                                        ("bf16", None, False), ("bf16_grad", None, True),
                                        ("bf16_order", newton_schulz_bf16_reordered, True))}
    recs = records(cfg, inputs, targets, init, fp32, bf16, exact, free, muon)
    try:
        write_dump(cfg.out, recs)
    except OSError as e:
        sys.exit(f"reference: cannot write {cfg.out}: {e.strerror}")
    steps = fp32[1]
    bf16_logits = next(a.item() for n, a in recs if n == "bf16.step0.logits")
    bf16_updates = [a.item() for n, a in recs if n.startswith("bf16.") and ".update." in n]
    fp32_updates = [a.item() for n, a in recs if n.startswith("fp32.")]
    extras = (f" {cfg.optimizer}" + (" qk-norm" if cfg.qk_norm else "")
              + (f" llama KVH={cfg.kv_heads} H={cfg.mlp_hidden} tied={cfg.tie_embeddings} "
                 f"theta={cfg.rope_theta:g} rope-scaling {cfg.rope_scaling}"
                 if cfg.arch == "llama" else "")
              + (f" z-loss {cfg.z_loss:g}" if cfg.z_loss else "")
              + (f" fp8 {cfg.fp8} (grads {cfg.fp8_grad}"
                 + (", lm head" if cfg.fp8_lm_head else "") + ")" if cfg.fp8 != "off" else ""))
    exact_logits = [a.item() for n, a in recs if n == "exact.step0.logits"]
    print(f"reference: wrote {cfg.out} ({len(recs)} records, {os.path.getsize(cfg.out)} bytes): "
          f"V={cfg.vocab} Vp={padded_vocab(cfg.vocab)} T={cfg.seq} maxT={cfg.context} "
          f"L={cfg.layers} NH={cfg.heads} C={cfg.embd} B={cfg.batch} A={cfg.grad_accum} "
          f"K={cfg.steps} {cfg.schedule}{extras}; loss {steps[0]['loss']:.6f} -> "
          f"{steps[-1]['loss']:.6f}, bf16 logits rel diff {bf16_logits:.2e}"
          + (f", exact-run FP8 logits rel diff {exact_logits[0]:.2e}" if exact_logits else "")
          + (f", Muon updates rel diff: bf16 up to {max(bf16_updates):.2e}, fp32 up to "
             f"{max(fp32_updates):.2e}" if bf16_updates else "")
          + f", {time.time() - t0:.1f} s", flush=True)
    if cfg.check:
        import check_reference  # (scripts/, this script's folder, is on the path)
        return check_reference.check(cfg.out)
    return 0


def main(argv):
    cfg = parse_args(argv)
    if cfg.runs is None:
        sys.exit(run(cfg))
    import check_reference  # (scripts/, this script's folder, is on the path)
    try:
        with open(cfg.runs) as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError as e:
        sys.exit(f"reference: cannot read {cfg.runs}: {e.strerror}")

    def run_line(line):
        line_cfg = parse_args(shlex.split(line))
        if line_cfg.runs is not None:
            sys.exit("reference: a line of a --runs file is one run, not another --runs")
        return run(line_cfg)

    sys.exit(check_reference.run_each(lines, run_line, "reference"))


if __name__ == "__main__":
    main(sys.argv[1:])
