#!/usr/bin/env python3
"""qkv's fast attention next to PyTorch, same configuration, same threads, in one run.

    bench/compare_pytorch.py --qkv build/qkv --module mha --batch 8 --seq-len 1024 --threads 2

runs, one after another (and --rounds times, alternating):
  * `qkv bench --json` (the fused kernels; the projections in qkv's own matrix product, or
    OpenBLAS's under QKV_GEMM=openblas),
  * the book's PyTorch class (tests/pytorch/book_classes.py: MultiHeadAttention for --module mha,
    CausalAttention for causal-attention, the book's four tensor ops for attention-core),
  * torch.nn.MultiheadAttention (batch_first, causal attn_mask, need_weights=False) for mha,
and prints the medians and the ratios PyTorch / qkv (above 1: qkv is faster).

--dtype bf16 runs `qkv bench --dtype bf16` (bf16 mode) and PyTorch under
torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's own mixed precision; qkv's fp32 run is timed
too, in the same rounds, for the bf16 / fp32 speed-up.

PyTorch runs the way a performance-minded user runs it: in
a child process with jemalloc preloaded (Debian libjemalloc2, MALLOC_CONF with decay off),
OMP_WAIT_POLICY=PASSIVE, torch.set_num_threads(n) and OPENBLAS_NUM_THREADS=n (OpenBLAS ignores
torch's setting). Forward runs under torch.no_grad(); --backward times forward + backward with
autograd (the input requires grad, as qkv computes dx too). Use Debian's python3-torch
(/usr/bin/python3). The environment is otherwise passed through unchanged to both sides (note
OPENBLAS_CORETYPE: it pins OpenBLAS's kernels, PyTorch's projections and, under QKV_GEMM=openblas,
qkv's; --unset-openblas-coretype removes it for both).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"), help="the qkv binary")
    p.add_argument("--module", default="mha", choices=["mha", "causal-attention", "attention-core"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--num-heads", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1, help="alternate qkv and PyTorch this many times; medians of all")
    p.add_argument("--backward", action="store_true", help="time forward + backward")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"],
                   help="bf16: qkv's bf16 mode against PyTorch under torch.autocast(cpu, bfloat16)")
    p.add_argument("--no-jemalloc", action="store_true", help="PyTorch with glibc's allocator")
    p.add_argument("--unset-openblas-coretype", action="store_true",
                   help="remove OPENBLAS_CORETYPE from both sides' environment")
    p.add_argument("--skip-nn", action="store_true", help="do not time torch.nn.MultiheadAttention")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def median_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), times


def torch_worker(a):
    """Runs in the child process: times the PyTorch variants, prints one JSON line."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tests", "pytorch"))
    from book_classes import CausalAttention, MultiHeadAttention

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, T, C, H = a.batch, a.seq_len, a.d_model, a.num_heads
    results = {"torch_version": torch.__version__, "threads": torch.get_num_threads()}

    def run(name, module_fn, x):
        if a.backward:
            x.requires_grad_(True)
            g = torch.randn(module_fn(x).shape)

            def step():
                x.grad = None
                y = module_fn(x)
                y.backward(g)
        else:
            def step():
                with torch.no_grad():
                    module_fn(x)
        timed = step
        if a.dtype == "bf16":
            def timed():
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    step()
        med, times = median_ms(timed, a.iters, a.warmup)
        results[name] = {"median_ms": med, "times_ms": times}

    if a.module == "attention-core":
        D = C // H
        q, k, v = (torch.randn(B, H, T, D) for _ in range(3))
        mask = torch.triu(torch.ones(T, T), diagonal=1).bool()

        def textbook(q_):  # the book's four steps on (B, H, T, D)
            s = q_ @ k.transpose(2, 3)
            s = s.masked_fill(mask, -torch.inf)
            w = torch.softmax(s / D ** 0.5, dim=-1)
            return w @ v

        run("book", textbook, q)
    elif a.module == "causal-attention":
        m = CausalAttention(C, C, T, 0.0).eval()
        run("book", m, torch.randn(B, T, C))
    else:
        book = MultiHeadAttention(C, C, T, 0.0, H).eval()
        run("book", book, torch.randn(B, T, C))
        if not a.skip_nn:
            nn_mha = torch.nn.MultiheadAttention(C, H, batch_first=True).eval()
            causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            run("nn", lambda x: nn_mha(x, x, x, attn_mask=causal, need_weights=False)[0], torch.randn(B, T, C))
    print(json.dumps(results))


def child_env(a, for_torch):
    env = dict(os.environ)
    if a.unset_openblas_coretype:
        env.pop("OPENBLAS_CORETYPE", None)
    if for_torch:
        env["OPENBLAS_NUM_THREADS"] = str(a.threads)
        env["OMP_NUM_THREADS"] = str(a.threads)
        env["OMP_WAIT_POLICY"] = "PASSIVE"
        if not a.no_jemalloc:
            if not os.path.exists(JEMALLOC):
                sys.exit(f"compare_pytorch: {JEMALLOC} is missing (apt install libjemalloc2), or pass --no-jemalloc")
            env["LD_PRELOAD"] = JEMALLOC
            env["MALLOC_CONF"] = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
    return env


def last_json_line(text, what):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"compare_pytorch: no JSON from {what}:\n{text}")


def main(argv):
    a = parse_args(argv)
    if a.worker:
        return torch_worker(a)
    common = ["--batch", str(a.batch), "--seq-len", str(a.seq_len), "--d-model", str(a.d_model),
              "--num-heads", str(a.num_heads), "--threads", str(a.threads), "--iters", str(a.iters),
              "--warmup", str(a.warmup)]
    qkv_cmd = [a.qkv, "bench", "--module", a.module, "--json"] + common + (["--backward"] if a.backward else [])
    torch_cmd = ["/usr/bin/python3", os.path.abspath(__file__), "--worker", "--module", a.module, "--dtype", a.dtype]
    torch_cmd += common + (["--backward"] if a.backward else []) + (["--skip-nn"] if a.skip_nn else [])

    def run_qkv(dtype):
        cmd = qkv_cmd + ["--dtype", dtype]
        out = subprocess.run(cmd, env=child_env(a, False), capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"compare_pytorch: {' '.join(cmd)} failed:\n{out.stderr}")
        return last_json_line(out.stdout, "qkv bench")

    qkv_times, qkv_f32_times, torch_times, last_qkv, last_torch = [], [], {}, None, None
    for _ in range(a.rounds):
        last_qkv = run_qkv(a.dtype)
        qkv_times += last_qkv["times_ms"]
        if a.dtype == "bf16":
            qkv_f32_times += run_qkv("f32")["times_ms"]
        out = subprocess.run(torch_cmd, env=child_env(a, True), capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"compare_pytorch: the PyTorch worker failed:\n{out.stderr}")
        last_torch = last_json_line(out.stdout, "the PyTorch worker")
        for name in ("book", "nn"):
            if name in last_torch:
                torch_times.setdefault(name, []).extend(last_torch[name]["times_ms"])

    qkv_ms = statistics.median(qkv_times)
    step = "forward + backward" if a.backward else "forward"
    load = os.getloadavg()
    print(f"{a.module} {step} {a.dtype}: B={a.batch} T={a.seq_len} C={a.d_model} H={a.num_heads}, {a.threads} threads, "
          f"{a.rounds} x {a.iters} runs each (load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}; "
          f"OPENBLAS_CORETYPE={child_env(a, False).get('OPENBLAS_CORETYPE', '(unset)')})")
    peak = last_qkv["peak_gflops"]
    gflop = last_qkv["gflop"]
    gemm = "OpenBLAS" if os.environ.get("QKV_GEMM") == "openblas" and a.dtype == "f32" else "qkv GEMM"
    rows = [(f"qkv {a.dtype} (fused kernels + {gemm})", qkv_ms)]
    if qkv_f32_times:
        rows.append(("qkv f32 (fused kernels + qkv GEMM)", statistics.median(qkv_f32_times)))
    autocast = " (autocast bf16)" if a.dtype == "bf16" else ""
    names = {"book": ("PyTorch, the book's class" if a.module != "attention-core" else "PyTorch, the book's tensor ops")
             + autocast,
             "nn": "PyTorch, torch.nn.MultiheadAttention" + autocast}
    summary = {"module": a.module, "backward": a.backward, "batch": a.batch, "seq_len": a.seq_len,
               "d_model": a.d_model, "num_heads": a.num_heads, "threads": a.threads, "qkv_median_ms": qkv_ms,
               "gflop": gflop, "peak_gflops": peak, "qkv_gflops": gflop / qkv_ms * 1e3,
               "torch_version": last_torch.get("torch_version"), "jemalloc": not a.no_jemalloc,
               "load_average": load, "dtype": a.dtype}
    if qkv_f32_times:
        summary["qkv_f32_median_ms"] = statistics.median(qkv_f32_times)
        summary["f32_over_bf16"] = summary["qkv_f32_median_ms"] / qkv_ms
    for name, times in torch_times.items():
        ms = statistics.median(times)
        rows.append((names[name], ms))
        summary[f"{name}_median_ms"] = ms
        summary[f"{name}_over_qkv"] = ms / qkv_ms
    print(f"  {'':52s} {'median ms':>10s} {'GFLOP/s':>9s} {'% peak':>7s} {'x qkv':>7s}")
    for label, ms in rows:
        gf = gflop / ms * 1e3
        print(f"  {label:52s} {ms:10.1f} {gf:9.1f} {100 * gf / peak:6.1f}% {ms / qkv_ms:7.2f}")
    print(f"  ({gflop:.1f} GFLOP of causal work; measured fp32 FMA peak {peak:.1f} GFLOP/s on {a.threads} threads; "
          f"'x qkv' = time / qkv's time)")
    if a.dtype == "bf16":
        print(f"  (bf16: {last_qkv.get('projections', '')}; the bf16 dot product's peak is twice the fp32 FMA peak)")
    if a.json:
        print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1:])
