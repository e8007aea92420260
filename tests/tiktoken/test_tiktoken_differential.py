#!/usr/bin/python3
"""Differential test: `qkv encode` against tiktoken, byte for byte.

    /usr/bin/python3 tests/tiktoken/test_tiktoken_differential.py --qkv build/qkv [--npm-dir DIR]

The oracles are the npm packages `tiktoken` (OpenAI's Rust core compiled to WebAssembly) and
`tiktoken-node` (tiktoken-rs, native), installed with npm into --npm-dir if they are not there.
The inputs (tests/tiktoken/corpus.py): at least 5 MB (--corpus-bytes) of text found on this machine (licences,
copyright files, man pages, headers, Python and Perl sources) plus generated hard cases (CJK,
emoji and ZWJ sequences, combining marks, right-to-left scripts, long whitespace and digit runs,
contractions in odd cases, special tokens), and 10,000 random Unicode strings. Checked:

  * ids with special tokens allowed: qkv == tiktoken (WASM) == tiktoken-rs, for every string
    (where the two tiktoken builds disagree with each other, because they carry different Unicode
    versions, qkv must equal the WASM build; such strings are counted and listed);
  * ids as ordinary text (qkv --disallowed-special none): qkv == tiktoken's encode_ordinary;
  * decode(encode(x)) == x over the whole corpus (qkv decode);
  * input that is not valid UTF-8: qkv encodes it as tiktoken encodes the text with each invalid
    sequence replaced by U+FFFD (what Python's errors="replace" and TextDecoder produce).

Prints "tiktoken differential: N passed, M failed" (one count per string and check).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import corpus  # noqa: E402
import npm_packages  # noqa: E402

PACKAGES = ["tiktoken@1.0.22", "tiktoken-node@0.0.7"]


def ensure_packages(npm_dir):
    npm_packages.ensure(npm_dir, PACKAGES)


def write_jsonl(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=True) + "\n")


def read_ids(text):
    return [json.loads(line) for line in text.splitlines()]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, **kw)
    if r.returncode != 0:
        err = r.stderr if isinstance(r.stderr, str) else r.stderr.decode("utf-8", "replace")
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{err}")
    return r.stdout


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


class Tally:
    def __init__(self):
        self.passed = self.failed = 0
        self.disagreements = []

    def check(self, ok, message):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            if self.failed <= 20:
                print("FAIL " + message)


def compare(tally, label, texts, results):
    """Every result must equal the first (qkv's). The two tiktoken builds carry different Unicode
    versions (the WASM build of tiktoken 1.0.22 knows letters that Unicode 16 added, tiktoken-rs
    0.0.7 does not), so on such text they disagree with each other; there qkv must equal the WASM
    build, and the case is counted as an oracle disagreement rather than a pass or a failure."""
    names = list(results)
    for i, text in enumerate(texts):
        ref = results[names[0]][i]
        bad = [n for n in names[1:] if results[n][i] != ref]
        if bad == ["tiktoken-rs"] and "tiktoken-wasm" in names:
            tally.disagreements.append(f"{label} #{i}")
            continue
        if bad:
            at = first_difference(ref, results[bad[0]][i])
            detail = ", ".join(f"{n}={results[n][i][max(0, at - 3):at + 5]}" for n in names)
            tally.check(False, f"{label} #{i} ({len(text)} chars) {text[:80]!r}: first difference at id {at}: {detail}")
        else:
            tally.check(True, "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--npm-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "qkv", "npm"))
    ap.add_argument("--corpus-bytes", type=int, default=5_000_000,
                    help="the least text from the machine (a quarter each: English, man pages, headers, sources)")
    args = ap.parse_args()
    ensure_packages(args.npm_dir)
    node = lambda backend, path: read_ids(run(["node", os.path.join(HERE, "tiktoken_encode.cjs"), args.npm_dir,
                                               backend, path], text=True))
    qkv = lambda path, *flags: read_ids(run([args.qkv, "encode", "--jsonl", path, "--threads", "2", *flags], text=True))
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        docs = corpus.documents(args.corpus_bytes + args.corpus_bytes // 10)
        hard = corpus.generated()
        size = sum(len(t.encode("utf-8")) for t in docs + hard)
        print(f"corpus: {len(docs)} documents from the machine + {len(hard)} generated strings, {size / 1e6:.2f} MB")
        tally.check(size >= args.corpus_bytes, f"the corpus has only {size} bytes; the test promises {args.corpus_bytes}")
        sets = {"corpus": docs + hard, "random": corpus.random_strings()}
        for label, texts in sets.items():
            path = os.path.join(tmp, label + ".jsonl")
            write_jsonl(path, texts)
            results = {"qkv": qkv(path, "--allowed-special", "all"), "tiktoken-wasm": node("wasm", path),
                       "tiktoken-rs": node("native", path)}
            for name, ids in results.items():
                tally.check(len(ids) == len(texts), f"{label}: {name} gave {len(ids)} lines for {len(texts)} strings")
            compare(tally, label, texts, results)
            ordinary = {"qkv": qkv(path, "--disallowed-special", "none"), "tiktoken-wasm": node("wasm-ordinary", path)}
            compare(tally, label + " (ordinary)", texts, ordinary)
            # Round trip: the ids of every string, decoded at once, give back all the text.
            all_ids = [i for ids in results["qkv"] for i in ids]
            ids_path = os.path.join(tmp, label + ".ids.json")
            with open(ids_path, "w") as f:
                json.dump(all_ids, f)
            with open(ids_path) as f:
                decoded = run([args.qkv, "decode"], stdin=f)
            joined = "".join(texts).encode("utf-8")
            if decoded.endswith(b"\n") and not joined.endswith(b"\n") and decoded[:-1] == joined:
                decoded = decoded[:-1]
            at = first_difference(decoded, joined)
            tally.check(decoded == joined, f"{label}: decode(encode(x)) != x, first difference at byte {at}: "
                                           f"{decoded[at:at + 40]!r} vs {joined[at:at + 40]!r}")
        # Bytes that are not UTF-8.
        rng = random.Random(3)
        bad_bytes = [b"\xff", b"\xc3", b"abc\x80def", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\xaf",
                     b"caf\xe9 au lait", b"\xf4\x90\x80\x80", b"x\xfe\xfey", b" \x80 \x81 "]
        for _ in range(30):
            raw = bytearray("Ünïcödé text, emoji \U0001F600 and 'll ".encode("utf-8"))
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            bad_bytes.append(bytes(raw))
        replaced = [b.decode("utf-8", errors="replace") for b in bad_bytes]
        path = os.path.join(tmp, "invalid.jsonl")
        write_jsonl(path, replaced)
        want = node("wasm", path)
        for i, raw in enumerate(bad_bytes):
            raw_path = os.path.join(tmp, f"invalid{i}.bin")
            with open(raw_path, "wb") as f:
                f.write(raw)
            got = json.loads(run([args.qkv, "encode", "--file", raw_path, "--allowed-special", "all"], text=True))
            tally.check(got == want[i], f"invalid UTF-8 {raw!r}: qkv {got} != tiktoken on {replaced[i]!r}: {want[i]}")
    if tally.disagreements:
        print(f"{len(tally.disagreements)} strings where tiktoken-rs (older Unicode tables) disagrees with tiktoken "
              f"WASM and qkv (newer): {', '.join(tally.disagreements[:10])}")
    print(f"tiktoken differential: {tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
