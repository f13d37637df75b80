#!/usr/bin/env python3
"""scripts/readme_flags.py: the README's flag table, made from the trainer's own --help (which
train_run.cuh generates from its one flag table), so the two cannot drift apart.

  python3 scripts/readme_flags.py [--bin-dir build/cpu]           prints the markdown table
  python3 scripts/readme_flags.py [--bin-dir build/cpu] --check   exits 1 when README.md's table
                                                                  differs from it
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "| flag | default | meaning |"


def table(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    rows = [BEGIN, "| --- | --- | --- |"]
    for line in out.splitlines():
        m = re.match(r"  (--[\w-]+)\s+(.*) \(default (.*)\)$", line)
        if not m:
            continue
        name, meaning, default = m.groups()
        default = "(empty)" if default == '""' else default.strip('"')
        meaning = meaning.replace("|", "\\|")  # a literal bar inside a markdown cell
        rows.append(f"| `{name}` | {default} | {meaning} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "cpu"))
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    want = table(os.path.join(args.bin_dir, "train_gpt"))
    if not args.check:
        print(want)
        return
    readme = open(os.path.join(ROOT, "README.md")).read()
    start = readme.find(BEGIN)
    end = readme.find("\n\n", start)
    have = readme[start:end] if start >= 0 else ""
    if have != want:
        print("FAIL  README.md's flag table differs from train_gpt --help; regenerate it with "
              "python3 scripts/readme_flags.py")
        sys.exit(1)
    print("PASS  README.md's flag table is train_gpt --help's")


if __name__ == "__main__":
    main()
