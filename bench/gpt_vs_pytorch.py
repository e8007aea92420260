#!/usr/bin/env python3
"""qkv's GPT model next to a PyTorch twin of the book's model, same preset, same threads, one run.

    /usr/bin/python3 bench/gpt_vs_pytorch.py --qkv build/qkv --threads 2 [--rounds 3] [--only decode]

Four cases (GPT-2 small by default), each alternating qkv and PyTorch --rounds times:
  decode   B = 1, a 4-token prompt, 200 new tokens, each step timed: tokens/s
           (qkv: `qkv bench --module gpt --new-tokens 200`, f32 and --dtype bf16;
            PyTorch: the book's GPTModel (tests/pytorch/gpt_model.py) with a preallocated KV
            cache, as the book's optimised variant: each block writes the new token's keys and
            values into (B, H, context, D) buffers and attends over the filled part)
  prefill  one forward of B = 1, T = 1,024 tokens (torch.no_grad)
  step     chapter 5's training step, B = 2, T = 256: forward, cross-entropy, backward, AdamW
           (lr 4e-4, weight decay 0.1), drop_rate 0 on both sides
  memory   one such training step at B = 8, T = 1,024 (qkv fp32 only), not run unless --only
           memory: each side's peak resident memory (getrusage's ru_maxrss of its own process)
qkv's side reports the ceilings measured in its own process (the read bandwidth for decode, the
FMA peak otherwise). PyTorch runs as compare_pytorch.py runs it: a child process with jemalloc
preloaded, torch.set_num_threads(n), OPENBLAS_NUM_THREADS=n. Medians of every timed run; the
ratio is PyTorch's time over qkv's (above 1: qkv is faster).
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
PRESETS = {"gpt2-small": (768, 12, 12), "gpt2-medium": (1024, 24, 16)}
CASES = {"decode": dict(batch=1, seq_len=4, new_tokens=200), "prefill": dict(batch=1, seq_len=1024),
         "step": dict(batch=2, seq_len=256), "memory": dict(batch=8, seq_len=1024)}


def torch_worker(a):
    import torch
    import torch.nn as nn

    sys.path.insert(0, os.path.join(ROOT, "tests", "pytorch"))
    from gpt_model import GPTModel

    torch.set_num_threads(a.threads)
    torch.manual_seed(123)
    E, L, H = PRESETS[a.preset]
    cfg = {"vocab_size": 50257, "context_length": 1024, "emb_dim": E, "n_heads": H, "n_layers": L,
           "drop_rate": 0.0, "qkv_bias": False}
    model = GPTModel(cfg)
    c = CASES[a.case]
    B, T = c["batch"], c["seq_len"]
    ids = torch.randint(0, 50257, (B, T))
    times = []
    if a.case == "prefill":
        model.eval()
        with torch.no_grad():
            for i in range(a.iters + 1):
                t0 = time.perf_counter()
                model(ids)
                if i > 0:
                    times.append((time.perf_counter() - t0) * 1e3)
    elif a.case in ("step", "memory"):
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=0.1)
        targets = torch.randint(0, 50257, (B, T))
        for i in range(a.iters + 1):
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), targets.flatten())
            loss.backward()
            opt.step()
            if i > 0:
                times.append((time.perf_counter() - t0) * 1e3)
    else:
        model.eval()
        D = E // H
        ctx = cfg["context_length"]
        kcache = [torch.zeros(B, H, ctx, D) for _ in range(L)]
        vcache = [torch.zeros(B, H, ctx, D) for _ in range(L)]

        def block_cached(blk, x, layer, pos):  # x (B, n, E) at positions pos .. pos + n - 1
            n = x.shape[1]
            h = blk.norm1(x)
            att = blk.att
            q = att.W_query(h).view(B, n, H, D).transpose(1, 2)
            kcache[layer][:, :, pos:pos + n] = att.W_key(h).view(B, n, H, D).transpose(1, 2)
            vcache[layer][:, :, pos:pos + n] = att.W_value(h).view(B, n, H, D).transpose(1, 2)
            k, v = kcache[layer][:, :, :pos + n], vcache[layer][:, :, :pos + n]
            s = q @ k.transpose(2, 3)
            if n > 1:
                s = s.masked_fill(torch.triu(torch.ones(n, pos + n, dtype=torch.bool), diagonal=pos + 1), -torch.inf)
            w = torch.softmax(s / D ** 0.5, dim=-1)
            x = x + att.out_proj((w @ v).transpose(1, 2).reshape(B, n, E))
            return x + blk.ff(blk.norm2(x))

        def forward_cached(tokens, pos):
            x = model.tok_emb(tokens) + model.pos_emb(torch.arange(pos, pos + tokens.shape[1]))
            for layer, blk in enumerate(model.trf_blocks):
                x = block_cached(blk, x, layer, pos)
            return model.out_head(model.final_norm(x[:, -1]))

        with torch.no_grad():
            logits = forward_cached(ids, 0)
            pos = T
            for i in range(c["new_tokens"] + 2):
                nxt = logits.argmax(-1, keepdim=True)
                t0 = time.perf_counter()
                logits = forward_cached(nxt, pos)
                if i >= 2:
                    times.append((time.perf_counter() - t0) * 1e3)
                pos += 1
    import resource
    max_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"times_ms": times, "torch_version": torch.__version__, "threads": torch.get_num_threads(),
                      "max_rss_mib": max_rss_mib}))


def run_torch(a, case):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
               OMP_WAIT_POLICY="PASSIVE")
    if os.path.exists(JEMALLOC) and not a.no_jemalloc:
        env["LD_PRELOAD"] = JEMALLOC
        env["MALLOC_CONF"] = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
    iters = 1 if case == "memory" else a.iters
    out = subprocess.run([sys.executable, __file__, "--worker", "--case", case, "--preset", a.preset,
                          "--threads", str(a.threads), "--iters", str(iters)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_qkv(a, case, dtype):
    c = CASES[case]
    cmd = [a.qkv, "bench", "--module", "gpt", "--preset", a.preset, "--batch", str(c["batch"]),
           "--seq-len", str(c["seq_len"]), "--threads", str(a.threads), "--dtype", dtype, "--json"]
    if case == "decode":
        cmd += ["--new-tokens", str(c["new_tokens"]), "--warmup", "2"]
    elif case == "memory":
        cmd += ["--iters", "1", "--warmup", "0", "--backward"]
    else:
        cmd += ["--iters", str(a.iters)] + (["--backward"] if case == "step" else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    p.add_argument("--preset", default="gpt2-small", choices=sorted(PRESETS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=5, help="timed runs per round (prefill, step)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--only", choices=sorted(CASES), help="one case")
    p.add_argument("--no-jemalloc", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return torch_worker(a)
    results = {}
    for case in [a.only] if a.only else ["decode", "prefill", "step"]:
        if case == "memory":
            rss_q, rss_t = [], []
            for _ in range(a.rounds):
                rss_q.append(run_qkv(a, case, "f32")["max_rss_mib"])
                rss_t.append(run_torch(a, case)["max_rss_mib"])
            rq, rt = max(rss_q), max(rss_t)
            results[case] = {"qkv_max_rss_mib": rq, "torch_max_rss_mib": rt, "torch_over_qkv": rt / rq}
            print(f"memory  {a.preset} training step B=8 T=1024: peak RSS PyTorch {rt:.0f} MiB, qkv f32 {rq:.0f} MiB; "
                  f"PyTorch/qkv {rt / rq:.2f}x")
            continue
        t_ms, q = [], {"f32": [], "bf16": []}
        ceil = {"f32": [], "bf16": []}
        for _ in range(a.rounds):
            for dtype in ("f32", "bf16"):
                r = run_qkv(a, case, dtype)
                q[dtype] += r["times_ms"]
                ceil[dtype].append(r.get("bandwidth_gb_s") or r.get("peak_gflops"))
                last = r
            t_ms += run_torch(a, case)["times_ms"]
        tm, qf, qb = statistics.median(t_ms), statistics.median(q["f32"]), statistics.median(q["bf16"])
        res = {"torch_ms": tm, "qkv_f32_ms": qf, "qkv_bf16_ms": qb, "torch_over_qkv": tm / qf,
               "bf16_speedup": qf / qb}
        if case == "decode":
            bw = statistics.median(ceil["f32"] + ceil["bf16"])
            P = last["product_parameters"]
            res.update(torch_tokens_per_s=1e3 / tm, qkv_f32_tokens_per_s=1e3 / qf, qkv_bf16_tokens_per_s=1e3 / qb,
                       bandwidth_gb_s=bw, f32_percent_of_limit=100 * (4 * P / (qf * 1e6)) / bw,
                       bf16_percent_of_limit=100 * (2 * P / (qb * 1e6)) / bw)
            print(f"decode  {a.preset} B=1: PyTorch {1e3 / tm:.1f} tokens/s, qkv f32 {1e3 / qf:.1f} "
                  f"({res['f32_percent_of_limit']:.0f}% of the {bw * 1e9 / (4 * P):.1f} tokens/s limit at {bw:.1f} GB/s), "
                  f"qkv bf16 {1e3 / qb:.1f} ({res['bf16_percent_of_limit']:.0f}% of its limit); "
                  f"qkv/PyTorch {tm / qf:.2f}x, bf16/f32 {qf / qb:.2f}x")
        else:
            peak = statistics.median(ceil["f32"])
            flops = last["gflop"] * 1e9
            res.update(peak_gflops=peak, qkv_f32_percent_of_peak=100 * flops / (qf * 1e6) / peak,
                       torch_percent_of_peak=100 * flops / (tm * 1e6) / peak)
            print(f"{case:8s}{a.preset}: PyTorch {tm:.1f} ms ({res['torch_percent_of_peak']:.0f}% of the FMA peak "
                  f"{peak:.0f} GFLOP/s), qkv f32 {qf:.1f} ms ({res['qkv_f32_percent_of_peak']:.0f}%), bf16 {qb:.1f} ms; "
                  f"PyTorch/qkv {tm / qf:.2f}x, bf16/f32 {qf / qb:.2f}x")
        results[case] = res
    if a.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
