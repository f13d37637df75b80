#!/usr/bin/env python3
"""Runs the project's test suite and ends with the line `N passed, N failed`.

Four kinds of tests:

1. CUDA test programs (dev/cpu/tests/*.cu, and the kernel harnesses dev/cuda/*.cu). Each is
   built once and run one or more times, as the `//!` directives at the top of the file say:
       //! cucc: FLAGS              extra build flags (--asan, --ubsan, --mpi, -lcublasLt, -lnccl)
       //! compile: fail /regex/    the build itself must fail, with output matching regex
       //! run: COMMAND => pass|fail [/regex/]
                                    one test case: COMMAND runs in a shell with ./prog naming
                                    the built binary; pass = exit 0, fail = non-zero exit; the
                                    regex (Python syntax) must match stdout+stderr
       //! cpu-only                 meaningless on a real GPU (sanitizers, CUCC_* variables)
       //! exclusive                its cases run with nothing else running (a speed ratio)
   Without a run line the case is `./prog => pass`. `mpirun` in a command becomes
   `mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca orte_allowed_exit_without_sync 1`
   (testlib.MPIRUN says why).
   Without a GPU the programs are built with dev/cpu/cucc (the CPU runtime); with a GPU
   (nvidia-smi lists one, or --native) they are built with nvcc and cpu-only files are skipped.

2. Python test scripts (PYTHON_TESTS: data preparation and tokenizers, the loss plot, the
   attention kernels' PTX and registers with nvcc), run when no PATHS are given; each passes when
   it exits 0.

3. Fuzz targets (fuzz/*.cc, libFuzzer harnesses of the file parsers, see fuzz/run.py): each
   runs for FUZZ_SECONDS from its seed corpus under ASan and UBSan, and passes when libFuzzer
   finds no crash, hang, leak, oversized allocation or sanitizer report. Needs clang and
   libFuzzer (scripts/setup.sh --test installs them).

4. Trainer checks (--gpt): scripts/test_e2e.py runs the trainer end to end, scripts/test_dp.py
   checks data parallelism (mpirun -np 2 and 3 against one process on the same global batch),
   scripts/test_bad_inputs.py feeds it bad inputs (each must end with its message, a non-zero
   exit, in bounded time, with no file changed), scripts/test_deadlines.py stops a rank of a
   two-rank job at a random moment in each parallel mode (the job must end by the deadline,
   leaving no process or shared-memory file), scripts/reference.py writes a PyTorch dump
   for each configuration in GPT_CONFIGS, scripts/check_reference.py confirms it with an independent float64 model, and
   both test binaries (fp32 and bf16 builds of test_gpt) check the trainer against it.

Tests run `-j` at a time (default: the cores + 1), the longest first (the trainer checks, the
Python scripts, the fuzz targets, the dev/cuda harnesses, then dev/cpu/tests), each test's lines
printed as it ends; a test file marked `//! exclusive` runs its cases last, alone.
The two trainer tests that mostly wait (WAITING_TESTS: deadlines, stopped ranks) run beside the
others from the start, without taking a worker.

Usage: python3 scripts/run_tests.py [--gpt] [--native] [-j N] [PATHS or GLOBS ...]
(PATHS: .cu test files and fuzz/*.cc targets, e.g. fuzz/shard.cc)
       python3 scripts/run_tests.py --only NAME     one test script alone (e.g. --only test_tp)
       python3 scripts/run_tests.py --config N      one trainer configuration against PyTorch
                                                    (GPT_CONFIGS, numbered from 1)
Both may be repeated and combined; they build the trainer first (make cpu, or make on a GPU).
"""
import argparse
import collections
import concurrent.futures
import glob
import hashlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUCC = os.path.join(ROOT, "dev", "cpu", "cucc")
DEFAULT_TESTS = ["dev/cpu/tests/*.cu", "dev/cuda/*.cu", "fuzz/*.cc"]
# Python test scripts: each exits 0 when all its checks pass.
PYTHON_TESTS = ["dev/data/test_tokenizer.py", "dev/data/test_prepare.py", "scripts/test_plot.py",
                "scripts/test_attention_ptx.py"]
# Python tests of the built trainer: run with the trainer checks, after the binaries exist.
TRAINER_TESTS = ["scripts/test_e2e.py", "scripts/test_dp.py", "scripts/test_zero.py", "scripts/test_zero3.py", "scripts/test_tp.py", "scripts/test_pp.py", "scripts/test_cp.py", "scripts/test_fp8.py", "scripts/test_stability.py",
                 "scripts/test_monitors.py", "scripts/test_hf.py", "scripts/test_llama.py", "scripts/test_recompute.py", "scripts/test_memplan.py", "scripts/test_bad_inputs.py",
                 "scripts/test_deadlines.py", "scripts/readme_flags.py --check"]
# Trainer tests that mostly wait (for --comm-timeout deadlines, stopped ranks, mpirun's start-up):
# they run beside the others, without taking one of the -j workers.
WAITING_TESTS = ["scripts/test_deadlines.py", "scripts/test_bad_inputs.py"]
# Seconds each fuzz target runs in the suite (make fuzz runs them for FUZZ_SECONDS, default 60).
FUZZ_SECONDS = 5
RUN_TIMEOUT_S = 600
# as testlib.MPIRUN says why
MPIRUN = "mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca orte_allowed_exit_without_sync 1"

# Trainer configurations checked against PyTorch: odd vocabularies, sequence lengths that are not
# powers of two, head dims 32/64/128, one and several layers, batch > 1, gradient accumulation,
# every schedule; then Muon (both lr adjustments, with and without Nesterov, its own lr,
# momentum and step count), QK-norm and z-loss, each alone and all together, with gradient
# accumulation and clipping; then Lion with accumulation and clipping, and with its own betas and
# QK-norm; then one FP8 recipe each (tensor; delayed with a 2-step history, a margin and the lm
# head; rowwise with Muon and E5M2 gradients; block with QK-norm and partial tiles; mx with
# QK-norm and the lm head), all with gradient accumulation and clipping, B*T a multiple of 16
# (32 for mx) as the trainer's FP8 matmuls need. Each entry is the reference.py command line
# minus --out.
GPT_CONFIGS = [
    "--seed 1 --vocab 313 --seq 24 --layers 2 --heads 2 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 3 --lr 1e-3 --warmup 1 --schedule cosine --min-lr-frac 0.1 --decay-frac 0.2 "
    "--weight-decay 0.1 --grad-clip 1.0",
    "--seed 2 --vocab 200 --seq 17 --context 32 --layers 1 --heads 1 --embd 64 --batch 3 "
    "--grad-accum 1 --steps 4 --lr 3e-3 --warmup 2 --schedule wsd --min-lr-frac 0.0 "
    "--decay-frac 0.5 --weight-decay 0.0 --grad-clip 0.05",
    "--seed 3 --vocab 500 --seq 40 --layers 2 --heads 4 --embd 128 --batch 1 --grad-accum 3 "
    "--steps 3 --lr 5e-4 --warmup 1 --schedule linear --min-lr-frac 0.2 --decay-frac 0.2 "
    "--weight-decay 0.1 --grad-clip 1.0",
    "--seed 7 --vocab 1000 --seq 130 --context 150 --layers 2 --heads 4 --embd 128 --batch 2 "
    "--grad-accum 2 --steps 3 --lr 2e-3 --warmup 1 --schedule wsd --min-lr-frac 0.1 "
    "--decay-frac 0.4 --weight-decay 0.1 --grad-clip 1.0",
    "--seed 4 --vocab 129 --seq 33 --layers 1 --heads 1 --embd 128 --batch 2 --grad-accum 1 "
    "--steps 2 --lr 1e-3 --warmup 0 --schedule constant --min-lr-frac 0.1 --decay-frac 0.2 "
    "--weight-decay 0.1 --grad-clip 0.0",
    "--seed 11 --vocab 211 --seq 20 --layers 2 --heads 2 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 3 --lr 2e-3 --warmup 1 --schedule cosine --weight-decay 0.1 --grad-clip 1.0 "
    "--optimizer muon --muon-adjust match_rms_adamw --muon-nesterov 1",
    "--seed 12 --vocab 150 --seq 16 --layers 1 --heads 1 --embd 32 --batch 2 --grad-accum 3 "
    "--steps 3 --lr 1e-3 --schedule wsd --decay-frac 0.5 --weight-decay 0.05 --grad-clip 0.05 "
    "--optimizer muon --muon-adjust original --muon-nesterov 0 --muon-lr 0.02 "
    "--muon-momentum 0.9 --muon-ns-steps 4",
    "--seed 13 --vocab 300 --seq 24 --layers 2 --heads 2 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 3 --lr 3e-3 --warmup 1 --weight-decay 0.1 --grad-clip 1.0 --qk-norm",
    "--seed 14 --vocab 257 --seq 19 --layers 1 --heads 1 --embd 128 --batch 2 --grad-accum 2 "
    "--steps 3 --lr 2e-3 --weight-decay 0.1 --grad-clip 1.0 --z-loss 0.01",
    "--seed 15 --vocab 400 --seq 28 --layers 2 --heads 1 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 4 --lr 2e-3 --warmup 1 --schedule linear --weight-decay 0.1 --grad-clip 0.5 "
    "--optimizer muon --qk-norm --z-loss 1e-3",
    "--seed 16 --vocab 230 --seq 20 --layers 2 --heads 2 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 3 --lr 3e-4 --warmup 1 --schedule cosine --weight-decay 0.1 --grad-clip 0.1 "
    "--optimizer lion",
    "--seed 17 --vocab 150 --seq 16 --layers 1 --heads 2 --embd 64 --batch 2 --grad-accum 1 "
    "--steps 4 --lr 5e-4 --schedule linear --weight-decay 0.1 --grad-clip 0.0 --optimizer lion "
    "--lion-beta1 0.95 --lion-beta2 0.98 --qk-norm",
    "--seed 21 --vocab 170 --seq 24 --layers 2 --heads 2 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 3 --lr 2e-3 --warmup 1 --weight-decay 0.1 --grad-clip 1.0 --fp8 tensor",
    "--seed 22 --vocab 140 --seq 16 --layers 1 --heads 2 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 4 --lr 2e-3 --schedule constant --weight-decay 0.1 --grad-clip 0.5 --fp8 delayed "
    "--fp8-amax-history 2 --fp8-margin 1 --fp8-lm-head 1",
    "--seed 23 --vocab 190 --seq 16 --layers 2 --heads 2 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 3 --lr 2e-3 --warmup 1 --weight-decay 0.1 --grad-clip 1.0 --optimizer muon "
    "--fp8 rowwise --fp8-grad e5m2",
    "--seed 24 --vocab 160 --seq 24 --layers 1 --heads 1 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 3 --lr 2e-3 --weight-decay 0.1 --grad-clip 0.05 --qk-norm --fp8 block",
    "--seed 25 --vocab 150 --seq 16 --layers 1 --heads 2 --embd 64 --batch 2 --grad-accum 2 "
    "--steps 3 --lr 2e-3 --warmup 1 --weight-decay 0.1 --grad-clip 1.0 --qk-norm --fp8 mx "
    "--fp8-lm-head 1",
    # Llama's block (--arch llama): grouped-query attention with 2 kv heads of 4 and an untied
    # lm head; multi-query (1 kv head) with Muon, QK-norm and Llama 3's rope theta; 4 kv heads
    # of 4 with llama3 rope scaling (its original context 16 < T: every frequency band), an
    # untied head, z-loss and a given SwiGLU width; head size 128 with 1 kv head of 2
    "--seed 31 --vocab 313 --seq 24 --layers 2 --heads 4 --kv-heads 2 --embd 128 --batch 2 "
    "--grad-accum 2 --steps 3 --lr 2e-3 --warmup 1 --weight-decay 0.1 --grad-clip 1.0 "
    "--arch llama --tie-embeddings 0",
    "--seed 32 --vocab 200 --seq 20 --layers 2 --heads 2 --kv-heads 1 --embd 128 --batch 2 "
    "--grad-accum 2 --steps 3 --lr 2e-3 --weight-decay 0.1 --grad-clip 0.5 --arch llama "
    "--optimizer muon --qk-norm --rope-theta 500000",
    "--seed 33 --vocab 257 --seq 40 --layers 1 --heads 4 --kv-heads 4 --embd 128 --batch 1 "
    "--grad-accum 3 --steps 3 --lr 1e-3 --schedule wsd --weight-decay 0.1 --grad-clip 0.05 "
    "--arch llama --tie-embeddings 0 --rope-scaling llama3 --rope-factor 4 "
    "--rope-low-freq-factor 1 --rope-high-freq-factor 2 --rope-original-context 16 "
    "--z-loss 1e-3 --mlp-hidden 192",
    "--seed 34 --vocab 150 --seq 33 --layers 1 --heads 2 --kv-heads 1 --embd 256 --batch 2 "
    "--grad-accum 1 --steps 2 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0 --arch llama "
    "--norm-eps 1e-6 --mlp-multiple-of 64",
    # Llama's block in FP8: [q | k | v] of 2 kv heads of 4 and [gate | up] as one matrix each,
    # delayed scaling with the untied lm head; row-wise with Muon and multi-query attention
    "--seed 35 --vocab 180 --seq 16 --layers 2 --heads 4 --kv-heads 2 --embd 128 --batch 2 "
    "--grad-accum 2 --steps 3 --lr 2e-3 --warmup 1 --weight-decay 0.1 --grad-clip 1.0 "
    "--arch llama --tie-embeddings 0 --mlp-hidden 128 --fp8 delayed --fp8-lm-head 1",
    "--seed 36 --vocab 150 --seq 16 --layers 1 --heads 2 --kv-heads 1 --embd 64 --batch 2 "
    "--grad-accum 2 --steps 3 --lr 2e-3 --weight-decay 0.1 --grad-clip 1.0 --arch llama "
    "--optimizer muon --mlp-hidden 192 --fp8 rowwise",
]


def has_gpu():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return out.returncode == 0 and "GPU" in out.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


class TestFile:
    def __init__(self, path):
        self.path = path
        self.name = os.path.relpath(path, ROOT)
        self.flags, self.runs, self.compile_fail = [], [], None
        self.cpu_only = self.exclusive = False
        for line in open(path, encoding="utf-8", errors="replace"):
            m = re.match(r"\s*//!\s*([\w-]+)\s*:?\s*(.*?)\s*$", line)
            if not m:
                continue
            key, value = m.group(1), m.group(2)
            if key == "cucc":
                self.flags += shlex.split(value)
            elif key == "run":
                self.runs.append(parse_expectation(value, path))
            elif key == "compile":
                self.compile_fail = parse_expectation("true => " + value, path)[1:]
            elif key == "cpu-only":
                self.cpu_only = True
            elif key == "exclusive":
                self.exclusive = True
            else:
                sys.exit(f"{path}: unknown test directive '//! {key}'")
        if not self.runs:
            self.runs = [("./prog", "pass", None)]


def parse_expectation(value, path):
    m = re.match(r"(.*?)\s*=>\s*(pass|fail)\s*(?:/(.*)/)?\s*$", value)
    if not m:
        sys.exit(f"{path}: cannot parse directive '{value}' (want 'COMMAND => pass|fail [/regex/]')")
    return m.group(1), m.group(2), m.group(3)


def build(test, outdir, native):
    exe = os.path.join(outdir, os.path.splitext(os.path.basename(test.path))[0])
    if native:
        flags = [f for f in test.flags if f not in ("--mpi",)]
        cmd = ["nvcc", "-O2", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a",
               test.path, "-o", exe] + flags
        if "--mpi" in test.flags:
            cmd[0:1] = ["nvcc", "-ccbin", "mpicxx"]
    else:
        cmd = [CUCC, "-O2", "-std=c++17", test.path, "-o", exe] + test.flags
    return (exe,) + run_process(cmd)


class Took(collections.namedtuple("Took", "wall cpu")):
    """How long a test took: wall seconds, and the CPU seconds (user + system) of it and every
    process under it that was waited for (None where unknown)."""

    def __str__(self):
        return f"{self.wall:.1f} s" + (f", {self.cpu:.1f} s CPU" if self.cpu is not None else "")


def run_process(cmd, env=None, timeout=RUN_TIMEOUT_S):
    """Runs cmd (a list, or a shell command line) in ROOT: (exit status, its stdout followed by
    its stderr, Took). On timeout the process is killed and the status is 124."""
    t0 = time.time()
    proc = subprocess.Popen(cmd, shell=isinstance(cmd, str), cwd=ROOT, env=env, text=True,
                            errors="replace", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    texts = {}
    readers = [threading.Thread(target=lambda f=f: texts.__setitem__(f, f.read()))
               for f in (proc.stdout, proc.stderr)]
    for reader in readers:
        reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    # wait4 rather than Popen.wait: its resource usage counts the process's waited-for children
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    timed_out = not timer.is_alive()
    timer.cancel()
    for reader in readers:  # a killed process's children may hold the pipes open
        reader.join(5 if timed_out else None)
    output = texts.get(proc.stdout, "") + texts.get(proc.stderr, "")
    took = Took(time.time() - t0, usage.ru_utime + usage.ru_stime)
    if timed_out:
        return 124, output + f"\n[timed out after {timeout} s]", took
    return proc.returncode, output, took


def run_case(command, exe, env=None, timeout=RUN_TIMEOUT_S):
    command = command.replace("./prog", shlex.quote(exe))
    command = re.sub(r"\bmpirun\b", MPIRUN, command)
    return run_process(command, env, timeout)


def verdict(rc, output, want, regex):
    if (rc == 0) != (want == "pass"):
        return f"exit code {rc}, expected {'0' if want == 'pass' else 'non-zero'}"
    if rc in (124, 137, -9):
        return f"killed (exit {rc})"
    if regex and not re.search(regex, output, re.MULTILINE):
        return f"output does not match /{regex}/"
    return None


class Tally:
    """The suite's count; record() may be called from several threads (run_jobs)."""

    def __init__(self):
        self.passed, self.failed, self.skipped = 0, 0, 0
        self.build_cpu, self.run_cpu = 0.0, 0.0  # CPU seconds of the builds, and of the tests
        self.lock = threading.Lock()

    def count_cpu(self, took):
        """Counts the CPU of a process whose runs are recorded one by one (without it)."""
        with self.lock:
            self.run_cpu += took.cpu or 0.0

    def record(self, label, problem, output, took):
        with self.lock:
            self.run_cpu += took.cpu or 0.0
            if problem is None:
                self.passed += 1
                print(f"PASS  {label}  ({took})", flush=True)
            else:
                self.failed += 1
                print(f"FAIL  {label}  ({took}): {problem}", flush=True)
                tail = output.strip().splitlines()[-40:]
                print("\n".join("      | " + line for line in tail), flush=True)


# One unit of the suite's work: run() records its results in the tally. The jobs run `-j` at a
# time (the cores + 1: most tests keep one busy, and many also wait on processes, files,
# timeouts or deadlines: with one job a core the cores idled 7% of the suite, measured with
# vmstat. On 2 cores, clean clones' suites took 373, 392 and 452 s with 3 jobs and 390 and
# 423 s with 2: the shared machine's noise is as large as the gain); an exclusive job (a speed
# ratio) runs with nothing else running.
# exclusive: runs alone (a speed ratio); waits: spends its time waiting (for deadlines, timeouts,
# stopped processes) rather than computing, so it runs beside the others without taking a worker
Job = collections.namedtuple("Job", "run exclusive waits", defaults=(False,))


def cpu_times():
    """(idle, total) jiffies of all the machine's cores so far (Linux /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait
    except (OSError, ValueError, IndexError):
        return None


def run_jobs(jobs, workers):
    """Runs the jobs in their order, up to `workers` at once; an exclusive job starts after every
    job before it has finished, and the next starts after it. Waiting jobs all start at once, each
    on a thread of its own, and are waited for before the exclusive jobs."""
    waiting = [job for job in jobs if job.waits]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(waiting))) as beside, \
            concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        waited = [beside.submit(job.run) for job in waiting]
        running = []
        for job in (job for job in jobs if not job.waits):
            if job.exclusive:
                for future in running + waited:
                    future.result()
                running = waited = []
                job.run()
                continue
            if len(running) >= workers:
                done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    future.result()
                running = [f for f in running if f not in done]
            running.append(pool.submit(job.run))
        for future in running + waited:
            future.result()


def cuda_test_jobs(patterns, native, tally):
    """A job per test file (build, then its cases), and one more at the end for the cases of an
    exclusive file, which is built with the others."""
    harnesses = os.path.join(ROOT, "dev", "cuda") + os.sep  # the longest builds, first
    paths = sorted({p for pat in patterns for p in glob.glob(os.path.join(ROOT, pat))
                    if p.endswith(".cu") and os.path.isfile(p)},
                   key=lambda p: (not p.startswith(harnesses), p))
    tests = [TestFile(p) for p in paths]
    if native:
        skipped = [t for t in tests if t.cpu_only]
        tally.skipped += len(skipped)
        tests = [t for t in tests if not t.cpu_only]
    if not tests:
        return [], []
    outdir = os.path.join(ROOT, "build", "gpu" if native else "cpu", "tests")
    os.makedirs(outdir, exist_ok=True)
    if not native:  # build the runtime libraries once, before the parallel builds race for them
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "dev", "cpu")], check=False)
    print(f"{len(tests)} test programs, built with {'nvcc' if native else 'dev/cpu/cucc'}", flush=True)
    built = {}

    def build_test(test):
        exe, rc, output, took = build(test, outdir, native)
        with tally.lock:
            tally.build_cpu += took.cpu
        if test.compile_fail is not None:
            want, regex = test.compile_fail
            tally.record(f"{test.name} [build]", verdict(rc, output, want, regex), output, took)
        elif rc != 0:
            tally.record(f"{test.name} [build]", "build failed", output, took)
        else:
            built[test.name] = exe

    def run_test(test):
        if test.name not in built:
            return
        for command, want, regex in test.runs:
            rc, output, took = run_case(command, built[test.name])
            tally.record(f"{test.name}: {command}", verdict(rc, output, want, regex), output, took)

    jobs, exclusive = [], []
    for test in tests:
        if test.exclusive:
            jobs.append(Job(lambda t=test: build_test(t), False))
            exclusive.append(Job(lambda t=test: run_test(t), True))
        else:
            jobs.append(Job(lambda t=test: (build_test(t), run_test(t)), False))
    return jobs, exclusive


def fuzz_jobs(patterns, tally):
    paths = sorted({p for pat in patterns for p in glob.glob(os.path.join(ROOT, pat))
                    if p.endswith(".cc") and os.path.dirname(p) == os.path.join(ROOT, "fuzz")})

    def fuzz(path):
        name = os.path.splitext(os.path.basename(path))[0]
        cmd = f"{sys.executable} fuzz/run.py --fresh --seconds {FUZZ_SECONDS} {name}"
        rc, output, took = run_case(cmd, "")
        tally.record(os.path.relpath(path, ROOT), verdict(rc, output, "pass", None), output, took)

    return [Job(lambda p=path: fuzz(p), False) for path in paths]


def script_jobs(scripts, tally, args=""):
    """A job per test script (PYTHON_TESTS, or TRAINER_TESTS with args "--bin-dir DIR")."""
    def script_job(script):
        rc, output, took = run_case(f"{sys.executable} {script} {args}".rstrip(), "")
        tally.record(script, verdict(rc, output, "pass", None), output, took)

    return [Job(lambda s=script: script_job(s), False, script in WAITING_TESTS) for script in scripts]


def trainer_bin_dir(native):
    return ROOT if native else os.path.join(ROOT, "build", "cpu")


def split_runs(name, count, rc, output, took):
    """The results of a process that made `count` runs in turn (check_reference.run_each, whose
    lines `NAME: run I of N: ...` and `NAME: run I of N exits STATUS (S s)` frame each run's
    output): [(status, output, took)] in order; a run the process did not finish (killed,
    timed out) fails with the process's output."""
    results, lines = {}, []
    for line in output.splitlines():
        m = re.match(rf"{name}: run (\d+) of \d+(?:: | exits (-?\d+) \(([\d.]+) s\)$)", line)
        if m and m.group(2) is None:
            lines = []
        elif m:
            results[int(m.group(1))] = (int(m.group(2)), "\n".join(lines), Took(float(m.group(3)), None))
        else:
            lines.append(line)
    return [results.get(i, (rc or 1, output, took)) for i in range(1, count + 1)]


def reference_config_jobs(indices, native, tally, workers):
    """The checks of the GPT_CONFIGS[i] against PyTorch, split into `workers` jobs. Each job makes
    its configurations' dumps (cached in build/dumps by the configuration and reference.py's
    text) in one reference.py --runs process, one start of PyTorch rather than one per
    configuration, each confirmed by check_reference.py's independent float64 model (the cached
    ones: in one check_reference.py process), then runs both test binaries against each dump.
    Each configuration's results are recorded apart, with the labels it has alone."""
    dumpdir = os.path.join(ROOT, "build", "dumps")
    os.makedirs(dumpdir, exist_ok=True)
    reference_text = open(os.path.join(ROOT, "scripts", "reference.py")).read()

    def dump_of(config):
        key = hashlib.sha1((config + reference_text).encode()).hexdigest()[:12]
        return os.path.join(dumpdir, f"ref_{key}.bin")

    def check_config(i, check):
        """GPT_CONFIGS[i]'s results: its dump's check (status, output, Took, from its batch),
        then both test binaries against the dump."""
        config = GPT_CONFIGS[i]
        dump = dump_of(config)
        words = config.split()
        features = [w + (" " + words[i + 1] if w != "--qk-norm" else "") for i, w in enumerate(words)
                    if w in ("--optimizer", "--qk-norm", "--z-loss", "--fp8", "--arch", "--kv-heads",
                             "--tie-embeddings", "--rope-scaling")]
        label = " ".join(words[:14] + ["..."] + features)
        rc, output, took = check
        if not os.path.exists(dump):
            tally.record(f"reference.py {label}", "reference failed", output, took)
            return
        checked = re.search(r"^check_reference: .*checks passed.*$", output, re.M)
        tally.record(f"check_reference.py {label}",
                     verdict(rc if checked else 1, output, "pass", None), output, took)
        # MXFP8 needs compute capability 10.0, which the CPU runtime simulates when told to
        env = dict(os.environ, CUCC_COMPUTE_CAPABILITY="10.0") if "--fp8 mx" in features else None
        # the fp32 build has no FP8: it must refuse an FP8 dump (test_gpt.cu's header)
        fp8 = any(f.startswith("--fp8 ") for f in features)
        for binary in ("test_gpt_fp32", "test_gpt"):
            rc, output, took = run_case(f"{os.path.join(trainer_bin_dir(native), binary)} {dump}", "",
                                           env)
            refuses = fp8 and binary == "test_gpt_fp32"
            tally.record(f"{binary} {label}" + (" (refuses FP8)" if refuses else ""),
                         verdict(rc, output, "fail" if refuses else "pass",
                                 "--fp8 needs the bf16 build" if refuses else None), output, took)

    def check_batch(batch):
        """The configurations GPT_CONFIGS[i] for i in batch, one after the other."""
        dumps = [dump_of(GPT_CONFIGS[i]) for i in batch]
        new = [k for k, dump in enumerate(dumps) if not os.path.exists(dump)]
        cached = [k for k in range(len(batch)) if k not in new]
        # An independent float64 model confirms each dump itself before the trainer is held to it
        # (with a new dump, in reference.py's process: --check).
        checks = {}
        if new:
            with tempfile.NamedTemporaryFile("w", suffix=".txt") as runs:  # a command line a line
                runs.write("".join(f"--check --out {shlex.quote(dumps[k])} {GPT_CONFIGS[batch[k]]}\n"
                                   for k in new))
                runs.flush()
                ran = run_case(f"{sys.executable} scripts/reference.py --runs {shlex.quote(runs.name)}", "",
                               timeout=RUN_TIMEOUT_S * len(new))
            tally.count_cpu(ran[2])
            checks.update(zip(new, split_runs("reference", len(new), *ran)))
        if cached:
            ran = run_case(f"{sys.executable} scripts/check_reference.py "
                           + " ".join(shlex.quote(dumps[k]) for k in cached), "",
                           timeout=RUN_TIMEOUT_S * len(cached))
            tally.count_cpu(ran[2])
            checks.update(zip(cached, split_runs("check_reference", len(cached), *ran)))
        for k, i in enumerate(batch):
            check_config(i, checks[k])

    indices, workers = list(indices), max(1, workers)
    return [Job(lambda b=indices[w::workers]: check_batch(b), False) for w in range(min(workers, len(indices)))]


def script_named(name):
    """The test script of TRAINER_TESTS or PYTHON_TESTS called `name` (its file name, with or
    without .py), and whether it is a trainer test; exits with the list when there is none."""
    for scripts, trainer in ((TRAINER_TESTS, True), (PYTHON_TESTS, False)):
        for script in scripts:
            base = os.path.basename(script.split()[0])
            if name in (base, base[:-3]):
                return script, trainer
    known = [os.path.basename(s.split()[0])[:-3] for s in PYTHON_TESTS + TRAINER_TESTS]
    sys.exit(f"run_tests.py: no test script named {name}; the scripts are: {', '.join(known)}")


def build_trainer(native):
    """Builds (or brings up to date) the trainer's binaries that --only and --config run: make
    cpu, or make natively on a GPU machine."""
    print("building the trainer (make " + ("all" if native else "cpu") + ")", flush=True)
    if subprocess.run(["make", "-s", "-C", ROOT, "all" if native else "cpu"]).returncode != 0:
        sys.exit("run_tests.py: the trainer does not build")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("patterns", nargs="*", help="test files or globs (default: all)")
    parser.add_argument("--gpt", action="store_true", help="also run the trainer-vs-PyTorch checks")
    parser.add_argument("--native", action="store_true", help="build with nvcc and run on the GPU")
    parser.add_argument("-j", "--jobs", type=int, default=(os.cpu_count() or 2) + 1,
                        help="tests built and run at once (default: the cores + 1)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run just this test script (e.g. test_tp; repeatable), nothing else")
    parser.add_argument("--config", action="append", default=[], type=int, metavar="N",
                        help=f"run just the PyTorch check of trainer configuration N (1 to {len(GPT_CONFIGS)}; "
                             "repeatable), nothing else")
    args = parser.parse_args()
    # OpenMP threads (PyTorch's, in the reference checks and the *_torch.py scripts) wait for work
    # asleep, not spinning: with two tests at a time on the cores, spinning threads took the CPU
    # the other test needed (the 23 reference configurations in one process at load 6 on 2 cores:
    # 20 s of CPU, not 123, the same dumps byte for byte). Only how threads wait changes.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # mpirun and every rank's MPI_Init discover the machine with hwloc, whose plugins for GPUs,
    # OpenCL, XML and PCI devices load X11 and libxml2 and tell Open MPI nothing it uses here:
    # left out, a 4-rank MPI_Init + MPI_Finalize under mpirun took 9% less CPU (six interleaved
    # pairs: 212-232 ms against 222-274). hwloc versions without the variable ignore it.
    os.environ.setdefault("HWLOC_PLUGINS_BLACKLIST", "hwloc_gl,hwloc_opencl,hwloc_xml_libxml,hwloc_pci")
    # `python3` in the tests (cucc itself, scripts, run lines) is this interpreter, found first:
    # a version manager's shim ahead of it in PATH (pyenv's) cost 0.09 s of CPU a start, measured.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    for n in args.config:
        if not 1 <= n <= len(GPT_CONFIGS):
            parser.error(f"--config {n}: the configurations are numbered 1 to {len(GPT_CONFIGS)}")
    only = [script_named(name) for name in args.only]
    native = args.native or has_gpu()
    print(f"running tests {'natively on the GPU' if native else 'through the CPU runtime (no GPU found)'}",
          flush=True)
    tally = Tally()
    t0, start_times = time.time(), cpu_times()
    if only or args.config:
        if args.patterns:
            parser.error("--only and --config run those alone: give no test files with them")
        if args.config or any(trainer for _, trainer in only):
            build_trainer(native)
        jobs = (script_jobs([s for s, trainer in only if trainer], tally, f"--bin-dir {trainer_bin_dir(native)}")
                + script_jobs([s for s, trainer in only if not trainer], tally)
                + reference_config_jobs([n - 1 for n in args.config], native, tally, args.jobs))
        run_jobs(jobs, args.jobs)
    else:
        # The longest tests first, the short ones fill in around them and end the suite: the
        # trainer's scripts, the reference checks, the Python scripts, the fuzz targets (5 s
        # each), then the CUDA test programs (the dev/cuda harnesses, which compile the model,
        # before dev/cpu/tests). A long test last would leave a core idle at the end.
        jobs = []
        if args.gpt:
            jobs += script_jobs(TRAINER_TESTS, tally, f"--bin-dir {trainer_bin_dir(native)}")
            jobs += reference_config_jobs(range(len(GPT_CONFIGS)), native, tally, args.jobs)
        if not args.patterns:
            jobs += script_jobs(PYTHON_TESTS, tally)
        jobs += fuzz_jobs(args.patterns or DEFAULT_TESTS, tally)
        cuda_jobs, exclusive_jobs = cuda_test_jobs(args.patterns or DEFAULT_TESTS, native, tally)
        run_jobs(jobs + cuda_jobs + exclusive_jobs, args.jobs)
    skipped = f", {tally.skipped} skipped" if tally.skipped else ""
    idle = ""
    if start_times and cpu_times():
        (idle0, total0), (idle1, total1) = start_times, cpu_times()
        idle = f"; the machine's cores idle {100 * (idle1 - idle0) / max(1, total1 - total0):.0f}%"
    print(f"({time.time() - t0:.0f} s; CPU: {tally.build_cpu:.0f} s building test programs, "
          f"{tally.run_cpu:.0f} s in tests{idle})")
    print(f"{tally.passed} passed, {tally.failed} failed{skipped}")
    sys.exit(1 if tally.failed or tally.passed == 0 else 0)


if __name__ == "__main__":
    main()
