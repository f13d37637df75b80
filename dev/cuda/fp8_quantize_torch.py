#!/usr/bin/env python3
"""PyTorch's FP8 quantization for dev/cuda/fp8_quantize.cu to check llmc/fp8.cuh against.

Each recipe of llmc/fp8.cuh redone with torch's casts (torch.float8_e4m3fn, torch.float8_e5m2,
torch.float8_e8m0fnu) under the same rules: amax = max |x| with NaN ignored and Inf counted;
scale = fp8_max / max(amax, 1e-12) * 2^-margin in float32, or the fallback (1; delayed scaling:
the last scale) when amax is 0 or Inf; q = (x * scale) clamped to +-fp8_max, then cast (PyTorch's
cast turns overflow into NaN where CUDA's __NV_SATFINITE saturates, hence the clamp first; NaN
stays NaN); the stored scale is 1 / scale. MXFP8: X = 2^(floor(log2 amax) - emax_elem) over 32
elements of a row (exponent clamped to [-127, 127], -127 for an all-zero block), q = sat(x / X),
X cast to float8_e8m0fnu; a block holding NaN or Inf gets X = NaN (0xFF) and NaN elements. The
E8M0 bytes are then laid out as cuBLASLt's VEC32_UE8M0 mode reads them (cuBLAS documentation,
"1D Block Scaling Factors Layout"): the rows x cols/32 scales zero-padded to whole 128 x 4 tiles,
tiles in row-major order, and inside a tile row r = 32 a + b, column c at b * 16 + a * 4 + c.

Inputs (bfloat16): Gaussian rows of magnitudes 1e-3 .. 1e3, all-zero rows and 128-column tiles,
rows of tiny (1e-30) and subnormal (1e-39) values, and a case with NaN, +-Inf and values far
beyond both formats' maxima (1e5 .. 1e6; saturation under scale 1 and under delayed scaling).

File (little-endian): "FP8QTRC1", uint32 count, then per case: uint32 len + name, uint32 len +
recipe, int32 format (0 E4M3, 1 E5M2), rows, cols, steps, history length, margin, uint16
x[steps*rows*cols] (bfloat16 bits), uint32 blob count, per blob uint32 len + name, uint64 size,
bytes. Blobs: q, qt (row-major bytes), scale_inv (float32), tensor_scale ({amax, scale,
scale_inv} per step), history (float32), scale_e8m0 (bytes, tiled as above, padding included).
"""
import argparse
import os
import struct

import torch

FORMATS = [(torch.float8_e4m3fn, 448.0, 8), (torch.float8_e5m2, 57344.0, 15)]


def amax_of(x):
    return torch.where(torch.isnan(x), torch.zeros_like(x), x.abs()).max()


def divide(numerator, t):
    """numerator / t in one float32 division (torch's scalar / tensor is reciprocal() * scalar,
    two roundings)."""
    return torch.full_like(t, numerator) / t


def scale_from_amax(amax, fp8_max, margin, fallback):
    amax = amax.float()
    scale = divide(fp8_max, amax.clamp(min=1e-12)) * (2.0 ** -margin)
    ok = (amax > 0) & ~torch.isinf(amax)
    return torch.where(ok, scale, torch.as_tensor(fallback, dtype=torch.float32))


def cast(v, fmt):
    dtype, fp8_max, _ = FORMATS[fmt]
    return v.clamp(-fp8_max, fp8_max).to(dtype).view(torch.uint8)


def f32(t):
    return t.float().contiguous().numpy().astype("<f4").tobytes()


def u8(t):
    return t.contiguous().numpy().tobytes()


def tiled(x, fmt, tile_rows, tile_cols, index):
    """q and scale_inv for tiles of x; index(tile_r, tile_c) -> slot, slots counted first."""
    rows, cols = x.shape
    n_tr, n_tc = -(-rows // tile_rows), -(-cols // tile_cols)
    slots = max(index(tr, tc) for tr in range(n_tr) for tc in range(n_tc)) + 1
    q = torch.zeros(rows, cols, dtype=torch.uint8)
    scale_inv = torch.zeros(slots, dtype=torch.float32)
    for tr in range(n_tr):
        for tc in range(n_tc):
            tile = x[tr * tile_rows:(tr + 1) * tile_rows, tc * tile_cols:(tc + 1) * tile_cols]
            scale = scale_from_amax(amax_of(tile), FORMATS[fmt][1], 0, 1.0)
            scale_inv[index(tr, tc)] = divide(1.0, scale)
            q[tr * tile_rows:(tr + 1) * tile_rows, tc * tile_cols:(tc + 1) * tile_cols] = \
                cast(tile * scale, fmt)
    return q, scale_inv


def block_stride(k):
    """The row stride of a BLK128x128_32F scale array: ceil(k / 128) rounded up to 4."""
    k_blocks = (k + 127) // 128
    return (k_blocks + 3) // 4 * 4


def tiled_e8m0(scales):
    """The (rows, cols/32) E8M0 bytes in cuBLASLt's tiled VEC32_UE8M0 layout, flattened."""
    rows, blocks = scales.shape
    row_tiles, col_tiles = -(-rows // 128), -(-blocks // 4)
    padded = torch.zeros(row_tiles * 128, col_tiles * 4, dtype=torch.uint8)
    padded[:rows, :blocks] = scales
    # (row tile, a, b, col tile, c) with row = 128 row_tile + 32 a + b, column = 4 col_tile + c
    tiles = padded.reshape(row_tiles, 4, 32, col_tiles, 4)
    return tiles.permute(0, 3, 2, 1, 4).contiguous().flatten()


def expected(recipe, x, fmt, history_len, margin):
    """x: float32 (steps, rows, cols). Returns the blobs."""
    steps, rows, cols = x.shape
    fp8_max = FORMATS[fmt][1]
    x0 = x[0]
    if recipe == "tensor":
        scale = scale_from_amax(amax_of(x0), fp8_max, 0, 1.0)
        q = cast(x0 * scale, fmt)
        return {"q": u8(q), "qt": u8(q.t()),
                "tensor_scale": f32(torch.stack([amax_of(x0), scale, divide(1.0, scale)]))}
    if recipe == "delayed":
        history = torch.zeros(history_len)
        scale = torch.tensor(1.0)
        qs, scales = [], []
        for s in range(steps):
            scale = scale_from_amax(history.max(), fp8_max, margin, scale)
            qs.append(cast(x[s] * scale, fmt))
            history[s % history_len] = amax_of(x[s])
            scales.append(torch.stack([amax_of(x[s]), scale, divide(1.0, scale)]))
        return {"q": u8(torch.stack(qs)), "tensor_scale": f32(torch.stack(scales)),
                "history": f32(history)}
    if recipe == "rowwise":
        q, s = tiled(x0, fmt, 1, cols, lambda tr, tc: tr)
        return {"q": u8(q), "scale_inv": f32(s)}
    if recipe == "rowwise_t":
        q, s = tiled(x0, fmt, rows, 1, lambda tr, tc: tc)
        return {"qt": u8(q.t()), "scale_inv": f32(s)}
    if recipe == "1x128":
        q, s = tiled(x0, fmt, 1, 128, lambda tr, tc: tc * rows + tr)
        return {"q": u8(q), "scale_inv": f32(s)}
    if recipe == "1x128_t":
        q, s = tiled(x0, fmt, 128, 1, lambda tr, tc: tr * cols + tc)
        return {"qt": u8(q.t()), "scale_inv": f32(s)}
    if recipe == "128x128":
        q, s = tiled(x0, fmt, 128, 128, lambda tr, tc: tr * block_stride(cols) + tc)
        _, st = tiled(x0, fmt, 128, 128, lambda tr, tc: tc * block_stride(rows) + tr)
        return {"q": u8(q), "qt": u8(q.t()), "scale_inv": f32(s), "scale_inv_t": f32(st)}
    if recipe == "mx":
        blocks = x0.reshape(rows, cols // 32, 32)
        nonfinite = (~torch.isfinite(blocks)).any(dim=2, keepdim=True)
        amax = torch.where(torch.isfinite(blocks), blocks.abs(), torch.zeros_like(blocks))
        amax = amax.amax(dim=2, keepdim=True)
        _, e = torch.frexp(amax)
        exponent = (e - 1 - FORMATS[fmt][2]).clamp(-127, 127)
        exponent = torch.where(amax == 0, torch.full_like(exponent, -127), exponent)
        big_x = torch.ldexp(torch.ones_like(amax), exponent)
        big_x = torch.where(nonfinite, torch.full_like(big_x, float("nan")), big_x)
        q = cast(blocks / big_x, fmt).reshape(rows, cols)
        e8m0 = big_x.to(torch.float8_e8m0fnu).view(torch.uint8).reshape(rows, cols // 32)
        return {"q": u8(q), "scale_e8m0": u8(tiled_e8m0(e8m0))}
    raise ValueError(recipe)


def inputs():
    gen = torch.Generator().manual_seed(22)
    cases = []
    # mixed magnitudes, zero rows and tiles, tiny and subnormal rows; partial tiles (200 x 352)
    for rows, cols in [(256, 384), (200, 352)]:
        x = torch.randn(rows, cols, generator=gen)
        x *= 10.0 ** torch.empty(rows, 1).uniform_(-3, 3, generator=gen)
        x[3] = 0
        x[5:140, 128:256] = 0
        x[7] *= 1e-30 / x[7].abs().max()
        x[9] = torch.randn(cols, generator=gen) * 1e-39
        cases.append((f"gaussian {rows}x{cols}", x[None]))
    # specials: NaN, +-Inf, far beyond the maxima, in some rows and tiles
    x = torch.randn(160, 256, generator=gen)
    x[1, 5] = float("nan")
    x[2, 200] = float("inf")
    x[130, 7] = float("-inf")
    x[4, :64] = torch.linspace(-1e6, 1e6, 64)
    x[6, 3] = 1e5
    cases.append(("NaN, Inf, beyond the maxima 160x256", x[None]))
    # a NaN-only case for per-tensor scaling (the rest's amax, NaN ignored, Inf absent)
    x = torch.randn(64, 128, generator=gen) * 1e3
    x[10, 10] = float("nan")
    cases.append(("NaN without Inf 64x128", x[None]))
    return [(name, x.bfloat16()) for name, x in cases]


def delayed_inputs():
    gen = torch.Generator().manual_seed(23)
    base = torch.randn(64, 128, generator=gen)
    amplitudes = [1.0, 4.0, 0.1, 100.0, 0.0, 1e-3]
    return torch.stack([base * a for a in amplitudes]).bfloat16()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="file to write")
    args = ap.parse_args()
    torch.set_num_threads(2)
    recs = []
    recipes = ["tensor", "rowwise", "rowwise_t", "1x128", "1x128_t", "128x128", "mx"]
    for name, x in inputs():
        for recipe in recipes:
            for fmt in (0, 1):
                recs.append((name, recipe, fmt, x, 1, 0,
                             expected(recipe, x.float(), fmt, 1, 0)))
    xs = delayed_inputs()
    for history_len, margin in [(3, 0), (2, 1)]:
        for fmt in (0, 1):
            recs.append(("6 steps of amplitudes 1, 4, 0.1, 100, 0, 1e-3 64x128", "delayed",
                         fmt, xs, history_len, margin,
                         expected("delayed", xs.float(), fmt, history_len, margin)))
    tmp = args.out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(tmp, "wb") as f:
        f.write(b"FP8QTRC1" + struct.pack("<I", len(recs)))
        for name, recipe, fmt, x, history_len, margin, blobs in recs:
            for s in (name, recipe):
                f.write(struct.pack("<I", len(s.encode())) + s.encode())
            f.write(struct.pack("<iiiiii", fmt, x.shape[1], x.shape[2], x.shape[0], history_len,
                                margin))
            f.write(x.contiguous().view(torch.int16).numpy().astype("<i2").tobytes())
            f.write(struct.pack("<I", len(blobs)))
            for key, raw in blobs.items():
                f.write(struct.pack("<I", len(key)) + key.encode() + struct.pack("<Q", len(raw)))
                f.write(raw)
    os.replace(tmp, args.out)
    print(f"fp8_quantize_torch: wrote {args.out} ({len(recs)} cases)")


if __name__ == "__main__":
    main()
