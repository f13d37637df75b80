#!/usr/bin/env python3
"""scripts/test_hf.py: pretrained weights in and out (--init-from, --export-hf; train_weights.cuh
and llmc/weights_io.h), checked against Hugging Face transformers' GPT2LMHeadModel, an
independent implementation of GPT-2.

Random GPT2LMHeadModels of three shapes (vocabulary 256, and 300 to exercise the padding to 384;
head sizes 32 and 64; contexts 64, 32 and 16), saved with save_pretrained, and token shards of
English-like bytes (T = 16, 2 x 4 validation sequences). Checks:
1. --init-from a Hugging Face folder, every shape: the validation loss at step 0 (every
   validation sequence, read from the log) equals transformers' loss on the same sequences,
   computed in float64 from its fp32 logits: fp32 build within 1e-5 relative (test_gpt's fp32
   rule); bf16 build within test_gpt's bf16 rule, min(max(4 d, 2^-8), 5e-2), where d is how far
   transformers' own bf16 model moves that loss. Every logit of the first validation batch
   (--dump-logits, B x T x V) against transformers' on the dumped tokens (check_logits: the
   largest absolute difference relative to the largest |logit|): fp32 build within 1e-5, bf16
   build within the same rule with d how far transformers' bf16 model moves the logits.
2. Round trips, fp32 build: Hugging Face -> --export-hf (direct) and Hugging Face -> a checkpoint
   (one step at --lr 0) -> --export-hf give back every tensor bit for bit (the same names,
   shapes and values), and transformers loads the folder; folders saved in bf16 and fp16 are
   read exactly (the export holds their values as F32), and so is a folder of shards
   (model.safetensors.index.json, save_pretrained's max_shard_size). The bf16 build's weights are the fp32
   ones rounded to nearest even: its direct export equals torch's bfloat16 cast of them.
3. llm.c model files written here by the documented layout (llm.c's train_gpt2.py write_model:
   the 256-int32 header, version 3 fp32 / 5 bf16, the tensors in llm.c's order, wte padded to
   Vp rows): loaded and exported (fp32 build), every tensor equals the Hugging Face model's
   (fp32: bit for bit; bf16: its bf16 rounding), and the fp32 file's step-0 validation loss is
   the Hugging Face folder's, bit for bit.
4. Fine-tuning from a Hugging Face folder (fp32): the validation loss after 4 steps is below the
   pretrained model's; the same run under mpirun -np 2 with ZeRO-3 and with --tp 2 equals the
   single process (losses, norms and parameters within 1e-5: testlib.compare, as test_zero3 and
   test_tp). Each run's checkpoint (one file; two ZeRO-3 shards; two tensor-parallel parts),
   exported with --export-hf, loads in transformers with our logits: its loss on the validation
   sequences equals that run's logged final validation loss within 1e-5; the tp 2 run's logits,
   dumped by the run resumed under mpirun -np 2 --tp 2 (the ranks' vocabulary columns
   gathered), equal transformers' within 1e-5 (of the largest logit).
5. Greedy generation (--sample, --temperature 0) from a Hugging Face folder and from the
   fine-tuned checkpoint equals transformers' generate(do_sample=False) from the same weights
   and prompt, token for token (the byte tokenizer, so the printed bytes are the tokens).
6. Tokenizer files: a model of GPT-2's vocabulary exported with GPT-2's BPE tokenizer file
   (dev/data/tokenizer.py) writes vocab.json and merges.txt equal to GPT-2's encoder.json and
   vocab.bpe, and transformers' GPT2Tokenizer loaded from the folder encodes text as ours does;
   a checkpoint of a run on a --data folder with that tokenizer, exported without --tokenizer,
   gets the same files.
7. Refusals, each with a message naming the problem: a safetensors header length past the end
   of the file, a header that is not JSON, a missing tensor, a wrong shape, a wrong dtype, a
   truncated file, an lm_head not tied to wte, a config.json whose sizes disagree with the
   tensors, another layer_norm_epsilon, another architecture, a NaN in a tensor, a config.json that
   is a FIFO, a head size the attention kernels lack; an llm.c file truncated, with an infinity, with a bad
   magic, with another version; a shape flag that contradicts the file.

Usage: python3 scripts/test_hf.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import copy
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time

import numpy as np

from testlib import MPIRUN, ROOT, check, compare, finish, hf_modules, logged_values, make_text, train, write_shard

T, B, VAL_BATCHES = 16, 4, 2
SHAPES = [dict(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64),
          dict(n_layer=2, n_embd=128, n_head=4, vocab_size=300, n_positions=32),
          dict(n_layer=1, n_embd=64, n_head=1, vocab_size=256, n_positions=16)]
FP32_REL = 1e-5
BF16_FACTOR, BF16_FLOOR, BF16_CEILING = 4.0, 2.0 ** -8, 5e-2
COMMON = ["--seq", str(T), "--batch", str(B), "--val-steps", "0", "--sample-len", "0", "--seed", "3"]
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def trainer(binary, args):
    """Runs the trainer; returns (exit code, stdout bytes + stderr text)."""
    p = subprocess.run([binary] + args, capture_output=True, cwd=ROOT)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


class SmallBpe:
    """A byte-level BPE of 300 tokens for dev/data/tokenizer.py's file writer: the 256 bytes,
    43 merges of the text's most frequent byte pairs, and the end-of-text token 299; no code
    point classes. The trainer needs a tokenizer of the model's vocabulary in a --data folder."""
    kind, vocab_size, eot = 2, 300, 299

    def __init__(self, text):
        pairs = {}
        for a, b in zip(text, text[1:]):
            pairs[(a, b)] = pairs.get((a, b), 0) + 1
        top = sorted(pairs, key=lambda p: (-pairs[p], p))[:43]
        self.token_bytes = [bytes([i]) for i in range(256)] + [bytes(p) for p in top] + [b"<|endoftext|>"]
        self.merges = [(a, b, 256 + i) for i, (a, b) in enumerate(top)]

    def class_ranges(self):
        return []


def make_data(work, pytok):
    """Train and validation shards of make_text's bytes (tokens < 256) in two folders, one with
    the byte tokenizer (models of 256 tokens) and one with SmallBpe (300); the validation split
    is VAL_BATCHES batches of B sequences of T + 1 tokens (overlapping by one)."""
    path = os.path.join(work, "text.txt")
    make_text(path)
    tokens = list(open(path, "rb").read())
    folders = {}
    for vocab, tok in ((256, pytok.ByteTokenizer()), (300, SmallBpe(tokens))):
        data = os.path.join(work, f"data{vocab}")
        os.makedirs(data)
        n_val = VAL_BATCHES * B * T + 1
        write_shard(os.path.join(data, "hf_val.bin"), tokens[:n_val])
        write_shard(os.path.join(data, "hf_train.bin"), tokens[n_val:])
        with open(os.path.join(data, "tokenizer.bin"), "wb") as f:
            f.write(pytok.tokenizer_file_bytes(tok))
        folders[vocab] = data
    val = [tokens[k * T:k * T + T + 1] for k in range(VAL_BATCHES * B)]
    return folders, np.array(val, dtype=np.int64)


def hf_loss(torch, model, val):
    """Mean cross-entropy of model on the validation sequences, from its logits in float64."""
    with torch.no_grad():
        x = torch.tensor(val[:, :-1])
        logits = model(x).logits.double()
        lp = torch.log_softmax(logits, dim=-1)
        y = torch.tensor(val[:, 1:])
        return float(-lp.gather(-1, y.unsqueeze(-1)).mean())


DUMP_MAGIC, DUMP_VERSION = 20261202, 1  # --dump-logits' header (train_run.cuh's dump_logits)


def dump_logits(binary, args, path, ranks=0):
    """Our logits of the first validation batch: the trainer with `args` (the model: --init-from a
    folder, or a run's flags with --resume) and --dump-logits `path`, under mpirun -np ranks when
    ranks > 0. Returns (tokens (B,T) int64, logits (B,T,V) float64, "") or (None, None, the
    error)."""
    launch = MPIRUN + ["-np", str(ranks)] if ranks else []
    p = subprocess.run(launch + [binary] + args + ["--dump-logits", path], capture_output=True, cwd=ROOT)
    if p.returncode != 0:
        return None, None, p.stderr.decode(errors="replace")[-300:]
    raw = open(path, "rb").read()
    magic, version, b, t, v = struct.unpack("<5i", raw[:20])
    if (magic, version) != (DUMP_MAGIC, DUMP_VERSION) or len(raw) != 32 + 4 * b * t + 4 * b * t * v:
        return None, None, f"{path}: header {magic}, {version}, {b} x {t} x {v} for {len(raw)} bytes"
    tokens = np.frombuffer(raw, "<i4", b * t, 32).reshape(b, t).astype(np.int64)
    logits = np.frombuffer(raw, "<f4", b * t * v, 32 + 4 * b * t).reshape(b, t, v).astype(np.float64)
    return tokens, logits, ""


def hf_logits(torch, model, tokens):
    """transformers' logits of model on tokens (B,T) as float64 (B,T,V)."""
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.double().numpy()


def logits_error(got, want):
    """The largest absolute difference of two logit arrays relative to the logits' scale, the
    largest |logit| of want (inf when got is missing or of another shape)."""
    if got is None or got.shape != want.shape:
        return float("inf")
    return float(np.abs(got - want).max() / np.abs(want).max())


def check_logits(torch, model, binary, args, path, bound, label, ranks=0):
    """Checks our --dump-logits (dump_logits' args and ranks) against `model`'s logits on the
    dumped tokens, every logit within `bound` (logits_error); returns our (tokens, logits)."""
    tokens, ours, err = dump_logits(binary, args, path, ranks)
    e = logits_error(ours, hf_logits(torch, model, tokens)) if tokens is not None else float("inf")
    shape = "x".join(map(str, ours.shape)) if ours is not None else "?"
    check(e <= bound, f"{label}: {shape} logits (--dump-logits) vs transformers': max abs error {e:.1e} of the "
          f"largest logit <= {bound:.1e}", err)
    return tokens, ours


def bf16_logits_bound(torch, model, tokens):
    """test_gpt's bf16 rule on the logits: min(max(4 d, 2^-8), 5e-2), d how far transformers' own
    bf16 model moves them (logits_error of its bf16 copy's against its fp32 ones); returns (the
    bound, d)."""
    want = hf_logits(torch, model, tokens)
    d = logits_error(hf_logits(torch, copy.deepcopy(model).to(torch.bfloat16), tokens), want)
    return min(max(BF16_FACTOR * d, BF16_FLOOR), BF16_CEILING), d


def logged_val_losses(log):
    with open(log) as f:
        return {r["step"]: r["val_loss"] for r in map(json.loads, f) if "val_loss" in r}


def write_llmc(torch, sd, cfg, path, bf16):
    """An llm.c model file of state dict sd by its documented layout (see the docstring)."""
    L, C, V, maxT = cfg.n_layer, cfg.n_embd, cfg.vocab_size, cfg.n_positions
    Vp = (V + 127) // 128 * 128
    header = [0] * 256
    header[:8] = [20240326, 5 if bf16 else 3, maxT, V, L, cfg.n_head, C, Vp]
    t = lambda name: sd["transformer." + name]
    wte = torch.zeros(Vp, C)
    wte[:V] = t("wte.weight")
    tensors = [wte, t("wpe.weight")]
    per_layer = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                 "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                 "mlp.c_proj.weight", "mlp.c_proj.bias"]
    for name in per_layer:  # each tensor of all layers, then the next; matrices as nn.Linear (out, in)
        for l in range(L):
            w = t(f"h.{l}.{name}")
            tensors.append(w.t() if name in CONV1D else w)
    tensors += [t("ln_f.weight"), t("ln_f.bias")]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for w in tensors:
            w = w.contiguous()
            f.write((w.to(torch.bfloat16).view(torch.int16) if bf16 else w.float()).numpy().tobytes())


def same_tensors(torch, got_path, want):
    """Whether the safetensors file holds exactly the tensors of dict `want` (names, shapes and
    values, bit for bit); returns (ok, the first difference)."""
    from safetensors.torch import load_file
    got = load_file(got_path)
    if sorted(got) != sorted(want):
        return False, f"names differ: {sorted(set(got) ^ set(want))[:4]}"
    for k in want:
        if got[k].shape != want[k].shape or not torch.equal(got[k], want[k]):
            return False, f"tensor {k} differs"
    return True, f"{len(want)} tensors identical"


def write_safetensors(path, header, data):
    """A safetensors file from a header dict (or raw header bytes) and its data bytes."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    start = time.time()
    fp32, bf16 = os.path.join(args.bin_dir, "train_gpt_fp32"), os.path.join(args.bin_dir, "train_gpt")
    torch, transformers, load_file, pytok = hf_modules("Hugging Face")

    work = tempfile.mkdtemp(prefix="test_hf_")
    try:
        datas, val = make_data(work, pytok)
        byte_tok = os.path.join(datas[256], "tokenizer.bin")
        models, folders = [], []
        for i, shape in enumerate(SHAPES):
            torch.manual_seed(100 + i)
            # a wider init than GPT-2's 0.02, so that greedy choices are far from ties
            cfg = transformers.GPT2Config(**shape, initializer_range=0.1)
            model = transformers.GPT2LMHeadModel(cfg).eval()
            folder = os.path.join(work, f"hf{i}")
            model.save_pretrained(folder)
            models.append(model)
            folders.append(folder)

        # 1. the step-0 validation loss of --init-from against transformers' loss
        # 2. round trips (fp32 build)
        for i, (model, folder) in enumerate(zip(models, folders)):
            name = "V %(vocab_size)d, L %(n_layer)d, C %(n_embd)d, NH %(n_head)d, maxT %(n_positions)d" % SHAPES[i]
            want = hf_loss(torch, model, val)
            d = abs(hf_loss(torch, copy.deepcopy(model).to(torch.bfloat16), val) - want) / want
            bf16_bound = min(max(BF16_FACTOR * d, BF16_FLOOR), BF16_CEILING)
            for binary, bound in ((fp32, FP32_REL), (bf16, bf16_bound)):
                build = "fp32" if binary == fp32 else "bf16"
                log, ck = os.path.join(work, f"init{i}_{build}.jsonl"), os.path.join(work, f"init{i}_{build}_ck")
                data = datas[SHAPES[i]["vocab_size"]]
                rc, _, err = trainer(binary, ["--init-from", folder, "--data", data, "--steps", "1", "--lr", "0",
                                              "--val-every", "1", "--log", log, "--checkpoint-dir", ck] + COMMON)
                got = logged_val_losses(log).get(0) if rc == 0 else None
                e = abs(got - want) / want if got is not None else float("inf")
                check(e <= bound, f"{build} --init-from HF ({name}): step-0 val loss {got} vs transformers' "
                      f"{want:.7f}: rel {e:.1e} <= {bound:.1e}", "" if rc == 0 else err[-300:])
                if binary != fp32:
                    if i == 1:  # the bf16 build rounds to nearest even, as torch's bfloat16 cast does
                        out = os.path.join(work, "export_bf16")
                        rc, _, err = trainer(bf16, ["--init-from", folder, "--export-hf", out])
                        want_bf16 = {k: v.to(torch.bfloat16).float()
                                     for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
                        ok, what = same_tensors(torch, os.path.join(out, "model.safetensors"),
                                                want_bf16) if rc == 0 else (False, err)
                        check(ok, f"bf16 build: HF -> --export-hf ({name}): {what} (torch's bf16 rounding)")
                    continue
                out = os.path.join(work, f"export{i}")
                rc, _, err = trainer(fp32, ["--init-from", folder, "--export-hf", out])
                ok, what = same_tensors(torch, os.path.join(out, "model.safetensors"),
                                        load_file(os.path.join(folder, "model.safetensors"))) if rc == 0 else (False, err)
                check(ok, f"fp32 HF -> --export-hf -> HF ({name}): {what}")
                out = os.path.join(work, f"export_ck{i}")
                rc, _, err = trainer(fp32, ["--init-from", ck, "--export-hf", out])
                ok, what = same_tensors(torch, os.path.join(out, "model.safetensors"),
                                        load_file(os.path.join(folder, "model.safetensors"))) if rc == 0 else (False, err)
                if ok:
                    back = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
                    ok, what = abs(hf_loss(torch, back, val) - want) == 0.0, what + ", transformers loads it"
                check(ok, f"fp32 HF -> checkpoint (a step at --lr 0) -> --export-hf -> HF ({name}): {what}")

            # every logit of the first validation batch (--dump-logits), both builds
            args = ["--init-from", folder, "--data", datas[SHAPES[i]["vocab_size"]]] + COMMON
            tokens, _ = check_logits(torch, model, fp32, args, os.path.join(work, f"logits{i}_fp32"), FP32_REL,
                                     f"fp32 --init-from HF ({name})")
            if tokens is not None:
                bound, d = bf16_logits_bound(torch, model, tokens)
                check_logits(torch, model, bf16, args, os.path.join(work, f"logits{i}_bf16"), bound,
                             f"bf16 --init-from HF ({name}; transformers' bf16 model: {d:.1e})")

        # half-precision folders (save_pretrained of a bf16 or fp16 model): read exactly
        for dtype, label in ((torch.bfloat16, "BF16"), (torch.float16, "F16")):
            half_dir, out = os.path.join(work, f"hf_{label}"), os.path.join(work, f"hf_{label}_out")
            copy.deepcopy(models[1]).to(dtype).save_pretrained(half_dir)
            rc, _, err = trainer(fp32, ["--init-from", half_dir, "--export-hf", out])
            want = {k: v.float() for k, v in load_file(os.path.join(half_dir, "model.safetensors")).items()}
            ok, what = same_tensors(torch, os.path.join(out, "model.safetensors"), want) if rc == 0 else (False, err)
            check(ok, f"fp32 build: a {label} Hugging Face folder -> --export-hf: {what} (its values, exactly)")

        # a folder of shards (model.safetensors.index.json), as save_pretrained writes a large model
        sharded, out = os.path.join(work, "hf_sharded"), os.path.join(work, "hf_sharded_out")
        models[1].save_pretrained(sharded, max_shard_size="200KB")
        shards = len([f for f in os.listdir(sharded) if f.endswith(".safetensors")])
        rc, _, err = trainer(fp32, ["--init-from", sharded, "--export-hf", out])
        ok, what = same_tensors(torch, os.path.join(out, "model.safetensors"),
                                load_file(os.path.join(folders[1], "model.safetensors"))) if rc == 0 else (False, err)
        check(ok and shards > 1, f"fp32 build: a folder of {shards} safetensors shards -> --export-hf: {what}")

        # 3. llm.c model files
        model, folder, cfg = models[1], folders[1], models[1].config
        sd = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        for bf16_file in (False, True):
            kind = "bf16 (version 5)" if bf16_file else "fp32 (version 3)"
            path = os.path.join(work, f"llmc_{'bf16' if bf16_file else 'fp32'}.bin")
            write_llmc(torch, sd, cfg, path, bf16_file)
            out = os.path.join(work, f"llmc_export_{bf16_file}")
            rc, _, err = trainer(fp32, ["--init-from", path, "--export-hf", out])
            want = {k: (v.to(torch.bfloat16).float() if bf16_file else v) for k, v in sd.items()}
            ok, what = same_tensors(torch, os.path.join(out, "model.safetensors"), want) if rc == 0 else (False, err)
            check(ok, f"llm.c {kind} file -> --init-from -> --export-hf: {what} (the HF model's"
                  f"{' bf16 rounding' if bf16_file else ''})")
        log = os.path.join(work, "llmc_val.jsonl")
        rc, _, err = trainer(fp32, ["--init-from", os.path.join(work, "llmc_fp32.bin"), "--data", datas[300], "--steps", "1",
                                    "--lr", "0", "--val-every", "1", "--log", log] + COMMON)
        got = logged_val_losses(log).get(0) if rc == 0 else None
        ref = logged_val_losses(os.path.join(work, "init1_fp32.jsonl")).get(0)
        check(got is not None and got == ref, f"llm.c fp32 file: step-0 val loss {got} = the HF folder's {ref}", err[-300:])

        # 4. fine-tuning, single process and under mpirun, and the checkpoint exported
        folder = folders[0]
        ft = ["--seq", str(T), "--init-from", folder, "--data", datas[256], "--val-steps", "0", "--sample-len", "0",
              "--seed", "3", "--lr", "1e-3", "--warmup", "1", "--steps", "4", "--val-every", "4"]
        single = train(fp32, 0, work, "ft_single", ft, ["--batch", str(B)])
        vals = {k[1]: v for k, v in logged_values(single[1]).items() if k[0] == "val_loss"}
        check(vals[4] < vals[0], f"fine-tuning from HF lowers the val loss: {vals[0]:.4f} -> {vals[4]:.4f} in 4 steps")
        # 2 data-parallel ranks of B/2 sequences: the same global batch
        zero3 = train(fp32, 2, work, "ft_zero3", ft, ["--batch", str(B // 2), "--zero", "3"])
        compare("fine-tuning under mpirun -np 2 --zero 3 vs one process", zero3, single, 4)
        tp2 = train(fp32, 2, work, "ft_tp2", ft, ["--batch", str(B), "--tp", "2"])
        compare("fine-tuning under mpirun -np 2 --tp 2 vs one process", tp2, single, 4)
        for label, result in (("one process", single), ("2 ranks, ZeRO-3", zero3), ("2 ranks, tp 2", tp2)):
            out = os.path.join(work, "ft_export_" + result[2].split("ft_")[-1])
            rc, _, err = trainer(fp32, ["--init-from", result[2], "--export-hf", out])
            final = {k[1]: v for k, v in logged_values(result[1]).items() if k[0] == "val_loss"}[4]
            back = transformers.GPT2LMHeadModel.from_pretrained(out).eval() if rc == 0 else None
            got = hf_loss(torch, back, val) if rc == 0 else float("inf")
            e = abs(got - final) / final
            check(e <= FP32_REL, f"fine-tuned checkpoint ({label}) -> --export-hf -> transformers: loss {got:.7f} "
                  f"vs our final val loss {final:.7f}: rel {e:.1e} <= {FP32_REL:.0e}", err[-300:])
            if back is not None and result is tp2:  # and its logits, resumed under tp 2
                check_logits(torch, back, fp32, ft + ["--batch", str(B), "--tp", "2", "--checkpoint-dir", result[2],
                                                      "--resume", "latest"],
                             os.path.join(work, "logits_tp2"), FP32_REL,
                             f"fine-tuned checkpoint ({label}) resumed under mpirun -np 2 --tp 2, against its "
                             f"--export-hf in transformers", 2)
        out = os.path.join(work, "ft_export_single_ck")

        # 5. greedy generation against transformers' generate
        prompt = "The lady"
        for label, weights, hf_model in (("the HF folder", folder, models[0]),
                                         ("the fine-tuned checkpoint", single[2], None)):
            if hf_model is None:
                hf_model = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
            n_new = 40
            rc, stdout, err = trainer(fp32, ["--sample", weights, "--tokenizer", byte_tok, "--prompt", prompt,
                                             "--temperature", "0", "--sample-len", str(n_new)])
            ours = stdout.split(b"---\n", 1)[1][:-1] if rc == 0 else b""
            ids = torch.tensor([[0] + list(prompt.encode())])
            with torch.no_grad():
                gen = hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new,
                                        do_sample=False, pad_token_id=0)[0].tolist()
            theirs = b"".join(b"<|endoftext|>" if t == 0 else bytes([t]) for t in gen[1:])
            check(ours == theirs, f"greedy --sample from {label} = transformers' generate(do_sample=False): "
                  f"{n_new} tokens", "" if rc == 0 else err[-300:])

        # 6. GPT-2's tokenizer files
        gpt2 = pytok.Gpt2Tokenizer()
        gpt2_bin = os.path.join(work, "gpt2_tokenizer.bin")
        with open(gpt2_bin, "wb") as f:
            f.write(pytok.tokenizer_file_bytes(gpt2))
        torch.manual_seed(7)
        big = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50257, n_positions=16, n_embd=64,
                                                                   n_layer=1, n_head=1))
        big_dir, big_out = os.path.join(work, "hf_gpt2vocab"), os.path.join(work, "hf_gpt2vocab_out")
        big.save_pretrained(big_dir)
        rc, _, err = trainer(fp32, ["--init-from", big_dir, "--export-hf", big_out, "--tokenizer", gpt2_bin])
        ok = rc == 0
        if ok:
            data_dir = pytok.gpt2_data_dir()
            with open(os.path.join(data_dir, "encoder.json")) as f:
                encoder = json.load(f)
            with open(os.path.join(big_out, "vocab.json")) as f:
                ok = json.load(f) == encoder
            with open(os.path.join(data_dir, "vocab.bpe"), encoding="utf-8") as f:
                bpe = f.read().split("\n")
            with open(os.path.join(big_out, "merges.txt"), encoding="utf-8") as f:
                ok = ok and f.read().split("\n") == bpe
        check(ok, "--export-hf with GPT-2's BPE: vocab.json = GPT-2's encoder.json, merges.txt = its vocab.bpe",
              err[-300:])
        # a checkpoint of a run on a --data folder with GPT-2's tokenizer: exported without --tokenizer
        gpt2_data = os.path.join(work, "data_gpt2")
        shutil.copytree(datas[256], gpt2_data)
        shutil.copy(gpt2_bin, os.path.join(gpt2_data, "tokenizer.bin"))
        run = train(fp32, 0, work, "gpt2vocab", ["--init-from", big_dir, "--data", gpt2_data, "--steps", "1"] + COMMON,
                    ["--val-every", "0"])
        recorded_out = os.path.join(work, "hf_gpt2vocab_recorded")
        rc, _, err = trainer(fp32, ["--init-from", run[2], "--export-hf", recorded_out])
        same = rc == 0 and all(open(os.path.join(recorded_out, f), "rb").read() == open(os.path.join(big_out, f), "rb").read()
                               for f in ("vocab.json", "merges.txt"))
        check(same, "--export-hf of a checkpoint, no --tokenizer: the tokenizer files of the run's --data", err[-300:])
        text = "Mr. Darcy's letter, written at 8 o'clock:\n  \"I can't\" -- she said; naïve café 2024!"
        theirs = transformers.GPT2Tokenizer.from_pretrained(big_out).encode(text) if ok else None
        check(theirs == gpt2.encode(text), f"transformers' GPT2Tokenizer from the exported folder encodes as ours "
              f"({len(gpt2.encode(text))} tokens)")

        # 7. refusals
        bad_inputs(work, fp32, folders[0], os.path.join(work, "llmc_fp32.bin"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"test_hf: {time.time() - start:.0f} s")
    finish("Hugging Face")


def bad_inputs(work, fp32, folder, llmc_file):
    """Damaged and mismatched copies of a good folder and llm.c file, each refused by name."""
    header, data = read_safetensors(os.path.join(folder, "model.safetensors"))
    config = json.load(open(os.path.join(folder, "config.json")))

    def variant(name, header_or_bytes=None, data_bytes=None, config_changes=None):
        d = os.path.join(work, "bad_" + name)
        os.makedirs(d)
        cfg = dict(config, **(config_changes or {}))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        write_safetensors(os.path.join(d, "model.safetensors"), header if header_or_bytes is None else header_or_bytes,
                          data if data_bytes is None else data_bytes)
        return d

    def without(key):
        return {k: v for k, v in header.items() if k != key}

    def with_entry(key, **changes):
        h = copy.deepcopy(header)
        h[key].update(changes)
        return h

    w = "transformer.h.1.mlp.c_fc.weight"
    b = "transformer.h.1.ln_2.bias"
    # a missing tensor: the last one in the data, whose bytes go with it (the rest stays consistent)
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])
    lo = header[last]["data_offsets"][0]
    hb = json.dumps(header).encode()
    # a header length of 10^9 in a file of half a megabyte
    path = os.path.join(work, "bad_headerlen")
    os.makedirs(path)
    shutil.copy(os.path.join(folder, "config.json"), path)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 10 ** 9) + hb + data)
    # an lm_head that is wte with one bit flipped
    wte = header["transformer.wte.weight"]
    untied = dict(header)
    untied["lm_head.weight"] = dict(wte, data_offsets=[len(data), len(data) + wte["data_offsets"][1] - wte["data_offsets"][0]])
    lm = bytearray(data[wte["data_offsets"][0]:wte["data_offsets"][1]])
    lm[0] ^= 0x40
    n_head = config["n_head"]
    # a NaN as the second element of a bias
    nan_data = bytearray(data)
    nan_data[header[b]["data_offsets"][0] + 4:header[b]["data_offsets"][0] + 8] = struct.pack("<f", float("nan"))
    # a config.json that is a FIFO (never opened to wait for a writer)
    fifo = os.path.join(work, "bad_fifo")
    os.makedirs(fifo)
    shutil.copy(os.path.join(folder, "model.safetensors"), fifo)
    os.mkfifo(os.path.join(fifo, "config.json"))
    # (wrong dtype: I32 in place of F32 keeps the byte counts; config.json sizes: a width twice the tensors')
    cases = [
        ("header length past the end", path, r"header length 1000000000 runs past the end of the file"),
        ("header not JSON", variant("json", hb[:-5] + b"]]]]}", data), r"header is not valid JSON"),
        ("missing tensor", variant("missing", without(last), data[:lo]), r"no tensor transformer\.%s" %
         re.escape(last.split("transformer.", 1)[1])),
        ("wrong shape", variant("shape", with_entry(b, shape=[2, header[b]["shape"][0] // 2])),
         r"tensor %s has shape \(2, \d+\); config.json's sizes .* give \(\d+,\)" % re.escape(b)),
        ("wrong dtype", variant("dtype", with_entry(w, dtype="I32")), r"tensor %s has dtype I32" % re.escape(w)),
        ("truncated file", variant("truncated", header, data[:-100]), r"truncated: tensor \S+ data ends at byte"),
        ("lm_head not tied", variant("untied", untied, data + bytes(lm)), r"lm_head.weight is not transformer.wte.weight"),
        ("config.json sizes disagree", variant("config", config_changes={"n_embd": config["n_embd"] * 2,
                                                                        "n_head": n_head * 2}),
         r"tensor transformer\.wte\.weight has shape \(256, 64\); config.json's sizes \(.*n_embd 128\) give \(256, 128\)"),
        ("layer_norm_epsilon", variant("eps", config_changes={"layer_norm_epsilon": 1e-6}),
         r"layer_norm_epsilon is 1e-06; this trainer's LayerNorms use 1e-5"),
        ("another architecture", variant("arch", config_changes={"model_type": "gpt_neox"}), r"model_type gpt_neox"),
        ("a NaN in a tensor", variant("nan", header, bytes(nan_data)),
         r"tensor %s holds a NaN at element 1: the weights are damaged" % re.escape(b)),
        ("config.json a FIFO", fifo, r"config\.json: it is a FIFO"),
        ("a head size the kernels lack", variant("heads", config_changes={"n_head": config["n_embd"] // 16}),
         r"--init-from \S+: this trainer cannot build its model: head size .* = 16 is not supported"),
    ]
    raw = open(llmc_file, "rb").read()
    for name, blob, want in (("llm.c truncated", raw[:-6], r"truncated: \d+ bytes, where its header .* gives \d+"),
                             ("llm.c bad magic", struct.pack("<i", 1234) + raw[4:], r"none of the weights read here"),
                             ("llm.c version 2", raw[:4] + struct.pack("<i", 2) + raw[8:], r"version 2; read here"),
                             ("llm.c infinity", raw[:-4] + struct.pack("<f", float("inf")),
                              r"tensor lnfb holds an infinity at element \d+: the weights are damaged")):
        p = os.path.join(work, "bad_" + name.replace(" ", "_") + ".bin")
        with open(p, "wb") as f:
            f.write(blob)
        cases.append((name, p, want))
    for name, weights, want in cases:
        rc, _, err = trainer(fp32, ["--init-from", weights, "--steps", "1"] + COMMON)
        found = re.search(want, err) is not None
        check(rc != 0 and found, f"refused: {name}", err.strip().splitlines()[-1][:160] if err.strip() else "no message")
    for name, flags, want in (("--layers 4 against a 2-layer file", ["--layers", "4"], "--layers 4 contradicts --init-from"),
                              ("--seq past the file's context", ["--seq", "128"],
                               "--seq 128 is longer than --init-from %s's context of 64 positions" % folder)):
        rc, _, err = trainer(fp32, ["--init-from", folder, "--steps", "1"] + COMMON + flags)
        check(rc != 0 and want in err, f"refused: {name}", err.strip().splitlines()[-1][:160] if err.strip() else "no message")


if __name__ == "__main__":
    main()
