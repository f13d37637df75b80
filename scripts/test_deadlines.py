#!/usr/bin/env python3
"""scripts/test_deadlines.py: a rank that stops at a random moment never hangs the job.

Two ranks under mpirun (the CPU build, build/cpu/train_gpt, a tiny model on a tiny byte-level
data set) train with --comm-timeout T; at a random moment (a random delay after the launch, so
start-up included) one rank, chosen at random, is stopped with SIGSTOP. Every wait for the
stopped rank, wherever the other one is (a device collective queued far ahead, a copy of the
losses, a host collective, a checkpoint's barrier, a sample's gathers, MPI's start-up), must end
by the deadline (llmc/comm.cuh's watchdog). Each trial passes when
  - the job ends within T + 5 s of the stop, with a non-zero exit status: mpirun and every
    process of the job (a rank may outlive mpirun for a moment while it handles the SIGTERM that
    mpirun sent it; it must still be gone by then),
  - the other rank printed the deadline message ("error: rank R: ... did not finish within T s
    (--comm-timeout)", or "error: process PID: ..." before MPI has said its rank),
  - no process of the job is left then (its session, which mpirun leads, is empty),
  - no file of the job is left in /dev/shm: every file new since the trial began that the job
    made (the files its ranks mapped, and the CPU NCCL's data files, named after their poster's
    pid) is gone; files of other users' jobs are named but not counted,
  - in the checkpoint mode, every committed checkpoint has all its shards.
Modes: ZeRO stages 0 to 3, tensor parallelism (with and without sequence parallelism), Muon,
evaluation every step (tensor-parallel), a checkpoint every step (ZeRO-3: a shard per rank), a
sample every step (tensor-parallel), a 2-stage pipeline (its sends and receives, evaluation
every step), a 2-stage pipeline sampling every step (each token's forward pass through the
stages, the logits' broadcast) and a cp 2 ring sampling every step (each token's forward pass
through the ring attention, the logits' broadcast from the rank holding the last position). A
SIGKILL variant kills a rank instead (mpirun ends the job): the same checks but the message,
which mpirun or the other rank prints.

Usage: python3 scripts/test_deadlines.py [--bin-dir DIR] [--trials N] [--kill-trials N]
                                          [--timeout T] [--seed S] [-k MODE]
(defaults: 1 SIGSTOP trial per mode and 2 SIGKILL trials, about a minute for the suite)
A trial whose mpirun ends before any rank of the job appeared, with no error of ours printed (the
launcher itself failed: seen once under load in CI), runs once more; twice is a failure.
Prints one line per trial and a summary per mode; exits non-zero when any trial fails.
"""
import argparse
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

from testlib import (KILLED_RANK_MESSAGE, MPIRUN, ROOT, TINY, checkpoint_files, checkpoint_sections, make_text,
                     manifest_names, prepare_text)

ENDLESS = TINY + ["--val-every", "0", "--sample-len", "0", "--steps", "100000"]  # a job that runs until stopped
TP = ["--tp", "2", "--heads", "2", "--embd", "64"]
# name: extra flags ({dir}: the trial's folder); a repeated flag takes its last value
MODES = {
    "zero0": ["--zero", "0"],
    "zero1": ["--zero", "1"],
    "zero2": ["--zero", "2"],
    "zero3": ["--zero", "3"],
    "tp": TP,
    "tp-sp": TP + ["--sequence-parallel"],
    "muon": ["--optimizer", "muon"],
    "eval": TP + ["--val-every", "1", "--val-steps", "2"],
    "checkpoint": ["--zero", "3", "--checkpoint-dir", "{dir}/ck", "--checkpoint-every", "1"],
    "sample": TP + ["--sample-every", "1", "--sample-len", "16"],
    "pp": ["--pp", "2", "--grad-accum", "2", "--val-every", "1", "--val-steps", "2"],
    "pp-sample": ["--pp", "2", "--grad-accum", "2", "--sample-every", "1", "--sample-len", "16"],
    "cp-sample": ["--cp", "2", "--sample-every", "1", "--sample-len", "16"],
}
SHM = "/dev/shm"
STOP_WINDOW_S = (0.2, 4.0)  # the stop comes this long after the launch (start-up is ~1 s)
GRACE_S = 5.0  # the job must be over this long after the deadline


def proc_stat(pid):
    """(ppid, session) of a process, or None when it is gone (a zombie has ended: here nothing
    may reap the orphans of mpirun for a while)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in "ZX" else (int(fields[1]), int(fields[3]))
    except (OSError, IndexError, ValueError):
        return None


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def session_members(sid):
    """The processes of session sid (the job's: mpirun leads it)."""
    return [p for p in all_pids() if (proc_stat(p) or (0, 0))[1] == sid]


def job_alive(job_pid, pids):
    """The processes of the job still alive (not exited, not zombies): of mpirun's session, and
    the ranks (pids), wherever they went."""
    return session_members(job_pid) + [p for p in pids if proc_stat(p)]


def ranks_of(job_pid, binary):
    """{world rank: pid} of the trainer processes mpirun started (OMPI_COMM_WORLD_RANK)."""
    ranks = {}
    for pid in all_pids():
        st = proc_stat(pid)
        try:
            if not st or st[0] != job_pid or os.path.realpath("/proc/%d/exe" % pid) != binary:
                continue
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for var in env:
            if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(var.split(b"=", 1)[1])] = pid
    return ranks


def shm_mapped(pids, seen):
    """Adds to `seen` the names of the files in /dev/shm that the processes map."""
    for pid in pids:
        try:
            with open("/proc/%d/maps" % pid) as f:
                for line in f:
                    fields = line.split(None, 5)  # address perms offset dev inode [path]
                    if len(fields) == 6 and fields[5].startswith(SHM + "/"):
                        seen.add(fields[5].strip()[len(SHM) + 1:].replace(" (deleted)", ""))
        except OSError:
            pass


def job_files(new, mapped, pids):
    """The new /dev/shm names this job made: mapped by its ranks (Open MPI's segments, the CPU
    NCCL's control files), or data files of one of those communicators or of one of its pids."""
    comms = {n for n in mapped if n.startswith("cucc-nccl-")}
    marks = tuple(".%d-" % p for p in pids)
    return sorted(n for n in new if n in mapped or n.split(".")[0] in comms or
                  (n.startswith("cucc-nccl-") and any(m in n for m in marks)))


def incomplete_checkpoints(folder):
    """The committed checkpoints in folder that lack a shard their manifest counts."""
    bad = []
    if not os.path.isdir(folder):
        return bad
    for name in manifest_names(folder):
        manifest = os.path.join(folder, name)
        _, sections = checkpoint_sections(manifest)
        want = struct.unpack("<4Q", sections["save"])[2]  # the save's id (2 words), shards, index
        have = len(checkpoint_files(manifest)) - 1
        if have != want:
            bad.append("%s has %d of %d shards" % (name, have, want))
    return bad


def trial(binary, data, work, mode, sig, rng, timeout):
    """One job of `mode`, a rank stopped (or killed) at a random moment. Returns (ok, seconds
    from the signal to the end of the job, a line about it); ok is None when mpirun ended before
    any rank of the job appeared and nothing printed an error of ours (the launcher failed: once
    in a CI run, under load, within 0.1 s of the launch), the line then mpirun's last words."""
    folder = tempfile.mkdtemp(prefix="trial_", dir=work)
    flags = [f.replace("{dir}", folder) for f in MODES[mode]]
    out_path = os.path.join(folder, "out.txt")
    shm_before = set(os.listdir(SHM))
    delay = rng.uniform(*STOP_WINDOW_S)
    victim = rng.randrange(2)
    with open(out_path, "w") as out:
        job = subprocess.Popen(MPIRUN + ["-np", "2", binary, "--data", data, "--comm-timeout", str(timeout)] +
                               ENDLESS + flags, stdout=out, stderr=subprocess.STDOUT, cwd=folder,
                               start_new_session=True)
    launched = time.time()
    mapped, pids, ranks = set(), set(), {}
    # until the moment of the stop: learn the ranks and the files they map
    while job.poll() is None and (time.time() < launched + delay or len(ranks) < 2):
        if time.time() > launched + 60:
            break
        ranks.update(ranks_of(job.pid, binary))
        pids.update(ranks.values())
        shm_mapped(pids, mapped)
        time.sleep(0.02)
    problems = []
    signalled = None
    if job.poll() is not None and not ranks:
        job.wait()
        text = open(out_path, errors="replace").read()
        if not re.search(r"^error:", text, re.M):  # mpirun's own failure to start the job
            shutil.rmtree(folder, ignore_errors=True)
            return None, 0.0, " | ".join(l.strip()[:200] for l in text.strip().splitlines()[-4:])
    if job.poll() is None and len(ranks) == 2:
        os.kill(ranks[victim], sig)
        signalled = time.time()
        # The job is over when mpirun and every process of it are: mpirun may exit before a rank
        # it signalled as it ended the job (SIGCONT, SIGTERM: the stopped rank among them) has
        # finished handling the signal (the watchdog aborts its communicators, then the signal's
        # default action ends it), so the ranks are given the same bound as mpirun.
        bound = signalled + timeout + GRACE_S
        while time.time() < bound and (job.poll() is None or job_alive(job.pid, pids)):
            shm_mapped(pids, mapped)
            time.sleep(0.02)
        seconds = time.time() - signalled
    else:
        problems.append("the job ended before the signal" if job.poll() is not None
                        else "the ranks never appeared")
        seconds = time.time() - launched
    if job.poll() is None:
        problems.append("still running %.1f s after the signal (hang)" % seconds)
        os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    text = open(out_path, errors="replace").read()
    if signalled is not None:
        if job.returncode == 0:
            problems.append("exit status 0")
        if sig == signal.SIGSTOP:
            other = 1 - victim  # named by its rank, or by its pid before MPI has said it
            deadline = r"error: (rank %d|process %d): .* did not finish within %g s \(--comm-timeout\)" % (
                other, ranks[other], timeout)
            if not re.search(deadline, text):
                problems.append("no deadline message from rank %d" % other)
        elif not re.search(KILLED_RANK_MESSAGE, text, re.M):  # whichever of mpirun and the other comes first
            problems.append("no message about the killed rank")
    time.sleep(0.1)  # mpirun has exited: what is left now stays
    left = job_alive(job.pid, pids)
    if left:
        problems.append("processes left: %s%s" % (sorted(set(left)), "" if signalled is None else
                                                  " %.1f s after the signal" % (time.time() - signalled)))
        for p in set(left):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    if not any(n.startswith("cucc-nccl-") for n in mapped) and signalled is not None and delay > 2.5:
        problems.append("never saw the job's communicator files (the check of /dev/shm is blind)")
    files = job_files(set(os.listdir(SHM)) - shm_before, mapped, pids)
    if files:
        problems.append("left in /dev/shm: %s" % " ".join(files))
        for n in files:
            try:
                os.unlink(os.path.join(SHM, n))
            except OSError:
                pass
    problems += incomplete_checkpoints(os.path.join(folder, "ck"))
    how = "SIGSTOP" if sig == signal.SIGSTOP else "SIGKILL"
    lines = [l for l in text.splitlines() if re.search(r"did not finish|NCCL failed|NCCL error|signal 9", l)]
    line = "%-10s %s rank %d at %.2f s: ended %.1f s later, status %s%s" % (
        mode, how, victim, delay, seconds, job.returncode,
        "; " + "; ".join(problems) if problems else "")
    if problems:
        line += "\n    last output: " + (" | ".join(l.strip()[:200] for l in text.strip().splitlines()[-6:])
                                       or "(none)")
        line += "\n    messages: " + (" | ".join(l[:200] for l in lines[:3]) or "(none)")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return not problems, seconds, line


def make_data(work):
    text, data = os.path.join(work, "tiny.txt"), os.path.join(work, "data")
    make_text(text)
    p = prepare_text(text, data)
    if p.returncode != 0:
        print("error: prepare.py failed: %s" % p.stderr[-500:], file=sys.stderr)
        return None
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"),
                    help="folder with train_gpt (default build/cpu, made by `make cpu`)")
    ap.add_argument("--trials", type=int, default=1, help="SIGSTOP trials per mode (default 1)")
    ap.add_argument("--kill-trials", type=int, default=2,
                    help="SIGKILL trials, over the modes in turn (default 2)")
    ap.add_argument("--timeout", type=float, default=3.0, help="--comm-timeout of the jobs (default 3)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the moments and ranks (default: random)")
    ap.add_argument("-k", dest="only", default="", help="run only the modes whose name contains this")
    args = ap.parse_args()
    binary = os.path.realpath(os.path.join(args.bin_dir, "train_gpt"))
    if not os.access(binary, os.X_OK):
        print("error: %s is missing; build it with `make cpu` (or pass --bin-dir)" % binary,
              file=sys.stderr)
        return 1
    modes = [m for m in MODES if args.only in m]
    if not modes:
        print("error: no mode's name contains %r" % args.only, file=sys.stderr)
        return 1
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print("seed %d, --comm-timeout %g, %d SIGSTOP trial(s) per mode, %d SIGKILL trial(s)"
          % (seed, args.timeout, args.trials, args.kill_trials), flush=True)
    work = tempfile.mkdtemp(prefix="test_deadlines_")
    start = time.time()
    results = {}  # (mode, signal name) -> [(ok, seconds)]
    try:
        data = make_data(work)
        if data is None:
            return 1
        plan = [(m, signal.SIGSTOP) for _ in range(args.trials) for m in modes]
        plan += [(modes[i % len(modes)], signal.SIGKILL) for i in range(args.kill_trials)]
        for mode, sig in plan:
            ok, seconds, line = trial(binary, data, work, mode, sig, rng, args.timeout)
            if ok is None:  # mpirun failed before any rank ran (seen under load): once more
                print("note  %s: mpirun ended before starting a rank, without an error of ours (%s); "
                      "the trial runs again" % (mode, line), flush=True)
                ok, seconds, line = trial(binary, data, work, mode, sig, rng, args.timeout)
                if ok is None:
                    ok, line = False, "%s: mpirun failed to start the job twice: %s" % (mode, line)
            print("%s  %s" % ("PASS" if ok else "FAIL", line), flush=True)
            results.setdefault((mode, sig.name), []).append((ok, seconds))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\nsummary (seconds from the signal to the end of the job; the bound is %g):"
          % (args.timeout + GRACE_S))
    failed = 0
    for (mode, how), runs in results.items():
        bad = sum(not ok for ok, _ in runs)
        failed += bad
        print("  %-10s %-7s %3d trial(s), %d failed, worst %.1f s" % (
            mode, how, len(runs), bad, max(s for _, s in runs)))
    print("%s: %d of %d trial(s) failed in %.0f s (seed %d)" % (
        "FAIL" if failed else "PASS", failed, sum(len(r) for r in results.values()),
        time.time() - start, seed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
