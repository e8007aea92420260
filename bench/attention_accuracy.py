#!/usr/bin/python3
"""The fused attention kernels' accuracy against PyTorch float32's, on random problems: for each,
qkv.attention + qkv.attention_backward (float32 in, the float64 lse between them) and PyTorch's
textbook attention in float32 (softmax(q k^T scale) v and its autograd), both measured against the
same in float64. Per tensor (o, dq, dk, dv, and the sums over the sequence of dq and dk, what a
bias's gradient sums) it prints the geometric mean of the ratio qkv / PyTorch of the distances from
float64, how many problems put qkv more than 2x further, and the largest ratio.

    QKV_SIMD=AVX2 PYTHONPATH=build/python /usr/bin/python3 bench/attention_accuracy.py [--trials 300] [--seed 1]

Problems: B 1, H 2, T 1-48, D in {4, 8, 16, 21, 33, 64} (scale 1/sqrt(D)), q and k drawn from
N(0, a^2) with a in {0.5, 2, 4, 8} (scores up to the hundreds), causal or not, each with its own
seed. Distances are max |x - ref| / max(1, max |ref|); PyTorch's is floored at 4 float32 roundings
(2^-22) so that exact results do not make the ratio infinite. One PyTorch run per problem: ratios
of single runs are noisy, compare counts and means across builds, not one problem.
"""
import argparse
import math
import os
import random

import numpy as np
import torch

import qkv

TENSORS = ("o", "dq", "dk", "dv", "sum dq", "sum dk")
FLOOR = 2.0**-22


def distance(got, want):
    want = want.double()
    return float((got.double() - want).abs().max() / max(1.0, float(want.abs().max())))


def textbook(q, k, v, d_o, scale, causal, dtype):
    """o and the gradients of PyTorch's textbook attention computing in dtype."""
    qq, kk, vv = (t.to(dtype).clone().requires_grad_(True) for t in (q, k, v))
    s = (qq @ kk.transpose(-1, -2)) * torch.tensor(scale, dtype=torch.float32).to(dtype)
    if causal:
        T = q.shape[2]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(s, -1) @ vv
    o.backward(d_o.to(dtype))
    return {"o": o.detach(), "dq": qq.grad, "dk": kk.grad, "dv": vv.grad}


def with_sums(t):
    t["sum dq"], t["sum dk"] = t["dq"].sum(2), t["dk"].sum(2)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.trials < 1:
        raise SystemExit(f"attention accuracy: --trials must be at least 1, got {args.trials}")
    rng = random.Random(args.seed)
    logs = {n: 0.0 for n in TENSORS}
    over = {n: 0 for n in TENSORS}
    worst = {n: 0.0 for n in TENSORS}
    for trial in range(args.trials):
        T, D, a = rng.randint(1, 48), rng.choice([4, 8, 16, 21, 33, 64]), rng.choice([0.5, 2, 4, 8])
        causal, scale = rng.random() < 0.5, 1.0 / math.sqrt(D)
        g = torch.Generator().manual_seed(args.seed * 100003 + trial)
        q, k = torch.randn(1, 2, T, D, generator=g) * a, torch.randn(1, 2, T, D, generator=g) * a
        v, d_o = torch.randn(1, 2, T, D, generator=g), torch.randn(1, 2, T, D, generator=g)
        ref = with_sums(textbook(q, k, v, d_o, scale, causal, torch.float64))
        f32 = with_sums(textbook(q, k, v, d_o, scale, causal, torch.float32))
        qn, kn, vn, gn = (t.numpy() for t in (q, k, v, d_o))
        o, lse = qkv.attention(qn, kn, vn, causal=causal, scale=scale, return_lse=True)
        dq, dk, dv = qkv.attention_backward(qn, kn, vn, o, lse, gn, causal=causal, scale=scale)
        got = with_sums({n: torch.from_numpy(np.asarray(x)) for n, x in (("o", o), ("dq", dq), ("dk", dk), ("dv", dv))})
        for n in TENSORS:
            ratio = distance(got[n], ref[n]) / max(distance(f32[n], ref[n]), FLOOR)
            logs[n] += math.log(max(ratio, 1e-3))
            over[n] += ratio > 2.0
            worst[n] = max(worst[n], ratio)
    print(f"attention accuracy: {args.trials} problems, SIMD target {os.environ.get('QKV_SIMD', 'the best')}, "
          f"qkv / PyTorch float32 distance from float64:")
    for n in TENSORS:
        print(f"  {n:7s} geometric mean {math.exp(logs[n] / args.trials):.2f}   over 2x: {over[n]:3d}   largest {worst[n]:.2f}")


if __name__ == "__main__":
    main()
