#!/usr/bin/env python3
"""How much faster qkv runs on N threads than on 1, measured in one run.

    bench/thread_scaling.py --qkv build/qkv --module mha --batch 8 --seq-len 1024 --threads 2

runs `qkv bench --json` for the same configuration on 1 thread and on N threads, alternating,
--rounds times (so drift on a shared machine hits both alike), and prints each side's median of
all timed runs and the speed-up (1-thread median / N-thread median). Extra arguments after `--`
go to `qkv bench` unchanged (e.g. `-- --backward`).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(qkv, args, threads, iters, extra):
    cmd = [qkv, "bench", "--module", args.module, "--batch", str(args.batch), "--seq-len", str(args.seq_len),
           "--threads", str(threads), "--iters", str(iters), "--json"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qkv", default="build/qkv")
    p.add_argument("--module", default="mha", choices=["mha", "causal-attention", "attention-core"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2, help="the N compared with 1")
    p.add_argument("--iters", type=int, default=5, help="timed runs per call")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    args, extra = p.parse_known_args()
    extra = [a for a in extra if a != "--"]
    if args.threads < 2:
        sys.exit(f"--threads {args.threads}: give the thread count to compare with 1 (2 or more)")
    if not os.access(args.qkv, os.X_OK):
        sys.exit(f"--qkv {args.qkv}: not an executable (build qkv first: bash scripts/setup.sh)")
    times = {1: [], args.threads: []}
    peaks = {1: [], args.threads: []}
    for _ in range(args.rounds):
        for n in (1, args.threads):
            r = run(args.qkv, args, n, args.iters, extra)
            times[n] += r["times_ms"]
            peaks[n].append(r["peak_gflops"])
    one, many = statistics.median(times[1]), statistics.median(times[args.threads])
    print(f"{args.module} B={args.batch} T={args.seq_len} {' '.join(extra)}: {args.rounds} rounds x {args.iters} runs, "
          f"alternating (load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')})")
    print(f"  1 thread : median {one:8.1f} ms  (FMA peak {statistics.median(peaks[1]):.0f} GFLOP/s)")
    print(f"  {args.threads} threads: median {many:8.1f} ms  (FMA peak {statistics.median(peaks[args.threads]):.0f} GFLOP/s)")
    print(f"  speed-up {one / many:.2f}x")
    if args.json:
        print(json.dumps({"module": args.module, "batch": args.batch, "seq_len": args.seq_len, "threads": args.threads,
                          "median_ms_1": one, "median_ms_n": many, "speedup": one / many}))


if __name__ == "__main__":
    main()
