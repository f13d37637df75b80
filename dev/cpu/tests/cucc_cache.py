#!/usr/bin/env python3
"""Checks cucc's object cache by building dev/cpu/tests/cucc_cache.cu (see its header) in a fresh
cache folder; prints each check and ends with `cucc_cache: all checks passed` (exit 0) or the
failures (exit 1)."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CUCC = os.path.join(ROOT, "dev", "cpu", "cucc")
SOURCE = os.path.join(ROOT, "dev", "cpu", "tests", "cucc_cache.cu")
failures = []


def build_and_run(work, flags, env=None):
    """Builds the test program with flags; returns (whether the object came from the cache,
    cucc's stderr, the program's output)."""
    exe = os.path.join(work, "prog")
    build = subprocess.run([CUCC, "-v", "-I", work, SOURCE, "-o", exe] + flags, capture_output=True,
                           text=True, env=dict(os.environ, CUCC_CACHE_DIR=os.path.join(work, "cache"),
                                               **(env or {})))
    if build.returncode != 0:
        sys.exit("cucc_cache: the build failed:\n" + build.stderr)
    run = subprocess.run([exe], capture_output=True, text=True)
    return "the object from the cache" in build.stderr, build.stderr, run.stdout.strip()


def expect(label, flags, cached, values, env=None, warning=False):
    hit, diagnostics, output = build_and_run(work, flags, env)
    ok = hit == cached and output == "values %d %d" % values
    if warning:
        ok = ok and "cucc_cache test warning" in diagnostics
    print(("ok   " if ok else "FAIL ") + label + ": " + ("from the cache" if hit else "compiled") +
          ", " + output)
    if not ok:
        failures.append(label)


def write_header(value):
    with open(os.path.join(work, "cucc_cache_value.h"), "w") as f:
        f.write("#define HEADER_VALUE %d\n" % value)


with tempfile.TemporaryDirectory() as work:
    write_header(5)
    expect("first build", ["-DVALUE=1", "-DWARN"], False, (1, 5), warning=True)
    expect("the same build again", ["-DVALUE=1", "-DWARN"], True, (1, 5), warning=True)
    expect("another -D value", ["-DVALUE=2", "-DWARN"], False, (2, 5), warning=True)
    write_header(6)
    expect("an edited header", ["-DVALUE=2", "-DWARN"], False, (2, 6), warning=True)
    expect("another -O level", ["-DVALUE=2", "-DWARN", "-O1"], False, (2, 6), warning=True)
    expect("the edited header's build again", ["-DVALUE=2", "-DWARN"], True, (2, 6), warning=True)
    expect("another target (CUCC_MARCH=x86-64)", ["-DVALUE=2", "-DWARN"], False, (2, 6),
           env={"CUCC_MARCH": "x86-64"}, warning=True)
    expect("this machine's target again", ["-DVALUE=2", "-DWARN"], True, (2, 6), warning=True)
    expect("CUCC_CACHE=0", ["-DVALUE=2", "-DWARN"], False, (2, 6), env={"CUCC_CACHE": "0"})
if failures:
    sys.exit("cucc_cache: %d checks FAILED: %s" % (len(failures), ", ".join(failures)))
print("cucc_cache: all checks passed")
