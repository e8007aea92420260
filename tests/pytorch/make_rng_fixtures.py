#!/usr/bin/python3
"""Write tests/data/rng_fixtures.json: what PyTorch's CPU generator draws, bit for bit.

Run with Debian's python3-torch 1.13 (CPU build without MKL):

    /usr/bin/python3 tests/pytorch/make_rng_fixtures.py [--out tests/data/rng_fixtures.json]

tests/core/generator_test.cc replays every case on qkv::Generator and compares bit patterns.

Layout: {"about", "torch_version", "cpu_capability", "cases": [case, ...]}.
A case is {"name", "seed", "initial_seed", "ops": [op, ...]}: "seed" is an integer for
torch.manual_seed(seed), or "default" for a fresh torch.Generator() (default seed). The ops run
in order on that one generator; each op has its arguments and "out", a list of tensors:

    {"op": "rand", "n"}                      torch.rand(n)
    {"op": "randn", "n"}                     torch.randn(n)
    {"op": "uniform", "n", "from", "to"}     torch.empty(n).uniform_(from, to)
    {"op": "normal", "n", "mean", "std"}     torch.empty(n).normal_(mean, std)
    {"op": "bernoulli", "n", "p"}            torch.empty(n).bernoulli_(p)
    {"op": "dropout", "n", "q"}              nn.Dropout(q)(torch.ones(n)) (training mode)
    {"op": "linear", "in_features", "out_features", "bias"}
                                             nn.Linear(in_features, out_features, bias):
                                             [weight, bias] (bias only if bias)
    {"op": "embedding", "num", "dim"}        nn.Embedding(num, dim): [weight]
    {"op": "seed", "seed"}                   torch.manual_seed(seed) mid-sequence; out = []
    {"op": "state"}                          generator state, out = [] plus
                                             "index" (MT words used, 0..624; 624 = the next draw
                                             regenerates the block), "mt_fnv1a64" (FNV-1a 64 over
                                             the 624 state words, little-endian bytes) and
                                             "cached_normal" (the double's bits as a hex string,
                                             or null)

A tensor is {"n", "bits": [uint32 ...]} (the float32 bit patterns), or, for n > 4097,
{"n", "head": first 64, "tail": last 64, "fnv1a64": hex FNV-1a 64 over all n bit patterns as
little-endian bytes}.
"""
import argparse
import json
import os
import struct

import numpy as np
import torch
import torch.nn as nn

FULL_LIMIT = 4097
SEEDS = [0, 1, 123, 789, 2**40 + 7, 2**32 + 5, 67280421310721]
SIZES = list(range(1, 41)) + [100, 1000, 4097]
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(words):
    h = FNV_OFFSET
    for b in np.asarray(words, dtype="<u4").tobytes():
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def record(t):
    bits = t.detach().contiguous().view(-1).numpy().view(np.uint32)
    n = int(bits.size)
    if n <= FULL_LIMIT:
        return {"n": n, "bits": [int(b) for b in bits]}
    return {"n": n, "head": [int(b) for b in bits[:64]], "tail": [int(b) for b in bits[-64:]],
            "fnv1a64": fnv1a64(bits)}


def state_of(gen):
    # Legacy 5056-byte layout of torch.get_rng_state(): seed u64, left i32, seeded i32, next u64,
    # state[624] u64, normal_x, normal_y (= the cached double sample), normal_rho doubles,
    # normal_is_valid i32, ...
    s = gen.get_state().numpy().tobytes()
    _seed, left, _seeded, _next = struct.unpack_from("<QiiQ", s, 0)
    words = struct.unpack_from("<624Q", s, 24)
    _x, y, _rho, valid = struct.unpack_from("<dddi", s, 24 + 624 * 8)
    cached = None
    if valid:
        cached = "%016x" % struct.unpack("<Q", struct.pack("<d", y))[0]
    return {"index": 625 - left, "mt_fnv1a64": fnv1a64([w & 0xFFFFFFFF for w in words]),
            "cached_normal": cached}


def run_case(name, seed, ops):
    if seed == "default":
        gen = torch.Generator()
    else:
        torch.manual_seed(seed)
        gen = torch.default_generator
    case = {"name": name, "seed": seed, "initial_seed": int(gen.initial_seed()), "ops": []}
    for op in ops:
        op = dict(op)
        kind = op["op"]
        with torch.no_grad():
            if kind == "rand":
                out = [torch.rand(op["n"], generator=gen)]
            elif kind == "randn":
                out = [torch.randn(op["n"], generator=gen)]
            elif kind == "uniform":
                out = [torch.empty(op["n"]).uniform_(op["from"], op["to"], generator=gen)]
            elif kind == "normal":
                out = [torch.empty(op["n"]).normal_(op["mean"], op["std"], generator=gen)]
            elif kind == "bernoulli":
                out = [torch.empty(op["n"]).bernoulli_(op["p"], generator=gen)]
            elif kind == "dropout":
                assert gen is torch.default_generator
                out = [nn.Dropout(op["q"]).train()(torch.ones(op["n"]))]
            elif kind == "linear":
                assert gen is torch.default_generator  # modules draw from the default generator
                lin = nn.Linear(op["in_features"], op["out_features"], bias=op["bias"])
                out = [lin.weight] + ([lin.bias] if op["bias"] else [])
            elif kind == "embedding":
                assert gen is torch.default_generator
                out = [nn.Embedding(op["num"], op["dim"]).weight]
            elif kind == "seed":
                gen.manual_seed(op["seed"])
                out = []
            elif kind == "state":
                op.update(state_of(gen))
                out = []
            else:
                raise ValueError(kind)
        op["out"] = [record(t) for t in out]
        case["ops"].append(op)
    return case


def build():
    cases = []
    for seed in SEEDS:
        for n in SIZES:
            cases.append(run_case(f"rand.seed{seed}.n{n}", seed, [{"op": "rand", "n": n}]))
            cases.append(run_case(f"randn.seed{seed}.n{n}", seed, [{"op": "randn", "n": n}]))
        for (a, b) in [(-0.3, 0.7), (-2.5, 10.0), (-0.0360843918243516, 0.0360843918243516),
                       (3.0, 3.0)]:
            for n in (1, 7, 100, 1000):
                cases.append(run_case(f"uniform.seed{seed}.{a}_{b}.n{n}", seed,
                                      [{"op": "uniform", "n": n, "from": a, "to": b}]))
        for (m, s) in [(0.3, 1.7), (-2.5, 0.013), (0.0, 0.02)]:
            for n in (5, 16, 37, 1000):
                cases.append(run_case(f"normal.seed{seed}.{m}_{s}.n{n}", seed,
                                      [{"op": "normal", "n": n, "mean": m, "std": s}]))
        for p in (0.5, 0.1, 0.9):
            for n in (1, 5, 36, 1000):
                cases.append(run_case(f"bernoulli.seed{seed}.p{p}.n{n}", seed,
                                      [{"op": "bernoulli", "n": n, "p": p}]))
        cases.append(run_case(f"sequence.seed{seed}", seed, [
            {"op": "state"},
            {"op": "rand", "n": 3},
            {"op": "state"},
            {"op": "randn", "n": 5},    # serial: 3 pairs, leaves one sample cached
            {"op": "state"},
            {"op": "randn", "n": 20},   # vectorised: neither reads nor clears the cache
            {"op": "state"},
            {"op": "bernoulli", "n": 10, "p": 0.5},
            {"op": "randn", "n": 1},    # the cached sample
            {"op": "state"},
            {"op": "randn", "n": 3},
            {"op": "normal", "n": 2, "mean": 1.5, "std": 0.25},  # cache from randn(3), scaled
            {"op": "uniform", "n": 700, "from": -1.0, "to": 1.0},  # crosses a 624-word block
            {"op": "state"},
            {"op": "randn", "n": 7},
            {"op": "state"},
            {"op": "seed", "seed": seed + 1},  # clears the cached sample
            {"op": "state"},
            {"op": "randn", "n": 1},
            {"op": "rand", "n": 2},
        ]))
    # The serial path's cached double sample, compared bit for bit: float outputs alone hardly
    # ever tell log(1 - u2) from log1p(-u2), the double cache does.
    for seed in range(300):
        cases.append(run_case(f"normal_cache.seed{seed}", seed, [
            {"op": "randn", "n": 1}, {"op": "state"},
            {"op": "normal", "n": 3, "mean": 0.5, "std": 2.0}, {"op": "state"}]))
    cases.append(run_case("default_generator", "default", [
        {"op": "state"}, {"op": "rand", "n": 10}, {"op": "randn", "n": 3}, {"op": "state"},
        {"op": "randn", "n": 33}, {"op": "bernoulli", "n": 12, "p": 0.3}]))
    for seed in (123, 789, 0):
        for (i, o, bias) in [(3, 2, False), (3, 2, True), (2, 3, True), (768, 768, True),
                             (768, 64, False), (5, 1, True), (1, 4, True), (50, 17, True)]:
            cases.append(run_case(f"linear.seed{seed}.{i}x{o}{'' if bias else '.nobias'}", seed,
                                  [{"op": "linear", "in_features": i, "out_features": o,
                                    "bias": bias}]))
        for (num, dim) in [(9, 3), (2, 3), (6, 16), (50257, 4), (1024, 768), (7, 5)]:
            if (num, dim) == (1024, 768) and seed != 123:
                continue
            cases.append(run_case(f"embedding.seed{seed}.{num}x{dim}", seed,
                                  [{"op": "embedding", "num": num, "dim": dim}]))
        cases.append(run_case(f"dropout.seed{seed}.ones36.q0.5", seed,
                              [{"op": "dropout", "n": 36, "q": 0.5}]))
        cases.append(run_case(f"dropout.seed{seed}.ones100.q0.1", seed,
                              [{"op": "dropout", "n": 100, "q": 0.1}]))
        # A module stack as a model builds it: three Linear layers then an embedding.
        cases.append(run_case(f"modules.seed{seed}", seed, [
            {"op": "linear", "in_features": 3, "out_features": 2, "bias": False},
            {"op": "linear", "in_features": 3, "out_features": 2, "bias": False},
            {"op": "linear", "in_features": 3, "out_features": 2, "bias": True},
            {"op": "embedding", "num": 4, "dim": 3},
            {"op": "state"},
            {"op": "embedding", "num": 4, "dim": 5},
            {"op": "state"}]))
    return cases


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(here, "..", "data", "rng_fixtures.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    doc = {
        "about": "Bit patterns of PyTorch CPU random draws, made by "
                 "tests/pytorch/make_rng_fixtures.py (see its docstring for the layout).",
        "torch_version": torch.__version__,
        "cpu_capability": torch.__config__.show().split("CPU capability usage:")[1]
                                                 .split("\n")[0].strip(),
        "cases": build(),
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(doc['cases'])} cases to {os.path.normpath(args.out)} "
          f"({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
