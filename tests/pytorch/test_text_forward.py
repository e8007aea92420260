#!/usr/bin/python3
"""End to end from text: `qkv forward --text T` against PyTorch doing the book's pipeline.

    /usr/bin/python3 tests/pytorch/test_text_forward.py --qkv build/qkv

PyTorch side, for the GPT-2 ids of the text (taken from qkv's own `qkv encode`, whose ids the
tokenizer tests check against tiktoken):
    torch.manual_seed(S)
    tok = nn.Embedding(50257, d_in); pos = nn.Embedding(context_length, d_in)
    module = Class(...)
    x = tok(ids) + pos(arange(T))       (batch of one for the causal classes)
    y = module(x)
The state dict qkv saves (token_emb.weight, pos_emb.weight and the module's tensors) must equal
PyTorch's bit for bit; the outputs must agree within 1e-5 relative. A run with --weights (the
saved file) must give the same output again. Then the backward: with a random dL/dy as
--grad-output, the gradients qkv writes (of the embedded input x, of every module parameter, and of
token_emb.weight and pos_emb.weight) must agree with PyTorch autograd's within 1e-4 relative
(max|qkv - torch| / max(1, max|torch|)). Prints "text forward: N passed, M failed".
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch import nn  # noqa: E402

import book_classes  # noqa: E402
import harness  # noqa: E402
import safetensors_io  # noqa: E402

TEXTS = ["Your journey starts with one step.",
         "Hello, do you like tea? <|endoftext|> In the sunlit terraces of someunknownPlace.",
         "x"]
CONFIGS = [("mha", 8, 8, 2, 32, 123), ("causal-attention", 6, 4, 1, 24, 7), ("mha-wrapper", 5, 3, 3, 20, 0),
           ("self-attention-v2", 4, 2, 1, 40, 789), ("self-attention-v1", 3, 2, 1, 20, 123)]


def build(module, d_in, d_out, heads, ctx):
    if module == "self-attention-v1":
        return book_classes.SelfAttention_v1(d_in, d_out)
    if module == "self-attention-v2":
        return book_classes.SelfAttention_v2(d_in, d_out)
    if module == "causal-attention":
        return book_classes.CausalAttention(d_in, d_out, ctx, 0.0)
    if module == "mha-wrapper":
        return book_classes.MultiHeadAttentionWrapper(d_in, d_out, ctx, 0.0, num_heads=heads)
    return book_classes.MultiHeadAttention(d_in, d_out, ctx, 0.0, num_heads=heads)


def check_backward(cmd, tmp, tok, pos, m, module, ids, seed):
    """qkv's --grad-output run against autograd through the module and both embeddings."""
    for t in (tok.weight, pos.weight, *m.parameters()):
        t.grad = None
    x = tok(torch.tensor(ids)) + pos(torch.arange(len(ids)))
    if not module.startswith("self-attention"):
        x = x.unsqueeze(0)
    x.retain_grad()
    y = m(x)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 1))
    y.backward(g)
    want = {"input": x.grad, "token_emb.weight": tok.weight.grad, "pos_emb.weight": pos.weight.grad}
    want.update({name: p.grad for name, p in m.named_parameters()})
    safetensors_io.save(f"{tmp}/g.st", {"grad_output": g})
    problem = harness.run_qkv(cmd + ["--grad-output", f"{tmp}/g.st", "--grads-out", f"{tmp}/grads.st"]).problem()
    if problem:
        return [f"--grad-output run: {problem}"]
    got = safetensors_io.load(f"{tmp}/grads.st")
    if sorted(got) != sorted(want):
        return [f"gradient names {sorted(got)} != {sorted(want)}"]
    problems = []
    for name, w in want.items():
        if got[name].shape != w.shape:
            problems.append(f"d {name}: shape {tuple(got[name].shape)} vs {tuple(w.shape)}")
            continue
        err = ((got[name].double() - w.double()).abs().max() / max(1.0, w.abs().max().item())).item()
        if err > 1e-4:
            problems.append(f"d {name}: relative error {err:.3g}")
    return problems


def main():
    h = harness.start("text forward", __doc__)
    with h.scratch("qkv-text-forward-") as tmp:
        for text in TEXTS:
            try:
                ids = json.loads(harness.check_qkv([h.qkv, "encode", "--allowed-special", "all", "--text", text]))
            except harness.QkvError as e:
                h.record(f"qkv encode {text[:20]!r}", [e])
                continue
            for module, d_in, d_out, heads, ctx, seed in CONFIGS:
                what = f"{module} d_in={d_in} d_out={d_out} heads={heads} ctx={ctx} seed={seed} text={text[:20]!r}"
                cmd = [h.qkv, "forward", "--module", module, "--d-in", str(d_in), "--d-out", str(d_out),
                       "--context-length", str(ctx), "--seed", str(seed), "--text", text,
                       "--output", f"{tmp}/y.st", "--save-weights", f"{tmp}/w.st"]
                if module in ("mha", "mha-wrapper"):
                    cmd += ["--num-heads", str(heads)]
                problem = harness.run_qkv(cmd).problem()
                if problem:
                    h.record(what, [problem], cmd)
                    print(f"FAIL {what}")
                    continue
                torch.manual_seed(seed)
                tok, pos = nn.Embedding(50257, d_in), nn.Embedding(ctx, d_in)
                m = build(module, d_in, d_out, heads, ctx)
                with torch.no_grad():
                    x = tok(torch.tensor(ids)) + pos(torch.arange(len(ids)))
                    y = m(x) if module.startswith("self-attention") else m(x.unsqueeze(0))
                want = dict(m.state_dict())
                want["token_emb.weight"], want["pos_emb.weight"] = tok.weight, pos.weight
                got = safetensors_io.load(f"{tmp}/w.st")
                problems = []
                if sorted(got) != sorted(want):
                    problems.append(f"state names {sorted(got)} != {sorted(want)}")
                else:
                    problems += [f"{k} differs" for k in want if not torch.equal(got[k], want[k].detach())]
                out = safetensors_io.load(f"{tmp}/y.st")["output"]
                err = ((out - y).abs().max() / max(1.0, y.abs().max().item())).item() if out.shape == y.shape else 1e9
                if err > 1e-5:
                    problems.append(f"output relative error {err:.3g} (shapes {tuple(out.shape)} vs {tuple(y.shape)})")
                again = harness.run_qkv(cmd[:cmd.index("--seed")] + ["--weights", f"{tmp}/w.st", "--text", text,
                                                                     "--output", f"{tmp}/y2.st"] +
                                        (["--num-heads", str(heads)] if module in ("mha", "mha-wrapper") else []))
                if again.problem():
                    problems.append(f"--weights run: {again.problem()}")
                elif not torch.equal(safetensors_io.load(f"{tmp}/y2.st")["output"], out):
                    problems.append("--weights run gave a different output")
                problems += check_backward(cmd, tmp, tok, pos, m, module, ids, seed)
                h.record(what, problems, cmd)
                if problems:
                    print(f"FAIL {what}: " + "; ".join(problems))
                elif h.verbose:
                    print(f"ok   {what}")
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
