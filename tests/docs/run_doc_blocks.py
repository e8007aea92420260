#!/usr/bin/env python3
"""Runs the runnable blocks of README.md and docs/*.md, so the commands the documentation shows
cannot go stale.

A runnable block is a fenced block whose info string is `sh runnable` (bash, `set -e -o pipefail`)
or `python runnable` (the interpreter given by --python). Each block runs alone, in a fresh
temporary directory laid out like a checkout whose build is the one under test:

  build/qkv       -> the qkv binary under test (also first on PATH, so blocks may say `qkv ...`)
  build/python    -> the built Python package (--python-dir), when there is one
  examples, bench, scripts, tests, ... -> the source tree's top-level entries (read only, please)

so `./build/qkv ...`, `qkv ...` and `PYTHONPATH=build/python /usr/bin/python3 ...` all mean this
build. A python block runs with PYTHONPATH set to the package. Without --python-dir, blocks that
need the package (python blocks, and sh blocks naming build/python) are skipped and listed as such.

Exit status 0 when every block that ran exited 0; 1 when one failed (the report names the file,
the block's number and first line, and shows the end of its output); 2 on bad arguments.

  run_doc_blocks.py --qkv build/qkv [--python-dir build/python --python /usr/bin/python3]
                    [--source-dir .] [--timeout 300] [--list] [FILE.md ...]
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
KINDS = {"sh runnable": "sh", "python runnable": "python"}


def blocks(path):
    """Yields (number, first line number, kind, text) for each runnable block of a Markdown file;
    number counts the file's runnable blocks from 1."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    n = 0
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        body = []
        j = i + 1
        while j < len(lines):
            close = FENCE.match(lines[j])
            if close and close.group(2)[0] == fence[0] and len(close.group(2)) >= len(fence) and not close.group(3).strip():
                break
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            raise SystemExit(f"{path}:{i + 1}: a fenced block that never closes")
        kind = KINDS.get(" ".join(info.split()))
        if kind is None and "runnable" in info.split():
            raise SystemExit(f"{path}:{i + 1}: unknown runnable block '{info}' (expected one of: {', '.join(KINDS)})")
        if kind:
            n += 1
            yield n, i + 1, kind, "\n".join(body) + "\n"
        i = j + 1


def lay_out(tmp, source_dir, qkv, python_dir):
    """Makes tmp look like a checkout whose build/ holds the binary (and package) under test."""
    for entry in sorted(os.listdir(source_dir)):
        if entry in ("build", ".git") or entry.startswith("build"):
            continue
        os.symlink(os.path.join(source_dir, entry), os.path.join(tmp, entry))
    os.makedirs(os.path.join(tmp, "build"))
    os.symlink(qkv, os.path.join(tmp, "build", "qkv"))
    if python_dir:
        os.symlink(python_dir, os.path.join(tmp, "build", "python"))
    bin_dir = os.path.join(tmp, ".doc-bin")
    os.makedirs(bin_dir)
    os.symlink(qkv, os.path.join(bin_dir, "qkv"))
    return bin_dir


def needs_package(kind, text):
    return kind == "python" or "build/python" in text


def run_block(path, number, line, kind, text, args):
    with tempfile.TemporaryDirectory(prefix="qkv-doc-block-") as tmp:
        bin_dir = lay_out(tmp, args.source_dir, args.qkv, args.python_dir)
        env = dict(os.environ)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        if kind == "sh":
            script = os.path.join(tmp, ".block.sh")
            with open(script, "w", encoding="utf-8") as f:
                f.write("set -e -o pipefail\n" + text)
            cmd = ["bash", script]
        else:
            script = os.path.join(tmp, ".block.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(text)
            env["PYTHONPATH"] = args.python_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            cmd = [args.python, script]
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=args.timeout)
            status, output = r.returncode, r.stdout
        except subprocess.TimeoutExpired as e:
            status, output = f"timed out after {args.timeout} s", e.stdout or b""
        return status, output.decode("utf-8", "replace"), time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qkv", help="the qkv binary under test")
    ap.add_argument("--python-dir", help="the built Python package (build/python); without it, blocks needing it are skipped")
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter the package was built for")
    ap.add_argument("--source-dir", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ap.add_argument("--timeout", type=float, default=300, help="seconds one block may take")
    ap.add_argument("--list", action="store_true", help="list the runnable blocks and exit")
    ap.add_argument("files", nargs="*", help="Markdown files (default: README.md and docs/*.md of the source dir)")
    args = ap.parse_args()
    args.source_dir = os.path.abspath(args.source_dir)
    files = args.files or [os.path.join(args.source_dir, "README.md")] + sorted(glob.glob(os.path.join(args.source_dir, "docs", "*.md")))
    found = [(f, *b) for f in files for b in blocks(f)]
    if args.list:
        for f, number, line, kind, text in found:
            print(f"{os.path.relpath(f, args.source_dir)} block {number} (line {line}, {kind}): {text.splitlines()[0] if text.strip() else ''}")
        return 0
    if not args.qkv:
        ap.error("--qkv is required (the binary under test)")
    args.qkv = os.path.abspath(args.qkv)
    if not os.access(args.qkv, os.X_OK):
        ap.error(f"--qkv {args.qkv}: not an executable file")
    if args.python_dir:
        args.python_dir = os.path.abspath(args.python_dir)
        if not os.path.isdir(os.path.join(args.python_dir, "qkv")):
            ap.error(f"--python-dir {args.python_dir}: no qkv package there (build the qkv_python target)")
    if not found:
        print("no runnable blocks found in " + ", ".join(files))
        return 1
    failed, skipped, total = [], [], 0.0
    for f, number, line, kind, text in found:
        name = f"{os.path.relpath(f, args.source_dir)} block {number} (line {line})"
        first = next((l for l in text.splitlines() if l.strip()), "")
        if needs_package(kind, text) and not args.python_dir:
            skipped.append(name)
            print(f"skip {name}: needs the Python package (no --python-dir): {first}")
            continue
        status, output, seconds = run_block(f, number, line, kind, text, args)
        total += seconds
        if status == 0:
            print(f"ok   {name} {seconds:.1f} s: {first}")
        else:
            failed.append(name)
            tail = "\n".join(output.rstrip().splitlines()[-25:])
            print(f"FAIL {name} {seconds:.1f} s: exit status {status}: {first}\n---- end of its output:\n{tail}\n----")
    print(f"{len(found) - len(skipped)} blocks ran in {total:.1f} s; {len(failed)} failed; {len(skipped)} skipped")
    for name in failed:
        print(f"failed: {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
