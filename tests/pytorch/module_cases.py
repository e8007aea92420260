"""What the differential tests (test_forward_differential.py, test_backward_differential.py) share:
random configurations of the book's five attention classes, the PyTorch module for one, the
`qkv forward` flags for it, the relative error they compare by, and running the cases' qkv
commands in a pool (harness.run_qkv each) while PyTorch prepares the next.
"""

import concurrent.futures

import torch

import book_classes
from harness import run_qkv

MODULES = ["self-attention-v1", "self-attention-v2", "causal-attention", "mha-wrapper", "mha", "gated-mha", "mla",
           "deltanet", "gated-deltanet"]
# (mla, deltanet, gated-deltanet: context_length is qkv's limit only; deltanet's dropout is on its
# context, not on weights)
CAUSAL = {"causal-attention", "mha-wrapper", "mha", "gated-mha", "mla", "deltanet", "gated-deltanet"}
NO_DROPOUT = {"gated-deltanet"}  # causal, but without dropout: seed cases instead of dropout cases
SPLIT_HEADS = {"mha", "gated-mha", "mla", "deltanet"}  # d_out = num_heads * head_dim
NO_SOFTMAX = {"deltanet", "gated-deltanet"}  # no attention weights: the forward differential compares the output only
# gated-deltanet (Qwen3.5's layer): d_out is d_in; its own sizes: value heads H, key heads Hk, key and
# value widths Dk, Dv, conv kernel K
# Gradients judged against the PyTorch class run in float64 (test_backward_differential.py): with a
# head width of 1, l2norm(k) is a sign whose small derivative PyTorch's float32 autograd gets only to
# ~1e-2 (its own distance from float64); a tensor over 1e-4 passes within 2x that distance.
FLOAT64_GRADIENTS = {"deltanet", "gated-deltanet"}
FLOAT32_RUNS = 5  # FLOAT64_GRADIENTS: the float32 class on x and on 4 nudged copies of it


def nudged_inputs(x, seed):
    """x and FLOAT32_RUNS - 1 copies of it with each element moved by about one float32 ulp: the
    float32 class run on them shows how far float32 arithmetic lands from float64 on a case."""
    g = torch.Generator().manual_seed(seed)
    return [x] + [(x.double() * (1 + 2.0**-23 * torch.randn(x.shape, generator=g, dtype=torch.float64))).float()
                  for _ in range(FLOAT32_RUNS - 1)]


def random_config(rng, module):
    cfg = {"module": module, "B": 1, "H": None, "ctx": None, "p": 0.0, "bias": False}
    cfg["T"] = rng.randint(1, 12)
    cfg["d_in"] = rng.randint(1, 16)
    if module == "gated-deltanet":
        cfg["Hk"] = rng.randint(1, 3)
        cfg["H"] = cfg["Hk"] * rng.randint(1, 2)
        cfg["Dk"], cfg["Dv"], cfg["K"] = rng.randint(1, 8), rng.randint(1, 8), rng.randint(2, 4)
        cfg["d_out"] = cfg["d_in"]
    elif module in SPLIT_HEADS:
        cfg["H"] = rng.randint(1, 4)
        cfg["d_out"] = cfg["H"] * rng.randint(1, 16 // cfg["H"])
    else:
        cfg["d_out"] = rng.randint(1, 16)
        if module == "mha-wrapper":
            cfg["H"] = rng.randint(1, 4)
    if module not in ("self-attention-v1", "gated-deltanet"):
        cfg["bias"] = rng.random() < 0.5
    if module == "mla":  # the class's default half the time, else any width
        cfg["latent"] = None if rng.random() < 0.5 else rng.randint(1, 12)
    if module in CAUSAL:
        cfg["B"] = rng.randint(1, 4)
        cfg["ctx"] = cfg["T"] if rng.random() < 0.35 else cfg["T"] + rng.randint(1, 8)
    return cfg


def describe(cfg):
    parts = [cfg["module"]]
    if cfg["module"] in CAUSAL:
        parts.append(f"B={cfg['B']}")
    parts += [f"T={cfg['T']}", f"d_in={cfg['d_in']}", f"d_out={cfg['d_out']}"]
    if cfg["ctx"] is not None:
        parts.append(f"context_length={cfg['ctx']}")
    if cfg["H"] is not None:
        parts.append(f"num_heads={cfg['H']}")
    if cfg["module"] == "gated-deltanet":
        parts.append(f"key_heads={cfg['Hk']} key_dim={cfg['Dk']} value_dim={cfg['Dv']} conv_kernel={cfg['K']}")
    if cfg["module"] in CAUSAL and cfg["module"] not in NO_DROPOUT:
        parts.append(f"dropout={cfg['p']}")
    if cfg["module"] not in ("self-attention-v1", "gated-deltanet"):
        parts.append(f"qkv_bias={cfg['bias']}")
    if cfg.get("latent") is not None:
        parts.append(f"latent_dim={cfg['latent']}")
    return " ".join(parts)


def construct(cfg):
    """Class(...) exactly as the book calls it; draws from torch's default generator."""
    m = cfg["module"]
    if m == "self-attention-v1":
        return book_classes.SelfAttention_v1(cfg["d_in"], cfg["d_out"])
    if m == "self-attention-v2":
        return book_classes.SelfAttention_v2(cfg["d_in"], cfg["d_out"], qkv_bias=cfg["bias"])
    if m == "causal-attention":
        return book_classes.CausalAttention(cfg["d_in"], cfg["d_out"], cfg["ctx"], cfg["p"], qkv_bias=cfg["bias"])
    if m == "mha-wrapper":
        return book_classes.MultiHeadAttentionWrapper(
            cfg["d_in"], cfg["d_out"], cfg["ctx"], cfg["p"], cfg["H"], qkv_bias=cfg["bias"])
    if m == "mha":
        return book_classes.MultiHeadAttention(
            cfg["d_in"], cfg["d_out"], cfg["ctx"], cfg["p"], cfg["H"], qkv_bias=cfg["bias"])
    if m == "deltanet":
        return book_classes.GatedDeltaNet(cfg["d_in"], cfg["d_out"], cfg["p"], cfg["H"], qkv_bias=cfg["bias"])
    if m == "mla":
        return book_classes.MultiHeadLatentAttention(
            cfg["d_in"], cfg["d_out"], cfg["p"], cfg["H"], qkv_bias=cfg["bias"], latent_dim=cfg.get("latent"))
    if m == "gated-mha":
        return book_classes.GatedMultiHeadAttention(
            cfg["d_in"], cfg["d_out"], cfg["ctx"], cfg["p"], cfg["H"], qkv_bias=cfg["bias"])
    if m == "gated-deltanet":
        return book_classes.Qwen3_5GatedDeltaNet(cfg["d_in"], cfg["H"], cfg["Hk"], cfg["Dk"], cfg["Dv"], cfg["K"])
    raise ValueError(m)


def seeded(cfg, seed):
    torch.manual_seed(seed)
    return construct(cfg)


def perturbed_weights(cfg, seed):
    """A state dict whose parameters are far from any init values (buffers unchanged)."""
    model = seeded(cfg, seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def qkv_args(cfg):
    if cfg["module"] == "gated-deltanet":
        return ["forward", "--module", "gated-deltanet", "--d-in", str(cfg["d_in"]), "--context-length", str(cfg["ctx"]),
                "--num-heads", str(cfg["H"]), "--num-kv-heads", str(cfg["Hk"]), "--head-dim", str(cfg["Dk"]),
                "--value-head-dim", str(cfg["Dv"]), "--conv-kernel", str(cfg["K"])]
    args = ["forward", "--module", cfg["module"], "--d-in", str(cfg["d_in"]), "--d-out", str(cfg["d_out"])]
    if cfg["module"] in CAUSAL:
        args += ["--context-length", str(cfg["ctx"])]
        if cfg["p"] > 0:
            args += ["--dropout", repr(cfg["p"])]
    if cfg["H"] is not None:
        args += ["--num-heads", str(cfg["H"])]
    if cfg["bias"]:
        args.append("--qkv-bias")
    if cfg.get("latent") is not None:
        args += ["--latent-dim", str(cfg["latent"])]
    return args


def rel_err(a, b):
    """max|a - b| / max(1, max|b|), and the flat index of the worst element."""
    if a.numel() == 0:
        return 0.0, None
    if not torch.isfinite(a).all():
        bad = (~torch.isfinite(a)).flatten().nonzero()[0].item()
        return float("inf"), bad
    diff = (a.double() - b.double()).abs().flatten()
    i = int(diff.argmax())
    return diff[i].item() / max(1.0, b.double().abs().max().item()), i


def run_all(cases, prepare, jobs):
    """Runs `prepare(case)` (PyTorch's side, in this thread) for each case in turn, and each case's
    qkv command (case.cmd, set by prepare) in a pool of `jobs` meanwhile; returns the results of
    harness.run_qkv (Run: returncode, stdout, stderr) in the cases' order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = []
        for case in cases:
            prepare(case)
            futures.append(pool.submit(run_qkv, case.cmd))
        return [fut.result() for fut in futures]
