#!/usr/bin/python3
"""Differential test: `qkv forward` against the book's PyTorch classes (tests/pytorch/book_classes.py).

    /usr/bin/python3 tests/pytorch/test_forward_differential.py --qkv build/qkv [--verbose]

Three groups of cases, all drawn from one seeded Python RNG (so a run is reproducible):

  weights  For every module, --cases random configurations (B 1..4, T 1..12, d_in and d_out
           1..16, num_heads 1..4, context_length == T or larger, qkv_bias on or off, and for the
           causal modules sometimes a dropout p that must stay inactive in eval mode). The weights
           are made in PyTorch (seeded constructor, then every parameter += randn * 0.5) and
           passed with --weights; the output and the attention weights must agree with PyTorch
           to a relative error max|qkv - torch| / max(1, max|torch|) <= 1e-5.
  seed     For every module, --seed-cases configurations run with --seed S --save-weights F:
           F must load into a fresh PyTorch module with load_state_dict(strict=True) and equal,
           tensor for tensor and bit for bit, the state dict of torch.manual_seed(S); Class(...).
           The output and attention weights are compared as above.
  dropout  For the causal modules, --dropout-cases configurations with --train and p in
           {0.1, 0.5, 0.7}: --seed S (and for half of them also --weights W, loaded after the
           seeded construction). PyTorch: torch.manual_seed(S); m = Class(...);
           [m.load_state_dict(W)]; m.train(); m(x). The output and the weights before and after
           dropout must agree within 1e-5, and the zero pattern of attn_weights_dropped (the
           dropout mask) must be identical.

The modules in module_cases.FLOAT64_GRADIENTS (GatedDeltaNet and Qwen3.5's layer, which carry
their recurrence in double) are compared, in the weights and seed cases, with the class run in
float64, within 1e-5 or 2x the float32 class's own farthest distance from it on x and on nudged
copies of x (module_cases.nudged_inputs), where float32 arithmetic cannot reach 1e-5.

Prints one summary line, "forward differential: N passed, M failed", and exits non-zero on any
failure, after describing each failure (module, configuration, tensor, worst element, values).
"""

import copy
import os
import random
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import book_classes  # noqa: E402
import harness  # noqa: E402
import safetensors_io  # noqa: E402
from module_cases import (CAUSAL, FLOAT64_GRADIENTS, MODULES, NO_DROPOUT, NO_SOFTMAX, nudged_inputs, construct, describe, perturbed_weights, qkv_args,  # noqa: E402
                          random_config, rel_err, run_all, seeded)

TOLERANCE = 1e-5
SPECIAL_SEEDS = [0, 1, 123, 789, 2**32 + 5, 2**40 + 7, 2**63 - 1, 2**64 - 1]


# ----------------------------------------------------------------------------------------------
# Configurations and the PyTorch side


def random_input(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (cfg["T"], cfg["d_in"]) if cfg["module"] not in CAUSAL else (cfg["B"], cfg["T"], cfg["d_in"])
    return torch.randn(shape, generator=g)


def run_torch(model, x, train):
    book_classes.enable_recording(model)
    model.train(train)
    with torch.no_grad():
        y = model(x)
    return {
        "output": y.clone(),
        "attn_weights": None if model.last_attn_weights is None else model.last_attn_weights.clone(),
        "attn_weights_dropped": None if model.last_attn_weights_dropped is None
        else model.last_attn_weights_dropped.clone(),
    }


# ----------------------------------------------------------------------------------------------
# Cases


class Case:
    def __init__(self, kind, index, cfg):
        self.kind, self.index, self.cfg = kind, index, cfg
        self.name = f"{kind}#{index} {describe(cfg)}"
        self.cmd = None
        self.expected = None        # what PyTorch computed
        self.expected_state = None  # seed cases: torch.manual_seed(S); Class(...).state_dict()
        self.train = False
        self.files = {}
        self.errors = []
        self.worst = {}             # tensor name -> relative error
        self.bound = {}             # tensor name -> its tolerance, where not TOLERANCE (float64_reference)


def prepare(case, qkv, tmp, rng_seed):
    """Writes the case's files and computes PyTorch's answer; sets case.cmd."""
    cfg = case.cfg
    base = os.path.join(tmp, f"{case.kind}-{cfg['module']}-{case.index}")
    f = case.files = {k: f"{base}.{k}.safetensors" for k in ("input", "weights", "output", "attn", "saved")}
    x = random_input(cfg, rng_seed.randrange(2**62))
    safetensors_io.save(f["input"], {"input": x})
    args = [qkv] + qkv_args(cfg)

    if case.kind == "weights":
        state = perturbed_weights(cfg, rng_seed.randrange(2**62))
        safetensors_io.save(f["weights"], state)
        model = construct(cfg)
        model.load_state_dict(state, strict=True)
        case.expected = run_torch(model, x, train=False)
        args += ["--weights", f["weights"]]
    elif case.kind == "seed":
        seed = case.seed
        model = seeded(cfg, seed)
        case.expected_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        case.expected = run_torch(model, x, train=False)
        args += ["--seed", str(seed), "--save-weights", f["saved"]]
    elif case.kind == "dropout":
        seed = case.seed
        case.train = True
        state = None
        if case.with_weights:
            state = perturbed_weights(cfg, rng_seed.randrange(2**62))
            safetensors_io.save(f["weights"], state)
        model = seeded(cfg, seed)
        if state is not None:
            model.load_state_dict(state, strict=True)
        case.expected = run_torch(model, x, train=True)
        args += ["--seed", str(seed), "--train"]
        if state is not None:
            args += ["--weights", f["weights"]]
    else:
        raise ValueError(case.kind)
    if cfg["module"] in FLOAT64_GRADIENTS and case.kind != "dropout":
        float64_reference(case, model, x)
    args += ["--input", f["input"], "--output", f["output"]]
    if cfg["module"] not in NO_SOFTMAX:
        args += ["--attn-weights", f["attn"]]
    case.cmd = args


def float64_reference(case, model, x):
    """The output of the class run in float64 as the reference (these modules carry their recurrence
    in double), and its bound: 1e-5, or 2x the float32 class's farthest distance from it on x and on
    nudged copies of x, where float32 arithmetic cannot reach 1e-5."""
    with torch.no_grad():
        runs = [model(xi) for xi in nudged_inputs(x, case.index)]
        want = copy.deepcopy(model).double()(x.double()).float()
    case.expected["output"] = want
    case.bound["output"] = max(TOLERANCE, 2 * max(rel_err(r, want)[0] for r in runs))


def compare(case, name, got, want):
    if got is None:
        case.errors.append(f"{name}: missing from qkv's files")
        return
    if tuple(got.shape) != tuple(want.shape):
        case.errors.append(f"{name}: qkv shape {tuple(got.shape)}, PyTorch shape {tuple(want.shape)}")
        return
    if got.dtype != torch.float32:
        case.errors.append(f"{name}: qkv dtype {got.dtype}, expected float32")
        return
    err, i = rel_err(got, want)
    case.worst[name] = err
    bound = case.bound.get(name, TOLERANCE)
    if not err <= bound:
        idx = tuple(int(v) for v in np.unravel_index(i, tuple(want.shape))) if want.dim() else ()
        case.errors.append(f"{name}: relative error {err:.3g} > {bound:.3g} at index {list(idx)}: "
                           f"qkv {got.flatten()[i].item()!r}, PyTorch {want.flatten()[i].item()!r}")


def check(case, result):
    problem = result.problem()
    if problem:
        case.errors.append(problem)
        return
    f = case.files
    try:
        y = safetensors_io.load(f["output"])
        attn = safetensors_io.load(f["attn"]) if case.expected["attn_weights"] is not None else {}
    except Exception as e:  # noqa: BLE001 - report any unreadable file as a failure
        case.errors.append(f"cannot read qkv's files: {e}")
        return
    compare(case, "output", y.get("output"), case.expected["output"])
    if case.expected["attn_weights"] is not None:
        compare(case, "attn_weights", attn.get("attn_weights"), case.expected["attn_weights"])
    want_dropped = case.expected["attn_weights_dropped"]
    got_dropped = attn.get("attn_weights_dropped")
    if want_dropped is None:
        if got_dropped is not None:
            case.errors.append("attn_weights_dropped: written although dropout is inactive")
    else:
        compare(case, "attn_weights_dropped", got_dropped, want_dropped)
        if got_dropped is not None and got_dropped.shape == want_dropped.shape:
            zero_got, zero_want = got_dropped == 0, want_dropped == 0
            if not torch.equal(zero_got, zero_want):
                where = (zero_got != zero_want).nonzero()
                first = [int(v) for v in where[0]]
                case.errors.append(
                    f"attn_weights_dropped: dropout mask differs at {where.shape[0]} of {want_dropped.numel()} "
                    f"elements, first at {first}: qkv {got_dropped[tuple(first)].item()!r}, "
                    f"PyTorch {want_dropped[tuple(first)].item()!r}")
    unknown = set(attn) - {"attn_weights", "attn_weights_dropped"}
    if unknown or set(y) != {"output"}:
        case.errors.append(f"unexpected tensors in qkv's files: {sorted(unknown | (set(y) - {'output'}))}")

    if case.kind == "seed":
        try:
            saved = safetensors_io.load(f["saved"])
        except Exception as e:  # noqa: BLE001
            case.errors.append(f"cannot read the --save-weights file: {e}")
            return
        try:
            fresh = construct(case.cfg)
            fresh.load_state_dict(saved, strict=True)
        except Exception as e:  # noqa: BLE001
            case.errors.append(f"load_state_dict(strict=True) of the --save-weights file failed: {e}")
            return
        want = case.expected_state
        if list(saved) != list(want):
            # Order is informational only (load_state_dict does not care); names are checked above.
            if set(saved) != set(want):
                case.errors.append(f"state dict names: qkv {sorted(saved)}, PyTorch {sorted(want)}")
        for k, v in want.items():
            got = saved.get(k)
            if got is None:
                continue
            if got.dtype != v.dtype or tuple(got.shape) != tuple(v.shape):
                case.errors.append(f"{k}: qkv {got.dtype} {tuple(got.shape)}, PyTorch {v.dtype} {tuple(v.shape)}")
            elif not torch.equal(got, v):
                where = (got != v).nonzero()
                first = tuple(int(t) for t in where[0])
                case.errors.append(
                    f"{k} (seed {case.seed}): {where.shape[0]} of {v.numel()} elements differ, first at "
                    f"{list(first)}: qkv {got[first].item()!r}, PyTorch {v[first].item()!r}")


# ----------------------------------------------------------------------------------------------


def build_cases(args):
    rng = random.Random(args.rng_seed)
    cases = []
    for module in MODULES:
        for i in range(args.cases):
            cfg = random_config(rng, module)
            if module in CAUSAL - NO_DROPOUT and rng.random() < 0.3:
                cfg["p"] = rng.choice([0.1, 0.5, 0.7])  # given but inactive: eval mode
            cases.append(Case("weights", i, cfg))
        for i in range(args.seed_cases):
            cfg = random_config(rng, module)
            if module in CAUSAL - NO_DROPOUT and rng.random() < 0.3:
                cfg["p"] = rng.choice([0.1, 0.5])
            case = Case("seed", i, cfg)
            case.seed = SPECIAL_SEEDS[i] if i < len(SPECIAL_SEEDS) else rng.randrange(2**64)
            case.name += f" seed={case.seed}"
            cases.append(case)
    for module in MODULES:
        if module not in CAUSAL or module in NO_DROPOUT:
            continue
        for i in range(args.dropout_cases):
            cfg = random_config(rng, module)
            cfg["p"] = [0.1, 0.5, 0.7][i % 3]
            case = Case("dropout", i, cfg)
            case.seed = rng.choice(SPECIAL_SEEDS) if i % 5 == 0 else rng.randrange(2**40)
            case.with_weights = i % 2 == 1
            case.name += f" seed={case.seed} train" + (" +weights" if case.with_weights else "")
            cases.append(case)
    return cases, rng


def add_flags(ap):
    ap.add_argument("--cases", type=int, default=100, help="--weights configurations per module")
    ap.add_argument("--seed-cases", type=int, default=20, help="--seed configurations per module")
    ap.add_argument("--dropout-cases", type=int, default=20, help="--train configurations per causal module")


def main():
    h = harness.start("forward differential", __doc__, add_flags, jobs=2, rng_seed=20240917)
    cases, rng = build_cases(h.args)
    summary = {}
    with h.scratch("qkv-forward-diff-") as tmp:
        # PyTorch's side of each case here, qkv processes in the pool meanwhile.
        results = run_all(cases, lambda case: prepare(case, h.qkv, tmp, rng), h.args.jobs)
        for case, result in zip(cases, results):
            check(case, result)
            h.record(case.name, case.errors, case.cmd)
            s = summary.setdefault(case.cfg["module"], {"passed": 0, "failed": 0, "worst": {}})
            s["failed" if case.errors else "passed"] += 1
            for name, err in case.worst.items():
                if err > s["worst"].get(name, -1.0):
                    s["worst"][name] = err
            if h.verbose:
                status = "FAIL" if case.errors else "ok  "
                worst = " ".join(f"{k}={v:.2g}" for k, v in case.worst.items())
                print(f"{status} {case.name}  [{worst}]\n     $ {shlex.join(case.cmd)}")
                for e in case.errors:
                    print(f"     {e}")
    for module in MODULES:
        s = summary.get(module)
        if s is None:
            continue
        worst = ", ".join(f"{k} {v:.3g}" for k, v in sorted(s["worst"].items()))
        print(f"  {module:18s} {s['passed']:4d} passed, {s['failed']:3d} failed; worst relative error: {worst}")
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
