"""scripts/testlib.py: what the Python tests of the trainer share: reading checkpoints (format:
llmc/checkpoint.h; a checkpoint is a manifest ckpt_stepSSSSSSSS.bin and its shard files
ckpt_stepSSSSSSSS.rankRRRRR.bin, written by train_run.cuh's save_checkpoint), independently of
the trainer's own reader.

A shard's section "owned" lists the ranges of the parameter layout it holds (uint64 tensor,
offset, n, matrix), and its sections hold those ranges' elements one after the other: "params"
and "master" every range, each optimizer's state section (STATE_SECTIONS) the ranges of the
tensors that optimizer updates (the manifest's "layout" section names each tensor's optimizer).
checkpoint_array reassembles any of them in layout order, whatever the grid and ZeRO stage that
wrote it.
"""
import glob
import hashlib
import os
import struct

import numpy as np

# train_gpt.cu's optimizer table (OPTIMIZERS, in OptimizerKind order) and the state sections of
# each (STATE_BUFFERS)
OPTIMIZERS = ["adamw", "muon", "lion"]
STATE_SECTIONS = {"optimizer.adamw.m": "adamw", "optimizer.adamw.v": "adamw",
                  "optimizer.muon.momentum": "muon", "optimizer.lion.m": "lion"}
# a record of the manifest's section "layout" (train_run.cuh's LayoutRecord)
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
