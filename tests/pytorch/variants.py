#!/usr/bin/python3
"""Differential test of MultiHeadAttention's variants against a PyTorch reference written from the
formulas: grouped-query and multi-query heads, RoPE (both layouts), sliding windows, ALiBi and
logit softcapping, alone and combined, forward and backward, through `qkv forward`.

    /usr/bin/python3 tests/pytorch/variants.py --qkv build/qkv [--cases N] [--verbose]

The reference (VariantMHA below) is written the way the book's bonus code writes attention
(GroupedQueryAttention's repeat_interleave of the key/value heads, the Llama code's
compute_rope / rotate_half, GPT-J's rotate_every_two for the interleaved layout, the ALiBi
paper's slopes, Gemma 2's softcap), with the book's W_query, W_key, W_value, out_proj and mask
buffer, W_key and W_value having num_kv_heads * head_dim rows:

    q, k, v   = x W_query^T, x W_key^T, x W_value^T       split into (B, H, T, D), (B, G, T, D)
    q, k      = rope(q), rope(k)                          positions 0 .. T-1, freqs base^(-2i/D)
    k, v      = repeat_interleave(k, v, H // G, dim=1)    query head h reads kv head h // (H/G)
    s         = q k^T / sqrt(D); s = c tanh(s / c); s = s - slope_h (i - j)
    s         = -inf where mask[i, j] (the causal buffer, or zeros: not causal) or j <= i - w
    out       = out_proj(merge(dropout(softmax(s)) v))

The RoPE angles are computed in float64 and then rounded to float32 (qkv does the same; PyTorch's
float32 angles differ from them by a few ulps of the angle, ~4e-6 at position 20).

For --cases random configurations (B 1..3, T 0..12, H 1..4, G any divisor of H, head dim 1..8
(even with RoPE), d_in 1..12, bias or not, causal or not (a zero mask loaded as the buffer), each
variant on with some probability), the case's weights (a perturbed seeded state dict), input and
upstream gradient are written as safetensors; PyTorch computes the output and every gradient
(input and each parameter); qkv runs with --attention textbook and --attention fused, dropout
off. A further set of cases runs the textbook path in training mode with dropout, from --seed S
(qkv draws PyTorch's weights and nn.Dropout's masks from the same seed). Dropout is not compared
on the fused path: its Philox mask is not PyTorch's.

Relative error of a tensor: max|qkv - torch| / max(1, max|torch|) over its elements (the other
differential tests' measure, module_cases.rel_err; the floor of 1 is there for gradients that are
zero up to rounding, such as W_key's bias without softcap or ALiBi: softmax ignores a shift that is
the same for every key, so PyTorch's ~1e-7 there is noise). The output must be within 1e-5, every
gradient within 1e-4.

Prints one summary line "variants: N passed, M failed"; exits non-zero on a failure.
"""

import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch import nn  # noqa: E402

import harness  # noqa: E402
import safetensors_io  # noqa: E402
from module_cases import rel_err, run_all  # noqa: E402

FORWARD_TOLERANCE = 1e-5
GRADIENT_TOLERANCE = 1e-4


# --- the reference, from the formulas --------------------------------------------------------------

def alibi_slopes(n):
    """The ALiBi paper's slopes (ofirpress/attention_with_linear_biases, get_slopes)."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


def rope_params(head_dim, base, positions, layout):
    """cos, sin (T, D) as the Llama bonus code's compute_rope_params (angles in float64)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, D/2)
    if layout == "half":
        angles = torch.cat([angles, angles], dim=1)
    else:
        angles = angles.repeat_interleave(2, dim=1)
    return torch.cos(angles).float(), torch.sin(angles).float()


def rotate_half(x):  # Hugging Face / the book's Llama: pairs (i, i + D/2)
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


def rotate_every_two(x):  # GPT-J / Meta's Llama: pairs (2i, 2i + 1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rope(x, layout, base):
    cos, sin = rope_params(x.shape[-1], base, x.shape[-2], layout)
    rotated = rotate_half(x) if layout == "half" else rotate_every_two(x)
    return x * cos + rotated * sin


class VariantMHA(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False,
                 rope=None, rope_base=10000.0, window=0, alibi=False, softcap=0.0):
        super().__init__()
        assert d_out % num_heads == 0 and num_heads % num_kv_heads == 0
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, d_out // num_heads
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        self.rope, self.rope_base, self.window, self.softcap = rope, rope_base, window, softcap
        self.slopes = torch.tensor(alibi_slopes(num_heads)) if alibi else None

    def forward(self, x):
        b, T, _ = x.shape
        H, G, D = self.num_heads, self.num_kv_heads, self.head_dim
        keys = self.W_key(x).view(b, T, G, D).transpose(1, 2)
        queries = self.W_query(x).view(b, T, H, D).transpose(1, 2)
        values = self.W_value(x).view(b, T, G, D).transpose(1, 2)
        if self.rope:
            queries = apply_rope(queries, self.rope, self.rope_base)
            keys = apply_rope(keys, self.rope, self.rope_base)
        keys = keys.repeat_interleave(H // G, dim=1)
        values = values.repeat_interleave(H // G, dim=1)
        scores = queries @ keys.transpose(2, 3) / keys.shape[-1] ** 0.5
        if self.softcap:
            scores = self.softcap * torch.tanh(scores / self.softcap)
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        if self.slopes is not None:
            scores = scores - self.slopes.view(H, 1, 1) * (i - j).float()
        blocked = self.mask.bool()[:T, :T]
        if self.window:
            blocked = blocked | (j <= i - self.window)
        scores = scores.masked_fill(blocked, -torch.inf)
        weights = self.dropout(torch.softmax(scores, dim=-1))
        context = (weights @ values).transpose(1, 2).reshape(b, T, self.d_out)
        return self.out_proj(context)


# --- cases -----------------------------------------------------------------------------------------

def random_config(rng, index):
    H = rng.randint(1, 4)
    divisors = [g for g in range(1, H + 1) if H % g == 0]
    cfg = {"B": rng.randint(1, 3), "T": [0, 1][index] if index < 2 else rng.randint(1, 12), "H": H,
           "G": rng.choice(divisors), "d_in": rng.randint(1, 12), "bias": rng.random() < 0.5,
           "rope": rng.choice([None, None, "half", "interleaved"]), "base": rng.choice([10000.0, 100.0, 500000.0]),
           "window": 0, "alibi": rng.random() < 0.3, "softcap": 0.0, "causal": rng.random() < 0.7, "p": 0.0}
    D = rng.randint(1, 4) * 2 if cfg["rope"] else rng.randint(1, 8)
    cfg["d_out"] = H * D
    if rng.random() < 0.35:
        cfg["window"] = rng.randint(1, max(1, cfg["T"] + 1))
    if rng.random() < 0.3:
        cfg["softcap"] = rng.choice([0.5, 2.0, 5.0, 30.0])
    cfg["ctx"] = max(1, cfg["T"] + (0 if rng.random() < 0.4 else rng.randint(1, 5)))
    return cfg


def describe(cfg):
    s = (f"B={cfg['B']} T={cfg['T']} d_in={cfg['d_in']} d_out={cfg['d_out']} H={cfg['H']} G={cfg['G']} "
         f"ctx={cfg['ctx']} bias={cfg['bias']} causal={cfg['causal']}")
    if cfg["rope"]:
        s += f" rope={cfg['rope']}/{cfg['base']:g}"
    for k in ("window", "alibi", "softcap", "p"):
        if cfg[k]:
            s += f" {k}={cfg[k]}"
    return s


def construct(cfg):
    return VariantMHA(cfg["d_in"], cfg["d_out"], cfg["ctx"], cfg["p"], cfg["H"], cfg["G"], cfg["bias"],
                      cfg["rope"], cfg["base"], cfg["window"], cfg["alibi"], cfg["softcap"])


def qkv_args(cfg, path):
    a = ["forward", "--module", "mha", "--d-in", str(cfg["d_in"]), "--d-out", str(cfg["d_out"]),
         "--context-length", str(cfg["ctx"]), "--num-heads", str(cfg["H"]), "--num-kv-heads", str(cfg["G"]),
         "--attention", path]
    if cfg["bias"]:
        a.append("--qkv-bias")
    if cfg["rope"]:
        a += ["--rope", cfg["rope"], "--rope-base", repr(cfg["base"])]
    if cfg["window"]:
        a += ["--window", str(cfg["window"])]
    if cfg["alibi"]:
        a.append("--alibi")
    if cfg["softcap"]:
        a += ["--softcap", repr(cfg["softcap"])]
    if cfg["p"]:
        a += ["--dropout", repr(cfg["p"])]
    return a


class Case:
    def __init__(self, index, cfg, path, kind):
        self.index, self.cfg, self.path, self.kind = index, cfg, path, kind
        self.name = f"{kind}/{path}#{index} {describe(cfg)}"
        self.errors, self.worst, self.cmd = [], {}, None


def prepare(case, qkv, tmp, rng):
    cfg = case.cfg
    base = os.path.join(tmp, f"{case.kind}-{case.path}-{case.index}")
    f = case.files = {k: f"{base}.{k}.safetensors" for k in ("input", "grad", "weights", "grads", "out")}
    g = torch.Generator().manual_seed(rng.randrange(2**62))
    args = [qkv] + qkv_args(cfg, case.path)
    if case.kind == "dropout":
        seed = rng.randrange(2**40)
        torch.manual_seed(seed)
        model = construct(cfg)
        model.train(True)
        args += ["--seed", str(seed), "--train"]
    else:
        torch.manual_seed(rng.randrange(2**40))
        model = construct(cfg)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.5)
            if not cfg["causal"]:
                model.mask.zero_()
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        safetensors_io.save(f["weights"], state)
        args += ["--weights", f["weights"]]
        model.eval()
    x = torch.randn((cfg["B"], cfg["T"], cfg["d_in"]), generator=g)
    xg = x.clone().requires_grad_(True)
    y = model(xg)
    grad = torch.randn(y.shape, generator=g)
    y.backward(grad)
    case.expected_output = y.detach().clone()
    case.expected = {"input": xg.grad.detach().clone()}
    for name, p in model.named_parameters():
        case.expected[name] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    safetensors_io.save(f["input"], {"input": x})
    safetensors_io.save(f["grad"], {"grad_output": grad})
    case.cmd = args + ["--input", f["input"], "--output", f["out"], "--grad-output", f["grad"],
                       "--grads-out", f["grads"]]


def compare(case, name, got, want, tolerance):
    if tuple(got.shape) != tuple(want.shape):
        case.errors.append(f"{name}: qkv shape {tuple(got.shape)}, PyTorch {tuple(want.shape)}")
        return
    err, i = rel_err(got, want)
    kind = "output" if name == "output" else "input" if name == "d input" else "weights"
    case.worst[kind] = max(case.worst.get(kind, 0.0), err)
    if not err <= tolerance:
        case.errors.append(f"{name}: relative error {err:.3g} > {tolerance:g} at flat index {i}: "
                           f"qkv {got.flatten()[i].item()!r}, PyTorch {want.flatten()[i].item()!r}")


def check(case, result):
    problem = result.problem()
    if problem:
        case.errors.append(problem)
        return
    try:
        out = safetensors_io.load(case.files["out"])["output"]
        grads = safetensors_io.load(case.files["grads"])
    except Exception as e:  # noqa: BLE001 - any unreadable file is a failure
        case.errors.append(f"cannot read qkv's outputs: {e}")
        return
    compare(case, "output", out, case.expected_output, FORWARD_TOLERANCE)
    if set(grads) != set(case.expected):
        case.errors.append(f"gradient names: qkv {sorted(grads)}, PyTorch {sorted(case.expected)}")
    for name, want in case.expected.items():
        if name in grads:
            compare(case, f"d {name}", grads[name], want, GRADIENT_TOLERANCE)


def build_cases(args):
    rng = random.Random(args.rng_seed)
    cases = []
    for i in range(args.cases):
        cfg = random_config(rng, i)
        for path in ("textbook", "fused"):
            cases.append(Case(i, cfg, path, "weights"))
    for i in range(args.cases // 4):
        cfg = random_config(rng, i + 2)
        cfg["p"] = rng.choice([0.1, 0.5])
        cfg["causal"] = True
        cases.append(Case(i, cfg, "textbook", "dropout"))
    return cases, rng


def add_flags(ap):
    ap.add_argument("--cases", type=int, default=160, help="random configurations (each on both paths)")


def main():
    h = harness.start("variants", __doc__, add_flags, jobs=2, rng_seed=20250611)
    cases, rng = build_cases(h.args)
    worst = {}
    with h.scratch("qkv-variants-") as tmp:
        results = run_all(cases, lambda case: prepare(case, h.qkv, tmp, rng), h.args.jobs)
        for c, result in zip(cases, results):
            check(c, result)
            h.record(c.name, c.errors, c.cmd)
            if h.verbose:
                status = "FAIL" if c.errors else "ok  "
                print(f"{status} {c.name} " + " ".join(f"{k}={v:.2g}" for k, v in c.worst.items()))
            for k, v in c.worst.items():
                key = (c.path, k)
                worst[key] = max(worst.get(key, 0.0), v)
    print("  worst relative errors: " + ", ".join(f"{p} {k} {v:.2g}" for (p, k), v in sorted(worst.items())))
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
