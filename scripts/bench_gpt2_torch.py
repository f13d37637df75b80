#!/usr/bin/env python3
"""PyTorch's GPT-2 124M training speed on the GPU, the yardstick of scripts/gpu_check.sh for
./train_gpt at the same B and T: the model train_gpt.cu trains (12 layers, 12 heads, width 768,
vocabulary 50257 padded to 50304 with the head tied to the token embedding, LayerNorm, GELU tanh,
causal attention), in the usual fast PyTorch setup: bf16 autocast, F.scaled_dot_product_attention
(causal), fused AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1), torch.compile, random tokens.
Steps after the first --warmup ones (which include compilation) are timed with CUDA events; MFU
counts FLOPs as train_gpt.cu's flops_per_token does (6 per matmul parameter per token plus
6 L C T for attention) over --peak-flops. Prints one line:

  torch GPT-2 124M: B 8 T 1024 | 20 timed steps | 123.4 ms/step | 66389 tok/s | MFU 41.2%

Needs PyTorch with CUDA; exits 2 (saying why) without.
Usage: python3 scripts/bench_gpt2_torch.py [--batch 8] [--seq 1024] [--steps 30] [--warmup 10]
"""
import argparse
import math
import sys

L, NH, C, V = 12, 12, 768, 50257
VP = (V + 127) // 128 * 128


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=30, help="steps in all, warmup included")
    parser.add_argument("--warmup", type=int, default=10, help="untimed first steps")
    parser.add_argument("--peak-flops", type=float, default=989e12)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        print("bench_gpt2_torch: --steps must be larger than --warmup")
        return 2
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        print("bench_gpt2_torch: PyTorch is needed: %s" % e)
        return 2
    if not torch.cuda.is_available():
        print("bench_gpt2_torch: PyTorch sees no CUDA device")
        return 2
    B, T = args.batch, args.seq

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, NH, C // NH).unbind(2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VP, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.lnf(x), self.wte.weight)[..., :V]
            return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1))

    torch.manual_seed(1337)
    model = GPT().cuda()
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), fused=True)
    step_model = model if args.no_compile else torch.compile(model)
    tokens = torch.randint(0, V, (args.steps, B, T + 1), device="cuda")

    def step(s):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(tokens[s, :, :T], tokens[s, :, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for s in range(args.warmup):
        step(s)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for s in range(args.warmup, args.steps):
        loss = step(s)
    stop.record()
    stop.synchronize()
    timed = args.steps - args.warmup
    ms = start.elapsed_time(stop) / timed
    tok_s = B * T / (ms * 1e-3)
    flops_per_token = 6.0 * (L * 12.0 * C * C + VP * C) + 6.0 * L * C * T
    mfu = tok_s * flops_per_token / args.peak_flops * 100
    if not math.isfinite(loss.item()):
        print("bench_gpt2_torch: non-finite loss %s" % loss.item())
        return 1
    print("torch GPT-2 124M: B %d T %d | %d timed steps | %.1f ms/step | %.0f tok/s | MFU %.1f%% | "
          "PyTorch %s%s" % (B, T, timed, ms, tok_s, mfu, torch.__version__,
                            "" if not args.no_compile else " (not compiled)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
