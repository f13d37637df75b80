"""scripts/testlib.py: what the Python tests of the trainer share: reading checkpoints (format:
llmc/checkpoint.h; a checkpoint is a manifest ckpt_stepSSSSSSSS.bin and its shard files
ckpt_stepSSSSSSSS.rankRRRRR.bin, written by train_checkpoint.cuh's save_checkpoint), independently of
the trainer's own reader.

A shard's section "owned" lists the ranges of the parameter layout it holds (uint64 tensor,
offset, n, matrix), and its sections hold those ranges' elements one after the other: "params"
and "master" every range, each optimizer's state section (STATE_SECTIONS) the ranges of the
tensors that optimizer updates (the manifest's "layout" section names each tensor's optimizer).
checkpoint_array reassembles any of them in layout order, whatever the grid and ZeRO stage that
wrote it.

And the rest the test scripts share: the check tally (check, finish), running the trainer (run,
train, resume, env_launch) and reading what it printed and logged (param_hash, logged_values,
val_losses_and_sample, final_checkpoint), comparing two runs (rel, compare, resume_errors,
check_resumed), the data sets (make_data: token shards for the parallel tests; make_text,
prepare_text and write_shard for test_e2e and the scripts built on it) and the models and constants
more than one script runs.
"""
import fcntl
import glob
import hashlib
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

# train_gpt.cu's optimizer table (OPTIMIZERS, in OptimizerKind order) and the state sections of
# each (STATE_BUFFERS)
OPTIMIZERS = ["adamw", "muon", "lion"]
STATE_SECTIONS = {"optimizer.adamw.m": "adamw", "optimizer.adamw.v": "adamw",
                  "optimizer.muon.momentum": "muon", "optimizer.lion.m": "lion"}
# a record of the manifest's section "layout" (train_checkpoint.cuh's LayoutRecord)
LAYOUT_RECORD = np.dtype([("name", "S32"), ("rows", "<i4"), ("cols", "<i4"), ("optimizer", "<i4"),
                          ("matrices", "<i4"), ("offset", "<u8"), ("numel", "<u8")])


def checkpoint_sections(path):
    """{name: bytes} of one checkpoint file, and its config bytes."""
    with open(path, "rb") as f:
        data = f.read()
    config_bytes = struct.unpack("<Q", data[24:32])[0]
    config = data[32:32 + config_bytes]
    pos, end, sections = 32 + config_bytes, len(data) - 32, {}
    while pos < end:
        name = data[pos:pos + 64].split(b"\0")[0].decode()
        size = struct.unpack("<Q", data[pos + 64:pos + 72])[0]
        sections[name] = data[pos + 72:pos + 72 + size]
        pos += 72 + size
    return config, sections


def checkpoint_files(manifest):
    """The manifest and its shard files, in rank order."""
    return [manifest] + sorted(glob.glob(manifest[:-len(".bin")] + ".rank*.bin"))


def checkpoint_hash(manifest):
    """One SHA-256 over every file of a checkpoint (manifest first, then shards): each file's
    configuration and its sections in order, but of section "save" only the shard count and index,
    not the id (random for every save, so equal checkpoints of two runs differ there alone, and in
    the trailer's CRC, which covers it)."""
    h = hashlib.sha256()
    for path in checkpoint_files(manifest):
        config, sections = checkpoint_sections(path)
        h.update(config)
        for name, data in sections.items():
            h.update(name.encode() + b"\0" + struct.pack("<Q", len(data)))
            h.update(data[16:] if name == "save" else data)
    return h.hexdigest()


def manifest_names(folder):
    """The checkpoints (manifests) in a folder, sorted: the files that are not shards."""
    return sorted(n for n in os.listdir(folder) if n.startswith("ckpt_step") and ".rank" not in n)


def checkpoint_array(manifest, name, dtype=np.float32):
    """Section `name` of every shard of the checkpoint, in layout order: an array of the layout's
    size (the largest offset + n of any range), zero where no shard holds an element."""
    _, head = checkpoint_sections(manifest)
    optimizer_of = np.frombuffer(head["layout"], dtype=LAYOUT_RECORD)["optimizer"]
    shards = checkpoint_files(manifest)[1:]
    assert len(shards) == struct.unpack("<4Q", head["save"])[2], manifest  # id, id, shards, index
    parts = []
    for path in shards:
        _, sec = checkpoint_sections(path)
        ranges = np.frombuffer(sec["owned"], dtype=np.uint64).reshape(-1, 4).astype(np.int64)
        parts.append((ranges, np.frombuffer(sec.get(name, b""), dtype=dtype)))
    total = max(int((r[:, 1] + r[:, 2]).max()) for r, _ in parts if len(r))
    out = np.zeros(total, dtype=dtype)
    for ranges, values in parts:
        at = 0
        for tensor, offset, n, _matrix in ranges:
            if name in STATE_SECTIONS and OPTIMIZERS[optimizer_of[tensor]] != STATE_SECTIONS[name]:
                continue
            out[offset:offset + n] = values[at:at + n]
            at += n
        assert at == len(values), (manifest, name)
    return out


# ---------------------------------------------------------------------------------------------
# Where the scripts run, and the models and tolerances several of them share.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every job of the tests runs on this one machine: the ob1 PML (shared memory) is the one Open MPI
# ends up with here anyway, and naming it skips the probing of the network transports first
# (mpirun -np 4 of an MPI_Init/MPI_Finalize program: 0.38 s -> 0.17 s on a 2-core machine).
# orte_allowed_exit_without_sync: Open MPI 4.x's mpirun now and then takes a rank that called
# MPI_Finalize and exited 0 for one that exited without it, and fails the job ("mpirun has
# exited due to process rank 1 with PID 0 on node ... exiting improperly": open-mpi/ompi#7833,
# a hello world 1 time in 1000-2000; a completed tp 2 run of test_recompute in CI). Allowed, such
# an exit no longer ends the job; a rank that really left early still fails its peers, at their
# deadline, and a non-zero exit or a signal still fails the job.
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ob1",
          "--mca", "orte_allowed_exit_without_sync", "1"]
# What names the failure when one rank of an mpirun job is killed (SIGKILL) mid-run: whichever
# reaches the output first, as their order is not deterministic (two processes' streams through
# mpirun, and mpirun may learn of the survivor's MPI_Abort before it reaps the killed rank; then
# it reports the abort and never says "signal 9"):
#   mpirun's report of the killed rank ("... rank R with PID P on node N exited on signal 9"),
#   the survivor's watchdog, seeing NCCL's error ("error: rank R: NCCL failed during ...: remote
#   error ..."; the CPU NCCL prints "cucc nccl: ...: rank R exited: ..." before it), its main
#   thread's NCCL call refused on the failed communicator ("NCCL error at FILE:LINE: remote
#   error"), or the survivor's deadline (should its wait not see the death: "error: rank R: ...
#   did not finish within T s (--comm-timeout)").
# A hang, a zero exit or a job that ends without any of these is still a failure.
# ("remote error": the CPU NCCL's name of ncclRemoteError; NCCL's says "remote process exited")
KILLED_RANK_MESSAGE = (r"exited on signal 9|^error: (rank|process) \d+: NCCL failed during .*remote (error|process)|"
                       r"^NCCL error at \S+: remote (error|process)|"
                       r"^error: (rank|process) \d+: .* did not finish within [\d.]+ s \(--comm-timeout\)")
# The tiny model of test_e2e, test_bad_inputs and test_deadlines.
TINY = ["--layers", "2", "--heads", "1", "--embd", "32", "--seq", "64", "--batch", "4", "--lr", "3e-3"]
# The model of test_zero and test_zero3 (which gives it more blocks) and its global batch in
# sequences.
ZERO_MODEL = ["--vocab", "256", "--layers", "2", "--heads", "2", "--embd", "64", "--seq", "16", "--lr", "3e-3",
              "--warmup", "1", "--seed", "5", "--val-every", "0", "--sample-len", "0", "--bucket-mb", "0.02"]
ZERO_GLOBAL_BATCH = 36
# fp32 runs that sum in another order (other grids, resumed on another grid) against one
# process: losses, norms and parameters within this, in relative norm.
RTOL = 1e-5


# ---------------------------------------------------------------------------------------------
# The check tally: every script prints a line per check and ends with a summary.
PASSED, FAILED = [], []


def check(ok, what, detail=""):
    """Prints PASS or FAIL, what was checked and, if given, the detail; counts it; returns ok."""
    print("%s  %s%s" % ("PASS" if ok else "FAIL", what, (": " + detail) if detail else ""), flush=True)
    (PASSED if ok else FAILED).append(what)
    return ok


def finish(what):
    """Prints a test script's summary line for its checks of `what` and exits with its status."""
    print(f"all {what} checks passed" if not FAILED else f"{len(FAILED)} {what} checks FAILED")
    sys.exit(1 if FAILED else 0)


def timed_summary(start):
    """Prints the summary line of test_e2e and test_bad_inputs (started at time `start`) and
    returns the exit status."""
    print("%s: %d check(s) failed in %.0f s" % ("FAIL" if FAILED else "PASS", len(FAILED), time.time() - start))
    return 1 if FAILED else 0


# ---------------------------------------------------------------------------------------------
# Running the trainer and reading its output.
def run(cmd, label):
    """Runs cmd in the repository root and returns its output; on a non-zero exit prints the
    command and the end of its output and exits."""
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", cwd=ROOT)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        print(f"FAIL  {label}: exit {proc.returncode}\n    $ {' '.join(cmd)}")
        print("\n".join("    | " + line for line in out.strip().splitlines()[-25:]))
        sys.exit(1)
    return out


def train(binary, ranks, work, name, model, extra, checkpoints=True):
    """Runs the trainer on `model` + `extra` (plain when ranks is 0, else under mpirun -np ranks)
    with a log, and unless checkpoints is False a checkpoint folder, named after `name` in
    `work`; returns (its output, the log's records, the checkpoint folder)."""
    log = os.path.join(work, name + ".jsonl")
    ck = os.path.join(work, name + "_ck")
    cmd = [binary] + model + ["--log", log]
    if checkpoints:
        cmd += ["--checkpoint-dir", ck, "--keep-checkpoints", "0"]
    cmd += extra
    if ranks:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd
    out = run(cmd, name)
    with open(log) as f:
        records = [json.loads(line) for line in f]
    return out, records, ck


def resume(binary, source, ranks, work, name, model, extra, step=2):
    """Runs `extra` with --resume latest on `ranks` ranks from a copy of the step-`step`
    checkpoint of `source` (a train() result); returns the run's train() result."""
    ck = os.path.join(work, name + "_ck")
    os.makedirs(ck)
    for path in checkpoint_files(final_checkpoint(source[2], step)):
        shutil.copy(path, ck)
    return train(binary, ranks, work, name, model, extra + ["--resume", "latest"])


def env_launch(cmd, ranks, rendezvous):
    """Runs cmd as `ranks` processes started by environment variables (RANK, WORLD_SIZE,
    LOCAL_RANK), meeting in folder `rendezvous`; returns (every one exited 0, rank 0's output)."""
    os.makedirs(rendezvous, exist_ok=True)
    procs = [subprocess.Popen(cmd + ["--rendezvous", rendezvous], cwd=ROOT,
                              env=dict(os.environ, RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
             for rank in reversed(range(ranks))]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return all(p.returncode == 0 for p in procs), outs[-1]


def drop_waits_binary():
    """build/cpu/train_gpt_drop_waits: the bf16 trainer (with MPI) built with -DTEST_DROP_WAITS,
    in which LLMC_TEST_DROP_WAIT=NAME leaves out one wait between the streams (llmc/zero.cuh's
    test_drops_wait), so a test can see that the wait matters. make builds it (make test does
    beforehand), one process at a time."""
    target = os.path.join("build", "cpu", "train_gpt_drop_waits")
    os.makedirs(os.path.join(ROOT, "build", "cpu"), exist_ok=True)
    with open(os.path.join(ROOT, "build", "cpu", ".drop_waits.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run(["make", "-s", "-C", ROOT, target], capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        sys.exit(f"cannot build {target}")
    return os.path.join(ROOT, target)


def param_hash(out, ranks):
    """The parameter hash a run printed, if every one of its `ranks` ranks held the same model."""
    m = re.search(r"parameter hash ([0-9a-f]{16}) on each of (\d+) ranks", out)
    return m.group(1) if m and int(m.group(2)) == ranks else None


def random_order(seed):
    """mpirun's options that make the CPU runtime run the streams' work in random orders."""
    return ["-x", "CUCC_SCHEDULE=random", "-x", f"CUCC_SEED={seed}"]


def missing_wait_exposed(command, ranks, reference, seeds=range(1, 7)):
    """Whether a run without one of the waits between the streams gives other bits than
    `reference`: runs command(seed) (the -DTEST_DROP_WAITS trainer under random_order(seed)) for
    one seed after another until its parameter hash differs (or the replicas disagree). Returns
    (seed, hash or None) for the first that differs, or None when every seed gave `reference`.
    A missing wait is a race: whether a seed's order exposes it also depends on when the other
    ranks' collectives complete, which no seed fixes, so a single seed can miss it."""
    for seed in seeds:
        proc = subprocess.run(command(seed), capture_output=True, text=True, errors="replace", cwd=ROOT)
        got = param_hash(proc.stdout + proc.stderr, ranks)
        if got != reference:
            return seed, got
    return None


def exposed_text(found):
    """How missing_wait_exposed's result reads in a check's line."""
    if found is None:
        return "every seed gave the same bits"
    return f"seed {found[0]}: {found[1] or 'replicas disagree'}"


def logged_values(records):
    """{(key, step): value} for every train loss, gradient norm and val loss of a log."""
    out = {}
    for r in records:
        for key in ("train_loss", "grad_norm", "val_loss"):
            if key in r:
                out[(key, r["step"])] = r[key]
    return out


def val_losses_and_sample(out, step):
    """The validation losses a run printed, and its sample at `step` (None if it printed none)."""
    sample = re.search(r"sample at step %d:\n---\n(.*?)\n---" % step, out, re.S)
    return re.findall(r"val loss ([0-9.]+) at step", out), sample.group(1) if sample else None


def final_checkpoint(folder, step):
    """The manifest of the step-`step` checkpoint in `folder`."""
    return os.path.join(folder, "ckpt_step%08d.bin" % step)


# ---------------------------------------------------------------------------------------------
# Comparing fp32 runs.
def rel(a, b):
    """||a - b|| / ||b||."""
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def compare(label, got, ref, steps, first=1):
    """Checks an fp32 run against a reference run (train() results): the same losses and norms
    logged from step `first` on, each within RTOL, and the parameters of their step-`steps`
    checkpoints within RTOL."""
    a, b = logged_values(got[1]), logged_values(ref[1])
    keys = {k for k in b if k[1] >= first}
    same = keys == {k for k in a if k[1] >= first}
    worst = max((abs(a[k] - b[k]) / abs(b[k]) for k in keys), default=float("inf")) if same else float("inf")
    err = rel(checkpoint_array(final_checkpoint(got[2], steps), "params"),
              checkpoint_array(final_checkpoint(ref[2], steps), "params"))
    check(worst <= RTOL and err <= RTOL,
          f"{label}: losses and norms within {worst:.1e} <= {RTOL:.0e}, final parameters {err:.1e} <= {RTOL:.0e}")


def resume_errors(resumed, source, steps):
    """fp32: the largest relative train-loss difference of a resumed run from the uninterrupted
    run `source` over the resumed steps, and the relative error of its step-`steps` parameters
    against source's (both train() results)."""
    whole = {r["step"]: r["train_loss"] for r in source[1] if "train_loss" in r}
    worst = max(abs(r["train_loss"] - whole[r["step"]]) / abs(whole[r["step"]])
                for r in resumed[1] if "train_loss" in r)
    err = rel(checkpoint_array(final_checkpoint(resumed[2], steps), "params"),
              checkpoint_array(final_checkpoint(source[2], steps), "params"))
    return worst, err


def check_resumed(binary, got, source, label, ranks, zero, steps):
    """Checks a run resumed by resume() with ZeRO stage `zero` on `ranks` ranks from a checkpoint
    of `source`, an uninterrupted run on 2 ranks (`label` names both): the bf16 build (resumed on
    the same grid) ends with source's parameter hash, the fp32 build within RTOL of it."""
    out = got[0]
    if not binary.endswith("_fp32"):
        check("resuming from" in out and param_hash(out, 2) == param_hash(source[0], 2),
              f"{label} on 2 ranks, resumed on the same grid: the uninterrupted run's parameter hash")
        return
    worst, err = resume_errors(got, source, steps)
    check("resuming from" in out and worst <= RTOL and err <= RTOL,
          f"{label} checkpoint of 2 ranks resumed on {max(ranks, 1)} rank(s) with ZeRO-{zero}: losses within "
          f"{worst:.1e}, final parameters {err:.1e} (<= {RTOL:.0e})")


def up(n, k=128):
    """n rounded up to a multiple of k (the layout puts each tensor on 128 elements)."""
    return (n + k - 1) // k * k


# ---------------------------------------------------------------------------------------------
# Data sets.
def hf_modules(what):
    """The Hugging Face tests' modules: (torch, transformers, safetensors' load_file, dev/data's
    tokenizer). A missing one is a failed check naming scripts/setup.sh, and the test ends."""
    try:
        import torch
        import transformers
        from safetensors.torch import load_file
    except ImportError as e:
        check(False, f"transformers, safetensors and torch import ({e}; scripts/setup.sh --test installs them)")
        finish(what)
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    sys.path.insert(0, os.path.join(ROOT, "dev", "data"))
    import tokenizer
    return torch, transformers, load_file, tokenizer


def make_data(folder):
    """Token shards and a byte tokenizer, written by dev/data/prepare.py from random sentences."""
    texts = os.path.join(folder, "texts")
    os.makedirs(texts)
    rng = np.random.default_rng(11)
    words = "the garden was quiet and emma walked to the house while mr knightley read a letter".split()
    for i in range(3):
        with open(os.path.join(texts, f"{i}.txt"), "w") as f:
            f.write(" ".join(rng.choice(words, 2500)) + "\n")
    run([sys.executable, os.path.join(ROOT, "dev", "data", "prepare.py"), "--input", texts, "--tokenizer", "byte",
         "--out-dir", os.path.join(folder, "out"), "--name", "tiny", "--val-frac", "0.1", "--val-chunk", "64",
         "--shard-tokens", "20000"], "prepare.py")
    return os.path.join(folder, "out")


def make_text(path):
    """About 60 KB of sentences from a small word list, seeded: learnable, and the same each run."""
    r = random.Random(5)
    words = ("the a lady gentleman house letter sister walked said was had not but she he her his "
             "very much would could to of and in with Elizabeth Darcy Emma Mr Mrs Bennet happy "
             "evening morning").split()
    lines = [" ".join(r.choice(words) for _ in range(r.randint(4, 12))).capitalize() + "."
             for _ in range(1500)]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def prepare_text(text, out_dir):
    """Runs dev/data/prepare.py on a text file (make_text's) with the byte tokenizer; returns the
    finished process."""
    return subprocess.run([sys.executable, os.path.join(ROOT, "dev", "data", "prepare.py"), "--input", text,
                           "--tokenizer", "byte", "--out-dir", out_dir, "--val-frac", "0.1", "--val-chunk", "512"],
                          capture_output=True, text=True)


def write_shard(path, tokens, magic=20240520, version=1, count=None):
    """A token shard (llmc/dataloader.h's format), with the header's fields as given."""
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens))
