#!/usr/bin/python3
"""The memory a GGUF file costs to generate from: peak resident memory against the file's size.

    /usr/bin/python3 bench/gguf_load_memory.py --qkv build/qkv FILE.gguf [FILE.gguf ...]
        [--runs 3] [--max-ratio 1.1]

For each file, runs `qkv generate --weights FILE --prompt Hello --max-new-tokens 4` under
/usr/bin/time --runs times and prints the file's size, the least maximum resident set size of
the runs, its ratio to the file, and the least wall time. With --max-ratio it exits 1 when a
file's ratio is above it. (Files with Qwen3-0.6B's shapes and its 151,936-token tokenizer, random
weights, in BF16, Q8_0 and Q4_0: `qkv convert --model qwen3-0.6b --to gguf --type TYPE`.)

qkv copies each tensor out of the mapped file a piece at a time, giving the file's pages back
as it goes, and makes the tokenizer before the weights: the peak is the model (about the file)
plus the tokenizer's tables (about 12 MB for 151,936 tokens) and the process itself.
"""

import argparse
import os
import re
import subprocess
import sys


def run(qkv, path):
    cmd = ["/usr/bin/time", "-v", qkv, "generate", "--weights", path, "--prompt", "Hello", "--max-new-tokens", "4"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"qkv failed ({r.returncode}):\n{r.stderr}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", r.stderr).group(1)
    m, s = wall.split(":")[-2:]
    return peak_kb * 1024, int(m) * 60 + float(s), r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", required=True)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-ratio", type=float)
    a = ap.parse_args()
    over = []
    print(f"{'file':<40} {'size MB':>9} {'peak MB':>9} {'ratio':>6} {'wall s':>7}")
    for path in a.files:
        size = os.path.getsize(path)
        runs = [run(a.qkv, path) for _ in range(a.runs)]
        peak = min(r[0] for r in runs)
        wall = min(r[1] for r in runs)
        print(f"{os.path.basename(path):<40} {size / 1e6:9.1f} {peak / 1e6:9.1f} {peak / size:6.3f} {wall:7.2f}",
              flush=True)
        if a.max_ratio and peak > a.max_ratio * size:
            over.append(path)
    if over:
        sys.exit(f"peak resident memory above {a.max_ratio} x the file: {', '.join(over)}")


if __name__ == "__main__":
    main()
