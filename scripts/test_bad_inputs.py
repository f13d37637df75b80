#!/usr/bin/env python3
"""scripts/test_bad_inputs.py: the trainer given bad inputs, through the binaries `make cpu`
builds (build/cpu/train_gpt and train_gpt_fp32; --bin-dir for others, e.g. . for the GPU build).

Each case of CASES is one command of the trainer that must end
  - with the expected exit status (any non-zero unless the case says otherwise),
  - with output (stdout + stderr) that matches the case's regex,
  - within its wall-clock bound (a hang is killed, with its process group, and fails),
  - with every file that existed before it unchanged: the shared fixture (data set, the
    checkpoints and log of a finished run) and the case's own folder are hashed before and
    after (regular files by content; FIFOs, folders and other special files by their kind,
    never opened), and a file that changed or disappeared fails the case. New files may
    appear (a case that is expected to train writes its own);
  - with a case that says `clean`: nothing new or changed left in its scratch folder (a launch's
    rendezvous files, the CPU NCCL's files), where files that were there may be replaced or
    deleted.

The fixture, made once: a tiny byte-level data set (dev/data/prepare.py on testlib's make_text),
a 4-step run of a tiny model that leaves checkpoints at steps 2 and 4 and a log, and the
checkpoints of two 2-rank ZeRO-1 runs (2 shards each): ck2, 6 steps, checkpoints at steps 2, 4
and 6; ck2b, the same run resumed from ck2's step 4 with --steps 7 (another schedule: a change
--resume allows), checkpoints at steps 6 and 7.

Adding a case: append a Case(...) to CASES. Its args are the trainer's arguments (after
the binary; with `launcher`, e.g. MPIRUN + ["-np", "1"], the command is launcher + binary +
args, and "{bin}" in args names the binary again, for an MPMD launch `A : -np 1 {bin} B`).
In args and the launcher, {data} is the data set, {ck} the finished run's checkpoint folder,
{ckpt} its step-4 file, {log} its log, {ck2} and {ck2b} the 2-rank runs' folders, {case} the
case's own folder (empty; its files are hashed too) and {scratch} a folder beside it, CASE.scratch
(not hashed; with an empty subfolder shm, where ranks() points the CPU NCCL). `setup` (a function
of the case folder) makes the bad files in it (or in its scratch folder) before the run. Other
fields: `status` (an exact exit status, e.g. 0 for documented correct behaviour such as skipping a
bad checkpoint), `timeout` (seconds), `binary` ("train_gpt_fp32" for the other precision), `clean`
(see above). ranks(...) is the launcher of a launch without MPI: one process per set of
environment variables (RANK, WORLD_SIZE, ...), all started at once; it prints their exit statuses
in order ("exit statuses: 1 0") and exits 0, so the pattern checks each.

Usage: python3 scripts/test_bad_inputs.py [--bin-dir DIR] [--keep] [-k SUBSTRING]
Exits non-zero when any check fails; prints one line per case.
"""
import argparse
import hashlib
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import types
import zlib

from testlib import (KILLED_RANK_MESSAGE, MPIRUN, ROOT, TINY, check, checkpoint_files, make_text, manifest_names, prepare_text,
                     timed_summary, write_shard)

TIMEOUT_S = int(os.environ.get("BAD_INPUTS_TIMEOUT_S", 60))
# A tiny run: 2 steps, no validation, no samples (cases that are refused never get to train).
RUN = ["--steps", "2", "--val-every", "0", "--sample-len", "0"] + TINY
# The 2-rank run's flags (ck2), resumed on one rank with the same global batch, to step 5 (so it
# writes a new checkpoint and replaces none of the case's files).
RESUME_CK2 = ["--steps", "5", "--checkpoint-every", "0", "--val-every", "0", "--sample-len", "0"] + TINY + [
    "--batch", "8"]


def Case(name, args, pattern, setup=None, status=None, timeout=TIMEOUT_S, binary="train_gpt",
         launcher=(), clean=False):
    return types.SimpleNamespace(name=name, args=args, pattern=pattern, setup=setup, status=status,
                                 timeout=timeout, binary=binary, launcher=list(launcher), clean=clean)


def ranks(*envs):
    """The launcher of processes started by environment variables alone (torchrun-style, Slurm's
    srun without MPI): one process of the command per dict of envs, all at once, each with the CPU
    NCCL's files in {scratch}/shm; then 'exit statuses: S0 S1 ...', and status 0."""
    script = ""
    for i, env in enumerate(envs):
        env = dict(env, CUCC_NCCL_DIR="{scratch}/shm")
        script += 'env %s "$@" & p%d=$!\n' % (" ".join("%s=%s" % kv for kv in env.items()), i)
    script += ('s=""; for p in %s; do wait $p; s="$s $?"; done; echo "exit statuses:$s"\n'
               % " ".join("$p%d" % i for i in range(len(envs))))
    return ["sh", "-c", script, "sh"]


# ---------------------------------------------------------------------------------------------
# Bad files, made in the case's folder by the setups.

def fifo(name):
    return lambda case: os.mkfifo(os.path.join(case, name))


def folder(name):
    return lambda case: os.makedirs(os.path.join(case, name))


def data_set(train="copy", val="copy", tokenizer="copy"):
    """A data set in {case}/d: each of the train shard, the val shard and tokenizer.bin is
    copied from the fixture ("copy"), left out (None), or made by a function of its path."""
    def setup(case):
        d = os.path.join(case, "d")
        os.makedirs(d)
        for name, make in (("d_train_000000.bin", train), ("d_val_000000.bin", val),
                           ("tokenizer.bin", tokenizer)):
            path = os.path.join(d, name)
            if make == "copy":
                source = "tokenizer.bin" if name == "tokenizer.bin" else name.replace("d_", "data_")
                shutil.copy(os.path.join(FIXTURE["data"], source), path)
            elif make is not None:
                make(path)
    return setup


def write_bytes(data):
    def make(path):
        with open(path, "wb") as f:
            f.write(data)
    return make


def shard_with_count(count, tokens=10):
    return lambda path: write_shard(path, list(range(tokens)), count=count)


def tokenizer_with(index, value):
    """The fixture's tokenizer file with header int32 number `index` set to value."""
    def make(path):
        data = bytearray(open(os.path.join(FIXTURE["data"], "tokenizer.bin"), "rb").read())
        data[4 * index:4 * index + 4] = struct.pack("<i", value)
        with open(path, "wb") as f:
            f.write(data)
    return make


def checkpoint_file(name, edit, shard_edit=None):
    """{case}/NAME: the fixture's step-4 checkpoint's manifest passed through edit(bytes) ->
    bytes, with its shard beside it (passed through shard_edit, if given)."""
    def setup(case):
        files = checkpoint_files(FIXTURE["ckpt"])
        data = open(files[0], "rb").read()
        with open(os.path.join(case, name), "wb") as f:
            f.write(edit(data))
        for shard in files[1:]:
            data = open(shard, "rb").read()
            with open(os.path.join(case, os.path.basename(shard)), "wb") as f:
                f.write(shard_edit(data) if shard_edit else data)
    return setup


def flip(data):
    return data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x10]) + data[len(data) // 2 + 1:]


def resealed(edit):
    """edit applied, then the trailer's CRC recomputed: damage that only a faulty writer makes,
    which the checksum cannot catch."""
    def apply(data):
        data = bytearray(edit(bytes(data)))
        data[-8:] = struct.pack("<Q", zlib.crc32(bytes(data[:-8])))
        return bytes(data)
    return apply


def rename_section(old, new):
    def edit(data):
        at = data.index(old.encode() + b"\0")
        return data[:at] + new.encode().ljust(len(old), b"\0") + data[at + len(old):]
    return edit


def copied_checkpoints(extra):
    """{case}/ck: a copy of the fixture's checkpoint folder, then extra(folder)."""
    def setup(case):
        shutil.copytree(FIXTURE["ck"], os.path.join(case, "ck"))
        extra(os.path.join(case, "ck"))
    return setup


def copied_ck2(extra):
    """{case}/ck: a copy of the 2-rank run's checkpoint folder (steps 2, 4, 6), then
    extra(folder)."""
    def setup(case):
        shutil.copytree(FIXTURE["ck2"], os.path.join(case, "ck"))
        extra(os.path.join(case, "ck"))
    return setup


def copy_file(source, target):
    """A function of a checkpoint folder that copies file `source` over `target` in it (source
    may be a path, with {ck2b} for the other run's folder)."""
    return lambda ck: shutil.copy(os.path.join(ck, source.format(**FIXTURE)), os.path.join(ck, target))


SHARD6 = "ckpt_step00000006.rank%05d.bin"


def stale_rendezvous(case):
    """{scratch}/rv holds the files of an earlier job of the same (default) name and world size,
    killed during its rendezvous: rank 1 started first and was killed while it waited for rank 0,
    then rank 0, killed once it had published the NCCL id; their cards and rank 0's offer stay."""
    rv = os.path.join(case + ".scratch", "rv")
    os.makedirs(rv)
    for rank, last in ((1, ".rank1"), (0, ".id")):
        proc = subprocess.Popen([FIXTURE["bin"], "--rendezvous", rv, "--comm-timeout", "60"] + RUN,
                                env=dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                                         CUCC_NCCL_DIR=os.path.join(case + ".scratch", "shm")),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline and not any(n.endswith(last) for n in os.listdir(rv)):
            time.sleep(0.05)
        time.sleep(0.3)
        proc.kill()
        proc.wait()


def live_lock(case):
    """{case}/ck holds a lock of a live process on this host: this test's own."""
    os.makedirs(os.path.join(case, "ck"))
    start = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]
    with open(os.path.join(case, "ck", "train_gpt.lock"), "w") as f:
        f.write("host %s pid %d start %s\n" % (os.uname().nodename, os.getpid(), start))


def config_int(index, value):
    """Edits int32 number `index` of a checkpoint's configuration block (after its 32-byte
    header: vocab, padded vocab, context, layers, heads, embd, bytes per weight)."""
    def edit(data):
        return data[:32 + 4 * index] + struct.pack("<i", value) + data[32 + 4 * index + 4:]
    return edit


# ---------------------------------------------------------------------------------------------
# The cases.

NOT_REGULAR = r"cannot open %s \S+%s: it is %s, not a regular file"
CASES = [
    # data shards
    Case("a FIFO as the train shard", ["--data", "{case}/d"] + RUN,
         NOT_REGULAR % ("shard", "d_train_000000.bin", r"a FIFO \(named pipe\)"),
         setup=data_set(train=lambda p: os.mkfifo(p))),
    Case("a directory as the train shard", ["--data", "{case}/d"] + RUN,
         NOT_REGULAR % ("shard", "d_train_000000.bin", "a directory"),
         setup=data_set(train=os.makedirs)),
    Case("a val shard pattern that matches a directory too", ["--data", "{case}/d"] + RUN,
         NOT_REGULAR % ("shard", "d_val_000001.bin", "a directory"),
         setup=lambda case: (data_set()(case), os.makedirs(os.path.join(case, "d", "d_val_000001.bin")))),
    Case("an empty (0-byte) train shard", ["--data", "{case}/d"] + RUN,
         r"shard \S+d_train_000000.bin is truncated: 0 bytes, the header alone is 1024",
         setup=data_set(train=write_bytes(b""))),
    Case("a shard whose header claims 2^31-1 tokens", ["--data", "{case}/d"] + RUN,
         r"shard \S+ is truncated: its header says 2147483647 tokens \(4294968318 bytes\), the "
         r"file has 1044 bytes", setup=data_set(train=shard_with_count(2**31 - 1))),
    Case("a shard whose header claims a negative count", ["--data", "{case}/d"] + RUN,
         r"shard \S+ has a negative token count -5", setup=data_set(train=shard_with_count(-5))),
    Case("a shard shorter than its header claims", ["--data", "{case}/d"] + RUN,
         r"shard \S+ is truncated: its header says 11 tokens", setup=data_set(train=shard_with_count(11))),
    # tokenizer files
    Case("a FIFO as --tokenizer", ["--data", "{data}", "--tokenizer", "{case}/t.bin"] + RUN,
         NOT_REGULAR % ("tokenizer file", "t.bin", r"a FIFO \(named pipe\)"), setup=fifo("t.bin")),
    Case("a directory as --tokenizer", ["--data", "{data}", "--tokenizer", "{case}/t.bin"] + RUN,
         NOT_REGULAR % ("tokenizer file", "t.bin", "a directory"), setup=folder("t.bin")),
    Case("a FIFO as the data set's tokenizer.bin", ["--data", "{case}/d"] + RUN,
         NOT_REGULAR % ("tokenizer file", "tokenizer.bin", r"a FIFO \(named pipe\)"),
         setup=data_set(tokenizer=lambda p: os.mkfifo(p))),
    Case("a tokenizer whose header claims 2^31-1 merges", ["--data", "{case}/d"] + RUN,
         r"tokenizer file \S+ is truncated: its header says 256 tokens, 2147483647 merges",
         setup=data_set(tokenizer=tokenizer_with(5, 2**31 - 1))),
    Case("a tokenizer whose header claims 2^31-1 code point ranges", ["--data", "{case}/d"] + RUN,
         r"tokenizer file \S+ is truncated: its header says 256 tokens, 0 merges and 2147483647",
         setup=data_set(tokenizer=tokenizer_with(6, 2**31 - 1))),
    Case("an empty tokenizer file", ["--data", "{case}/d"] + RUN,
         r"tokenizer file \S+ is truncated: 0 bytes, the header alone is 64",
         setup=data_set(tokenizer=write_bytes(b""))),
    # checkpoints given to --resume and --sample
    Case("a FIFO as --resume", ["--data", "{data}", "--resume", "{case}/c.bin"] + RUN,
         NOT_REGULAR % ("checkpoint", "c.bin", r"a FIFO \(named pipe\)"), setup=fifo("c.bin")),
    Case("a FIFO as --sample", ["--data", "{data}", "--sample", "{case}/c.bin", "--prompt", "The"],
         NOT_REGULAR % ("checkpoint", "c.bin", r"a FIFO \(named pipe\)"), setup=fifo("c.bin")),
    Case("a 0-byte --resume file", ["--data", "{data}", "--resume", "{case}/c.bin"] + RUN,
         r"checkpoint \S+c.bin is truncated: 0 bytes, a checkpoint has at least 64",
         setup=checkpoint_file("c.bin", lambda d: b"")),
    Case("a truncated --resume file", ["--data", "{data}", "--resume", "{case}/c.bin"] + RUN,
         r"checkpoint \S+c.bin is truncated or has bytes appended",
         setup=checkpoint_file("c.bin", lambda d: d[:-100])),
    Case("a --resume file with bytes appended", ["--data", "{data}", "--resume", "{case}/c.bin"] + RUN,
         r"checkpoint \S+c.bin is truncated or has bytes appended",
         setup=checkpoint_file("c.bin", lambda d: d + b"\0" * 8)),
    Case("a --resume file with a flipped bit", ["--data", "{data}", "--resume", "{case}/c.bin"] + RUN,
         r"checkpoint \S+c.bin is corrupted: checksum mismatch", setup=checkpoint_file("c.bin", flip)),
    Case("a truncated --sample file", ["--data", "{data}", "--sample", "{case}/c.bin", "--prompt", "The"],
         r"checkpoint \S+c.bin is truncated", setup=checkpoint_file("c.bin", lambda d: d[:-100])),
    Case("a --resume file that is a shard", ["--data", "{data}", "--resume", "{data}/data_val_000000.bin"] + RUN,
         r"data_val_000000.bin is not a checkpoint file"),
    Case("a --resume file whose shard lacks a section (CRC resealed)",
         ["--data", "{data}", "--resume", "{case}/c.bin"] + RUN,
         r"checkpoint \S+rank00000.bin has no section 'optimizer.adamw.v'",
         setup=checkpoint_file("c.bin", lambda d: d, resealed(rename_section("optimizer.adamw.v",
                                                                             "optimizer.adamw.x")))),
    Case("a --resume file whose shard is missing", ["--data", "{data}", "--resume", "{case}/c.bin"] + RUN,
         r"cannot open checkpoint \S+rank00000.bin: No such file",
         setup=lambda case: (checkpoint_file("c.bin", lambda d: d)(case),
                             os.remove(os.path.join(case, "ckpt_step00000004.rank00000.bin")))),
    Case("a --resume file whose shard has a flipped bit", ["--data", "{data}", "--resume", "{case}/c.bin"] + RUN,
         r"checkpoint \S+rank00000.bin is corrupted: checksum mismatch",
         setup=checkpoint_file("c.bin", lambda d: d, flip)),
    Case("a --resume file of another model", ["--data", "{data}", "--resume", "{ckpt}", "--steps", "6",
                                               "--val-every", "0", "--sample-len", "0"] + TINY + ["--layers", "1"],
         r"different model configuration; layers: 2 in the checkpoint, 1 here"),
    Case("--resume latest skips a FIFO under the newest checkpoint name and resumes from step 4",
         ["--data", "{data}", "--checkpoint-dir", "{case}/ck", "--resume", "latest", "--steps", "5",
          "--checkpoint-every", "0", "--val-every", "0", "--sample-len", "0"] + TINY,
         r"skipping checkpoint \S+ckpt_step00000009.bin: .*FIFO[\s\S]*resuming from \S+ckpt_step00000004.bin",
         setup=copied_checkpoints(lambda ck: os.mkfifo(os.path.join(ck, "ckpt_step00000009.bin"))),
         status=0),
    # the shards of a checkpoint must be its save's own (resumed on one rank: any grid reads them)
    Case("--resume latest: rank 1's shard of another run's step 6 is skipped",
         ["--data", "{data}", "--checkpoint-dir", "{case}/ck", "--resume", "latest"] + RESUME_CK2,
         r"skipping checkpoint \S+ckpt_step00000006.bin: checkpoint shard \S+rank00001.bin is of "
         r"another save than its manifest[\s\S]*resuming from \S+ckpt_step00000004.bin",
         setup=copied_ck2(copy_file("{ck2b}/" + SHARD6 % 1, SHARD6 % 1)), status=0),
    Case("--resume of that checkpoint's manifest itself is refused",
         ["--data", "{data}", "--resume", "{case}/ck/ckpt_step00000006.bin"] + RESUME_CK2,
         r"checkpoint shard \S+rank00001.bin is of another save than its manifest",
         setup=copied_ck2(copy_file("{ck2b}/" + SHARD6 % 1, SHARD6 % 1))),
    Case("--resume latest: shard 0 copied over shard 1 of step 6 is skipped",
         ["--data", "{data}", "--checkpoint-dir", "{case}/ck", "--resume", "latest"] + RESUME_CK2,
         r"skipping checkpoint \S+ckpt_step00000006.bin: checkpoint shard \S+rank00001.bin holds "
         r"shard 0 of 2, where its manifest expects shard 1 of 2[\s\S]*resuming from "
         r"\S+ckpt_step00000004.bin", setup=copied_ck2(copy_file(SHARD6 % 0, SHARD6 % 1)), status=0),
    Case("--resume latest: a manifest without its shard 1 is skipped",
         ["--data", "{data}", "--checkpoint-dir", "{case}/ck", "--resume", "latest"] + RESUME_CK2,
         r"skipping checkpoint \S+ckpt_step00000006.bin: its shard 1: cannot open checkpoint "
         r"\S+rank00001.bin: No such file[\s\S]*resuming from \S+ckpt_step00000004.bin",
         setup=copied_ck2(lambda ck: os.remove(os.path.join(ck, SHARD6 % 1))), status=0),
    Case("a FIFO as --log", ["--data", "{data}", "--log", "{case}/log"] + RUN,
         r"cannot open log \S+log: it is a FIFO \(named pipe\), not a regular file", setup=fifo("log")),
    # the command line, in train and in sample mode alike
    Case("--sample-len -5 in sample mode", ["--data", "{data}", "--sample", "{ckpt}", "--sample-len", "-5"],
         r"--sample-len must be in \[0, 1048576\] \(got -5\)"),
    Case("--sample-len 2147483647 in sample mode", ["--data", "{data}", "--sample", "{ckpt}", "--sample-len",
                                                    "2147483647"], r"--sample-len must be in \[0, 1048576\]"),
    Case("--sample-len beyond int", ["--data", "{data}", "--sample", "{ckpt}", "--sample-len", "99999999999"],
         r"--sample-len: '99999999999' is not an integer in range"),
    Case("--temperature -1 in sample mode", ["--data", "{data}", "--sample", "{ckpt}", "--temperature", "-1"],
         r"--temperature must be >= 0 \(got -1\)"),
    Case("--top-k -7 in sample mode", ["--data", "{data}", "--sample", "{ckpt}", "--top-k", "-7"],
         r"--top-k must be >= 0 \(got -7\)"),
    Case("--sample under mpirun -np 2", ["--data", "{data}", "--sample", "{ckpt}"],
         r"--sample runs as a single process", launcher=MPIRUN + ["-np", "2"]),
    Case("--sample with --resume", ["--data", "{data}", "--sample", "{ckpt}", "--resume", "{ckpt}"],
         r"--sample only generates text"),
    Case("an unknown flag", ["--data", "{data}", "--lrr", "1e-3"] + RUN, r"unknown flag '--lrr'"),
    Case("a flag without its value", ["--data", "{data}"] + RUN + ["--lr"], r"--lr needs a value"),
    Case("--lr nan", ["--data", "{data}"] + RUN + ["--lr", "nan"], r"--lr: 'nan' is not a finite number"),
    Case("--batch 0", ["--data", "{data}"] + RUN + ["--batch", "0"], r"--batch must be in \[1, 65535\] \(got 0\)"),
    Case("--seq 2000000", ["--data", "{data}"] + RUN + ["--seq", "2000000"], r"--seq must be in \[1, 1048576\]"),
    Case("--context 30000000", ["--data", "{data}"] + RUN + ["--context", "30000000"],
         r"--context must be in \[0, 1048576\] \(got 30000000\)"),
    Case("--schedule unknown", ["--data", "{data}"] + RUN + ["--schedule", "step"],
         r"--schedule 'step' is not one of cosine\|wsd\|linear\|constant"),
    Case("--embd not divisible by --heads", ["--data", "{data}"] + RUN + ["--heads", "3"],
         r"--heads 3 does not divide --embd 32"),
    # the process grid (llmc/parallel.h)
    Case("--tp 3 on 2 ranks", ["--data", "{data}"] + RUN + ["--tp", "3"],
         r"2 ranks cannot be cut into tensor-parallel groups of --tp 3", launcher=MPIRUN + ["-np", "2"]),
    Case("--tp 2 with one attention head", ["--data", "{data}"] + RUN + ["--tp", "2"],
         r"--tp 2 does not divide the 1 attention heads", launcher=MPIRUN + ["-np", "2"]),
    Case("--sequence-parallel with rows that --tp does not divide",
         ["--data", "{data}"] + RUN + ["--tp", "2", "--heads", "2", "--embd", "64", "--batch", "1", "--seq", "7",
                                       "--sequence-parallel"],
         r"--sequence-parallel cuts the 7 tokens of a micro-batch \(--batch x --seq\) into --tp 2 parts",
         launcher=MPIRUN + ["-np", "2"]),
    Case("--tp 3 that does not divide the padded vocabulary",
         ["--data", "{data}"] + RUN + ["--tp", "3", "--heads", "3", "--embd", "96"],
         r"--tp 3 does not divide the padded vocabulary of 256 rows", launcher=MPIRUN + ["-np", "3"]),
    Case("--plan-ranks that --tp does not divide", RUN + ["--tp", "2", "--heads", "2", "--embd", "64", "--plan",
                                                          "--plan-ranks", "3"],
         r"3 ranks cannot be cut into tensor-parallel groups of --tp 2"),
    Case("--tp 0", ["--data", "{data}"] + RUN + ["--tp", "0"], r"--tp must be in \[1, 65536\] \(got 0\)"),
    Case("--muon-ns-steps 0 (Muon without orthogonalization)", ["--data", "{data}"] + RUN
         + ["--optimizer", "muon", "--muon-ns-steps", "0"], r"--muon-ns-steps must be in \[1, 99\] \(got 0\)"),
    Case("--muon-momentum 1 (a buffer that never moves)", ["--data", "{data}"] + RUN
         + ["--optimizer", "muon", "--muon-momentum", "1"], r"--muon-momentum must be in \[0, 1\) \(got 1\)"),
    Case("--vocab 1 (a loss of 0)", RUN + ["--vocab", "1"], r"--vocab must be 0 \(the tokenizer's\) or at least 2 "
         r"\(got 1\)"),
    Case("--device-memory 1.5 (not whole bytes)", RUN + ["--batch", "auto", "--device-memory", "1.5"],
         r"--device-memory: '1.5' is 1.5 bytes, not a whole number of bytes"),
    Case("--device-memory 10GB (no such unit)", RUN + ["--batch", "auto", "--device-memory", "10GB"],
         r"--device-memory: '10GB' is not a byte count: a number with an optional unit k, M, G or T"),
    Case("--device-memory 1k: 1024 bytes, in which nothing fits", RUN + ["--batch", "auto", "--device-memory", "1k"],
         r"no configuration fits 1014 bytes of device memory \(99% of 1024, --device-memory\)"),
    Case("--plan --batch auto --device-memory 1.5G plans the fitted batch", RUN + ["--plan", "--batch", "auto",
                                                                                   "--device-memory", "1.5G"],
         r"fitted to \d+ bytes of device memory \(99% of 1610612736\): --batch (\d+) --recompute none[\s\S]*"
         r"memory plan of rank 0 of 1 \(ZeRO-0 over 1 data-parallel ranks, tp 1, recompute none, B \1 x T 64",
         status=0),
    Case("--plan --recompute auto on 4 planned ZeRO-3 ranks plans the fitted recompute",
         RUN + ["--plan", "--plan-ranks", "4", "--zero", "3", "--batch", "16", "--recompute", "auto",
                "--device-memory", "158000000"],
         r"fitted to 156420000 bytes of device memory \(99% of 158000000\): --batch 16 --recompute selective"
         r"[\s\S]*memory plan of rank 0 of 4 \(ZeRO-3 over 4 data-parallel ranks, tp 1, recompute selective, B 16",
         status=0),
    Case("--zero 4", ["--data", "{data}"] + RUN + ["--zero", "4"], r"--zero must be in \[0, 3\] \(got 4\)"),
    Case("a repeated flag takes its last value", ["--data", "{data}"] + RUN + ["--steps", "1", "--steps", "3"],
         r"step +3/3", status=0),
    Case("a crafted checkpoint with context 3e7 (CRC resealed) in sample mode",
         ["--data", "{data}", "--sample", "{case}/c.bin"], r"checkpoint \S+c.bin holds an invalid model configuration",
         setup=checkpoint_file("c.bin", resealed(config_int(2, 30000000)))),
    # the checkpoint folder
    Case("--checkpoint-dir is a regular file", ["--data", "{data}", "--checkpoint-dir", "{ckpt}"] + RUN,
         r"checkpoint folder \S+: \S+ckpt_step00000004.bin is not a folder"),
    Case("--checkpoint-dir below a regular file", ["--data", "{data}", "--checkpoint-dir", "{ckpt}/sub"] + RUN,
         r"is not a folder"),
    Case("--checkpoint-dir that cannot be created", ["--data", "{data}", "--checkpoint-dir", "/proc/no/such"] + RUN,
         r"cannot create folder /proc/no"),
    Case("--checkpoint-dir held by a live run of this host", ["--data", "{data}", "--checkpoint-dir", "{case}/ck"] + RUN,
         r"checkpoint folder \S+ck is in use by another run: process \d+ on host", setup=live_lock),
    Case("--checkpoint-dir held from another host", ["--data", "{data}", "--checkpoint-dir", "{case}/ck"] + RUN,
         r"on host other-node holds [\s\S]*never taken over",
         setup=lambda case: (os.makedirs(os.path.join(case, "ck")), open(os.path.join(case, "ck", "train_gpt.lock"), "w")
                             .write("host other-node pid 1 start 1\n"))),
    # resuming with other flags: the run's identity
    Case("--resume with another --lr and --warmup: both named",
         ["--data", "{data}", "--resume", "{ckpt}", "--steps", "6", "--val-every", "0", "--sample-len", "0"] + TINY
         + ["--lr", "1e-3", "--warmup", "2"],
         r"of another run \(2 differences\):\n  --lr: 0.003 in the checkpoint, 0.001 in this run\n  --warmup: 0 in "
         r"the checkpoint, 2 in this run"),
    Case("--resume with another global batch",
         ["--data", "{data}", "--resume", "{ckpt}", "--steps", "6", "--val-every", "0", "--sample-len", "0"] + TINY
         + ["--grad-accum", "2"], r"global batch \(ranks x --batch x --grad-accum\): 4 sequences in the checkpoint, 8"),
    Case("--resume with another --data", ["--data", "{case}/d", "--resume", "{ckpt}", "--steps", "6", "--val-every",
                                          "0", "--sample-len", "0"] + TINY, r"--data: \S+ in the checkpoint, \S+/d in this run",
         setup=data_set()),
    Case("--resume with more --steps and other logging is the same run",
         ["--data", "{data}", "--resume", "{ckpt}", "--steps", "5", "--val-every", "1", "--val-steps", "1",
          "--sample-len", "4", "--log", "{case}/new.jsonl"] + TINY, r"resuming from [\s\S]*step +5/5", status=0),
    # ranks started with different flags (MPMD launches) and other launches
    Case("ranks with --val-every 0 : 5", ["--data", "{data}"] + RUN + [":", "-np", "1", "{bin}", "--data", "{data}"]
         + RUN + ["--val-every", "5"], r"rank 1 was started with other flags than rank 0:\n  --val-every: 0 on rank 0, "
         r"5 here", launcher=MPIRUN + ["-np", "1"]),
    Case("ranks with --val-every 0 : 5: rank 0's message names it (1 difference)",
         ["--data", "{data}"] + RUN + [":", "-np", "1", "{bin}", "--data", "{data}"] + RUN + ["--val-every", "5"],
         r"rank 0: the ranks were started with different flags \(1 difference; every rank must get the same "
         r"command line\):\n  --val-every: 0 on rank 0, 5 on rank 1", launcher=MPIRUN + ["-np", "1"]),
    Case("ranks with another --batch and --data", ["--data", "{data}"] + RUN + [":", "-np", "1", "{bin}", "--data",
                                                                                "{case}/d"] + RUN + ["--batch", "2"],
         r"rank 1 was started with other flags than rank 0:\n  --data: .*\n  --batch: 4 on rank 0, 2 here",
         launcher=MPIRUN + ["-np", "1"], setup=data_set()),
    Case("ranks of different builds (bf16 and fp32)", ["--data", "{data}"] + RUN + [":", "-np", "1",
         "{bin}_fp32", "--data", "{data}"] + RUN, r"the ranks run different builds of train_gpt",
         launcher=MPIRUN + ["-np", "1"]),
    Case("a rank started without MPI and without --rendezvous", ["--data", "{data}"] + RUN,
         r"give every rank --rendezvous DIR", launcher=["env", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1"]),
    Case("a rendezvous that rank 1 never reaches", ["--rendezvous", "{scratch}", "--comm-timeout", "1"] + RUN,
         r"rank 0: rank 1 of 2 did not join the rendezvous in \S+ within 1 s[\s\S]*exit statuses: 1$",
         launcher=ranks(dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0)), status=0, clean=True),
    Case("a rank started with WORLD_SIZE 2 but no LOCAL_RANK", ["--rendezvous", "{scratch}"] + RUN,
         r"rank 1 of 2: the launcher set RANK and WORLD_SIZE but not LOCAL_RANK",
         launcher=["env", "RANK=1", "WORLD_SIZE=2"], clean=True, timeout=20),
    Case("stale rendezvous files of a killed job: rank 0 alone names them in time",
         ["--rendezvous", "{scratch}/rv", "--comm-timeout", "3"] + RUN,
         r"rank 0: rank 1 of 2 did not join the rendezvous in \S+ within 3 s \(--comm-timeout\)\n  \S+rank1 is a "
         r"file of an earlier job: its process \(host \S+ pid \d+\) no longer runs[\s\S]*exit statuses: 1$",
         launcher=ranks(dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0)), setup=stale_rendezvous, status=0, clean=True),
    Case("stale rendezvous files of a killed job: a new job of 2 ranks meets and trains",
         ["--rendezvous", "{scratch}/rv", "--comm-timeout", "30"] + RUN,
         r"step +2/2[\s\S]*exit statuses: 0 0$", setup=stale_rendezvous, status=0, clean=True,
         launcher=ranks(dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0), dict(RANK=1, WORLD_SIZE=2, LOCAL_RANK=1))),
    Case("two processes given RANK=0: both end, naming each other", ["--rendezvous", "{scratch}", "--comm-timeout",
                                                                      "3"] + RUN,
         r"(two processes were given rank 0 [^\n]*both end\n[\s\S]*){2}exit statuses: 1 1$", status=0, clean=True,
         launcher=ranks(dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0), dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0))),
    Case("two processes given RANK=0 and one RANK=1: none hangs, the duplicate is named",
         ["--rendezvous", "{scratch}", "--comm-timeout", "10"] + RUN,
         r"two processes were given rank 0[\s\S]*exit statuses: \d \d \d$", status=0, clean=True,
         launcher=ranks(dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0), dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0),
                        dict(RANK=1, WORLD_SIZE=2, LOCAL_RANK=1))),
    Case("ranks started with WORLD_SIZE 2 and 3: both name the mismatch at once",
         ["--rendezvous", "{scratch}", "--comm-timeout", "20"] + RUN,
         r"rank 0: rank 1 \(host \S+ pid \d+\) was started as one of 3 ranks, rank 0 as one of 2[\s\S]*"
         r"exit statuses: 1 1$", status=0, clean=True, timeout=15,
         launcher=ranks(dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0), dict(RANK=1, WORLD_SIZE=3, LOCAL_RANK=1))),
    Case("ranks started with SLURM_JOB_ID 100 and 200: the deadline's message names the other job",
         ["--rendezvous", "{scratch}", "--comm-timeout", "3"] + RUN,
         r"\A(?=[\s\S]*rank 0: rank 1 of 2 did not join[^\n]*\n  a file of job 'slurm200.0' \(this job is "
         r"'slurm100.0'\): rank 1 of 2 ranks)(?=[\s\S]*rank 1: no complete offer[^\n]*\n  a file of job "
         r"'slurm100.0' \(this job is 'slurm200.0'\): rank 0)[\s\S]*exit statuses: 1 1$", status=0, clean=True,
         launcher=ranks(dict(SLURM_PROCID=0, SLURM_NTASKS=2, SLURM_LOCALID=0, SLURM_JOB_ID=100),
                        dict(SLURM_PROCID=1, SLURM_NTASKS=2, SLURM_LOCALID=1, SLURM_JOB_ID=200))),
    Case("two ranks with LOCAL_RANK 0 on one host: named before they share a GPU",
         ["--rendezvous", "{scratch}", "--comm-timeout", "20"] + RUN,
         r"ranks 0 \(host \S+ pid \d+\) and 1 \(host \S+ pid \d+\) are both local rank 0 of host[\s\S]*"
         r"exit statuses: 1 1$", status=0, clean=True, timeout=15,
         launcher=ranks(dict(RANK=0, WORLD_SIZE=2, LOCAL_RANK=0), dict(RANK=1, WORLD_SIZE=2, LOCAL_RANK=0))),
    # a run that diverges
    Case("--lr 1e300 with --max-skips 0: a non-finite loss stops the run",
         ["--data", "{data}"] + RUN + ["--lr", "1e300", "--max-skips", "0"],
         r"the loss is -?nan and the gradient norm -?nan: training diverged"),
]


# ---------------------------------------------------------------------------------------------

def snapshot(paths):
    """{path: content hash, or the kind of a file that is not regular} for every file under
    paths, without opening anything but regular files."""
    out = {}
    for top in paths:
        for folder, dirs, files in os.walk(top):
            out[folder] = "folder"
            for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                path = os.path.join(folder, name)
                mode = os.lstat(path).st_mode
                if stat.S_ISREG(mode):
                    with open(path, "rb") as f:
                        out[path] = hashlib.sha256(f.read()).hexdigest()
                else:
                    out[path] = "special file, mode %o" % stat.S_IFMT(mode)
    return out


def changed(before, after):
    return sorted(p for p, h in before.items() if after.get(p) != h)


def run_case(case, bin_dir, work):
    folder = os.path.join(work, "cases", re.sub(r"\W+", "_", case.name)[:60])
    scratch = folder + ".scratch"
    os.makedirs(folder)
    os.makedirs(os.path.join(scratch, "shm"))
    if case.setup:
        case.setup(folder)
    binary = os.path.join(bin_dir, case.binary)
    fields = dict(FIXTURE, case=folder, scratch=scratch, bin=binary)
    command = [a.format(**fields) for a in case.launcher + [binary] + case.args]
    watched = [FIXTURE["data"], FIXTURE["ck"], FIXTURE["ck2"], FIXTURE["ck2b"], FIXTURE["log"], folder]
    before = snapshot(watched)
    scratch_before = snapshot([scratch])
    t0 = time.time()
    proc = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=case.timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        rc = None
    seconds = time.time() - t0
    text = output.decode("utf-8", "replace")
    problems = []
    if rc is None:
        problems.append("no exit within %d s (a hang)" % case.timeout)
    elif (rc != case.status) if case.status is not None else rc == 0:
        problems.append("exit status %d, expected %s" % (rc, case.status if case.status is not None
                                                         else "non-zero"))
    if rc is not None and not re.search(case.pattern, text, re.M):
        problems.append("output does not match /%s/" % case.pattern)
    damaged = changed(before, snapshot(watched))
    if damaged:
        problems.append("files changed: %s" % ", ".join(os.path.relpath(p, work) for p in damaged))
    left = changed(snapshot([scratch]), scratch_before) if case.clean else []
    if left:
        problems.append("files left behind: %s" % ", ".join(os.path.relpath(p, work) for p in left))
    last = text.strip().splitlines()[-1] if text.strip() else "(no output)"
    check(not problems, "%s (%.1f s)" % (case.name, seconds),
          last if not problems else "; ".join(problems) + "\n" + text[-1500:])


def wait_for_step(proc_output_path, step, limit_s):
    """Waits until the log of a running trainer shows `step` (or limit_s passes)."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if os.path.exists(proc_output_path) and re.search(r"step +%d/" % step, open(proc_output_path, errors="replace").read()):
            return True
        time.sleep(0.1)
    return False


def rank_pids(binary, marker):
    """The pids of the trainer processes whose command line holds `marker`, in pid order."""
    out = subprocess.run(["pgrep", "-f", "--", marker], capture_output=True, text=True).stdout.split()
    return sorted(int(p) for p in out if os.path.realpath("/proc/%s/exe" % p) == os.path.realpath(binary))


TP_GRID = "--tp 2 --sequence-parallel --heads 2 --embd 64"
# the mpirun jobs of test_running_jobs: how the second rank is ended, the signal, the grid
STOPPED_OR_KILLED = (("stopped (SIGSTOP)", signal.SIGSTOP, "--zero 0"),
                     ("killed (SIGKILL)", signal.SIGKILL, "--zero 0"),
                     ("stopped (SIGSTOP) under ZeRO-3", signal.SIGSTOP, "--zero 3"),
                     ("killed (SIGKILL) under ZeRO-3", signal.SIGKILL, "--zero 3"),
                     ("stopped (SIGSTOP) under tensor parallelism", signal.SIGSTOP, TP_GRID),
                     ("killed (SIGKILL) under tensor parallelism", signal.SIGKILL, TP_GRID))
# the names of test_running_jobs' cases, for -k
RUNNING_JOBS = ["two runs on one checkpoint folder"] + [
    "a rank %s mid-run under mpirun" % how for how, _, _ in STOPPED_OR_KILLED]


def test_running_jobs(bin_dir, work, only=""):
    """Cases that need a job running alongside: two runs on one checkpoint folder, and a rank
    stopped (SIGSTOP) or killed (SIGKILL) in the middle of an mpirun job (those of RUNNING_JOBS
    whose name contains `only`)."""
    binary = os.path.join(bin_dir, "train_gpt")
    folder = os.path.join(work, "running")
    os.makedirs(folder)
    if only in RUNNING_JOBS[0]:
        two_runs_on_one_folder(binary, folder)
    for i, (how, sig, grid) in enumerate(STOPPED_OR_KILLED):
        if only in RUNNING_JOBS[1 + i]:
            rank_stopped_or_killed(binary, folder, i, how, sig, grid)


def two_runs_on_one_folder(binary, folder):
    ck, out1 = os.path.join(folder, "ck"), os.path.join(folder, "first.out")
    long_run = ["--data", FIXTURE["data"], "--steps", "60", "--checkpoint-dir", ck, "--checkpoint-every", "20",
                "--val-every", "0", "--sample-len", "0"] + TINY
    with open(out1, "w") as f:
        first = subprocess.Popen([binary] + long_run, stdout=f, stderr=subprocess.STDOUT, cwd=folder)
    wait_for_step(out1, 1, 60)
    second = subprocess.run([binary] + long_run, capture_output=True, text=True, cwd=folder, timeout=60)
    first.wait(timeout=300)
    text = open(out1, errors="replace").read()
    check(second.returncode != 0 and re.search(r"in use by another run: process %d on host" % first.pid, second.stderr),
          "two runs on one checkpoint folder: the second is refused at start, naming the first's pid",
          second.stderr.strip().splitlines()[-1] if second.stderr.strip() else "(no output)")
    names = sorted(os.listdir(ck))
    want = sorted("ckpt_step%08d%s.bin" % (step, part) for step in (20, 40, 60) for part in ("", ".rank00000"))
    check(first.returncode == 0 and "step    60/60" in text and names == want,
          "two runs on one checkpoint folder: the first finishes intact, its checkpoints and no lock left", str(names))


def rank_stopped_or_killed(binary, folder, i, how, sig, grid):
    """Job i: two ranks under mpirun, the second (in pid order) stopped or killed (sig) at step 2.
    The job must end within 30 s with a non-zero status and a message naming the failure: the
    survivor's deadline message for SIGSTOP; for SIGKILL, whichever of mpirun's report and the
    survivor's message comes first (KILLED_RANK_MESSAGE: their order is not deterministic)."""
    out = os.path.join(folder, "job_%d.out" % i)
    # names this job's processes for pgrep
    marker = "--comm-timeout 3 --rendezvous job_%d %s" % (i, grid)
    with open(out, "w") as f:
        job = subprocess.Popen(MPIRUN + ["-np", "2", binary, "--data", FIXTURE["data"], "--steps", "100000",
                                         "--val-every", "0", "--sample-len", "0"] + TINY + marker.split(),
                               stdout=f, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True)
    started = wait_for_step(out, 2, 120)
    pids = rank_pids(binary, marker)
    t0 = time.time()
    if started and len(pids) == 2:
        os.kill(pids[1], sig)
    try:
        job.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    seconds = time.time() - t0
    text = open(out, errors="replace").read()
    expected = r"did not finish within 3 s \(--comm-timeout\)" if sig == signal.SIGSTOP else KILLED_RANK_MESSAGE
    check(started and len(pids) == 2 and job.returncode != 0 and seconds < 30 and re.search(expected, text, re.M),
          "a rank %s mid-run under mpirun: the job ends in %.1f s with a message" % (how, seconds),
          "status %s: " % job.returncode + (" | ".join(l for l in text.splitlines() if re.search(expected, l))
                                            or "no line matches /%s/; last: %s" % (
                                                expected, text.strip().splitlines()[-1] if text.strip() else "(no output)")))
    # mpirun may exit before a rank it signalled as it ended the job (SIGCONT, SIGTERM) has
    # finished handling the signal: the ranks too must be gone within the job's 30 s
    while rank_pids(binary, marker) and time.time() < t0 + 30:
        time.sleep(0.05)
    left = rank_pids(binary, marker)
    check(not left, "a rank %s: no process of the job is left" % how, str(left))
    for p in left:
        os.kill(p, signal.SIGKILL)


def make_fixture(bin_dir, work):
    text, data = os.path.join(work, "tiny.txt"), os.path.join(work, "data")
    make_text(text)
    p = prepare_text(text, data)
    if not check(p.returncode == 0, "fixture: prepare.py makes a tiny byte-level data set",
                 p.stderr[-500:] if p.returncode else ""):
        return False
    ck, log = os.path.join(work, "ck"), os.path.join(work, "log.jsonl")
    p = subprocess.run([os.path.join(bin_dir, "train_gpt"), "--data", data, "--steps", "4",
                        "--checkpoint-dir", ck, "--checkpoint-every", "2", "--log", log,
                        "--val-every", "0", "--sample-len", "0"] + TINY,
                       capture_output=True, text=True, cwd=work, timeout=300)
    names = manifest_names(ck) if os.path.isdir(ck) else []
    if not check(p.returncode == 0 and names == ["ckpt_step00000002.bin", "ckpt_step00000004.bin"],
                 "fixture: a 4-step run leaves checkpoints at steps 2 and 4 and a log",
                 (p.stdout + p.stderr)[-800:] if p.returncode else ""):
        return False
    FIXTURE.update(data=data, ck=ck, ckpt=os.path.join(ck, names[-1]), log=log,
                   bin=os.path.join(bin_dir, "train_gpt"))
    # the 2-rank runs: ck2, and ck2b resumed from its step 4 with another --steps
    ck2, ck2b = os.path.join(work, "ck2"), os.path.join(work, "ck2b")
    two = MPIRUN + ["-np", "2", FIXTURE["bin"], "--data", data, "--zero", "1", "--val-every", "0",
                    "--sample-len", "0"] + TINY
    for folder, extra, want in (
            (ck2, ["--steps", "6", "--checkpoint-every", "2"], [2, 4, 6]),
            (ck2b, ["--steps", "7", "--checkpoint-every", "6", "--resume",
                    os.path.join(ck2, "ckpt_step00000004.bin")], [6, 7])):
        p = subprocess.run(two + extra + ["--checkpoint-dir", folder], capture_output=True, text=True,
                           cwd=work, timeout=300)
        names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        expect = sorted("ckpt_step%08d%s.bin" % (step, part) for step in want
                        for part in ("", ".rank00000", ".rank00001"))
        if not check(p.returncode == 0 and names == expect,
                     "fixture: a 2-rank ZeRO-1 run leaves 2-shard checkpoints at steps %s in %s"
                     % (want, os.path.basename(folder)), (p.stdout + p.stderr)[-800:] if p.returncode else str(names)):
            return False
    FIXTURE.update(ck2=ck2, ck2b=ck2b)
    return True


FIXTURE = {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"),
                    help="folder with train_gpt and train_gpt_fp32 (default build/cpu, made by `make cpu`)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder and print its path")
    ap.add_argument("-k", dest="only", default="",
                    help="run only the cases whose name contains this (of the running-job cases too)")
    args = ap.parse_args()
    bin_dir = os.path.abspath(args.bin_dir)
    for name in sorted({c.binary for c in CASES} | {"train_gpt"}):
        if not os.access(os.path.join(bin_dir, name), os.X_OK):
            print("error: %s is missing; build it with `make cpu` (or pass --bin-dir)"
                  % os.path.join(bin_dir, name), file=sys.stderr)
            return 1
    cases = [c for c in CASES if args.only in c.name]
    if not cases and not any(args.only in name for name in RUNNING_JOBS):
        print("error: no case's name contains %r" % args.only, file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(prefix="test_bad_inputs_")
    start = time.time()
    try:
        if make_fixture(bin_dir, work):
            for case in cases:
                run_case(case, bin_dir, work)
            test_running_jobs(bin_dir, work, args.only)
    finally:
        if args.keep:
            print("scratch folder kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return timed_summary(start)


if __name__ == "__main__":
    sys.exit(main())
