#!/usr/bin/env python3
"""qkv's Llama 3 / Qwen3 models next to the PyTorch twin (tests/pytorch/llama_model.py), same preset,
same threads, one run.

    /usr/bin/python3 bench/llama_vs_pytorch.py --qkv build/qkv --threads 2 [--preset qwen3-0.6b] [--rounds 2]

  decode   B = 1, a 4-token prompt, 200 new tokens, each step timed: tokens/s.
           qkv: `qkv bench --module gpt --preset P --new-tokens 200 --dtype bf16` (the weights kept in
           bf16: 2 bytes per weight read per token) against the read bandwidth it measures on the same
           threads: the memory-bound limit is bandwidth / (2 bytes x P weights);
           PyTorch: the twin with a preallocated KV cache (each layer writes the new token's keys and
           values into (B, G, context, D) buffers and attends over the filled part), in float32 and in
           bfloat16; its faster one is the comparison.
  prefill  one forward of B = 1, T = 1,024 tokens: qkv bf16 against the bf16 dot-product peak it
           measures (the issue's target: 60%), and the twin's fastest dtype under torch.no_grad.
  memory   (--only memory) the twin's weights written as Hugging Face ships them in BF16 (config.json,
           model.safetensors, the installed tokenizer.json), then `qkv generate --weights DIR` (bf16: the
           weights kept in bf16 only) for 20 tokens: its peak resident memory against the file's size.
PyTorch runs as bench/gpt_vs_pytorch.py runs it: a child process with jemalloc preloaded,
torch.set_num_threads(n), OPENBLAS_NUM_THREADS=n. Medians of every timed run; a ratio is PyTorch's
time over qkv's (above 1: qkv is faster).
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
PRESETS = {  # E, F, L, H, G, D, V, theta, tied (their config.json's)
    "qwen3-0.6b": ("qwen3", 1024, 3072, 28, 16, 8, 128, 151936, 1e6, True),
    "qwen3-1.7b": ("qwen3", 2048, 6144, 28, 16, 8, 128, 151936, 1e6, True),
    "llama-3.2-1b": ("llama", 2048, 8192, 16, 32, 8, 64, 128256, 5e5, True),
}
CASES = {"decode": dict(seq_len=4, new_tokens=200), "prefill": dict(seq_len=1024), "memory": {}}


def torch_worker(a):
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tests", "pytorch"))
    import llama_model

    torch.set_num_threads(a.threads)
    torch.manual_seed(123)
    family, E, F, L, H, G, D, V, theta, tied = PRESETS[a.preset]
    ctx = 2048
    rope = None if family == "qwen3" else dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                               original_context_length=8192)
    cfg = dict(family=family, vocab_size=V, emb_dim=E, hidden_dim=F, n_layers=L, n_heads=H, n_kv_groups=G,
               head_dim=D, context_length=ctx, rope_base=theta, rms_eps=1e-6, tied=tied, rope_freq=rope)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = llama_model.LlamaModel(cfg).to(dtype).eval()
    cos, sin = (t.to(dtype) for t in llama_model.rope_params(D, theta, ctx, rope))
    c = CASES[a.case]
    ids = torch.randint(0, V, (1, c["seq_len"]))
    times = []
    if a.case == "prefill":
        with torch.no_grad():
            for i in range(a.iters + 1):
                t0 = time.perf_counter()
                model(ids)
                if i > 0:
                    times.append((time.perf_counter() - t0) * 1e3)
    else:
        kcache = [torch.zeros(1, G, ctx, D, dtype=dtype) for _ in range(L)]
        vcache = [torch.zeros(1, G, ctx, D, dtype=dtype) for _ in range(L)]

        def block_cached(blk, x, layer, pos):  # x (1, n, E) at positions pos .. pos + n - 1
            n = x.shape[1]
            att = blk.att
            h = blk.norm1(x)
            q = att.W_query(h).view(1, n, H, D).transpose(1, 2)
            k = att.W_key(h).view(1, n, G, D).transpose(1, 2)
            v = att.W_value(h).view(1, n, G, D).transpose(1, 2)
            if att.qk_norm:
                q, k = att.q_norm(q), att.k_norm(k)
            cs, sn = cos[pos:pos + n], sin[pos:pos + n]
            q, k = llama_model.apply_rope(q, cs, sn), llama_model.apply_rope(k, cs, sn)
            kcache[layer][:, :, pos:pos + n] = k
            vcache[layer][:, :, pos:pos + n] = v
            keys = kcache[layer][:, :, :pos + n].repeat_interleave(H // G, dim=1)
            values = vcache[layer][:, :, :pos + n].repeat_interleave(H // G, dim=1)
            s = q @ keys.transpose(2, 3)
            if n > 1:
                s = s.masked_fill(torch.triu(torch.ones(n, pos + n, dtype=torch.bool), diagonal=pos + 1), -torch.inf)
            w = torch.softmax(s / D ** 0.5, dim=-1)
            x = x + att.out_proj((w @ values).transpose(1, 2).reshape(1, n, H * D))
            return x + blk.ff(blk.norm2(x))

        def forward_cached(tokens, pos):
            x = model.tok_emb(tokens)
            for layer, blk in enumerate(model.trf_blocks):
                x = block_cached(blk, x, layer, pos)
            return model.out_head(model.final_norm(x[:, -1]))

        with torch.no_grad():
            logits = forward_cached(ids, 0)
            pos = c["seq_len"]
            for i in range(c["new_tokens"] + 2):
                nxt = logits.argmax(-1, keepdim=True)
                t0 = time.perf_counter()
                logits = forward_cached(nxt, pos)
                if i >= 2:
                    times.append((time.perf_counter() - t0) * 1e3)
                pos += 1
    print(json.dumps({"times_ms": times, "torch_version": torch.__version__, "threads": torch.get_num_threads()}))


def run_torch(a, case, dtype):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
               OMP_WAIT_POLICY="PASSIVE")
    if os.path.exists(JEMALLOC):
        env["LD_PRELOAD"] = JEMALLOC
        env["MALLOC_CONF"] = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
    out = subprocess.run([sys.executable, __file__, "--worker", "--case", case, "--preset", a.preset, "--dtype", dtype,
                          "--threads", str(a.threads), "--iters", str(a.iters)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_qkv(a, case):
    c = CASES[case]
    cmd = [a.qkv, "bench", "--module", "gpt", "--preset", a.preset, "--batch", "1", "--seq-len", str(c["seq_len"]),
           "--threads", str(a.threads), "--dtype", "bf16", "--json"]
    cmd += ["--new-tokens", str(c["new_tokens"]), "--warmup", "2"] if case == "decode" else ["--iters", str(a.iters)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def memory(a):
    import shutil
    import tempfile

    import torch

    sys.path.insert(0, os.path.join(ROOT, "tests", "pytorch"))
    import llama_model
    import safetensors_io

    family, E, F, L, H, G, D, V, theta, tied = PRESETS[a.preset]
    cfg = dict(family=family, vocab_size=V, emb_dim=E, hidden_dim=F, n_layers=L, n_heads=H, n_kv_groups=G,
               head_dim=D, context_length=40960, rope_base=theta, rms_eps=1e-6, tied=tied, rope_freq=None)
    with tempfile.TemporaryDirectory(prefix="qkv-llama-memory-") as tmp:
        torch.manual_seed(0)
        m = llama_model.LlamaModel(cfg)
        safetensors_io.save(os.path.join(tmp, "model.safetensors"),
                            {k: v.to(torch.bfloat16) for k, v in llama_model.to_hugging_face(m).items()})
        del m
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(llama_model.config_json(cfg), f)
        home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
        shutil.copy(os.path.join(home, "qkv", "qwen3" if family == "qwen3" else "llama3", "tokenizer.json"), tmp)
        size = os.path.getsize(os.path.join(tmp, "model.safetensors"))
        # /usr/bin/time measures qkv alone (a child forked from this process counts this process's
        # pages until it execs, so the children's ru_maxrss here would be Python's)
        cmd = ["/usr/bin/time", "-f", "maxrss_kib %M", a.qkv, "generate", "--weights", tmp, "--prompt", "Hello",
               "--max-new-tokens", "20", "--json"]
        run = subprocess.run(cmd, check=True, capture_output=True, text=True)
        out = json.loads(run.stdout.splitlines()[-1])
        rss = int(run.stderr.split("maxrss_kib")[-1].split()[0]) * 1024
        print(f"memory  {a.preset}: model.safetensors {size / 2**20:.0f} MiB (BF16); qkv generate --weights DIR "
              f"peak RSS {rss / 2**20:.0f} MiB = {rss / size:.2f}x the file ({out['model']}; "
              f"{out['new_tokens']} tokens at {out['tokens_per_s']:.1f} tokens/s)")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    p.add_argument("--preset", default="qwen3-0.6b", choices=sorted(PRESETS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=3, help="timed runs per round (prefill)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--only", choices=sorted(CASES))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return torch_worker(a)
    for case in [a.only] if a.only else ["decode", "prefill"]:
        if case == "memory":
            memory(a)
            continue
        q, ceil, torch_ms = [], [], {"f32": [], "bf16": []}
        for _ in range(a.rounds):
            r = run_qkv(a, case)
            q += r["times_ms"]
            ceil.append(r.get("bandwidth_gb_s") or r.get("bf16_peak_gflops"))
            last = r
            for dtype in ("f32", "bf16"):
                torch_ms[dtype] += run_torch(a, case, dtype)["times_ms"]
        qm = statistics.median(q)
        tm = {d: statistics.median(v) for d, v in torch_ms.items()}
        best = min(tm, key=tm.get)
        if case == "decode":
            bw = statistics.median(ceil)
            P = last["product_parameters"]
            limit = bw * 1e9 / (2 * P)
            print(f"decode  {a.preset} B=1, 200 tokens: qkv bf16 {1e3 / qm:.1f} tokens/s = "
                  f"{100 * (1e3 / qm) / limit:.0f}% of the {limit:.1f} tokens/s limit ({2 * P / 1e6:.0f} MB of bf16 "
                  f"weights per token at {bw:.1f} GB/s); PyTorch f32 {1e3 / tm['f32']:.1f}, bf16 "
                  f"{1e3 / tm['bf16']:.1f} tokens/s; qkv / PyTorch {best} {tm[best] / qm:.2f}x")
        else:
            peak = statistics.median(ceil)
            gflop = last["gflop"]
            print(f"prefill {a.preset} T=1024: qkv bf16 {qm:.0f} ms = {gflop / qm * 1e3:.0f} GFLOP/s = "
                  f"{100 * gflop / qm * 1e3 / peak:.0f}% of the bf16 dot-product peak {peak:.0f} GFLOP/s; "
                  f"PyTorch f32 {tm['f32']:.0f} ms, bf16 {tm['bf16']:.0f} ms; PyTorch {best} / qkv {tm[best] / qm:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
