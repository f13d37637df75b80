#!/usr/bin/env python3
"""Checks the GPU code of the attention kernels (bf16 build of train_gpt.cu) with the CUDA
toolkit, no GPU needed:
  - `nvcc -ptx` for sm_90a: every tensor-core attention kernel (attention_*_mma_kernel, three
    passes x head sizes 32, 64, 128) executes mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32,
    ldmatrix and cp.async, and the CUDA-core attention kernels are there too;
  - ptxas -v on that PTX: no attention kernel spills registers or uses a stack frame.
Prints the ptxas table (registers, spill bytes, stack, shared memory) of every attention kernel;
--report FILE also writes it there (dev/cuda/attention_ptxas.txt holds the committed one).
Skips (exit 0, says so) when nvcc is not installed.

Usage: python3 scripts/test_attention_ptx.py [--report FILE]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCH = "sm_90a"
HEAD_SIZES = (32, 64, 128)
MMA_KERNELS = ("attention_forward_mma_kernel", "attention_backward_dq_mma_kernel",
               "attention_backward_dkv_mma_kernel")
CUDA_CORE_KERNELS = ("attention_forward_kernel", "attention_backward_dq_kernel",
                     "attention_backward_dkv_kernel")
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


def find_nvcc():
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for candidate in (os.path.join(home, "bin", "nvcc"), shutil.which("nvcc")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def kernel_name(mangled):
    """attention_forward_mma_kernel<64> for _Z28attention_forward_mma_kernelILi64EE..."""
    m = re.match(r"_Z\d+(\w+?)ILi(\d+)EE", mangled)
    return "%s<%s>" % (m.group(1), m.group(2)) if m else mangled


def entry_starts(ptx):
    """The matches of the PTX's .entry lines (`.visible .entry`, or `.entry` for a static kernel);
    group 1 is the mangled name."""
    return list(re.finditer(r"^(?:\.visible\s+)?\.entry (\w+)\(", ptx, re.M))


def entries(ptx):
    """{kernel name: PTX text of its .entry}."""
    out = {}
    starts = entry_starts(ptx)
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(ptx)
        out[kernel_name(m.group(1))] = ptx[m.start():end]
    return out


def ptxas_table(report):
    """[(kernel, registers, spill stores, spill loads, stack, smem)] of the attention kernels."""
    rows, name, stack = [], None, None
    for line in report.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            name, stack = kernel_name(m.group(1)), None
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name and stack is None:
            stack = tuple(int(g) for g in m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            smem = re.search(r"(\d+) bytes smem", line)
            if "attention" in name:
                rows.append((name, int(m.group(1)), stack[1], stack[2], stack[0],
                             int(smem.group(1)) if smem else 0))
            name = None
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", help="also write the ptxas table to this file")
    args = parser.parse_args()
    nvcc = find_nvcc()
    if nvcc is None:
        print("SKIP: nvcc not found (set CUDA_HOME); the attention kernels' PTX was not checked")
        return 0
    failures = []
    with tempfile.TemporaryDirectory(prefix="attention_ptx.") as tmp:
        ptx_path = os.path.join(tmp, "train_gpt.ptx")
        cmd = [nvcc, "-ptx", "-O3", "-std=c++17", "-arch=" + ARCH, "train_gpt.cu", "-o", ptx_path]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            print("FAIL: " + " ".join(cmd))
            return 1
        ptx = open(ptx_path).read()
        # ptxas compiles the attention kernels' entries alone (-e): the rest of the model is not
        # checked here, and took a third of ptxas's time
        attention = [m.group(1) for m in entry_starts(ptx) if "attention" in kernel_name(m.group(1))]
        ptxas = os.path.join(os.path.dirname(nvcc), "ptxas")
        r = subprocess.run([ptxas, "-arch=" + ARCH, "-O3", "-v", "-e", ",".join(attention), ptx_path, "-o",
                            os.path.join(tmp, "train_gpt.cubin")], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            print("FAIL: ptxas on the PTX")
            return 1
        report = r.stdout + r.stderr
    kernels = entries(ptx)
    for base in MMA_KERNELS:
        for hs in HEAD_SIZES:
            name = "%s<%d>" % (base, hs)
            body = kernels.get(name)
            if body is None:
                failures.append("%s is missing from the PTX" % name)
                continue
            for needle in (MMA, "ldmatrix.sync.aligned.m8n8.x4", "cp.async.cg.shared.global",
                           "cp.async.wait_group"):
                if needle not in body:
                    failures.append("%s: no %s in its PTX" % (name, needle))
            print("%-40s %4d x %s, %d ldmatrix, %d cp.async" % (
                name, body.count(MMA), MMA, body.count("ldmatrix.sync"), body.count("cp.async.")))
    for base in CUDA_CORE_KERNELS:
        for hs in HEAD_SIZES:
            if "%s<%d>" % (base, hs) not in kernels:
                failures.append("the CUDA-core kernel %s<%d> is missing from the PTX" % (base, hs))
    rows = ptxas_table(report)
    lines = ["ptxas -v, %s, nvcc -ptx -O3 (bf16 build of train_gpt.cu); smem is static shared "
             "memory (the *_mma_kernels take theirs dynamically, sized in their launchers):" % ARCH,
             "%-40s %9s %12s %11s %6s %6s" % ("kernel", "registers", "spill stores", "spill loads",
                                              "stack", "smem")]
    for name, regs, stores, loads, stack, smem in sorted(rows):
        lines.append("%-40s %9d %12d %11d %6d %6d" % (name, regs, stores, loads, stack, smem))
        if stores or loads or stack:
            failures.append("%s spills: %d bytes stored, %d loaded, %d bytes of stack"
                            % (name, stores, loads, stack))
    if len(rows) != 2 * len(MMA_KERNELS) * len(HEAD_SIZES):
        failures.append("ptxas reported %d attention kernels, expected %d"
                        % (len(rows), 2 * len(MMA_KERNELS) * len(HEAD_SIZES)))
    print("\n".join(lines))
    if args.report:
        with open(args.report, "w") as f:
            f.write("\n".join(lines) + "\n")
    for f in failures:
        print("FAIL: " + f)
    print("attention PTX: %s" % ("%d failures" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
