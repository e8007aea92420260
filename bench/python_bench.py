#!/usr/bin/python3
"""The Python package, timed in-process (issue 14's targets): medians of --runs, one JSON line per row.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py [--threads 2] [--runs 7]
    ... --batch 1 --tokens 64 --d 64 --heads 4 --runs 2 --mb 0.2      # a smoke run

1. MultiHeadAttention forward, and forward + backward, GPT-2 small by default (B=8, T=1024,
   d=768, 12 heads, dropout 0): qkv.torch.MultiHeadAttention, the book's class
   (tests/pytorch/book_classes.py) and torch.nn.MultiheadAttention (batch_first, causal mask), in
   this process; then `qkv bench --module mha` on the same shapes (--qkv), for the ratio of the
   Python module's time to the command line's. With --jemalloc (default when /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 exists)
   the script re-runs itself with jemalloc preloaded, as bench/compare_pytorch.py runs PyTorch;
   qkv then uses it too.
2. The binding's overhead on a tiny call: qkv.attention on the book's input, (1, 1, 6, 3) float32
   arrays (and qkv.torch.attention on tensors), microseconds per call.
4. GPT-2 small (--gpt-batch 2, --gpt-tokens 256, dropout 0), forward + backward of the
   cross-entropy: qkv.torch.GPTModel against the book's model (tests/pytorch/gpt_model.py), in the
   jemalloc child with the MHA rows; and generation, greedy, --gen-tokens after "Hello, I am":
   qkv.make_model("gpt2-small").generate's tokens/s against `qkv generate --model gpt2-small --json`'s.
3. encode_batch on the tokenizer benchmark's English corpus (tests/tiktoken/corpus.english)
   against tiktoken-rs (npm tiktoken-node, single-threaded, bench/tokenizer/tiktoken_bench.cjs).
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
ROOT = os.path.dirname(HERE)
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def median_seconds(fn, runs, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def emit(**row):
    print(json.dumps(row), flush=True)


def bench_mha(a):
    import torch

    import qkv.torch as qt

    sys.path.insert(0, os.path.join(ROOT, "tests", "pytorch"))
    import book_classes

    B, T, d, H = a.batch, a.tokens, a.d, a.heads
    torch.manual_seed(0)
    x = torch.randn(B, T, d)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    modules = {
        "qkv.torch.MultiHeadAttention": qt.MultiHeadAttention(d, d, T, 0.0, num_heads=H),
        "book MultiHeadAttention": book_classes.MultiHeadAttention(d, d, T, 0.0, num_heads=H),
        "torch.nn.MultiheadAttention": torch.nn.MultiheadAttention(d, H, batch_first=True),
    }

    def call(name, m, inp):
        if name == "torch.nn.MultiheadAttention":
            return m(inp, inp, inp, attn_mask=causal, need_weights=False)[0]
        return m(inp)

    results = {}
    for name, m in modules.items():
        m.eval()
        with torch.no_grad():
            fwd = median_seconds(lambda: call(name, m, x), a.runs)
        xg = x.clone().requires_grad_(True)

        def step():
            m.zero_grad(set_to_none=True)
            call(name, m, xg).sum().backward()

        fb = median_seconds(step, a.runs)
        results[name] = (fwd, fb)
        emit(bench="mha", module=name, B=B, T=T, d=d, heads=H, threads=a.threads, forward_s=fwd, forward_backward_s=fb)
    mine = results["qkv.torch.MultiHeadAttention"]
    for other in ("book MultiHeadAttention", "torch.nn.MultiheadAttention"):
        emit(bench="mha speedup", versus=other, forward=results[other][0] / mine[0],
             forward_backward=results[other][1] / mine[1])
    # The command line's pipeline on the same shapes, in the same run: how much the Python layer costs.
    if a.qkv and os.path.exists(a.qkv):
        cli = []
        for backward in (False, True):
            cmd = [a.qkv, "bench", "--module", "mha", "--batch", str(B), "--seq-len", str(T), "--d-model", str(d),
                   "--num-heads", str(H), "--threads", str(a.threads), "--iters", str(a.runs), "--json"]
            out = subprocess.run(cmd + (["--backward"] if backward else []), capture_output=True, text=True, check=True)
            cli.append(json.loads(out.stdout.strip().splitlines()[-1])["median_ms"] / 1e3)
        emit(bench="mha vs qkv bench", qkv_bench_forward_s=cli[0], qkv_bench_forward_backward_s=cli[1],
             forward=mine[0] / cli[0], forward_backward=mine[1] / cli[1])


def bench_gpt(a):
    import torch
    import torch.nn.functional as F

    import qkv.torch as qt

    sys.path.insert(0, os.path.join(ROOT, "tests", "pytorch"))
    import gpt_model

    cfg = dict(vocab_size=50257, context_length=1024, emb_dim=768, n_heads=12, n_layers=12, drop_rate=0.0,
               qkv_bias=False)
    B, T = a.gpt_batch, a.gpt_tokens
    ids, targets = torch.randint(0, 50257, (B, T)), torch.randint(0, 50257, (B, T))
    times = {}
    for name, cls in (("qkv.torch.GPTModel", qt.GPTModel), ("book GPTModel", gpt_model.GPTModel)):
        torch.manual_seed(123)
        m = cls(cfg).train()

        def step():
            m.zero_grad(set_to_none=True)
            F.cross_entropy(m(ids).flatten(0, 1), targets.flatten()).backward()

        times[name] = median_seconds(step, a.runs)
        emit(bench="gpt forward+backward", module=name, B=B, T=T, threads=a.threads, seconds=times[name])
        del m
    emit(bench="gpt speedup", forward_backward=times["book GPTModel"] / times["qkv.torch.GPTModel"])


def bench_generate(a):
    import qkv

    model = qkv.make_model("gpt2-small", seed=123)
    prompt = model.encode("Hello, I am")
    stamps = []
    model.generate(prompt, max_new_tokens=4)  # warm-up
    for _ in model.generate(prompt, max_new_tokens=a.gen_tokens, stream=True):
        stamps.append(time.perf_counter())
    py_tps = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    cmd = [a.qkv, "generate", "--model", "gpt2-small", "--seed", "123", "--prompt", "Hello, I am",
           "--max-new-tokens", str(a.gen_tokens), "--temperature", "0", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env=dict(os.environ, QKV_NUM_THREADS=str(a.threads)))
    cli_tps = json.loads(out.stdout.strip().splitlines()[-1])["tokens_per_s"]
    emit(bench="generate", tokens=a.gen_tokens, threads=a.threads, python_tokens_per_s=py_tps,
         qkv_generate_tokens_per_s=cli_tps, python_over_cli=py_tps / cli_tps)


def bench_tiny(a):
    import numpy as np
    import torch

    import qkv
    import qkv.torch as qt

    q = np.random.default_rng(0).random((1, 1, 6, 3), dtype=np.float32)
    n = a.tiny_calls
    per_call = median_seconds(lambda: [qkv.attention(q, q, q, causal=True) for _ in range(n)], a.runs) / n
    emit(bench="tiny call", what="qkv.attention (1, 1, 6, 3) numpy, causal", microseconds=per_call * 1e6)
    t = torch.from_numpy(q)
    per_call = median_seconds(lambda: [qt.attention(t, t, t, causal=True) for _ in range(n)], a.runs) / n
    emit(bench="tiny call", what="qkv.torch.attention (1, 1, 6, 3) tensor, causal", microseconds=per_call * 1e6)


def bench_tokenizer(a):
    import qkv

    sys.path.insert(0, os.path.join(ROOT, "tests", "tiktoken"))
    import corpus
    from test_tiktoken_differential import ensure_packages, write_jsonl

    docs = corpus.english(int(a.mb * 1e6))
    mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    enc = qkv.get_encoding("gpt2")
    for threads in (1, a.threads):
        s = median_seconds(lambda: enc.encode_batch(docs, num_threads=threads, allowed_special="all"), a.runs)
        emit(bench="encode_batch", what=f"qkv encode_batch, {threads} thread(s)", mb=mb, mb_per_s=mb / s)
    npm_dir = os.path.abspath(a.npm_dir or os.path.join(ROOT, "build", "npm"))
    ensure_packages(npm_dir)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "english.jsonl")
        write_jsonl(path, docs)
        out = subprocess.run(["node", os.path.join(HERE, "tokenizer", "tiktoken_bench.cjs"), npm_dir, "native", path,
                              str(a.runs)], capture_output=True, text=True, check=True)
    s = statistics.median(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])
    emit(bench="encode_batch", what="tiktoken-rs (npm tiktoken-node), 1 thread", mb=mb, mb_per_s=mb / s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--tiny-calls", type=int, default=2000)
    ap.add_argument("--mb", type=float, default=10.0, help="tokenizer corpus size, MB")
    ap.add_argument("--npm-dir", default=None)
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"), help="the qkv binary, for qkv bench's row")
    ap.add_argument("--no-jemalloc", action="store_true")
    ap.add_argument("--gpt-batch", type=int, default=2)
    ap.add_argument("--gpt-tokens", type=int, default=256)
    ap.add_argument("--gen-tokens", type=int, default=200)
    ap.add_argument("--only", choices=["mha", "gpt", "torch", "generate", "tiny", "tokenizer", "rest"], default=None,
                    help="one part (torch: mha and gpt; rest: generate, tiny and tokenizer)")
    a = ap.parse_args()
    # jemalloc is for PyTorch (as bench/compare_pytorch.py runs it): the MHA rows run in a child with
    # it preloaded. The tokenizer and tiny-call rows run here, on glibc's allocator: under jemalloc
    # every encode_batch of 10 MB page-faults its 50 MB of fresh id vectors and lists again (3x slower
    # than with glibc, which reuses the freed memory), and neither side of that comparison is PyTorch.
    want_torch = a.only in (None, "mha", "gpt", "torch")
    if want_torch and not a.no_jemalloc and os.path.exists(JEMALLOC) and JEMALLOC not in os.environ.get("LD_PRELOAD", ""):
        env = dict(os.environ, LD_PRELOAD=JEMALLOC, MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")
        argv, rest = [], iter(sys.argv[1:])
        for arg in rest:  # every argument but --only X / --only=X
            if arg == "--only":
                next(rest, None)
            elif not arg.startswith("--only="):
                argv.append(arg)
        subprocess.run([sys.executable, sys.argv[0], *argv, "--only", a.only or "torch"], env=env, check=True)
        if a.only in ("mha", "gpt", "torch"):
            return
        a.only = "rest"
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import torch

    import qkv

    torch.set_num_threads(a.threads)
    qkv.set_num_threads(a.threads)
    emit(bench="setup", torch=torch.__version__, threads=a.threads, jemalloc=JEMALLOC in os.environ.get("LD_PRELOAD", ""))
    if a.only in (None, "mha", "torch"):
        bench_mha(a)
    if a.only in (None, "gpt", "torch"):
        bench_gpt(a)
    if a.only in (None, "generate", "rest"):
        bench_generate(a)
    if a.only in (None, "tiny", "rest"):
        bench_tiny(a)
    if a.only in (None, "tokenizer", "rest"):
        bench_tokenizer(a)


if __name__ == "__main__":
    main()
