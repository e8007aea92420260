#!/usr/bin/python3
"""Makes tests/data/rope_fixtures.json: RoPE's cos and sin with Llama 3's frequency scaling, computed
with PyTorch in float64 the way Hugging Face's _compute_llama3_parameters and the book's Llama 3.1/3.2
chapters scale the frequencies (inv_freq / factor for long waves, unchanged for short ones, a blend
between). tests/kernels/rope_scaling_test.cc compares qkv's RopeTable with them.

    /usr/bin/python3 tests/pytorch/make_rope_fixtures.py

Cases: Llama 3.2 1B's (D 64, base 500,000, factor 32, low 1, high 4, L 8,192), Llama 3.1 8B's
(D 128, factor 8), and 30 random ones (one seeded RNG: the file is reproducible), each at positions
from 0 to beyond L.
"""
import json
import math
import os
import random

import torch


def llama3_inv_freq(D, base, factor, low, high, L):
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    low_wavelen, high_wavelen = L / low, L / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (L / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
    return torch.where(medium, smoothed, scaled)


def case(D, base, factor, low, high, L, positions):
    inv = llama3_inv_freq(D, base, factor, low, high, L)
    pos = torch.tensor(positions, dtype=torch.float64)
    angles = pos[:, None] * inv[None, :]
    return {"head_dim": D, "base": base, "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
            "original_max_positions": L, "positions": positions, "inv_freq": inv.tolist(),
            "cos": torch.cos(angles).reshape(-1).tolist(), "sin": torch.sin(angles).reshape(-1).tolist()}


def main():
    rng = random.Random(20261127)
    cases = [case(64, 500000.0, 32.0, 1.0, 4.0, 8192, [0, 1, 2, 100, 8191, 8192, 131071]),
             case(128, 500000.0, 8.0, 1.0, 4.0, 8192, [0, 5, 4096, 65535])]
    for _ in range(30):
        D = 2 * rng.randint(1, 80)
        low = rng.choice([0.5, 1.0, 2.0])
        L = rng.choice([16, 256, 2048, 8192])
        cases.append(case(D, rng.choice([10000.0, 500000.0, 1e6]), rng.choice([1.0, 2.0, 8.0, 32.0]), low,
                          low * rng.choice([2.0, 4.0, 8.0]), L, sorted(rng.sample(range(0, 4 * L), 5))))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "rope_fixtures.json")
    with open(path, "w") as f:
        json.dump({"about": "made by tests/pytorch/make_rope_fixtures.py with torch " + torch.__version__,
                   "cases": cases}, f, separators=(",", ":"))
    print("wrote", os.path.normpath(path), os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
