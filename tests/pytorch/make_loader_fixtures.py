#!/usr/bin/python3
"""Makes tests/data/loader_fixtures.json: the order in which PyTorch's DataLoader(shuffle=True)
serves a dataset after torch.manual_seed(s), for a few epochs, and torch.rand(2) afterwards (the
global generator's state). tests/text/data_loader_test.cc replays it."""
import json
import os

import torch
from torch.utils.data import DataLoader, Dataset


class Indices(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([i])


cases = []
for n, batch, drop_last, seed, epochs in [(10, 3, False, 123, 2), (10, 3, True, 0, 3), (1, 1, False, 5, 2),
                                          (257, 8, True, 2**40 + 3, 2), (1000, 16, False, 42, 1),
                                          (64, 64, True, 7, 2)]:
    torch.manual_seed(seed)
    loader = DataLoader(Indices(n), batch_size=batch, shuffle=True, drop_last=drop_last)
    order = [[b.flatten().tolist() for b in loader] for _ in range(epochs)]
    after = torch.rand(2).tolist()
    cases.append({"n": n, "batch_size": batch, "drop_last": drop_last, "seed": seed, "epochs": order,
                  "rand_after": after})
for n, seed in [(1, 0), (2, 1), (5, 123), (100, 9)]:
    g = torch.Generator().manual_seed(seed)
    cases.append({"randperm": n, "seed": seed, "perm": torch.randperm(n, generator=g).tolist()})

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "loader_fixtures.json")
with open(out, "w") as f:
    json.dump({"about": "made by tests/pytorch/make_loader_fixtures.py, torch " + torch.__version__, "cases": cases}, f)
print("wrote", os.path.normpath(out), len(cases), "cases")
