#!/usr/bin/python3
"""The memory a GPT-2 weights file costs to load: peak resident memory against the file's size.

    /usr/bin/python3 bench/gpt_load_memory.py --qkv build/qkv [--preset gpt2-xl] [--dir /tmp]

Writes a file in Hugging Face's layout with the preset's shapes (gpt2-xl: 1.56 billion float32
values, 6.2 GB; the values are random, drawn tensor by tensor so that this script never holds
more than one), then runs `qkv generate --weights FILE` for one greedy token without the KV cache
under /usr/bin/time and prints its maximum resident set size, the file's size and their ratio.
qkv maps the file and loads the model one tensor at a time, dropping each tensor's pages once
read: the peak is the model's float32 weights (the file's size for an F32 file) plus one tensor
and the activations of one token. The file is removed afterwards unless --keep.
"""

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import time

import numpy as np

PRESETS = {  # (layers, width, context, vocabulary)
    "gpt2-small": (12, 768, 1024, 50257),
    "gpt2-medium": (24, 1024, 1024, 50257),
    "gpt2-large": (36, 1280, 1024, 50257),
    "gpt2-xl": (48, 1600, 1024, 50257),
}


def hf_shapes(layers, E, ctx, V):
    yield "wte.weight", (V, E)
    yield "wpe.weight", (ctx, E)
    for i in range(layers):
        h = f"h.{i}."
        yield h + "ln_1.weight", (E,)
        yield h + "ln_1.bias", (E,)
        yield h + "attn.c_attn.weight", (E, 3 * E)
        yield h + "attn.c_attn.bias", (3 * E,)
        yield h + "attn.c_proj.weight", (E, E)
        yield h + "attn.c_proj.bias", (E,)
        yield h + "ln_2.weight", (E,)
        yield h + "ln_2.bias", (E,)
        yield h + "mlp.c_fc.weight", (E, 4 * E)
        yield h + "mlp.c_fc.bias", (4 * E,)
        yield h + "mlp.c_proj.weight", (4 * E, E)
        yield h + "mlp.c_proj.bias", (E,)
    yield "ln_f.weight", (E,)
    yield "ln_f.bias", (E,)


def write_file(path, shapes, seed=0):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes:
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in shapes:
            values = rng.standard_normal(shape, dtype=np.float32)
            values *= 0.02
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                values[...] = 1.0
            f.write(values.tobytes())
    return 8 + len(text) + offset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--preset", default="gpt2-xl", choices=sorted(PRESETS))
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    layers, E, ctx, V = PRESETS[a.preset]
    path = os.path.join(a.dir, f"qkv-{a.preset}-shaped.safetensors")
    t0 = time.time()
    size = write_file(path, list(hf_shapes(layers, E, ctx, V)))
    print(f"wrote {path}: {size / 1e9:.3f} GB in {time.time() - t0:.0f} s", flush=True)
    try:
        cmd = ["/usr/bin/time", "-v", a.qkv, "generate", "--weights", path, "--prompt", "Hello",
               "--max-new-tokens", "1", "--temperature", "0", "--no-kv-cache", "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"qkv failed ({r.returncode}):\n{r.stderr}")
        peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
        wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", r.stderr).group(1)
        out = json.loads(r.stdout.strip().splitlines()[-1])
        peak = peak_kb * 1024
        print(f"qkv generate --weights <file> (one token): {out['model']}")
        print(f"  peak resident memory {peak / 1e9:.3f} GB = {peak / size:.3f} x the file's {size / 1e9:.3f} GB"
              f" (wall {wall})")
    finally:
        if not a.keep:
            os.remove(path)


if __name__ == "__main__":
    main()
