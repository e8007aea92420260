#!/usr/bin/python3
"""GPT-2 encoding throughput, qkv next to tiktoken, in one run on the same corpus.

    /usr/bin/python3 bench/tokenizer/compare_tiktoken.py [--build build] [--runs 5] [--mb 10]

The corpus is English prose found on the machine (licences, copyright files, READMEs: see
tests/tiktoken/corpus.py), as documents of at most 16 KiB. tiktoken-rs (npm tiktoken-node) and
tiktoken's WebAssembly build run single-threaded in Node; qkv runs bench/tokenizer/bench_tokenizer.cc
(Google Benchmark): one thread from a cold piece cache (as tiktoken, which has none), a 2-thread
batch, and one thread with a warm cache. Medians of --runs runs; MB = 10^6 bytes of UTF-8 input.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "tiktoken"))
import corpus  # noqa: E402
from test_tiktoken_differential import ensure_packages, write_jsonl  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=float, default=10.0, help="corpus size to aim for, in MB")
    ap.add_argument("--npm-dir", default=None)
    args = ap.parse_args()
    npm_dir = args.npm_dir or os.path.join(args.build, "npm")
    ensure_packages(npm_dir)
    docs = corpus.english(int(args.mb * 1e6))
    size = sum(len(d.encode("utf-8")) for d in docs)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "english.jsonl")
        write_jsonl(path, docs)
        for backend, label in [("native", "tiktoken-rs (npm tiktoken-node), 1 thread"),
                               ("wasm", "tiktoken WASM (npm tiktoken), 1 thread")]:
            out = subprocess.run(["node", os.path.join(HERE, "tiktoken_bench.cjs"), npm_dir, backend, path,
                                  str(args.runs)], check=True, capture_output=True, text=True).stdout
            rows.append((label, size / statistics.median(json.loads(out)["seconds"]) / 1e6))
        env = dict(os.environ, QKV_BENCH_CORPUS=path)
        out = subprocess.run([os.path.join(args.build, "bench", "tokenizer", "qkv_bench_tokenizer"),
                              f"--benchmark_repetitions={args.runs}", "--benchmark_format=json"],
                             check=True, capture_output=True, text=True, env=env).stdout
        results = json.loads(out)["benchmarks"]
        labels = {"BM_EncodeCold1Thread": "qkv, 1 thread, cold piece cache",
                  "BM_EncodeBatchCold2Threads": "qkv, 2-thread batch, cold piece caches",
                  "BM_EncodeWarm1Thread": "qkv, 1 thread, warm piece cache"}
        for name, label in labels.items():
            rates = [b["bytes_per_second"] for b in results
                     if b.get("run_name") == name or b["name"].startswith(name + "/")
                     if b.get("run_type") == "iteration"]
            rows.append((label, statistics.median(rates) / 1e6))
    base = rows[0][1]
    print(f"GPT-2 encoding of {size / 1e6:.1f} MB of English prose ({len(docs)} documents), median of {args.runs} runs")
    print(f"{'':48s} {'MB/s':>8s} {'vs tiktoken-rs':>15s}")
    for label, rate in rows:
        print(f"{label:48s} {rate:8.2f} {rate / base:14.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
