"""Shared by the tests of the Python package (tests/python): paths, the book's tables, references.

Run from a build:  PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python
(ctest runs each file as python.<name>, with that PYTHONPATH). The book's PyTorch classes
(tests/pytorch/book_classes.py) and the tokenizer corpus (tests/tiktoken/corpus.py) are imported
from their folders, not copied.
"""
import json
import math
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(TESTS, "pytorch"))
sys.path.insert(0, os.path.join(TESTS, "tiktoken"))


def _tensor_data(value):
    """book.json's numbers: floats, with '-inf' / 'inf' / 'nan' as strings."""
    if isinstance(value, list):
        return [_tensor_data(v) for v in value]
    if isinstance(value, str):
        return float(value)
    return value


@pytest.fixture(scope="session")
def book():
    """name -> case of tests/data/book.json (the notebooks' tables, recorded with PyTorch 1.13)."""
    with open(os.path.join(TESTS, "data", "book.json")) as f:
        doc = json.load(f)
    return {c["name"]: c for c in doc["cases"]}


def book_tensor(case):
    import torch

    e = case["expected"]
    return torch.tensor(_tensor_data(e["data"]), dtype=torch.float32).reshape(e["shape"])


def attention_reference(q, k, v, causal=False, mask=None, scale=None, keep=None, p=0.0):
    """Textbook attention in PyTorch float64: scores, mask, softmax, (dropout as a given keep mask),
    weighted sum. q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv) tensors; G divides H."""
    import torch

    H, G = q.shape[1], k.shape[1]
    if G != H:
        k = k.repeat_interleave(H // G, dim=1)
        v = v.repeat_interleave(H // G, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    T, S = s.shape[-2], s.shape[-1]
    if causal:
        s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), -math.inf)
    if mask is not None:
        s = s.masked_fill(mask, -math.inf) if mask.dtype == torch.bool else s + mask
    w = torch.softmax(s, dim=-1)
    w = torch.nan_to_num(w, nan=0.0)  # qkv's convention: a row that sees no key weighs nothing
    if keep is not None:
        w = w * keep / (1.0 - p)
    return w @ v
