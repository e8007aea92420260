#!/usr/bin/python3
"""Makes tests/data/grad_fixtures.json with PyTorch autograd: the gradients of the layer-level
modules, which have no command of their own. tests/modules/backward_pytorch_test.cc replays every case.

    /usr/bin/python3 tests/pytorch/make_grad_fixtures.py

100 random configurations each (one seeded Python RNG, so the file is reproducible):

  linear         x (..., in) with 0-2 leading dims, nn.Linear(in, out, bias) -> dx, dweight, dbias
  embedding      ids (B, T) with repeats, nn.Embedding(n, dim) -> dweight
  positional     nn.Embedding(context_length, dim)(arange(T)), T <= context_length -> dweight
  dropout        torch.manual_seed(seed); nn.Dropout(p).train()(x) -> dx (PyTorch's mask, which
                 qkv's Generator(seed) must draw too)
  softmax        torch.softmax(x, dim) with some -inf entries (never a whole row) -> dx
  sdpa           notebook 002's scaled_dot_product_attention: q (..., T, D), k, v with broadcast
                 leading dims, no mask / additive (0, -inf, or finite values) / boolean -> dq, dk, dv
  cross_entropy  F.cross_entropy(logits (N, V), targets with some -100) -> loss, dlogits
  rms_norm       Llama's RMSNorm, x * rsqrt(x.pow(2).mean(-1) + eps) * weight -> y, dx, dweight
  swiglu         Llama's feed-forward, down(silu(gate(x)) * up(x)) -> y, dx, dgate, dup, ddown

Each case holds its inputs, the upstream gradient `grad` (dL/doutput), and PyTorch's gradients.
Floats are written in their shortest float32 form.
"""
import json
import math
import os
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CASES = 100
rng = random.Random(20241122)
gen = torch.Generator().manual_seed(4242)


def T(t):
    vals = []
    for v in t.detach().reshape(-1).tolist():
        if math.isinf(v):
            vals.append("inf" if v > 0 else "-inf")
        else:
            vals.append(float(repr(np.float32(v)).replace("np.float32(", "").rstrip(")")))
    return {"shape": list(t.shape), "data": vals}


def randn(*shape):
    return torch.randn(*shape, generator=gen)


def leading(max_dims=2, max_size=3):
    return tuple(rng.randint(1, max_size) for _ in range(rng.randint(0, max_dims)))


def linear_case():
    lead, i, o, bias = leading(), rng.randint(1, 7), rng.randint(1, 7), rng.random() < 0.5
    lin = nn.Linear(i, o, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(randn(o, i))
        if bias:
            lin.bias.copy_(randn(o))
    x = randn(*lead, i).requires_grad_(True)
    y = lin(x)
    g = randn(*y.shape)
    y.backward(g)
    c = {"x": T(x), "weight": T(lin.weight), "grad": T(g), "dx": T(x.grad), "dweight": T(lin.weight.grad)}
    if bias:
        c.update({"bias": T(lin.bias), "dbias": T(lin.bias.grad)})
    return c


def embedding_case():
    n, dim, b, t = rng.randint(1, 8), rng.randint(1, 5), rng.randint(1, 3), rng.randint(1, 6)
    emb = nn.Embedding(n, dim)
    ids = torch.tensor([[rng.randrange(n) for _ in range(t)] for _ in range(b)])
    y = emb(ids)
    g = randn(*y.shape)
    y.backward(g)
    return {"ids": ids.reshape(-1).tolist(), "ids_shape": [b, t], "weight": T(emb.weight), "grad": T(g),
            "dweight": T(emb.weight.grad)}


def positional_case():
    ctx, dim = rng.randint(1, 9), rng.randint(1, 5)
    t = rng.randint(1, ctx)
    emb = nn.Embedding(ctx, dim)
    y = emb(torch.arange(t))
    g = randn(*y.shape)
    y.backward(g)
    return {"tokens": t, "weight": T(emb.weight), "grad": T(g), "dweight": T(emb.weight.grad)}


def dropout_case():
    shape, p, seed = leading(3, 5) or (3,), rng.choice([0.1, 0.5, 0.7]), rng.randrange(2**40)
    x = randn(*shape).requires_grad_(True)
    torch.manual_seed(seed)
    d = nn.Dropout(p)
    d.train()
    y = d(x)
    g = randn(*y.shape)
    y.backward(g)
    return {"p": p, "seed": seed, "x": T(x), "y": T(y), "grad": T(g), "dx": T(x.grad)}


def softmax_case():
    shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))
    dim = rng.randrange(-len(shape), len(shape))
    x = randn(*shape) * 2
    hide = torch.rand(*shape, generator=gen) < 0.25
    keep_one = torch.zeros(shape, dtype=torch.bool).index_fill_(dim, torch.tensor([0]), True)
    x = x.masked_fill(hide & ~keep_one, -math.inf).requires_grad_(True)  # never a whole lane hidden
    y = torch.softmax(x, dim)
    g = randn(*y.shape)
    y.backward(g)
    return {"dim": dim, "x": T(x), "grad": T(g), "dx": T(x.grad)}


def sdpa_case():
    t, s, d, dv = rng.randint(1, 5), rng.randint(1, 5), rng.randint(1, 4), rng.randint(1, 4)
    lead = leading(2, 3)
    # k and v may drop or shrink leading dims: they broadcast against q's.
    def squash(shape):
        return tuple(1 if rng.random() < 0.4 else n for n in shape)[rng.randint(0, len(shape)):] if shape else ()
    q = randn(*lead, t, d).requires_grad_(True)
    k_lead = squash(lead)
    k = randn(*k_lead, s, d).requires_grad_(True)
    v = randn(*(k_lead if rng.random() < 0.5 else squash(lead)), s, dv).requires_grad_(True)
    kind = rng.choice(["none", "additive", "blocked"])
    mask = None
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if kind != "none":
        blocked = torch.rand(t, s, generator=gen) < 0.3
        blocked[:, 0] = False  # every query keeps a key: PyTorch would give NaN otherwise
        if kind == "additive":
            mask = torch.where(blocked, torch.tensor(-math.inf), randn(t, s) * 0.5)
            scores = scores + mask
        else:
            mask = blocked.float()
            scores = scores.masked_fill(blocked, -math.inf)
    w = torch.softmax(scores, dim=-1)
    out = w @ v
    g = randn(*out.shape)
    out.backward(g)
    c = {"kind": kind, "q": T(q), "k": T(k), "v": T(v), "grad": T(g), "output": T(out),
         "dq": T(q.grad), "dk": T(k.grad), "dv": T(v.grad)}
    if mask is not None:
        c["mask"] = T(mask)
    return c


def cross_entropy_case():
    n, v = rng.randint(1, 8), rng.randint(1, 7)
    logits = (randn(n, v) * 3).requires_grad_(True)
    targets = [rng.randrange(v) if rng.random() < 0.8 else -100 for _ in range(n)]
    targets[rng.randrange(n)] = rng.randrange(v)  # at least one counts
    loss = F.cross_entropy(logits, torch.tensor(targets), ignore_index=-100)
    loss.backward()
    return {"logits": T(logits), "targets": targets, "loss": T(loss), "dlogits": T(logits.grad)}


def rms_norm_case():
    """Llama's RMSNorm as Hugging Face's LlamaRMSNorm computes it (float32 throughout)."""
    lead, e, eps = leading(), rng.randint(1, 9), rng.choice([1e-5, 1e-6])
    weight = randn(e).requires_grad_(True)
    x = randn(*lead, e).requires_grad_(True)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    g = randn(*y.shape)
    y.backward(g)
    return {"x": T(x), "weight": T(weight), "eps": eps, "grad": T(g), "y": T(y), "dx": T(x.grad),
            "dweight": T(weight.grad)}


def swiglu_case():
    """Llama's feed-forward (Hugging Face's LlamaMLP): down(silu(gate(x)) * up(x)), no biases."""
    lead, e, f = leading(), rng.randint(1, 7), rng.randint(1, 9)
    gate, up, down = nn.Linear(e, f, bias=False), nn.Linear(e, f, bias=False), nn.Linear(f, e, bias=False)
    with torch.no_grad():
        for lin, shape in [(gate, (f, e)), (up, (f, e)), (down, (e, f))]:
            lin.weight.copy_(randn(*shape))
    x = (2 * randn(*lead, e)).requires_grad_(True)
    y = down(F.silu(gate(x)) * up(x))
    g = randn(*y.shape)
    y.backward(g)
    return {"x": T(x), "gate": T(gate.weight), "up": T(up.weight), "down": T(down.weight), "grad": T(g), "y": T(y),
            "dx": T(x.grad), "dgate": T(gate.weight.grad), "dup": T(up.weight.grad), "ddown": T(down.weight.grad)}


def main():
    torch.manual_seed(0)
    out = {"about": "made by tests/pytorch/make_grad_fixtures.py with torch " + torch.__version__}
    for name, make in [("linear", linear_case), ("embedding", embedding_case), ("positional", positional_case),
                       ("dropout", dropout_case), ("softmax", softmax_case), ("sdpa", sdpa_case),
                       ("cross_entropy", cross_entropy_case), ("rms_norm", rms_norm_case), ("swiglu", swiglu_case)]:
        out[name] = [make() for _ in range(CASES)]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "grad_fixtures.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", os.path.normpath(path), os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
