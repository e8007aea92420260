#!/usr/bin/python3
"""The rule qkv's torch_softmax follows (include/qkv/core/torch_math.h), against torch.softmax itself:

    /usr/bin/python3 tests/pytorch/test_torch_softmax.py [--qkv build/qkv]

    m = the row's largest value; e = torch.exp(x - m) (elementwise: SLEEF's expf_u10 here);
    s = sum of e in float32 in PyTorch's vectorised order: n >= 8: eight running sums (sum l takes
        e[l], e[8 + l], ... over the whole groups of eight, then the last partial group's values
        into sums 0, 1, ...), combined as ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7));
        n < 8: ((e0 + e1) + e2) + ... in order;
    p = e * (1 / s).

Rows of every length to 40 and the vocabularies' lengths, spreads from flat to saturated, -inf
entries, scaled by a temperature as generation does (x / t in float32: also checked to be
torch's tensor / float): torch.softmax's bits, every one. The same rows summed in plain order must
differ somewhere (so the check can tell the orders apart). qkv's side of the claim (torch_softmax
equals the rule, bit for bit) is tests/core/torch_math_test.cc; with both, `qkv generate` samples
from torch.softmax's very probabilities. --qkv is accepted and unused (the suite passes it to
every script here). About 2 s.
"""

import argparse
import sys

import numpy as np
import torch

F = np.float32


def rule(x, sequential=False):
    xt = torch.from_numpy(x)
    e = torch.exp(xt - xt.max()).numpy()
    n = len(e)
    if n < 8 or sequential:
        s = F(e[0])
        for v in e[1:]:
            s = F(s + v)
    else:
        whole = n - n % 8
        lanes = e[:8].copy()
        for i in range(8, whole, 8):
            lanes = (lanes + e[i:i + 8]).astype(F)
        lanes[:n - whole] = (lanes[:n - whole] + e[whole:]).astype(F)
        b = (lanes[:4] + lanes[4:]).astype(F)
        c = (b[:2] + b[2:]).astype(F)
        s = F(c[0] + c[1])
    return (e * F(F(1) / s)).astype(F)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--qkv", help="unused")
    parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(5)
    lengths = list(range(1, 41)) + [1000, 50257, 128256, 151936, 151937]
    cases = failed = order_matters = 0
    for n in lengths:
        for spread in (0.0, 0.5, 4.0, 30.0, 200.0):
            for temperature in (1.0, 0.7, 1.3):
                x = rng.uniform(-spread, spread, n).astype(F)
                if n > 3:
                    x[n // 3] = -np.inf
                scaled = (torch.from_numpy(x) / temperature).numpy()
                if not np.array_equal(scaled, (x / F(temperature)).astype(F)):
                    print(f"FAIL n={n}: torch's x / {temperature} is not float32 division")
                    failed += 1
                want = torch.softmax(torch.from_numpy(scaled), dim=-1).numpy()
                got = rule(scaled)
                cases += 1
                if not np.array_equal(got, want):
                    bad = int(np.sum(got != want))
                    print(f"FAIL n={n} spread={spread} T={temperature}: {bad} of {n} differ from torch.softmax")
                    failed += 1
                order_matters += not np.array_equal(rule(scaled, sequential=True), want)
    if order_matters < 10:
        print(f"FAIL: only {order_matters} rows tell PyTorch's order from a plain one")
        failed += 1
    print(f"torch softmax rule: {cases} rows, {order_matters} where the plain order differs, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
