#!/usr/bin/python3
"""Makes tests/data/op_fixtures.json with PyTorch: what tensors print as, and what the ops give.

Run with Debian's python3-torch: /usr/bin/python3 tests/pytorch/make_op_fixtures.py
The C++ test tests/core/tensor_test.cc replays every case through qkv.
"""
import json
import math
import os

import torch

torch.set_printoptions(precision=4, sci_mode=False)
g = torch.Generator().manual_seed(2024)


def T(t):
    vals = []
    for v in t.detach().reshape(-1).tolist():
        vals.append("nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else v))
    return {"shape": list(t.shape), "data": vals}


def rn(*shape, scale=1.0):
    return torch.randn(*shape, generator=g) * scale


prints = []
def P(t):
    prints.append({"tensor": T(t), "str": str(t)})

P(torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66]]))
P(torch.tensor(0.5))
P(torch.tensor(-3.0))
P(torch.ones(6, 6))
P(torch.tril(torch.ones(4, 4)))
P(torch.zeros(2, 3))
P(torch.tensor([1.0, float("-inf"), 0.25]))
P(torch.tensor([[0.2899, float("-inf")], [0.4656, 0.1723]]))
P(torch.tensor([2.0, float("-inf"), 0.0]))
P(rn(6, 2))
P(rn(2, 6, 2))
P(rn(1, 2, 3, 4))
P(rn(25))
P(rn(3, 30))
P(rn(40) * 100)
P(rn(2000))
P(rn(40, 40))
P(rn(3, 400))
P(torch.tensor([-0.0, 1.5]))
P(torch.tensor([123456.75, 0.5]))
P(torch.tensor([float("nan"), 1.0]))
P(rn(5, 3) * 1000)
P(torch.tensor([0.00001, 0.5]))
P(torch.tensor([1.0, 5000.0]))
P(torch.tensor([3.0, -7.0, 0.0]))
P(torch.empty(0))
P(torch.empty(0, 3))

ops = []
def O(name, inputs, out, **kw):
    ops.append({"op": name, "inputs": [T(i) for i in inputs], "output": T(out), **kw})

for sa, sb in [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((3, 5), (5, 4)), ((2, 3, 5), (5, 4)),
               ((2, 3, 5), (2, 5, 4)), ((1, 2, 3, 4), (1, 2, 4, 3)), ((2, 1, 3, 5), (4, 5, 2)),
               ((3,), (2, 3, 4)), ((2, 2, 3, 4), (4,)), ((0, 3), (3, 2)), ((2, 0), (0, 3))]:
    a, b = rn(*sa), rn(*sb)
    O("matmul", [a, b], a @ b)
for sa, sb in [((2, 3), (3,)), ((2, 1, 3), (4, 1)), ((1,), (2, 2)), ((2, 6, 6), (6, 6))]:
    a, b = rn(*sa), rn(*sb)
    O("add", [a, b], a + b)
    O("sub", [a, b], a - b)
    O("mul", [a, b], a * b)
    O("div", [a, b], a / (b.abs() + 0.5))
    ops[-1]["inputs"][1] = T(b.abs() + 0.5)
for shape in [(6,), (4, 5), (2, 3, 4)]:
    a = rn(*shape, scale=3.0)
    for d in range(-1, len(shape)):
        O("softmax", [a], torch.softmax(a, dim=d), dim=d)
        O("sum", [a], a.sum(dim=d), dim=d)
        O("sum_keepdim", [a], a.sum(dim=d, keepdim=True), dim=d)
        O("max", [a], a.max(dim=d).values, dim=d)
        O("mean", [a], a.mean(dim=d), dim=d)
big = rn(3, 7, scale=30.0)
O("softmax", [big], torch.softmax(big, dim=-1), dim=-1)
masked = rn(4, 4).masked_fill(torch.triu(torch.ones(4, 4), diagonal=1).bool(), -torch.inf)
O("softmax", [masked], torch.softmax(masked, dim=-1), dim=-1)
for d in (-2, -1, 0, 1, 2):
    a = rn(5, 4)
    O("tril", [a], torch.tril(a, diagonal=d), diagonal=d)
    O("triu", [a], torch.triu(a, diagonal=d), diagonal=d)
a = rn(2, 3, 3)
O("tril", [a], torch.tril(a), diagonal=0)
a, m = rn(2, 4, 4), torch.triu(torch.ones(4, 4), diagonal=1)
O("masked_fill", [a, m], a.masked_fill(m.bool(), -torch.inf), value="-inf")
a, b, c = rn(2, 3), rn(2, 1), rn(2, 4)
O("cat", [a, b, c], torch.cat([a, b, c], dim=1), dim=1)
O("cat", [a, a], torch.cat([a, a], dim=0), dim=0)
a, b = rn(6, 3), rn(6, 3)
for d in (0, 1, 2, -1):
    O("stack", [a, b], torch.stack([a, b], dim=d), dim=d)
a, b = rn(7, 3), rn(7, 3)
O("cosine", [a, b], ((a / (a.norm(dim=-1, keepdim=True) + 1e-8)) * (b / (b.norm(dim=-1, keepdim=True) + 1e-8))).sum(-1))
O("exp", [a], a.exp())
O("neg", [a], -a)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "op_fixtures.json")
with open(out, "w") as f:
    json.dump({"about": "made by tests/pytorch/make_op_fixtures.py with torch " + torch.__version__,
               "prints": prints, "ops": ops}, f)
print("wrote", os.path.normpath(out), len(prints), "prints,", len(ops), "ops")
