#!/usr/bin/python3
"""Training differential test: `qkv train` against the same training loop in PyTorch.

    /usr/bin/python3 tests/pytorch/test_train_vs_pytorch.py --qkv build/qkv [--verbose]

Each run trains the attention-only LM (PyTorch twin: tests/pytorch/attention_lm.py) for 20 steps
on fixed data (random ids written to a safetensors file, some targets -100 = ignored, taken in
order through `qkv train --data`), from the same initial weights: qkv builds its model from
--seed S, PyTorch runs torch.manual_seed(S) and the twin's constructor, so the test also checks
that the two initialisations agree. Every step is PyTorch's usual loop:

    lr = lr_at(step); opt.zero_grad(); loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward(); clip_grad_norm_(params, clip); opt.step()

The losses must agree step by step within 1e-5 relative, and the final weights (every tensor of
the state dict, from qkv's checkpoint) within 1e-5 relative to max(1, max|w|). Runs: AdamW with
warm-up and cosine decay (the MultiHeadAttention-based model of issue 4), AdamW with attention
dropout (PyTorch's masks, drawn from the global generator after the constructor), AdamW with
weight decay 0 and clipping off, SGD with Nesterov momentum and weight decay, SGD with momentum
and dampening; and the attention variants (the twin's GroupedQueryAttention): grouped-query heads
with RoPE (half layout), RoPE alone (interleaved), and multi-query heads with interleaved RoPE, a sliding window, ALiBi and
softcapping. A variant run trains qkv on the textbook path (--attention textbook) and on the fused
path (--attention fused).

Prints one line per run (worst loss and weight errors) and
"train vs pytorch: N passed, M failed".
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import attention_lm  # noqa: E402
import harness  # noqa: E402
import safetensors_io  # noqa: E402

STEPS = 20
TOLERANCE = 1e-5

# LMConfig's attention variants: the run's key -> (`qkv train` flag, the twin's keyword).
VARIANTS = {"G": ("--num-kv-heads", "num_kv_heads"), "rope": ("--rope", "rope"), "rope_base": ("--rope-base", "rope_base"),
            "window": ("--window", "window"), "alibi": ("--alibi", "alibi"), "softcap": ("--softcap", "softcap")}

RUNS = [
    {"name": "adamw warmup+cosine, clip 1", "optimizer": "adamw", "lr": 3e-3, "min_lr": 3e-4, "warmup": 5,
     "weight_decay": 0.01, "clip": 1.0, "dropout": 0.0, "seed": 123, "V": 23, "T": 12, "C": 32, "H": 4, "L": 2, "B": 4},
    {"name": "adamw, attention dropout 0.1", "optimizer": "adamw", "lr": 1e-3, "min_lr": 1e-4, "warmup": 3,
     "weight_decay": 0.05, "clip": 0.5, "dropout": 0.1, "seed": 7, "V": 17, "T": 10, "C": 24, "H": 3, "L": 2, "B": 3},
    {"name": "adamw, no decay, no clipping, betas (0.8, 0.95)", "optimizer": "adamw", "lr": 2e-3, "min_lr": 2e-3,
     "warmup": 0, "weight_decay": 0.0, "clip": 0.0, "beta1": 0.8, "beta2": 0.95, "eps": 1e-6, "dropout": 0.0,
     "seed": 2024, "V": 31, "T": 8, "C": 16, "H": 2, "L": 3, "B": 5},
    {"name": "sgd nesterov momentum 0.9, weight decay", "optimizer": "sgd", "lr": 0.05, "min_lr": 0.005, "warmup": 4,
     "weight_decay": 1e-3, "momentum": 0.9, "nesterov": True, "clip": 1.0, "dropout": 0.0, "seed": 99,
     "V": 19, "T": 9, "C": 16, "H": 4, "L": 1, "B": 4},
    {"name": "sgd momentum 0.5, dampening 0.3", "optimizer": "sgd", "lr": 0.1, "min_lr": 0.1, "warmup": 0,
     "weight_decay": 0.0, "momentum": 0.5, "dampening": 0.3, "clip": 2.0, "dropout": 0.0, "seed": 5,
     "V": 13, "T": 7, "C": 12, "H": 2, "L": 2, "B": 3},
    {"name": "adamw, GQA 4/2 heads, rope half", "optimizer": "adamw", "lr": 3e-3, "min_lr": 3e-4, "warmup": 5,
     "weight_decay": 0.01, "clip": 1.0, "dropout": 0.0, "seed": 31, "V": 23, "T": 12, "C": 32, "H": 4, "L": 2, "B": 4,
     "G": 2, "rope": "half"},
    {"name": "adamw, rope interleaved alone, 3 heads", "optimizer": "adamw", "lr": 2e-3, "min_lr": 2e-4,
     "warmup": 2, "weight_decay": 0.0, "clip": 0.5, "dropout": 0.0, "seed": 5, "V": 17, "T": 9, "C": 24, "H": 3, "L": 1,
     "B": 4, "rope": "interleaved"},
    {"name": "adamw, MQA 4/1, rope interleaved base 500, window 5, alibi, softcap 5", "optimizer": "adamw",
     "lr": 3e-3, "min_lr": 3e-4, "warmup": 3, "weight_decay": 0.01, "clip": 1.0, "dropout": 0.0, "seed": 77,
     "V": 19, "T": 11, "C": 16, "H": 4, "L": 2, "B": 3, "G": 1, "rope": "interleaved", "rope_base": 500.0,
     "window": 5, "alibi": True, "softcap": 5.0},
]


def make_data(run, path):
    g = torch.Generator().manual_seed(run["seed"] + 1000)
    n = run["B"] * 7  # fewer rows than 20 batches: the batches wrap around
    inputs = torch.randint(0, run["V"], (n, run["T"]), generator=g)
    targets = torch.randint(0, run["V"], (n, run["T"]), generator=g)
    targets[torch.rand(n, run["T"], generator=g) < 0.2] = -100
    safetensors_io.save(path, {"inputs": inputs.float(), "targets": targets.float()})
    return inputs, targets


def torch_run(run, inputs, targets):
    torch.manual_seed(run["seed"])
    variants = {kw: run[key] for key, (_, kw) in VARIANTS.items() if key in run}
    model = attention_lm.AttentionLM(run["V"], run["T"], run["C"], run["H"], run["L"], run["dropout"], False,
                                     **variants)
    model.train()
    params = list(model.parameters())
    if run["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params, lr=run["lr"], betas=(run.get("beta1", 0.9), run.get("beta2", 0.999)),
                                eps=run.get("eps", 1e-8), weight_decay=run["weight_decay"])
    else:
        opt = torch.optim.SGD(params, lr=run["lr"], momentum=run.get("momentum", 0.0),
                              dampening=run.get("dampening", 0.0), weight_decay=run["weight_decay"],
                              nesterov=run.get("nesterov", False))
    losses = []
    n, b = inputs.shape[0], run["B"]
    for step in range(STEPS):
        rows = [(step * b + i) % n for i in range(b)]
        for group in opt.param_groups:
            group["lr"] = attention_lm.lr_at(step, run["lr"], run["min_lr"], run["warmup"], STEPS)
        opt.zero_grad()
        logits = model(inputs[rows])
        loss = F.cross_entropy(logits.flatten(0, 1), targets[rows].flatten(), ignore_index=-100)
        loss.backward()
        if run["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, run["clip"])
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def variant_paths(run):
    """The attention paths a run trains qkv on: the default (auto), or both for a variant run."""
    return ["textbook", "fused"] if any(key in run for key in VARIANTS) else [None]


def qkv_run(qkv, run, data, tmp, path=None):
    ckpt = os.path.join(tmp, "ckpt.safetensors")
    cmd = [qkv, "train", "--data", data, "--vocab-size", str(run["V"]), "--context-length", str(run["T"]),
           "--d-model", str(run["C"]), "--num-heads", str(run["H"]), "--num-layers", str(run["L"]),
           "--dropout", repr(run["dropout"]), "--optimizer", run["optimizer"], "--steps", str(STEPS),
           "--batch-size", str(run["B"]), "--lr", repr(run["lr"]), "--min-lr", repr(run["min_lr"]),
           "--warmup", str(run["warmup"]), "--weight-decay", repr(run["weight_decay"]), "--clip", repr(run["clip"]),
           "--seed", str(run["seed"]), "--checkpoint", ckpt, "--svg", "", "--json", "--quiet"]
    for key, flag in (("beta1", "--beta1"), ("beta2", "--beta2"), ("eps", "--eps"), ("momentum", "--momentum"),
                      ("dampening", "--dampening")):
        if key in run:
            cmd += [flag, repr(run[key])]
    if run.get("nesterov"):
        cmd.append("--nesterov")
    for key, (flag, _) in VARIANTS.items():
        if key in run:
            cmd += [flag] if run[key] is True else [flag, str(run[key])]
    if path:
        cmd += ["--attention", path]
    summary = harness.qkv_json(cmd, timeout=600)
    saved = safetensors_io.load(ckpt)
    return summary, saved


def rel(a, b):
    return (a.double() - b.double()).abs().max().item() / max(1.0, b.double().abs().max().item())


def compare(summary, saved, want_losses, want_state, verbose):
    """(errors, the run's line): where qkv's losses and weights are not PyTorch's."""
    errors = []
    got_losses = saved["train.losses"].tolist()
    worst_loss = 0.0
    if len(got_losses) != STEPS:
        errors.append(f"qkv recorded {len(got_losses)} losses, expected {STEPS}")
    for step, (g, w) in enumerate(zip(got_losses, want_losses), 1):
        e = abs(g - w) / abs(w)
        worst_loss = max(worst_loss, e)
        if verbose:
            print(f"    step {step:2d}: qkv {g:.7f}  torch {w:.7f}  rel {e:.2g}")
        if not e <= TOLERANCE:
            errors.append(f"step {step}: loss qkv {g!r}, PyTorch {w!r} (relative {e:.3g})")
    if abs(summary["final_loss"] - want_losses[-1]) > TOLERANCE * abs(want_losses[-1]):
        errors.append(f"--json final_loss {summary['final_loss']} vs PyTorch {want_losses[-1]}")
    worst_weight, worst_name = 0.0, ""
    for name, w in want_state.items():
        g = saved.get(name)
        if g is None or tuple(g.shape) != tuple(w.shape):
            errors.append(f"{name}: missing or misshapen in qkv's checkpoint")
            continue
        e = rel(g, w.float())
        if e > worst_weight:
            worst_weight, worst_name = e, name
        if not e <= TOLERANCE:
            errors.append(f"final {name}: relative error {e:.3g}")
    line = (f"loss {want_losses[0]:.4f} -> {want_losses[-1]:.4f}; worst relative "
            f"error: loss {worst_loss:.2g}, weights {worst_weight:.2g} ({worst_name})")
    return errors, line


def main():
    h = harness.start("train vs pytorch", __doc__)
    with h.scratch("qkv-train-vs-torch-") as tmp:
        for run in RUNS:
            data = os.path.join(tmp, "data.safetensors")
            inputs, targets = make_data(run, data)
            want_losses, want_state = torch_run(run, inputs, targets)
            for path in variant_paths(run):
                label = run["name"] + (f" [{path}]" if path else "")
                try:
                    summary, saved = qkv_run(h.qkv, run, data, tmp, path)
                except Exception as e:  # noqa: BLE001 - qkv failed, or its checkpoint is unreadable
                    h.record(label, [e])
                    print(f"  FAIL {label:48s} no checkpoint to compare")
                    continue
                errors, line = compare(summary, saved, want_losses, want_state, h.verbose)
                h.record(label, errors)
                print(f"  {'ok  ' if not errors else 'FAIL'} {label:48s} {line}")
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
