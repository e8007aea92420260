#!/usr/bin/python3
"""Accuracy on every SIMD path, measured: `qkv forward` and its gradients (--grad-output /
--grads-out) with the kernels capped at each target this CPU and build run (QKV_SIMD=AVX3_DL, AVX3,
AVX2, ..., the portable one; NEON on ARM), against the book's classes run in float64, as a ratio to
PyTorch float32's own distance from float64 on the same cases.

    /usr/bin/python3 bench/accuracy_targets.py --qkv build/qkv [--cases N] [--rng-seed S] [--verbose]

Cases: every module of the differential tests (tests/pytorch/module_cases.py), with weights far
from their init (eval mode), at shapes wider than the differentials' (T 1..48, widths up to 48;
gated-deltanet's heads up to 16 wide). For each case and each tensor (the output, the input's
gradient, each parameter's gradient):

  reference  the class in float64 on x;
  float32    the class in float32 on x and on four copies of x with each element moved by about one
             float32 ulp: its farthest distance from the reference is how far float32 arithmetic
             lands on this case (module_cases.nudged_inputs);
  qkv        `qkv forward` on x under each target, held to 2x float32's distance, or to 8 float32
             roundings of the tensor's scale (8 * 2^-24: tensors float32 computes exactly or nearly)
             - of its neighbours' scale (the case's largest tensor) when the tensor is zero or
             nearly so in exact arithmetic (below 2^-12 of that: a key bias's gradient, which
             softmax's indifference to a shift of a row makes zero).

Distances are module_cases.rel_err's: max |a - b| / max(1, max |reference|). Prints per target and
module the worst ratio of qkv's distance to float32's, and how many tensors miss the 2x bound (the
target of issue 44; docs/developing.md says where qkv stands and why). Exits non-zero when a qkv
run fails or writes the wrong tensors, and with --fail-over R when a tensor's ratio exceeds R
(--portable-fail-over R' instead on the portable targets, SCALAR and EMU128, whose multiply-adds
round twice). ctest runs it with R = 2, issue 44's target, and R' = 3: PyTorch's own distance moves
with its BLAS kernels, and under OpenBLAS's SkylakeX ones a portable-target tensor is at 2.5x
(docs/developing.md#accuracy-on-every-simd-path). Where PyTorch's OpenBLAS runs its Prescott (SSE3)
kernels, its fallback for a CPU missing from its table (an Intel Xeon of family 6 model 207 with
OpenBLAS 0.3.21), the yardstick is not the float32 of a machine OpenBLAS knows: the script says so
and holds every target to R' (one gated-deltanet weight gradient there: 2.13x Prescott's distance,
1.37x Haswell's, qkv's own distance the same).
"""

import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pytorch"))

import torch  # noqa: E402

import harness  # noqa: E402
import safetensors_io  # noqa: E402
from harness import run_qkv  # noqa: E402
from module_cases import (CAUSAL, MODULES, SPLIT_HEADS, construct, describe, nudged_inputs, perturbed_weights,  # noqa: E402
                          qkv_args, random_config, rel_err)

RATIO = 2.0
PORTABLE = ("SCALAR", "EMU128")
FLOOR = 8 * 2.0**-24
NEAR_ZERO = 2.0**-12


def simd_targets(qkv):
    """The targets this CPU and build run, best first, as qkv's own error for a bad QKV_SIMD lists them."""
    r = run_qkv([qkv, "forward", "--module", "mha"], env={"QKV_SIMD": "not-a-target"})
    m = re.search(r"this CPU and build run (.*) \(or none: the best\)", r.stderr)
    if r.returncode == 0 or m is None:
        raise SystemExit(f"accuracy targets: FAILED: cannot read the SIMD targets from qkv's error: {r.stderr.strip()!r}")
    return [t.strip() for t in m.group(1).split(",")]


def wide_config(rng, module):
    """module_cases.random_config's case at wider shapes."""
    cfg = random_config(rng, module)
    cfg["T"] = rng.randint(1, 48)
    cfg["d_in"] = rng.randint(1, 48)
    if module == "gated-deltanet":
        cfg["Dk"], cfg["Dv"] = rng.randint(1, 16), rng.randint(1, 16)
        cfg["d_out"] = cfg["d_in"]
    elif module in SPLIT_HEADS:
        cfg["d_out"] = cfg["H"] * rng.randint(1, 48 // cfg["H"])
    else:
        cfg["d_out"] = rng.randint(1, 48)
    if module == "mla" and cfg.get("latent") is not None:
        cfg["latent"] = rng.randint(1, 32)
    if module in CAUSAL:
        cfg["ctx"] = cfg["T"] + rng.randint(0, 8)
    cfg["p"] = 0.0
    return cfg


def run_model(model, x, g, dtype):
    """{"output": y, "input": dL/dx, parameter name: dL/dp} as float64, the model computing in dtype."""
    model.to(dtype)
    xg = x.detach().to(dtype).clone().requires_grad_(True)
    y = model(xg)
    y.backward(g.to(dtype))
    # clone(): .double() of a float64 tensor is the tensor itself, which zero_grad() then zeroes
    out = {"output": y.detach().double().clone(), "input": xg.grad.detach().double().clone()}
    for name, p in model.named_parameters():
        out[name] = p.grad.detach().double().clone() if p.grad is not None else torch.zeros_like(p, dtype=torch.float64)
    model.zero_grad()
    return out


class Case:
    def __init__(self, index, cfg):
        self.index, self.cfg = index, cfg
        self.name = f"#{index} {describe(cfg)}"


def prepare(case, qkv, tmp, seed):
    cfg = case.cfg
    base = os.path.join(tmp, f"{cfg['module']}-{case.index}")
    gen = torch.Generator().manual_seed(seed)
    shape = (cfg["T"], cfg["d_in"]) if cfg["module"] not in CAUSAL else (cfg["B"], cfg["T"], cfg["d_in"])
    x = torch.randn(shape, generator=gen)
    state = perturbed_weights(cfg, seed + 1)
    model = construct(cfg)
    model.load_state_dict(state, strict=True)
    model.eval()
    with torch.no_grad():
        y_shape = model(x).shape
    g = torch.randn(y_shape, generator=gen)
    case.reference = run_model(model, x, g, torch.float64)
    runs = [run_model(model, xi, g, torch.float32) for xi in nudged_inputs(x, case.index)]
    case.float32 = {name: max(rel_err(r[name], want)[0] for r in runs) for name, want in case.reference.items()}
    case.neighbours = max(t.abs().max().item() for t in case.reference.values() if t.numel())
    case.files = {k: f"{base}.{k}.safetensors" for k in ("input", "grad", "weights", "grads", "output")}
    safetensors_io.save(case.files["weights"], state)
    safetensors_io.save(case.files["input"], {"input": x})
    safetensors_io.save(case.files["grad"], {"grad_output": g})
    case.cmd = [qkv] + qkv_args(cfg) + ["--weights", case.files["weights"], "--input", case.files["input"],
                                        "--output", case.files["output"], "--grad-output", case.files["grad"],
                                        "--grads-out", case.files["grads"]]


def check(case, target, result, worst, fail_over=0.0):
    """(failures, misses) of one case under one target: failures, a run that failed or files that
    are wrong, or (fail_over > 0) a tensor whose ratio exceeds fail_over; misses, tensors over the
    bound. worst[(target, module)] keeps the largest ratio."""
    problem = result.problem()
    if problem:
        return [problem], []
    try:
        got = dict(safetensors_io.load(case.files["grads"]))
        out = safetensors_io.load(case.files["output"])
    except Exception as e:  # noqa: BLE001 - any unreadable file is a failure
        return [f"cannot read qkv's files: {e}"], []
    if len(out) != 1:
        return [f"--output holds {sorted(out)}, expected one tensor"], []
    got["output"] = next(iter(out.values()))
    failures, misses = [], []
    for name, want in case.reference.items():
        a = got.get(name)
        if a is None:
            failures.append(f"{name}: not written by qkv")
            continue
        if tuple(a.shape) != tuple(want.shape):
            failures.append(f"{name}: qkv shape {tuple(a.shape)}, reference {tuple(want.shape)}")
            continue
        err, _ = rel_err(a, want)
        f32 = case.float32[name]
        # rel_err's distances are relative to max(1, max|reference|); a tensor that is zero or
        # nearly so in exact arithmetic is judged against its neighbours' scale instead
        size = want.abs().max().item() if want.numel() else 0.0
        floor = FLOOR * max(1.0, case.neighbours) / max(1.0, size) if size < NEAR_ZERO * case.neighbours else FLOOR
        bound = max(RATIO * f32, floor)
        key = (target, case.cfg["module"])
        ratio = err / max(f32, floor / RATIO)
        if ratio > worst.get(key, (0.0, ""))[0]:
            worst[key] = (ratio, f"{case.name} {name}: qkv {err:.3g}, float32 {f32:.3g}")
        if fail_over > 0 and not ratio <= fail_over:
            failures.append(f"{name}: qkv's distance from float64 {err:.3g} is {ratio:.2f}x PyTorch float32's "
                            f"{f32:.3g} (or the floor), over {fail_over:g}")
        if not err <= bound:
            misses.append(f"{name}: qkv's distance from float64 {err:.3g} > {bound:.3g} (PyTorch float32's {f32:.3g})")
    return failures, misses


def openblas_core():
    """The kernels PyTorch's OpenBLAS runs ("Haswell", "SkylakeX", "Prescott", ...), or None when
    PyTorch does not run on OpenBLAS: asked of the library this process has loaded."""
    import ctypes
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "openblas" in line and line.split()[-1].startswith("/")})
    for path in paths:
        try:
            corename = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        corename.restype = ctypes.c_char_p
        return corename().decode()
    return None


def add_flags(ap):
    ap.add_argument("--cases", type=int, default=12, help="configurations per module")
    ap.add_argument("--targets", default="", help="a comma-separated subset of the targets (default: all)")
    ap.add_argument("--portable-fail-over", type=float, default=None,
                    help="--fail-over for the portable targets (SCALAR, EMU128; default: --fail-over)")
    ap.add_argument("--fail-over", type=float, default=0.0,
                    help="fail when a tensor's ratio to PyTorch float32's distance exceeds this (0: report only)")


def main():
    h = harness.start("accuracy targets", __doc__, add_flags, jobs=2, rng_seed=20261130)
    targets = simd_targets(h.qkv)
    if h.args.targets:
        wanted = [t.strip().upper() for t in h.args.targets.split(",")]
        missing = [t for t in wanted if t not in targets]
        if missing:
            raise SystemExit(f"accuracy targets: --targets names {missing}; this CPU and build run {targets}")
        targets = wanted
    core = openblas_core()
    print(f"  PyTorch {torch.__version__}, BLAS kernels: {core or 'not OpenBLAS'}")
    unknown_cpu = core == "Prescott" and h.args.portable_fail_over is not None
    if unknown_cpu:
        print(f"  OpenBLAS runs its Prescott kernels (this CPU is not in its table): PyTorch float32's distance is "
              f"not the yardstick of issue 44, and every target is held to --portable-fail-over "
              f"{h.args.portable_fail_over:g}")
    rng = random.Random(h.args.rng_seed)
    cases = [Case(i, wide_config(rng, module)) for module in MODULES for i in range(h.args.cases)]
    worst, tensors, missed = {}, 0, 0
    with h.scratch("qkv-accuracy-targets-") as tmp:
        for case in cases:
            prepare(case, h.qkv, tmp, rng.randrange(2**40))
            for target in targets:
                result = run_qkv(case.cmd, env={"QKV_SIMD": target})
                portable = (target in PORTABLE or unknown_cpu) and h.args.portable_fail_over is not None
                failures, misses = check(case, target, result, worst,
                                         h.args.portable_fail_over if portable else h.args.fail_over)
                h.record(f"{target} {case.name}", failures, ["env", f"QKV_SIMD={target}"] + case.cmd)
                tensors += len(case.reference)
                missed += len(misses)
                if misses and h.verbose:
                    print(f"over {RATIO:g}x: {target} {case.name}\n    " + "\n    ".join(misses))
    for target in targets:
        print(f"  {target}: worst qkv / PyTorch float32 distance from float64, per module:")
        for module in MODULES:
            ratio, where = worst.get((target, module), (0.0, "-"))
            print(f"    {module:18s} {ratio:6.2f}  ({where})")
    print(f"accuracy targets: {missed} of {tensors} tensors over {RATIO:g}x PyTorch float32's distance "
          f"(or the floor), {len(targets)} targets x {len(cases)} cases")
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
