#!/usr/bin/env python3
"""qkv and llama.cpp side by side on the same GGUF files, same threads, one run.

    python3 bench/gguf_vs_llamacpp.py --qkv build/qkv [--preset qwen3-0.6b] [--types bf16,q8_0,q4_0]
                                      [--threads 2] [--rounds 3] [--dir /tmp/qkv-gguf-bench]
                                      [--simd avx2 --llamacpp-cpu haswell]

The files: `qkv convert --model PRESET --to gguf --type T` (the preset's weights drawn from seed 123,
the installed tokenizer; for qwen3.5-0.8b, which has none installed, Qwen3's: the speed does not
depend on it), written once into --dir and reused.
  decode   a 4-token prompt, 200 new tokens, greedy; tokens/s after the first token.
           qkv: `qkv generate --weights F --json` (tokens_per_s); llama.cpp: node-llama-cpp 3.22.1's
           prebuilt CPU build (tests/llamacpp/greedy.mjs --bench-decode 200). Each against the
           measured read bandwidth (`qkv bench --module decode`'s, same threads, probed just
           before and just after each round's qkv run, the larger of the two: a shared host's
           bandwidth moves during a run, and a probe caught in a slow spell would inflate a share)
           for the bytes it reads per token: the file's tensors, for both (qkv keeps Q8_0 / Q4_0 /
           Q4_K / Q6_K weights as their blocks and BF16 ones as bf16), and the attention's keys and
           values at the timed steps' mean length (the prompt and half the new tokens; 2 bytes each
           in both: qkv's bf16 cache, llama.cpp's f16 one), with Qwen3.5's linear layers' states
           (floats) where it has them. A % column is the median of the rounds' shares, each against
           the probes of its own round; the table's KV column is the cache's part of those bytes.
  prefill  1,000 prompt tokens: qkv's prefill_ms (the prompt and the first token), llama.cpp's
           --bench-prefill 1000 (one evaluation of the prompt).
Runs alternate qkv and llama.cpp, never together (llama.cpp spins its threads); medians of --rounds;
a ratio is llama.cpp's time over qkv's (above 1: qkv is faster). node-llama-cpp is installed into
--npm-dir (default: npm-llamacpp beside --qkv, as the tests install it) when missing.
Both engines pick their kernels for the CPU; to compare one instruction set on a CPU that has more,
--simd T runs qkv (and the probes) with QKV_SIMD=T, and --llamacpp-cpu V gives llama.cpp a copy of
the prebuilt binaries' folder (hard links, beside --npm-dir) holding libggml-cpu-V.so as its only CPU
backend: `--simd avx2 --llamacpp-cpu haswell` is an AVX2 machine without AVX-VNNI (a Zen 3) for
both. The header names the backend llama.cpp loaded.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "pytorch"))

import test_gguf_llamacpp  # noqa: E402  (its npm install of node-llama-cpp)

GREEDY = os.path.join(ROOT, "tests", "llamacpp", "greedy.mjs")
PROMPT_WORDS = "The quick brown fox jumps over the lazy dog while the cat sleeps. "


def run_json(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode(errors='replace')[-1500:]}")
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def file_tensor_bytes(path):
    """The bytes of the file's tensors (what llama.cpp reads per token: every weight once), and its
    metadata."""
    import gguf_files
    meta, tensors = gguf_files.read_gguf(path)
    return sum(len(t[2]) for t in tensors.values()), meta


def cache_bytes_read(meta, positions):
    """Bytes a decoding step reads besides the weights with `positions` cached: every full-attention
    layer's keys and values (2 bytes a number), and every linear layer's state (floats)."""
    arch = meta["general.architecture"]
    layers = meta[f"{arch}.block_count"]
    interval = meta.get(f"{arch}.full_attention_interval", 1)  # Qwen3.5: one full layer in `interval`
    full = layers // interval
    heads = meta[f"{arch}.attention.head_count"]
    kv_heads = meta.get(f"{arch}.attention.head_count_kv", heads)
    dim = meta.get(f"{arch}.attention.key_length", meta[f"{arch}.embedding_length"] // heads)
    state = 0
    if interval > 1:  # a linear layer's state: value heads x key dim x value dim floats
        state = (layers - full) * meta[f"{arch}.ssm.state_size"] * meta[f"{arch}.ssm.inner_size"] * 4
    return full * kv_heads * dim * 2 * 2 * positions + state


def npm_dir_with_one_cpu_backend(npm_dir, variant):
    """A copy of npm_dir (hard links) whose prebuilt binaries keep libggml-cpu-<variant>.so as their one
    CPU backend, made once beside npm_dir; exits naming the variants there when there is no such one."""
    bins = os.path.join("node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
    have = sorted(f[len("libggml-cpu-"):-len(".so")] for f in os.listdir(os.path.join(npm_dir, bins))
                  if f.startswith("libggml-cpu-") and f.endswith(".so"))
    if variant not in have:
        sys.exit(f"--llamacpp-cpu {variant}: the prebuilt binaries have no such CPU backend; they have {', '.join(have)}")
    copy = f"{os.path.abspath(npm_dir).rstrip('/')}-cpu-{variant}"
    if not os.path.isdir(copy):
        tmp = copy + ".partial"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(npm_dir, tmp, symlinks=True, copy_function=os.link)
        for v in have:
            if v != variant:
                os.remove(os.path.join(tmp, bins, f"libggml-cpu-{v}.so"))
        os.rename(tmp, copy)
    return copy


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--preset", default="qwen3-0.6b")
    ap.add_argument("--types", default="bf16,q8_0,q4_0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=200)
    ap.add_argument("--prefill-tokens", type=int, default=1000)
    ap.add_argument("--dir", default="/tmp/qkv-gguf-bench")
    ap.add_argument("--npm-dir")
    ap.add_argument("--simd", help="qkv's kernels' target (QKV_SIMD), e.g. avx2; default: the CPU's best")
    ap.add_argument("--llamacpp-cpu", help="llama.cpp's one CPU backend, e.g. haswell; default: its pick")
    a = ap.parse_args()
    npm_dir = a.npm_dir or test_gguf_llamacpp.default_npm_dir(a.qkv)
    test_gguf_llamacpp.ensure_node_llama_cpp(npm_dir)
    if a.llamacpp_cpu:
        npm_dir = npm_dir_with_one_cpu_backend(npm_dir, a.llamacpp_cpu)
    os.makedirs(a.dir, exist_ok=True)
    env = dict(os.environ, QKV_NUM_THREADS=str(a.threads), QKV_NPM_DIR=npm_dir)
    if a.simd:
        env["QKV_SIMD"] = a.simd
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    probe_cmd = [a.qkv, "bench", "--module", "decode", "--kv-len", "64", "--threads", str(a.threads), "--json"]
    probes = []  # GB/s: the first, then two a round and file

    def probe():
        r = run_json(probe_cmd, env)
        probes.append(r["bandwidth_gb_s"])
        return r

    first = probe()
    variants = set()  # the CPU backends llama.cpp loaded
    print(f"{cpu}; {a.threads} threads; qkv: {first['simd']}, lines prefetched in bursts into {first['prefetch']}; "
          f"{a.rounds} rounds, medians")
    rows = []
    for t in a.types.split(","):
        path = os.path.join(a.dir, f"{a.preset}-{t}.gguf")
        if not os.path.exists(path):
            extra = []
            if a.preset.startswith("qwen3.5"):  # no Qwen3.5 tokenizer installed: Qwen3's (llama.cpp needs one)
                home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
                extra = ["--tokenizer", os.path.join(home, "qkv", "qwen3", "tokenizer.json")]
            subprocess.run([a.qkv, "convert", "--model", a.preset, "--to", "gguf", "--type", t, "--out", path, *extra],
                           check=True, env=env, stdout=subprocess.DEVNULL)
        file_bytes, meta = file_tensor_bytes(path)
        # the timed steps (after the first new token) see the 4-token prompt and 1 .. new - 1 new ones
        kv_bytes = cache_bytes_read(meta, 4 + a.new_tokens / 2)
        step_bytes = file_bytes + kv_bytes
        # a prompt of about --prefill-tokens of the model's own tokenizer, as text for qkv and ids for llama.cpp
        vocab = "qwen3" if a.preset.startswith("qwen") else "llama3"  # the preset's installed tokenizer (Qwen2.5: Qwen3's)
        n = len(run_json([a.qkv, "encode", "--tokenizer", vocab, "--text", PROMPT_WORDS * 100], env))
        prompt = PROMPT_WORDS * max(1, round(100 * a.prefill_tokens / n))
        ids = run_json([a.qkv, "encode", "--tokenizer", vocab, "--text", prompt], env)
        ids_arg = ",".join(map(str, ids))
        q_dec, l_dec, q_pre, l_pre, q_share, l_share = [], [], [], [], [], []
        for _ in range(a.rounds):
            before = probe()["bandwidth_gb_s"]
            r = run_json([a.qkv, "generate", "--weights", path, "--prompt", "The quick brown fox", "--temperature", "0",
                          "--max-new-tokens", str(a.new_tokens), "--json"], env)
            gb = max(before, probe()["bandwidth_gb_s"]) * 1e9
            q_dec.append(r["tokens_per_s"])
            q_share.append(r["tokens_per_s"] * step_bytes / gb)
            model = r["model"]
            r = run_json(["node", GREEDY, path, "--ids", ",".join(map(str, ids[:4])), "--bench-decode",
                          str(a.new_tokens), "--threads", str(a.threads)], env)
            l_dec.append(r["decode"]["tokens_per_s"])
            variants.add(r.get("cpu_variant"))
            l_share.append(r["decode"]["tokens_per_s"] * step_bytes / gb)
            r = run_json([a.qkv, "generate", "--weights", path, "--prompt", prompt, "--temperature", "0",
                          "--max-new-tokens", "1", "--json"], env)
            q_pre.append(r["prefill_ms"] / 1000)
            r = run_json(["node", GREEDY, path, "--ids", ids_arg, "--bench-prefill", str(len(ids)), "--threads",
                          str(a.threads)], env)
            l_pre.append(r["prefill"]["seconds"])
        qd, ld = statistics.median(q_dec), statistics.median(l_dec)
        qp, lp = statistics.median(q_pre), statistics.median(l_pre)
        rows.append((t, file_bytes, kv_bytes, qd, ld, qp, lp, model, statistics.median(q_share),
                     statistics.median(l_share)))
    print(f"llama.cpp's CPU backend: {', '.join(sorted(map(str, variants)))}")
    print(f"read bandwidth (qkv bench --module decode, {len(probes)} probes, before and after each round's qkv run): "
          f"median {statistics.median(probes):.1f} GB/s, {min(probes):.1f}-{max(probes):.1f}")
    print(f"\n| {a.preset} file | MB | KV MB | qkv decode tok/s | llama.cpp | ratio | % of bw qkv | llama.cpp | "
          f"prefill {a.prefill_tokens} qkv s | llama.cpp s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t, fb, kb, qd, ld, qp, lp, _, qs, ls in rows:
        print(f"| {t.upper()} | {fb / 1e6:.0f} | {kb / 1e6:.1f} | {qd:.1f} | {ld:.1f} | {qd / ld:.2f}x | "
              f"{100 * qs:.0f}% | {100 * ls:.0f}% | {qp:.2f} | {lp:.2f} | {lp / qp:.2f}x |")
    print("\nqkv's models:", *sorted({r[7] for r in rows}), sep="\n  ")


if __name__ == "__main__":
    main()
