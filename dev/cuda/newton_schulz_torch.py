#!/usr/bin/env python3
"""PyTorch's Newton-Schulz results for dev/cuda/newton_schulz.cu to check llmc/muon.cuh against.

For each case it writes the input matrix G (float32), torch.optim.Muon's own orthogonalization
of it (torch.optim._muon._zeropower_via_newtonschulz, which computes in bfloat16), the same
function with float32 in place of bfloat16 (scripts/reference.py's newton_schulz_fp32, the fp32
dump's), and the singular values (torch.linalg.svdvals, float64) of G and of both results.
Cases: the seed example (torch.manual_seed(0); a 64x32 Gaussian matrix times
diag(logspace(0, 2, 32)): singular values about 919, 74, 6 before and 1.20, 0.87, 0.68 after 5
steps), then Gaussian matrices that are wide, tall, square and not multiples of 16, and one of
rank 16 (the shape of a gradient of few tokens); --large adds GPT-2 124M's shapes.

File (little-endian): "NSTORCH1", uint32 count, then per case: uint32 name_len, name, int32 rows,
int32 cols, int32 steps, float32 G[rows*cols], ns_bf16[rows*cols], ns_fp32[rows*cols] (row-major),
float64 sv_in[k], sv_bf16[k], sv_fp32[k] (k = min(rows, cols), descending).
"""
import argparse
import os
import struct
import sys

import torch
from torch.optim._muon import _zeropower_via_newtonschulz, DEFAULT_A, DEFAULT_B, DEFAULT_C, EPS

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from reference import newton_schulz_fp32  # noqa: E402

COEFFICIENTS = (DEFAULT_A, DEFAULT_B, DEFAULT_C)


def cases(large):
    torch.manual_seed(0)
    seed = torch.randn(64, 32) @ torch.diag(torch.logspace(0, 2, 32))
    out = [("seed 64x32 Gaussian x diag(logspace(0,2,32))", seed, 5)]
    gen = torch.Generator().manual_seed(1)
    shapes = [("wide", 32, 96), ("tall", 96, 48), ("square", 64, 64), ("odd wide", 37, 83),
              ("odd tall", 90, 45), ("square, 3 steps", 48, 48)]
    if large:
        shapes += [("GPT-2 attn (C, C)", 768, 768), ("GPT-2 mlp.fc (4C, C)", 3072, 768),
                   ("GPT-2 mlp.proj (C, 4C)", 768, 3072)]
    for name, rows, cols in shapes:
        g = torch.randn(rows, cols, generator=gen)
        out.append((f"{name} {rows}x{cols} Gaussian", g, 3 if "3 steps" in name else 5))
    low = torch.randn(64, 16, generator=gen) @ torch.randn(16, 64, generator=gen)
    out.append(("rank 16 64x64 (few tokens' gradient)", low, 5))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="file to write")
    ap.add_argument("--large", action="store_true", help="also GPT-2 124M's matrix shapes")
    args = ap.parse_args()
    torch.set_num_threads(2)
    recs = []
    for name, g, steps in cases(args.large):
        bf16 = _zeropower_via_newtonschulz(g, COEFFICIENTS, steps, EPS).float()
        fp32 = newton_schulz_fp32(g, COEFFICIENTS, steps, EPS)
        sv = [torch.linalg.svdvals(x.double()) for x in (g, bf16, fp32)]
        recs.append((name, g, steps, bf16, fp32, sv))
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"NSTORCH1" + struct.pack("<I", len(recs)))
        for name, g, steps, bf16, fp32, sv in recs:
            raw = name.encode()
            f.write(struct.pack("<I", len(raw)) + raw + struct.pack("<iii", *g.shape, steps))
            for t in (g, bf16, fp32):
                f.write(t.contiguous().numpy().astype("<f4").tobytes())
            for s in sv:
                f.write(s.numpy().astype("<f8").tobytes())
    os.replace(tmp, args.out)
    s0 = recs[0][5]
    print(f"newton_schulz_torch: wrote {args.out} ({len(recs)} cases); seed example singular values "
          f"{s0[0][0]:.0f} .. {s0[0][-1]:.1f} before, {s0[1][0]:.2f} .. {s0[1][-1]:.2f} after "
          f"(bf16)")


if __name__ == "__main__":
    main()
