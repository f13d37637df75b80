#!/usr/bin/env python3
"""PyTorch's causal attention on the GPU, timed like the dev/cuda attention harnesses time ours:
F.scaled_dot_product_attention with the flash backend only, bf16, on the shapes of
dev/cuda/attention_reference.h's bench_shapes (B x NH x T = 8 x 12 x 1024 and 4 x 16 x 2048, head
sizes 64 and 128). q, k and v are views of one packed (B, T, 3, NH, HS) tensor, the layout of
train_gpt.cu's qkv. The forward is timed alone, the backward alone (torch.autograd.grad of a fixed
output gradient); FLOPs are counted as the harnesses count them (causal forward 4 B NH HS
T(T+1)/2, backward 2.5 times that). Prints one line per shape and pass in the harnesses' format:

  bench attention_forward B8 NH12 T1024 HS64 torch:   0.1234 ms   123.45 TFLOP/s  (...)

Used by scripts/gpu_check.sh. Needs PyTorch with CUDA; exits 2 (saying why) without.
Usage: python3 scripts/bench_attention_torch.py [--warmup N] [--repeats N]
"""
import argparse
import sys

SHAPES = [(8, 1024, 12, 64), (8, 1024, 12, 128), (4, 2048, 16, 64), (4, 2048, 16, 128)]


def forward_flops(B, T, NH, HS):
    return 4.0 * B * NH * HS * (T * (T + 1) / 2)


def time_ms(torch, fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print("bench_attention_torch: PyTorch (>= 2.3, torch.nn.attention) is needed: %s" % e)
        return 2
    if not torch.cuda.is_available():
        print("bench_attention_torch: PyTorch sees no CUDA device")
        return 2
    print("PyTorch %s on %s" % (torch.__version__, torch.cuda.get_device_name(0)))
    gen = torch.Generator(device="cuda").manual_seed(7)
    for B, T, NH, HS in SHAPES:
        label = "B%d NH%d T%d HS%d" % (B, NH, T, HS)
        qkv = (torch.rand((B, T, 3, NH, HS), device="cuda", generator=gen) * 4 - 2).to(torch.bfloat16)
        qkv.requires_grad_(True)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, NH, T, HS) views
        dout = (torch.rand((B, NH, T, HS), device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            fwd = time_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                          args.warmup, args.repeats)
            bwd = time_ms(torch, lambda: torch.autograd.grad(out, qkv, dout, retain_graph=True),
                          args.warmup, args.repeats)
        flops = forward_flops(B, T, NH, HS)
        for name, ms, f in (("forward", fwd, flops), ("backward", bwd, 2.5 * flops)):
            print("bench attention_%s %s torch: %9.4f ms %8.2f TFLOP/s  (F.scaled_dot_product_attention, "
                  "flash backend)" % (name, label, ms, f / (ms * 1e-3) / 1e12))
    return 0


if __name__ == "__main__":
    sys.exit(main())
