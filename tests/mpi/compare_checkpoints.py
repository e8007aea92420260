#!/usr/bin/python3
"""Compares two qkv training checkpoints (safetensors), with the standard library only.

  compare_checkpoints.py A B [--rtol 1e-6]

Passes (exit 0) when both hold the same step, the same data position and model generator (the
data-parallel ranks must draw exactly what one process draws), the loss of every step within
rtol relative, and every tensor (weights, optimiser state) within rtol of the tensor's largest
magnitude. Otherwise prints what differs, with the values, and exits 1.
"""
import json
import struct
import sys
from array import array


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        values = array("f")
        values.frombytes(blob[8 + n + begin:8 + n + end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (info["shape"], values)
    return meta, tensors


def main():
    args = sys.argv[1:]
    rtol = 1e-6
    if "--rtol" in args:
        i = args.index("--rtol")
        rtol = float(args[i + 1])
        del args[i:i + 2]
    a_path, b_path = args
    a_meta, a = load(a_path)
    b_meta, b = load(b_path)
    problems = []
    for key in ("step", "rng.model", "data.state"):
        if a_meta.get(key) != b_meta.get(key):
            problems.append(f"metadata {key}: {str(a_meta.get(key))[:80]} vs {str(b_meta.get(key))[:80]}")
    if set(a) != set(b):
        problems.append(f"tensor names differ: only in A {sorted(set(a) - set(b))}, only in B {sorted(set(b) - set(a))}")
    worst_loss, worst_tensor, worst_name = 0.0, 0.0, ""
    for name in sorted(set(a) & set(b)):
        (sa, va), (sb, vb) = a[name], b[name]
        if sa != sb:
            problems.append(f"{name}: shape {sa} vs {sb}")
            continue
        if name == "train.losses":
            for step, (x, y) in enumerate(zip(va, vb), 1):
                rel = abs(x - y) / max(abs(x), 1e-30)
                worst_loss = max(worst_loss, rel)
                if rel > rtol:
                    problems.append(f"loss of step {step}: {x!r} vs {y!r} (relative {rel:.3g} > {rtol})")
            continue
        scale = max((abs(x) for x in va), default=0.0)
        diff = max((abs(x - y) for x, y in zip(va, vb)), default=0.0)
        rel = diff / scale if scale > 0 else diff
        if rel >= worst_tensor:
            worst_tensor, worst_name = rel, name
        if rel > rtol:
            problems.append(f"{name}: max difference {diff:.3g} over largest magnitude {scale:.3g} = {rel:.3g} > {rtol}")
    if "train.losses" not in a:
        problems.append("no train.losses in the checkpoints")
    steps = len(a.get("train.losses", ((), []))[1])
    if problems:
        print(f"{a_path} vs {b_path}: {len(problems)} differences")
        for p in problems[:20]:
            print("  " + p)
        return 1
    print(f"equal within {rtol}: {steps} losses (worst relative {worst_loss:.3g}), {len(a) - 1} tensors "
          f"(worst relative {worst_tensor:.3g}, {worst_name}), step, data state and generator identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
