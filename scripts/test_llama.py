#!/usr/bin/env python3
"""scripts/test_llama.py: the Llama block (--arch llama) against Hugging Face transformers'
LlamaForCausalLM, an independent implementation, and its composition with the parallel modes.

Random LlamaForCausalLMs of three configurations, saved with save_pretrained: grouped-query
attention (2 kv heads of 4) with an untied lm head; multi-query (1 kv head of 2) with a tied
head, rope theta 500000 and vocabulary 300 (padded to 384); 4 kv heads of 4 with Llama 3's
rope scaling (original context 8 < T = 16, so every frequency band is used), an untied head
and rms_norm_eps 1e-6. Token shards as scripts/test_hf.py makes them (T = 16, 2 x 4 validation
sequences). Checks:
1. --init-from the folder: the step-0 validation loss (every validation sequence, from the log)
   equals transformers' loss on the same sequences computed in float64 from its fp32 logits:
   fp32 build within 1e-5 relative (test_gpt's fp32 rule), bf16 build within
   min(max(4 d, 2^-8), 5e-2), d how far transformers' own bf16 model moves that loss. And every
   logit of the first validation batch (--dump-logits: B x T x V) against transformers' logits
   on the dumped tokens, the largest absolute difference relative to the largest |logit|: fp32
   build within 1e-5, bf16 build within the same rule with d how far transformers' own bf16
   model moves the logits (test_hf.py's check_logits).
2. fp32 round trip: --init-from the folder, --export-hf: every tensor back bit for bit (names,
   shapes, values), transformers loads the folder with the same loss, and its logits are our
   dumped ones (fp32 and bf16 builds, the bounds of 1).
3. Training from the first folder (fp32, 4 steps): one process; mpirun -np 2 --tp 2 (kv heads
   split across the two ranks), and with --sequence-parallel; mpirun -np 2 --zero 3 with B/2
   sequences per rank; one process with --recompute full and with --recompute selective; all
   equal the single process within 1e-5 (losses, norms, final parameters: testlib.compare);
   with Muon, mpirun -np 2 --zero 2 against one process likewise. Replicated kv heads (more
   tensor-parallel ranks than kv heads, Megatron's): mpirun -np 4 --tp 4 (2 kv heads, each on 2
   ranks), with --sequence-parallel and with Muon; from the second folder (1 kv head of 2)
   mpirun -np 2 --tp 2, with --sequence-parallel, with Muon, and mpirun -np 4 --tp 2 --zero 2
   (dp 2): each equal to one process likewise. Checkpoints across tensor-parallel sizes: tp 4's
   (2 kv heads on 4 ranks) resumed on one process and on tp 2, one process's (1 kv head)
   resumed on tp 2, each within 1e-5 of the uninterrupted one process (losses, final
   parameters). Each run's checkpoint exported with --export-hf loads in transformers with our
   logits: its loss on the validation sequences equals the run's logged final validation loss
   within 1e-5, and (tp 2) the logits dumped by the run resumed under mpirun -np 2 --tp 2 (the
   ranks' vocabulary columns gathered) equal transformers' within 1e-5.
4. Resuming (bf16 build, Muon, an untied head, mpirun -np 2 --tp 2): a run resumed from its
   step-2 checkpoint ends with the uninterrupted run's parameter hash, bit for bit.
5. Refusals by name (its FP8 runs, --fp8-allgather included, are scripts/test_fp8.py's, its
   pipelines scripts/test_pp.py's): --kv-heads that does not divide --heads; --tp 2 with 3 kv
   heads of 6 (neither a multiple nor a divisor of --tp); --dump-logits without --data, and
   under --pp 2.

Usage: python3 scripts/test_llama.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import copy
import os
import shutil
import subprocess
import tempfile

from testlib import (MPIRUN, ROOT, RTOL, check, compare, finish, hf_modules, logged_values, param_hash, resume,
                     resume_errors, train)
from test_hf import (B, T, bf16_logits_bound, check_logits, hf_logits, hf_loss, logged_val_losses, logits_error,
                     make_data, same_tensors, trainer)

FP32_REL = 1e-5
BF16_FACTOR, BF16_FLOOR, BF16_CEILING = 4.0, 2.0 ** -8, 5e-2
COMMON = ["--seq", str(T), "--batch", str(B), "--val-steps", "0", "--sample-len", "0", "--seed", "3"]
CONFIGS = [
    dict(vocab_size=256, hidden_size=128, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False, rope_theta=10000.0),
    dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
         num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=True, rope_theta=500000.0),
    dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=1, num_attention_heads=4,
         num_key_value_heads=4, max_position_embeddings=32, tie_word_embeddings=False, rms_norm_eps=1e-6,
         rope_theta=10000.0, rope_scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0,
                                               high_freq_factor=2.0, original_max_position_embeddings=8)),
]


def describe(cfg):
    return ("V {vocab_size}, L {num_hidden_layers}, C {hidden_size}, NH {num_attention_heads}, "
            "KVH {num_key_value_heads}, H {intermediate_size}, ".format(**cfg)
            + ("tied" if cfg["tie_word_embeddings"] else "untied")
            + f", theta {cfg['rope_theta']:g}" + (", llama3 scaling" if "rope_scaling" in cfg else ""))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    fp32, bf16 = os.path.join(args.bin_dir, "train_gpt_fp32"), os.path.join(args.bin_dir, "train_gpt")
    torch, transformers, load_file, pytok = hf_modules("Llama")

    work = tempfile.mkdtemp(prefix="test_llama_")
    try:
        datas, val = make_data(work, pytok)
        folders, models = [], []
        for i, cfg in enumerate(CONFIGS):
            torch.manual_seed(200 + i)
            # a wider init than Llama's 0.02, so that the loss is far from uniform
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
                **cfg, initializer_range=0.1, attention_bias=False, mlp_bias=False)).eval()
            folder = os.path.join(work, f"llama{i}")
            model.save_pretrained(folder)
            folders.append(folder)
            models.append(model)

        # 1. the step-0 validation loss of --init-from against transformers' loss
        # 2. the fp32 round trip
        for i, (model, folder) in enumerate(zip(models, folders)):
            name = describe(CONFIGS[i])
            want = hf_loss(torch, model, val)
            d = abs(hf_loss(torch, copy.deepcopy(model).to(torch.bfloat16), val) - want) / want
            bf16_bound = min(max(BF16_FACTOR * d, BF16_FLOOR), BF16_CEILING)
            data = datas[CONFIGS[i]["vocab_size"]]
            for binary, bound in ((fp32, FP32_REL), (bf16, bf16_bound)):
                build = "fp32" if binary == fp32 else "bf16"
                log = os.path.join(work, f"init{i}_{build}.jsonl")
                rc, _, err = trainer(binary, ["--init-from", folder, "--data", data, "--steps", "1", "--lr", "0",
                                              "--val-every", "1", "--log", log] + COMMON)
                got = logged_val_losses(log).get(0) if rc == 0 else None
                e = abs(got - want) / want if got is not None else float("inf")
                check(e <= bound, f"{build} --init-from LlamaForCausalLM ({name}): step-0 val loss {got} vs "
                      f"transformers' {want:.7f}: rel {e:.1e} <= {bound:.1e}", "" if rc == 0 else err[-300:])
            # every logit of the first validation batch (--dump-logits)
            args = ["--init-from", folder, "--data", data] + COMMON
            tokens, ours = check_logits(torch, model, fp32, args, os.path.join(work, f"logits{i}_fp32"), FP32_REL,
                                        f"fp32 --init-from LlamaForCausalLM ({name})")
            ours_bf16, bound = None, BF16_CEILING
            if tokens is not None:
                bound, d = bf16_logits_bound(torch, model, tokens)
                ours_bf16 = check_logits(torch, model, bf16, args, os.path.join(work, f"logits{i}_bf16"), bound,
                                         f"bf16 --init-from LlamaForCausalLM ({name}; transformers' bf16 model: "
                                         f"{d:.1e})")[1]
            out = os.path.join(work, f"export{i}")
            rc, _, err = trainer(fp32, ["--init-from", folder, "--export-hf", out])
            ok, what = same_tensors(torch, os.path.join(out, "model.safetensors"),
                                    load_file(os.path.join(folder, "model.safetensors"))) if rc == 0 else (False, err)
            if ok:
                back = transformers.LlamaForCausalLM.from_pretrained(out).eval()
                ok, what = hf_loss(torch, back, val) == want, what + ", transformers loads it with the same loss"
            check(ok, f"fp32 LlamaForCausalLM -> --export-hf -> transformers ({name}): {what}")
            if ok and tokens is not None:  # our export in transformers gives our dumped logits
                theirs = hf_logits(torch, back, tokens)
                e, e16 = logits_error(ours, theirs), logits_error(ours_bf16, theirs)
                check(e <= FP32_REL and e16 <= bound,
                      f"our --export-hf ({name}) in transformers: its logits vs our dumped ones: fp32 build {e:.1e} "
                      f"<= {FP32_REL:.0e}, bf16 build {e16:.1e} <= {bound:.1e} (of the largest logit)")

        # 3. training under the parallel modes against one process, each checkpoint exported
        ft = ["--seq", str(T), "--init-from", folders[0], "--data", datas[256], "--val-steps", "0",
              "--sample-len", "0", "--seed", "3", "--lr", "1e-3", "--warmup", "1", "--steps", "4",
              "--val-every", "4"]
        single = train(fp32, 0, work, "ft_single", ft, ["--batch", str(B)])
        vals = {k[1]: v for k, v in logged_values(single[1]).items() if k[0] == "val_loss"}
        check(vals[4] < vals[0], f"training the Llama lowers the val loss: {vals[0]:.4f} -> {vals[4]:.4f} in 4 steps")
        runs = [("one process", single)]
        for label, ranks, extra in (("mpirun -np 2 --tp 2", 2, ["--batch", str(B), "--tp", "2"]),
                                    ("mpirun -np 2 --tp 2 --sequence-parallel", 2,
                                     ["--batch", str(B), "--tp", "2", "--sequence-parallel"]),
                                    ("mpirun -np 2 --zero 3", 2, ["--batch", str(B // 2), "--zero", "3"]),
                                    ("--recompute full", 0, ["--batch", str(B), "--recompute", "full"]),
                                    ("--recompute selective", 0, ["--batch", str(B), "--recompute", "selective"])):
            result = train(fp32, ranks, work, "ft_" + "".join(label.split()[-2:]).strip("-"), ft, extra)
            compare(f"Llama training under {label} vs one process", result, single, 4)
            runs.append((label, result))
        # Muon (q, k, v, o, gate, up, down each a matrix; k and v of 2 kv heads are 64 x 128) with
        # ZeRO-2's whole-matrix shards against one process
        muon = ["--optimizer", "muon", "--batch", str(B)]
        single_muon = train(fp32, 0, work, "ft_muon", ft, muon)
        zero2_muon = train(fp32, 2, work, "ft_muon_zero2", ft, ["--optimizer", "muon", "--batch", str(B // 2),
                                                                 "--zero", "2"])
        compare("Llama training with Muon under mpirun -np 2 --zero 2 vs one process", zero2_muon, single_muon, 4)
        # replicated kv heads (more tensor-parallel ranks than kv heads): the 2 kv heads of the
        # first folder on 4 ranks, 2 each (with Muon: k and v gathered from 2 of the 4 ranks)
        for label, ref, extra in (("--tp 4 (2 kv heads, each on 2 ranks)", single, ["--batch", str(B)]),
                                  ("--tp 4 --sequence-parallel (2 kv heads, each on 2 ranks)", single,
                                   ["--batch", str(B), "--sequence-parallel"]),
                                  ("--tp 4 with Muon (2 kv heads, each on 2 ranks)", single_muon, muon)):
            result = train(fp32, 4, work, "ft_tp4_" + str(len(extra)), ft, extra + ["--tp", "4"])
            compare(f"Llama training under mpirun -np 4 {label} vs one process", result, ref, 4)
        # the second folder's 1 kv head on both ranks of tp 2, with ZeRO-2 over dp 2, with Muon
        ft1 = ft[:ft.index("--init-from")] + ["--init-from", folders[1], "--data", datas[300]] + \
            ft[ft.index("--data") + 2:]
        single1 = train(fp32, 0, work, "ft1_single", ft1, ["--batch", str(B), "--checkpoint-every", "2"])
        single1_muon = train(fp32, 0, work, "ft1_muon", ft1, muon)
        for label, ranks, ref, extra in (
                ("mpirun -np 2 --tp 2 (1 kv head on both ranks)", 2, single1, ["--batch", str(B), "--tp", "2"]),
                ("mpirun -np 2 --tp 2 --sequence-parallel (1 kv head on both ranks)", 2, single1,
                 ["--batch", str(B), "--tp", "2", "--sequence-parallel"]),
                ("mpirun -np 4 --tp 2 --zero 2 (1 kv head on both ranks of each tp group)", 4, single1,
                 ["--batch", str(B // 2), "--tp", "2", "--zero", "2"]),
                ("mpirun -np 2 --tp 2 with Muon (1 kv head on both ranks)", 2, single1_muon, muon + ["--tp", "2"])):
            result = train(fp32, ranks, work, "ft1_" + str(len(extra)) + str(ranks), ft1, extra)
            compare(f"Llama training under {label} vs one process", result, ref, 4)
        # checkpoints across tensor-parallel sizes with replicated kv heads: written on tp 4 (2 kv
        # heads) resumed on 1 and 2 ranks; written on one process (1 kv head) resumed on tp 2
        tp4 = train(fp32, 4, work, "ft_tp4_ck", ft, ["--batch", str(B), "--tp", "4", "--checkpoint-every", "2"])
        for source, ref, ranks, model, label in (
                (tp4, single, 0, ft, "tp 4 (2 kv heads, each on 2 ranks) resumed on one process"),
                (tp4, single, 2, ft, "tp 4 (2 kv heads, each on 2 ranks) resumed on tp 2 (one each)"),
                (single1, single1, 2, ft1, "one process (1 kv head) resumed on tp 2 (on both ranks)")):
            extra = ["--batch", str(B)] + (["--tp", str(ranks)] if ranks else [])
            resumed = resume(fp32, source, ranks, work, f"resume_{len(label)}_{ranks}", model, extra)
            worst, err = resume_errors(resumed, ref, 4)
            check("resuming from" in resumed[0] and worst <= RTOL and err <= RTOL,
                  f"Llama checkpoint of {label}: losses within {worst:.1e} of one process's, final parameters "
                  f"{err:.1e} (<= {RTOL:.0e})")
        for label, result in runs[:2] + runs[3:4]:
            out = os.path.join(work, "export_" + os.path.basename(result[2]))
            rc, _, err = trainer(fp32, ["--init-from", result[2], "--export-hf", out])
            final = {k[1]: v for k, v in logged_values(result[1]).items() if k[0] == "val_loss"}[4]
            back = transformers.LlamaForCausalLM.from_pretrained(out).eval() if rc == 0 else None
            got = hf_loss(torch, back, val) if rc == 0 else float("inf")
            e = abs(got - final) / final
            check(e <= FP32_REL, f"trained Llama checkpoint ({label}) -> --export-hf -> transformers: loss "
                  f"{got:.7f} vs our final val loss {final:.7f}: rel {e:.1e} <= {FP32_REL:.0e}", err[-300:])
            if back is not None and label == "mpirun -np 2 --tp 2":  # and its logits, resumed under tp 2
                check_logits(torch, back, fp32, ft + ["--batch", str(B), "--tp", "2", "--checkpoint-dir", result[2],
                                                      "--resume", "latest"],
                             os.path.join(work, "logits_tp2"), FP32_REL,
                             f"trained Llama checkpoint ({label}) resumed under mpirun -np 2 --tp 2, against its "
                             f"--export-hf in transformers", 2)

        # 4. resuming, bit for bit
        tiny = ["--arch", "llama", "--vocab", "256", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--embd",
                "128", "--seq", str(T), "--batch", str(B), "--data", datas[256], "--val-every", "0", "--sample-len",
                "0", "--tie-embeddings", "0", "--optimizer", "muon", "--lr", "1e-3", "--steps", "4", "--tp", "2"]
        whole = train(bf16, 2, work, "resume_whole", tiny, ["--checkpoint-every", "2"])
        resumed = resume(bf16, whole, 2, work, "resume_from2", tiny, [])
        check("resuming from" in resumed[0] and param_hash(resumed[0], 2) == param_hash(whole[0], 2) is not None,
              f"bf16 Llama (Muon, untied, tp 2) resumed at step 2: parameter hash {param_hash(resumed[0], 2)} vs "
              f"the uninterrupted run's {param_hash(whole[0], 2)}")

        # 5. refusals
        base = [fp32, "--arch", "llama", "--vocab", "256", "--layers", "1", "--heads", "2", "--embd", "64",
                "--seq", "16", "--steps", "1"]
        for extra, want, ranks in ((["--kv-heads", "3"], "--kv-heads 3 must divide --heads 2", 0),
                                   (["--dump-logits", os.path.join(work, "x")], "--dump-logits runs a validation "
                                    "batch of a training run: it needs --data", 0),
                                   (["--layers", "2", "--pp", "2", "--data", datas[256], "--dump-logits",
                                     os.path.join(work, "x")], "--dump-logits is not built with --pp or --cp", 2),
                                   (["--heads", "6", "--embd", "192", "--kv-heads", "3", "--tp", "2"],
                                    "--arch llama under --tp 2 needs --kv-heads (3) to be a multiple of it", 2)):
            cmd = base + extra
            if ranks:
                cmd = MPIRUN + ["-np", str(ranks)] + cmd
            p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", cwd=ROOT)
            check(p.returncode != 0 and want in p.stdout + p.stderr,
                  f"refused: --arch llama {' '.join(extra)} ({want!r})", (p.stdout + p.stderr)[-200:])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("Llama")


if __name__ == "__main__":
    main()
