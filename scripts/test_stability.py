#!/usr/bin/env python3
"""scripts/test_stability.py: a run rides through bad steps (llmc/stability.h): a step whose loss
or gradient norm is not finite, or a spike against the trailing window, is skipped on every
rank, never applied, and --max-skips non-finite ones in a row end the run; the faults come from
--inject-fault.

A tiny model (2 blocks, width 128, vocabulary 256, T 16) trained on token shards for 5 steps.
Checks:
1. A NaN gradient injected at step 3 (micro-batch 0's loss gradient times NaN, on one rank) is
   skipped: the run ends with exactly the parameters of a run that skipped step 3's update on
   purpose (--inject-fault 3:skip), so nothing of the NaN reached the weights or the optimizer
   state (AdamW's moments and step count shape every later step): fp32 one process (the final
   checkpoints' parameters equal, element for element), bf16 under mpirun on 2 ranks with ZeRO-1
   and ZeRO-3 with the NaN on rank 1 (the parameter hashes equal), and with --fp8 delayed (the
   step's amaxes dropped with it). The log records the skip (skipped, skip_reason, skips) and
   every other step's loss equals the clean run's up to step 3. With --fp8 delayed (one process,
   and 2 ranks with ZeRO-3 and --fp8-allgather) a run that skipped step 3 on purpose ends with
   the parameter hash of the same run resumed from its step-3 checkpoint (the step after a skip
   records its weights' amaxes, which the skip dropped, as the resumed run does).
2. --max-skips: --lr 1e300 makes every step after the first non-finite; with --max-skips 2 the
   run rides through steps 2 and 3 and stops at step 4 with the count in its message; with
   --max-skips 10 it finishes, 4 skips logged.
3. A loss-scale spike (x 1e4 on micro-batch 0 at step 2) and a bad batch (micro-batch 0's tokens
   one repeated token at step 2) are applied where asked: the step's gradient norm (the spike) or
   loss (the bad batch) moves away from the clean run's, the steps before stay equal. Under
   --tp 2 on 2 ranks the same faults on rank 1 hit its whole tensor-parallel group, whose ranks
   share the batch: the run equals the one with them on rank 0 (parameter hashes), its bad
   batch's loss one process's.
4. Spikes (--spike-window 4 --spike-zscore 4, 8 steps): the clean run has none; a loss-scale
   spike of 1e4 at step 6 is detected (its gradient norm far above the window's) and skipped,
   ending with the parameters of a run that skipped step 6 on purpose; resumed from its step-4
   checkpoint (the window in the checkpoint), the spiked run detects the same spike and ends
   with the same parameters, element for element (an empty window would miss it).
5. A malformed --inject-fault is refused with its message.
6. Rewinds (--spike-rewind 2, --spike-window 4, --spike-zscore 50, constant learning rate,
   checkpoints every 2 steps, --keep-checkpoints 1): loss-scale spikes of 1e4 at steps 7 and 9
   (step 8 between them is applied, and its checkpoint would prune step 6's) make the run go
   back to step 6's checkpoint (kept by the pruning for the rewind) and skip the 3 batches
   consumed since; it must end (step 12) with exactly the parameters and optimizer state of a
   run that skipped steps 7-9 on purpose and trained to step 15 (the same 12 updates on the same
   batches: the rewound run's state is the checkpoint's, its data 3 batches on), fp32 one
   process element for element, and bf16 on 2 ranks with ZeRO-2 and ZeRO-3 (the parameter
   hashes equal). Its log tells the story (the two spikes, the rewind line with its steps,
   checkpoint and batches, the steps after it marked "rewinds": 1), and its final validation
   loss is within 2% of the clean run's (the bound: skipping 3 of 15 batches of this corpus; the
   deliberate-skip run must meet it too).
   Killed (--inject-fault kill) after the rewind, before any checkpoint of the new timeline
   (checkpoints every 4 steps, spikes at 5 and 6, killed as step 7 begins: the newest
   checkpoint, step 4's, is from before the rewind) and after one (the run above killed as step
   10 begins, resuming from step 8's checkpoint of the new timeline), --resume latest ends with
   the uninterrupted run's parameters, element for element, and its log (timing fields aside).
   Under mpirun on 2 ranks with ZeRO-3, rank 1 killed as step 10 begins and the job resumed at
   once ends with the uninterrupted run's parameter hash (mpirun can return before the other
   rank has been collected: its zombie must not hold the folder's lock).
   Spikes with no checkpoint before them: the run says so and goes on; --max-rewinds 1 with a
   second pair of spikes stops the run with its message.
7. A checkpoint folder's lock held by a zombie (a process that has exited, not yet collected by
   its parent) is taken over, as a lock of a process that is gone.

Usage: python3 scripts/test_stability.py [--bin-dir build/cpu]; exits 0 when every check passes.
"""
import argparse
import os
import shutil
import socket
import subprocess
import tempfile
import time

import numpy as np

from testlib import (MPIRUN, ROOT, check, checkpoint_array, final_checkpoint, finish, logged_values, make_data,
                     param_hash, resume, train)

STEPS = 5
MODEL = ["--vocab", "256", "--layers", "2", "--heads", "4", "--embd", "128", "--seq", "16", "--lr", "3e-3",
         "--warmup", "1", "--seed", "9", "--val-every", "0", "--sample-len", "0", "--steps", str(STEPS)]


def losses(result):
    return {k[1]: v for k, v in logged_values(result[1]).items() if k[0] == "train_loss"}


TIMING = ("ms", "tok_per_s", "mfu")


def untimed(records):
    """The records without timing fields, and the rewinds' checkpoints by file name alone."""
    return [{k: os.path.basename(v) if k == "rewind_checkpoint" else v for k, v in r.items() if k not in TIMING}
            for r in records]


def final_state(folder, step):
    """The parameters and every optimizer state section of a checkpoint, concatenated."""
    manifest = final_checkpoint(folder, step)
    return np.concatenate([checkpoint_array(manifest, name) for name in
                           ("params", "optimizer.adamw.m", "optimizer.adamw.v")])


def kill_and_resume(binary, work, name, model, extra, kill_step):
    """Trains with `extra`, killed (SIGKILL) as step kill_step begins, then resumes from the
    newest checkpoint into the same folder and log; returns (the killed run's output, the
    resumed run's train() result)."""
    log, ck = os.path.join(work, name + ".jsonl"), os.path.join(work, name + "_ck")
    cmd = [binary] + model + ["--log", log, "--checkpoint-dir", ck] + extra
    faults = extra[extra.index("--inject-fault") + 1]
    killed = subprocess.run(cmd[:-1] + [faults + f",{kill_step}:kill"], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    resumed = train(binary, 0, work, name, model, extra + ["--resume", "latest"])
    return killed, resumed


def test_rewinds(fp32, bf16, work, base):
    model = MODEL[:MODEL.index("--steps")] + ["--lr", "1e-3", "--schedule", "constant", "--val-every", "100",
                                              "--val-steps", "4", "--spike-window", "4", "--spike-zscore", "50"]
    rewinding = ["--checkpoint-every", "2", "--keep-checkpoints", "1", "--spike-rewind", "2"]
    spikes = ["--inject-fault", "7:loss-scale=1e4,9:loss-scale=1e4"]
    rewound = train(fp32, 0, work, "rewound", model, base + ["--steps", "12"] + rewinding + spikes)
    skipped = train(fp32, 0, work, "skipped", model, base + ["--steps", "15", "--inject-fault", "7:skip,8:skip,9:skip"])
    clean = train(fp32, 0, work, "clean12", model, base + ["--steps", "12"], checkpoints=False)
    same = np.array_equal(final_state(rewound[2], 12), final_state(skipped[2], 15))
    check(same and "rewind 1: 2 spikes within the last 4 steps (steps 7, 9): back to step 6" in rewound[0],
          "fp32: spikes at steps 7 and 9 rewind to step 6's checkpoint (kept by --keep-checkpoints 1's pruning for "
          "it) skipping 3 batches: the end state (parameters, AdamW's moments) equals a run that skipped steps 7-9 on "
          "purpose and trained to step 15, element for element")
    line = next((r for r in rewound[1] if "rewind_from" in r), {})
    after = [r for r in rewound[1] if r.get("rewinds") == 1 and "train_loss" in r]
    spiked = [r["step"] for r in rewound[1] if "a spike" in r.get("skip_reason", "")]
    story = line == {"step": 6, "rewinds": 1, "rewind_from": 9, "rewind_spikes": "7, 9",
                     "rewind_checkpoint": final_checkpoint(rewound[2], 6), "rewind_skipped_batches": 3} and \
        spiked == [7, 9] and [r["step"] for r in after] == list(range(7, 13)) and \
        rewound[1].index(line) == next(i for i, r in enumerate(rewound[1]) if r.get("step") == 9) + 1
    check(story, f"the log tells the story: spikes at {spiked}, then the rewind's line {line}, then steps 7-12 "
                 f"marked rewinds 1")
    vals = [next(r["val_loss"] for r in run[1] if "val_loss" in r and r["step"] == last)
            for run, last in ((rewound, 12), (skipped, 15), (clean, 12))]
    check(all(abs(v / vals[2] - 1) < 0.02 for v in vals[:2]),
          f"final validation loss after the rewind {vals[0]:.4f}, after skipping on purpose {vals[1]:.4f}, clean "
          f"{vals[2]:.4f}: within 2% of the clean run")
    for zero in (2, 3):
        runs = [train(bf16, 2, work, f"{name}_z{zero}", model, base + ["--zero", str(zero)] + extra)
                for name, extra in (("rewound", ["--steps", "12"] + rewinding + spikes),
                                    ("skipped", ["--steps", "15", "--inject-fault", "7:skip,8:skip,9:skip"]))]
        hashes = [param_hash(r[0], 2) for r in runs]
        check(hashes[0] is not None and hashes[0] == hashes[1] and "rewind 1:" in runs[0][0],
              f"bf16, 2 ranks, ZeRO-{zero}: the rewound run ends with the deliberate skips' parameter hash")
    # rank 1 killed after the rewind, resumed at once: mpirun may return before rank 0 has been
    # collected (a zombie holding the folder's lock), which must not keep the resumed run out
    extra = ["--zero", "3", "--steps", "12"] + rewinding + ["--inject-fault", "7:loss-scale=1e4:1,9:loss-scale=1e4:1"]
    ck = os.path.join(work, "killed_z3_ck")
    killed = subprocess.run(MPIRUN + ["-np", "2", bf16] + model + base + extra[:-1] +
                            [extra[-1] + ",10:kill:1", "--checkpoint-dir", ck], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    resumed = train(bf16, 2, work, "killed_z3", model, base + extra + ["--resume", "latest"])
    check(killed.returncode != 0 and "at step 8 (after a rewind)" in resumed[0] and
          param_hash(resumed[0], 2) == hashes[0],
          "bf16, 2 ranks, ZeRO-3: rank 1 killed as step 10 begins (after the rewind), resumed at once: the "
          "uninterrupted run's parameter hash")

    # killed after the rewind, before the new timeline's first checkpoint, and after it
    during = ["--checkpoint-every", "4", "--spike-rewind", "2", "--inject-fault", "5:loss-scale=1e4,6:loss-scale=1e4"]
    reference = train(fp32, 0, work, "during_ref", model, base + ["--steps", "10"] + during)
    # resumed during it, the run rewinds again (from step 4's checkpoint); after it, it resumes in
    # the new timeline (step 8's checkpoint)
    for name, extra, kill, ref, steps, says in (
            ("during", ["--steps", "10"] + during, 7, reference, 10, "rewind 1:"),
            ("after", ["--steps", "12"] + rewinding + spikes, 10, rewound, 12, "at step 8 (after a rewind)")):
        killed, resumed = kill_and_resume(fp32, work, name, model, base + extra, kill)
        same_state = np.array_equal(final_state(resumed[2], steps), final_state(ref[2], steps))
        same_log = untimed(resumed[1]) == untimed(ref[1])
        if not same_log:
            print("\n".join(f"    {a}\n  vs {b}" for a, b in zip(untimed(resumed[1]), untimed(ref[1])) if a != b))
        check(killed.returncode != 0 and "rewind 1:" in killed.stdout and says in resumed[0] and
              same_state and same_log,
              f"killed {name} the rewind (as step {kill} begins), resumed: the uninterrupted run's end state, "
              f"element for element, and its log")

    no_checkpoint = train(fp32, 0, work, "no_checkpoint", model,
                          base + ["--steps", "9", "--checkpoint-every", "8", "--spike-rewind", "2"] + spikes)
    check("holds no checkpoint from before step 7: the run goes on" in no_checkpoint[0] and
          "rewind 1" not in no_checkpoint[0],
          "spikes at steps 7 and 9 with no checkpoint before them: the run says so and goes on")
    proc = subprocess.run([fp32] + model + base + ["--steps", "14", "--max-rewinds", "1", "--checkpoint-dir",
                          os.path.join(work, "max_ck")] + rewinding[:-2] + ["--spike-rewind", "2", "--inject-fault",
                          "7:loss-scale=1e4,8:loss-scale=1e4,11:loss-scale=1e4,12:loss-scale=1e4"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    check(proc.returncode != 0 and "call for rewind 2, past --max-rewinds 1" in proc.stderr,
          "--max-rewinds 1: a second pair of spikes (steps 11 and 12) stops the run with its message")


def zombie_lock(fp32, work, base):
    """A checkpoint folder's lock held by a zombie (a process that has exited and that its parent
    has not collected, as a killed job's rank can be for a while after mpirun returns) is taken
    over: the process has ended."""
    ck = os.path.join(work, "zombie_ck")
    os.makedirs(ck)
    child = subprocess.Popen(["true"])  # not waited for until the end: a zombie
    stat = ""
    for _ in range(500):
        stat = open(f"/proc/{child.pid}/stat").read()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.01)
    start = stat.rsplit(")", 1)[1].split()[19]
    with open(os.path.join(ck, "train_gpt.lock"), "w") as f:
        f.write(f"host {socket.gethostname()} pid {child.pid} start {start}\n")
    proc = subprocess.run([fp32] + MODEL + base + ["--steps", "1", "--checkpoint-dir", ck], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    child.wait()
    check(proc.returncode == 0 and f"removed the stale lock of a run that no longer runs (host {socket.gethostname()} "
          f"pid {child.pid}" in proc.stdout + proc.stderr,
          "a folder lock held by a zombie (exited, not yet collected by its parent) is taken over",
          (proc.stdout + proc.stderr).strip().splitlines()[-1] if proc.returncode else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    args = parser.parse_args()
    bf16, fp32 = os.path.join(args.bin_dir, "train_gpt"), os.path.join(args.bin_dir, "train_gpt_fp32")
    work = tempfile.mkdtemp(prefix="test_stability_")
    try:
        data = make_data(os.path.join(work, "data"))
        base = ["--data", data, "--batch", "4"]

        # 1
        clean = train(fp32, 0, work, "clean", MODEL, base)
        nan = train(fp32, 0, work, "nan", MODEL, base + ["--inject-fault", "3:nan-grad"])
        skip = train(fp32, 0, work, "skip", MODEL, base + ["--inject-fault", "3:skip"])
        same = np.array_equal(checkpoint_array(final_checkpoint(nan[2], STEPS), "params"),
                              checkpoint_array(final_checkpoint(skip[2], STEPS), "params"))
        record = next((r for r in nan[1] if r.get("step") == 3 and "train_loss" in r), {})
        logged = record.get("skipped") == 1 and "not finite" in record.get("skip_reason", "") and \
            record.get("skips") == 1
        before = all(losses(nan)[k] == losses(clean)[k] for k in (1, 2, 3))
        check(same and logged and before,
              "fp32: a NaN gradient at step 3 is skipped: the parameters equal a run that skipped step 3 on "
              "purpose, element for element; the log records the skip; steps 1-3 are the clean run's")
        for zero, extra in ((1, []), (3, []), (1, ["--fp8", "delayed"])):
            runs = [train(bf16, 2, work, f"{kind}_z{zero}{len(extra)}", MODEL,
                          base + ["--zero", str(zero), "--inject-fault", fault] + extra, checkpoints=False)
                    for kind, fault in (("nan", "3:nan-grad:1"), ("skip", "3:skip"))]
            hashes = [param_hash(r[0], 2) for r in runs]
            check(hashes[0] is not None and hashes[0] == hashes[1] and "update skipped" in runs[0][0],
                  f"bf16, 2 ranks, ZeRO-{zero}{' --fp8 delayed' if extra else ''}: a NaN gradient on rank 1 at "
                  f"step 3 is skipped on both ranks, ending with the deliberate skip's parameter hash")
        # --fp8 delayed: the step after a skip counts its weights' amaxes, as a run resumed there does
        for ranks, extra in ((0, []), (2, ["--zero", "3", "--fp8-allgather"])):
            fp8 = base + ["--fp8", "delayed"] + extra
            whole = train(bf16, ranks, work, f"fp8_skip{ranks}", MODEL,
                          fp8 + ["--inject-fault", "3:skip", "--checkpoint-every", "3"])
            resumed = resume(bf16, whole, ranks, work, f"fp8_skip{ranks}_resumed", MODEL, fp8, step=3)
            hashes = [param_hash(r[0], max(ranks, 1)) for r in (whole, resumed)]
            check(hashes[0] is not None and hashes[0] == hashes[1],
                  f"bf16 --fp8 delayed{' on 2 ranks, ZeRO-3 --fp8-allgather' if ranks else ''}: step 3 skipped on "
                  f"purpose, resumed from its checkpoint: the uninterrupted run's parameter hash {hashes}")

        # 2
        diverge = [fp32] + MODEL + base + ["--lr", "1e300"]
        proc = subprocess.run(diverge + ["--max-skips", "2"], capture_output=True, text=True, cwd=ROOT, timeout=300)
        out = proc.stdout + proc.stderr
        check(proc.returncode != 0 and "step 4: the loss is" in out and "3 non-finite steps in a row, --max-skips 2" in out
              and out.count("update skipped") == 2,
              "--lr 1e300 --max-skips 2: steps 2 and 3 skipped, the run stops at step 4 with the count")
        rode = train(fp32, 0, work, "rode", MODEL, base + ["--lr", "1e300", "--max-skips", "10"], checkpoints=False)
        last = [r for r in rode[1] if "train_loss" in r][-1]
        check(last.get("skips") == 4 and last.get("step") == STEPS,
              f"--lr 1e300 --max-skips 10: the run finishes with {last.get('skips')} skips logged (4)")

        # 3
        norms = {k[1]: v for k, v in logged_values(clean[1]).items() if k[0] == "grad_norm"}
        spike = train(fp32, 0, work, "spike", MODEL, base + ["--inject-fault", "2:loss-scale=1e4"], checkpoints=False)
        spiked = {k[1]: v for k, v in logged_values(spike[1]).items() if k[0] == "grad_norm"}
        check(spiked[1] == norms[1] and spiked[2] > 100 * norms[2],
              f"a loss-scale spike of 1e4 at step 2: its gradient norm {spiked[2]:.4g} against the clean "
              f"{norms[2]:.4g}, step 1 unchanged")
        bad = train(fp32, 0, work, "bad", MODEL, base + ["--inject-fault", "2:bad-batch"], checkpoints=False)
        check(losses(bad)[1] == losses(clean)[1] and abs(losses(bad)[2] - losses(clean)[2]) > 1e-3,
              f"a bad batch at step 2: its loss {losses(bad)[2]:.4f} against the clean {losses(clean)[2]:.4f}, "
              f"step 1 unchanged")

        # under --tp 2 (one replica of 2 ranks) the data faults on rank 1 hit the whole replica:
        # the same run as with them on rank 0, the bad batch's loss that of one process
        tp_runs = [train(bf16, 2, work, f"tp_faults{rank}", MODEL, base + ["--tp", "2", "--inject-fault",
                         f"2:bad-batch:{rank},4:loss-scale=1e4:{rank}"], checkpoints=False) for rank in (1, 0)]
        hashes = [param_hash(r[0], 2) for r in tp_runs]
        tp_bad = losses(tp_runs[0])[2]
        check(hashes[0] is not None and hashes[0] == hashes[1] and abs(tp_bad - losses(bad)[2]) < 0.05,
              f"--tp 2: a bad batch (step 2) and a loss-scale spike (step 4) on rank 1 hit its whole tensor-parallel "
              f"group: the parameter hash of the same faults on rank 0 {hashes}; the bad batch's loss {tp_bad:.4f} "
              f"is one process's {losses(bad)[2]:.4f} (bf16 against fp32: within 0.05), not the clean "
              f"{losses(clean)[2]:.4f}")

        # 4
        spiky = MODEL[:-1] + ["8", "--spike-window", "4", "--spike-zscore", "4"]
        quiet = train(fp32, 0, work, "quiet", spiky, base, checkpoints=False)
        spiked_run = train(fp32, 0, work, "spiked", spiky, base + ["--inject-fault", "6:loss-scale=1e4",
                                                                   "--checkpoint-every", "4"])
        on_purpose = train(fp32, 0, work, "on_purpose", spiky, base + ["--inject-fault", "6:skip"])
        record = next((r for r in spiked_run[1] if r.get("step") == 6 and "train_loss" in r), {})
        check("update skipped" not in quiet[0] and "a spike: the gradient norm" in record.get("skip_reason", "") and
              np.array_equal(checkpoint_array(final_checkpoint(spiked_run[2], 8), "params"),
                             checkpoint_array(final_checkpoint(on_purpose[2], 8), "params")),
              "a gradient spike at step 6 is detected and skipped (the clean run has no spike), ending with the "
              "parameters of a run that skipped step 6 on purpose")
        resumed = resume(fp32, spiked_run, 0, work, "spiked_resumed", spiky,
                         base + ["--inject-fault", "6:loss-scale=1e4"], step=4)
        check("update skipped" in resumed[0] and
              np.array_equal(checkpoint_array(final_checkpoint(resumed[2], 8), "params"),
                             checkpoint_array(final_checkpoint(spiked_run[2], 8), "params")),
              "resumed from step 4, the spike window comes from the checkpoint: the same skip, the same parameters")

        # 5
        proc = subprocess.run([fp32] + MODEL + ["--inject-fault", "0:nan-grad"], capture_output=True, text=True,
                              cwd=ROOT, timeout=60)
        check(proc.returncode != 0 and "STEP:KIND[:RANK] with STEP >= 1" in proc.stderr,
              "--inject-fault 0:nan-grad is refused with its message")

        # 6
        test_rewinds(fp32, bf16, work, base)

        # 7
        zombie_lock(fp32, work, base)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("stability")


if __name__ == "__main__":
    main()
