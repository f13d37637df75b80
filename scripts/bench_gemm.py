#!/usr/bin/env python3
"""Single-core GEMM of the CPU cuBLASLt on the trainer's shapes, against the best BLAS on the
machine, all timed in the same run: NumPy's own OpenBLAS and PyTorch's CPU matmul (MKL), each
single-threaded and on the same core.

Builds dev/cpu/bench/gemm.cu with dev/cpu/cucc (-lcublasLt) into build/cpu/bench_gemm and runs
it on one core (CUCC_THREADS=1, one OpenBLAS thread). Shapes are column-major M x N x K with
cuBLASLt's op flags, as train_gpt.cu's matmul() calls them with B*T = 2048 tokens: GPT-2 small's
(C = 768) and the default CPU model's (C = 128); forward TN (out = W^T x), backward NN
(dx = W dout) and NT (dW = x dout^T). NumPy and PyTorch compute the same product from the same
memory layout (transposed views, no copies), fp32; PyTorch also in bf16. Times are CPU time of
the process (other processes on a shared machine do not count in it, as they do in wall time);
rounds (--rounds) time the three one after the other on each shape, so that a busy stretch of
the machine hits all of them, and the best time of each over all rounds and repeats counts.

Columns: GFLOP/s (2 M N K per product) of cuBLASLt fp32, the BLAS under it called directly,
NumPy, PyTorch fp32, cuBLASLt bf16 (bf16 operands and output, fp32 compute) and PyTorch bf16
(one run after a warm-up, in the first round only: a reference, and a slow one on a core without
bf16 arithmetic); then cuBLASLt fp32 and bf16 as a share of the best fp32 of NumPy and PyTorch.
The targets: fp32 at 80% of that best or more, bf16 at 50% or more (bf16 is widened to fp32 and
run by sgemm). Exits 1 when a shape misses a target, 2 when NumPy or PyTorch is missing.
CUCC_BLAS=system in the environment measures the CPU cuBLASLt on its fallback BLAS instead
(dev/cpu/cublaslt/blas.cpp).

Usage: python3 scripts/bench_gemm.py [--rounds N] [--repeats N] [--cpu N] [--small-only]
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "dev", "cpu", "bench", "gemm.cu")
BINARY = os.path.join(ROOT, "build", "cpu", "bench_gemm")

# (label, M, N, K, op A, op B) of train_gpt.cu's matmul(): forward (OC, B*T, C) TN, backward dx
# (C, B*T, OC) NN and dW (C, OC, B*T) NT.
GPT2_SMALL = [
    ("gpt2 qkv fwd", 2304, 2048, 768, "T", "N"),
    ("gpt2 fc fwd", 3072, 2048, 768, "T", "N"),
    ("gpt2 fcproj fwd", 768, 2048, 3072, "T", "N"),
    ("gpt2 fc bwd dx", 768, 2048, 3072, "N", "N"),
    ("gpt2 fc bwd dW", 768, 3072, 2048, "N", "T"),
]
CPU_MODEL = [
    ("cpu qkv fwd", 384, 2048, 128, "T", "N"),
    ("cpu fc fwd", 512, 2048, 128, "T", "N"),
    ("cpu fcproj fwd", 128, 2048, 512, "T", "N"),
    ("cpu qkv bwd dx", 128, 2048, 384, "N", "N"),
    ("cpu qkv bwd dW", 128, 384, 2048, "N", "T"),
]
FP32_TARGET, BF16_TARGET = 0.80, 0.50


def operands(np, m, n, k, ta, tb):
    """Column-major A and B as NumPy sees them: a column-major r x c matrix is the row-major
    c x r array. Returns (x, y) with x @ y = D^T row-major = D column-major, from views of A and
    B's storage, as cuBLASLt reads it."""
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (m, k) if ta else (k, m)).astype(np.float32)  # storage of A
    b = rng.uniform(-1, 1, (k, n) if tb else (n, k)).astype(np.float32)  # storage of B
    # D^T = op(B)^T op(A)^T; op(X)^T is X's storage as an array when op is N, its .T when T.
    return (b.T if tb else b), (a.T if ta else a)


def time_numpy(np, shapes, repeats):
    best = {}
    for label, m, n, k, opa, opb in shapes:
        x, y = operands(np, m, n, k, opa == "T", opb == "T")
        out = np.empty((x.shape[0], y.shape[1]), dtype=np.float32)
        np.matmul(x, y, out=out)
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            np.matmul(x, y, out=out)
            times.append(time.process_time() - t0)
        best[label] = min(times)
    return best


def time_torch(np, torch, shapes, repeats, dtype):
    best = {}
    for label, m, n, k, opa, opb in shapes:
        x, y = operands(np, m, n, k, opa == "T", opb == "T")
        # (from_numpy keeps a transposed view's strides, and so does .to(): preserve_format)
        tx, ty = torch.from_numpy(x).to(dtype), torch.from_numpy(y).to(dtype)
        out = torch.empty((x.shape[0], y.shape[1]), dtype=dtype)
        torch.matmul(tx, ty, out=out)
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            torch.matmul(tx, ty, out=out)
            times.append(time.process_time() - t0)
        best[label] = min(times)
    return best


def time_cublaslt(shapes, repeats, cpu):
    """Best seconds per label: {'blas': ..., 'fp32': ..., 'bf16': ...}, and the BLAS line."""
    args = ["%d,%d,%d,%s,%s" % s[1:] for s in shapes]
    env = dict(os.environ, CUCC_THREADS="1")
    out = subprocess.run(["taskset", "-c", str(cpu), BINARY, str(repeats)] + args, env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("bench_gemm: %s failed:\n%s%s" % (BINARY, out.stdout, out.stderr))
    best, blas = {}, ""
    rows = iter(shapes)
    for line in out.stdout.splitlines():
        if line.startswith("blas "):
            blas = line[5:]
        elif line.startswith("shape "):
            f = line.split()
            best[next(rows)[0]] = {"blas": float(f[7]), "fp32": float(f[9]), "bf16": float(f[11])}
    return best, blas


def below(share, target):
    return "" if share >= target else " (below target)"


def merge(best, new):
    for key, value in new.items():
        if isinstance(value, dict):
            merge(best.setdefault(key, {}), value)
        else:
            best[key] = min(best.get(key, value), value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per round (default 3)")
    parser.add_argument("--cpu", type=int, default=0, help="the core to run on (default 0)")
    parser.add_argument("--small-only", action="store_true",
                        help="only the default CPU model's shapes (seconds instead of minutes)")
    args = parser.parse_args()

    # One thread everywhere, on one core: NumPy's OpenBLAS reads OPENBLAS_NUM_THREADS when it
    # loads, PyTorch's MKL and OpenMP read OMP_NUM_THREADS / MKL_NUM_THREADS, and the
    # affinity is inherited by the cuBLASLt program.
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    os.sched_setaffinity(0, {args.cpu})
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print("bench_gemm: needs NumPy and PyTorch (scripts/setup.sh --test): %s" % e)
        return 2
    torch.set_num_threads(1)

    build = subprocess.run([os.path.join(ROOT, "dev", "cpu", "cucc"), "-O2", "-std=c++17",
                            SOURCE, "-o", BINARY, "-lcublasLt"], capture_output=True, text=True)
    if build.returncode != 0:
        sys.exit("bench_gemm: building %s failed:\n%s" % (SOURCE, build.stderr))

    shapes = CPU_MODEL if args.small_only else GPT2_SMALL + CPU_MODEL
    best = {}
    for r in range(args.rounds):
        for shape in shapes:  # (the three one after the other on each shape)
            cublaslt, blas = time_cublaslt([shape], args.repeats, args.cpu)
            merge(best, {"cublaslt": cublaslt, "numpy": time_numpy(np, [shape], args.repeats),
                         "torch": time_torch(np, torch, [shape], args.repeats, torch.float32)})
            if r == 0:  # (a reference column only, slow where the core has no bf16 arithmetic)
                merge(best, {"torch_bf16": time_torch(np, torch, [shape], 1, torch.bfloat16)})
        print("round %d of %d done" % (r + 1, args.rounds), file=sys.stderr)

    print("CPU cuBLASLt BLAS: %s" % blas)
    print("NumPy %s (%s), PyTorch %s, one thread each on core %d; best of %d rounds x %d runs"
          % (np.__version__, numpy_blas(np), torch.__version__, args.cpu, args.rounds,
             args.repeats))
    header = ("| shape (M x N x K, ops) | cuBLASLt fp32 | BLAS direct | NumPy | PyTorch fp32 "
              "| cuBLASLt bf16 | PyTorch bf16 | fp32 / best | bf16 / best |")
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    missed = 0
    for label, m, n, k, opa, opb in shapes:
        gflop = 2.0 * m * n * k / 1e9
        c = best["cublaslt"][label]
        rates = {"fp32": gflop / c["fp32"], "blas": gflop / c["blas"], "bf16": gflop / c["bf16"],
                 "numpy": gflop / best["numpy"][label], "torch": gflop / best["torch"][label],
                 "torch_bf16": gflop / best["torch_bf16"][label]}
        top = max(rates["numpy"], rates["torch"])
        fp32_share, bf16_share = rates["fp32"] / top, rates["bf16"] / top
        missed += fp32_share < FP32_TARGET or bf16_share < BF16_TARGET
        print("| %s %dx%dx%d %s%s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f%%%s | %.0f%%%s |"
              % (label, m, n, k, opa, opb, rates["fp32"], rates["blas"], rates["numpy"],
                 rates["torch"], rates["bf16"], rates["torch_bf16"], 100 * fp32_share,
                 below(fp32_share, FP32_TARGET), 100 * bf16_share, below(bf16_share, BF16_TARGET)))
    print("GFLOP/s; targets: fp32 >= %.0f%%, bf16 >= %.0f%% of the best fp32 of NumPy and "
          "PyTorch; %s" % (100 * FP32_TARGET, 100 * BF16_TARGET,
                           "all shapes meet them" if not missed else "%d shapes miss" % missed))
    return 1 if missed else 0


def numpy_blas(np):
    """NumPy's BLAS, as its build configuration names it."""
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return "%s %s" % (blas.get("name", "?"), blas.get("version", ""))
    except (TypeError, KeyError):
        return "BLAS unknown"


if __name__ == "__main__":
    sys.exit(main())
