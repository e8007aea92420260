#!/usr/bin/python3
"""qkv's GPT model (the book's chapter 4) and its generation (chapter 5) against the PyTorch twin.

    /usr/bin/python3 tests/pytorch/test_gpt_vs_pytorch.py --qkv build/qkv [--verbose] [--keep]

The twin is tests/pytorch/gpt_model.py: the book's GPTModel and generate, written for these tests.

Forward and backward (`qkv forward --module gpt`), on small models drawn from --rng-seed
(vocabulary 20-80, width 4-24, 1-4 heads, 1-3 blocks, context 2-12; every LayerNorm and bias moved
off its initial value, so that a scale taken for a shift shows):
  weights files  the twin's state written in Hugging Face's layout (gpt_model.to_hugging_face: Conv1D
                 weights, q | k | v side by side; a file with --num-heads, or a directory with
                 model.safetensors and config.json) and in the book's (the state dict's names, with
                 and without the mask buffers); heads tied to the token embedding and untied; q, k, v
                 biases on and off (Hugging Face's layout always has them); batches of 1 and 2 and
                 T from 1 to the context length.
  compared       the logits (the tensor 'output', (B, T, V)) against the twin's in float64, within
                 1e-5 relative (max |qkv - twin| / max |twin|); then the backward of the loss
                 L = sum(logits * G), G a random tensor written as --grad-output (qkv's backward
                 seed dL/dlogits): every parameter's gradient (the book's names; a tied head's
                 gradient is tok_emb.weight's) against autograd's within 1e-4 relative (to the
                 tensor's largest value, or to 1e-3 of the model's largest gradient when the tensor's
                 is smaller: W_key.bias's gradient is zero by the math, W_query's and W_key's too with
                 one token, and float32 sums leave rounding noise there, PyTorch's as qkv's), and the
                 set of names equal to the twin's named_parameters(). Each model runs on both attention
                 paths (--attention fused and --attention textbook), and the two paths' logits agree
                 with each other within 1e-5.
  seed-drawn     `--seed S --vocab-size V ...` against torch.manual_seed(S); GPTModel(cfg): the
                 state dict qkv saves (--save-weights, masks included) equals the twin's bit for bit,
                 and the logits and gradients agree as above; once more in training mode (--train
                 --dropout 0.2, the auto path): PyTorch's dropout masks, drawn after the weights
                 (the twin in float32 there, the masks being drawn for float32 tensors).

Generation (`qkv generate --json`), for GPT-2's vocabulary (its tokenizer reads the prompt; the
prompt's ids come from `qkv encode`) and small widths: a Hugging Face directory (untied, biases)
and a book file (tied head, no q, k, v biases, --num-heads). Greedy, temperature only, top-k only
(the default temperature 1), temperature + top-k, top-k 1 and top-k = the vocabulary, seeds from
0 to 2^64 - 1, with the KV cache and with --no-kv-cache, and more new tokens than the context
holds (the window slides). The twin runs torch.manual_seed(seed); gpt_model.generate(...) in
float32, as the book does (torch.multinomial draws); qkv's "ids" must be its ids, id for id, and
"prompt_tokens", "new_tokens", "kv_cache" must say what ran. Stopping: --eos-id X with X an id the
twin samples a few steps in, and --stop-at-eos (<|endoftext|>, 50256) on the Hugging Face model with
lm_head's row 50256 made a multiple of a row that greedy picks, so that the twin stops after a few
ids (the book's generate with eos_id=50256). A preset: `--model gpt2-small --seed S` against
torch.manual_seed(S); GPTModel(GPT_CONFIG_124M); model.eval(); generate(...) drawing from the
same generator after the weights.

Bad input, each of which must end qkv with a nonzero status below 128 (no signal, no abort) and a
message naming the value: a weights file missing a tensor (both layouts), a tensor of the wrong
shape, an input longer than the context, an input id outside
the vocabulary, --top-k 0 and --top-k above the vocabulary, --eos-id outside it, an unknown preset,
--num-heads not dividing the width (generate --weights and forward --seed), a truncated safetensors
file, a file that does not exist. A refused forward writes no --output.

Prints one line per case and "gpt vs pytorch: N passed, M failed (T s)"; exits non-zero on a
failure. About 30 s on two cores.
"""

import concurrent.futures
import copy
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import gpt_model  # noqa: E402
import harness  # noqa: E402
import safetensors_io  # noqa: E402
from gpt_model import GPTModel, to_hugging_face  # noqa: E402

LOGITS_TOL = 1e-5
GRAD_TOL = 1e-4
GRAD_FLOOR = 1e-3  # see compare()
GPT2_VOCAB = 50257
EOT = 50256

LAYOUTS = ["hf-file", "hf-dir", "book", "book-nomask"]
FORWARD_CASES = 12
PATHS = ["fused", "textbook"]

# (label, temperature or None for the default 1, top_k or None, seeds)
SETTINGS = [
    ("greedy", 0.0, None, [0]),
    ("temperature 0.8", 0.8, None, [1, 2**64 - 1]),
    ("top-k 20", None, 20, [5]),
    ("temperature 1.5 + top-k 4", 1.5, 4, [7, 2**32 + 5]),
    ("top-k 1", None, 1, [9]),
    ("temperature 0.7 + top-k = vocabulary", 0.7, GPT2_VOCAB, [3]),
]
CACHES = [True, False]  # the KV cache (default), --no-kv-cache
CRASH_WORDS = ("Traceback", "terminate called", "Segmentation fault", "Aborted", "AddressSanitizer", "core dumped")


# --- the twin and its files ----------------------------------------------------------------------------

def make_cfg(V, C, E, H, L, bias, drop=0.0):
    return dict(vocab_size=V, context_length=C, emb_dim=E, n_heads=H, n_layers=L, drop_rate=drop, qkv_bias=bias)


def twin_model(cfg, tied, seed, head_scale=1.0):
    """torch.manual_seed(seed); GPTModel(cfg), then every LayerNorm's scale and shift and every bias
    moved off its initial value (and the final norm's scale times head_scale, to spread the logits)."""
    torch.manual_seed(seed)
    m = GPTModel(cfg)
    if tied:
        m.out_head.weight = m.tok_emb.weight
    return gpt_model.perturb(m, seed + 1, head_scale).eval()


def write_weights(m, tied, layout, base):
    """The twin's weights as a file (or directory) in `layout`; the qkv flags that go with it."""
    state = m.state_dict()
    heads = ["--num-heads", str(m.trf_blocks[0].att.num_heads)] if len(m.trf_blocks) else []
    if layout == "hf-dir":
        os.makedirs(base, exist_ok=True)
        safetensors_io.save(os.path.join(base, "model.safetensors"), to_hugging_face(state, tied=tied))
        cfg = {"model_type": "gpt2", "n_embd": m.tok_emb.weight.shape[1], "n_head": int(heads[1]),
               "n_layer": len(m.trf_blocks), "n_positions": m.pos_emb.weight.shape[0],
               "vocab_size": m.tok_emb.weight.shape[0], "layer_norm_epsilon": 1e-5}
        with open(os.path.join(base, "config.json"), "w") as f:
            json.dump(cfg, f)
        return base, []
    path = base + ".safetensors"
    if layout == "hf-file":
        safetensors_io.save(path, to_hugging_face(state, tied=tied))
    else:
        book = {k: v.contiguous() for k, v in state.items()}
        if layout == "book-nomask":
            book = {k: v for k, v in book.items() if not k.endswith(".mask")}
        safetensors_io.save(path, book)
    return path, heads


def twin_backward(m, ids, G, double=True):
    """(logits, {name: gradient}) of L = sum(logits * G), in float64 unless told otherwise."""
    ref = copy.deepcopy(m)
    tied = m.out_head.weight is m.tok_emb.weight
    if double:
        ref = ref.double()
        G = G.double()
    if tied:
        ref.out_head.weight = ref.tok_emb.weight
    for p in ref.parameters():
        p.grad = None
    logits = ref(ids)
    (logits * G).sum().backward()
    return logits.detach(), {name: p.grad for name, p in ref.named_parameters()}


def rel_err(got, want, floor=0.0):
    """max |got - want| / max(max |want|, floor), in float64."""
    got, want = got.double(), want.double()
    if want.numel() == 0:
        return 0.0
    return (got - want).abs().max().item() / max(want.abs().max().item(), floor, 1e-30)


def compare(got_logits, got_grads, want_logits, want_grads):
    """The errors of qkv's logits and gradients against the twin's. A gradient's error is relative
    to its largest value, or to GRAD_FLOOR times the model's largest gradient when its own is
    smaller: gradients that are zero by the math (W_key.bias: softmax ignores a constant added to a
    row of scores; W_query and W_key with one key) or nearly so (a saturated softmax) come out of
    float32 sums as rounding noise, in PyTorch's float32 as in qkv."""
    errors = []
    if tuple(got_logits.shape) != tuple(want_logits.shape):
        return [f"logits have shape {tuple(got_logits.shape)}, the twin's {tuple(want_logits.shape)}"]
    e = rel_err(got_logits, want_logits)
    if not e <= LOGITS_TOL:
        errors.append(f"logits: relative error {e:.3g} > {LOGITS_TOL:g} "
                      f"(max |twin| {want_logits.abs().max().item():.4g})")
    if got_grads is None:
        return errors
    if set(got_grads) != set(want_grads):
        errors.append(f"gradient names: qkv only {sorted(set(got_grads) - set(want_grads))}, "
                      f"twin only {sorted(set(want_grads) - set(got_grads))}")
    largest = max((w.abs().max().item() for w in want_grads.values() if w.numel()), default=0.0)
    for name in sorted(set(got_grads) & set(want_grads)):
        g, w = got_grads[name], want_grads[name]
        if tuple(g.shape) != tuple(w.shape):
            errors.append(f"d {name}: shape {tuple(g.shape)}, the twin's {tuple(w.shape)}")
            continue
        e = rel_err(g, w, GRAD_FLOOR * largest)
        if not e <= GRAD_TOL:
            errors.append(f"d {name}: relative error {e:.3g} > {GRAD_TOL:g} (max |twin| {w.abs().max().item():.4g}, "
                          f"the model's largest gradient {largest:.4g})")
    return errors


def forward_files(tmp, tag, ids, G):
    """Writes the input ids (as floats: the tensor 'input') and G ('grad_output'); their paths."""
    inp, g = os.path.join(tmp, f"{tag}.input.st"), os.path.join(tmp, f"{tag}.g.st")
    safetensors_io.save(inp, {"input": ids.float()})
    safetensors_io.save(g, {"grad_output": G})
    return inp, g


def forward_run(cmd, out, grads):
    """Runs a forward command; (logits, grads, problem)."""
    run = harness.run_qkv(cmd)
    if run.problem():
        return None, None, run.problem()
    try:
        return safetensors_io.load(out)["output"], safetensors_io.load(grads), None
    except (OSError, KeyError, ValueError) as e:
        return None, None, f"reading qkv's outputs: {e}"


# --- forward: files in both layouts -------------------------------------------------------------------

def draw_forward_cases(rng):
    cases = []
    for i in range(FORWARD_CASES):
        H = rng.randint(1, 4)
        E = H * rng.randint(-(-4 // H), 24 // H)  # a multiple of H in [4, 24]
        C = rng.randint(2, 12)
        layout = LAYOUTS[i % len(LAYOUTS)]
        tied = (i // len(LAYOUTS) + i) % 2 == 1  # each layout both ways
        bias = True if layout.startswith("hf") else rng.random() < 0.5
        B = rng.randint(1, 2)
        T = 1 if i % 5 == 0 else C if i % 5 == 1 else rng.randint(1, C)
        cases.append(dict(V=rng.randint(20, 80), C=C, E=E, H=H, L=rng.randint(1, 3), bias=bias, tied=tied,
                          layout=layout, B=B, T=T, seed=rng.randint(0, 2**31)))
    return cases


def describe(c):
    return (f"V={c['V']} C={c['C']} E={c['E']} H={c['H']} L={c['L']} bias={int(c['bias'])} "
            f"{'tied' if c['tied'] else 'untied'} B={c['B']} T={c['T']}")


def forward_layouts(h, tmp, pool, rng):
    for i, c in enumerate(draw_forward_cases(rng)):
        cfg = make_cfg(c["V"], c["C"], c["E"], c["H"], c["L"], c["bias"])
        m = twin_model(cfg, c["tied"], c["seed"])
        tag = f"fwd{i}"
        weights, heads = write_weights(m, c["tied"], c["layout"], os.path.join(tmp, tag + ".w"))
        g = torch.Generator().manual_seed(c["seed"] + 2)
        ids = torch.randint(0, c["V"], (c["B"], c["T"]), generator=g)
        G = torch.randn(c["B"], c["T"], c["V"], generator=g)
        inp, gpath = forward_files(tmp, tag, ids, G)
        runs = {}
        for path in PATHS:
            out, grads = os.path.join(tmp, f"{tag}.{path}.out.st"), os.path.join(tmp, f"{tag}.{path}.grads.st")
            cmd = [h.qkv, "forward", "--module", "gpt", "--weights", weights] + heads + [
                "--input", inp, "--output", out, "--grad-output", gpath, "--grads-out", grads, "--attention", path]
            runs[path] = (cmd, pool.submit(forward_run, cmd, out, grads))
        want_logits, want_grads = twin_backward(m, ids, G)
        got = {}
        for path in PATHS:
            cmd, fut = runs[path]
            logits, grads, problem = fut.result()
            label = f"forward {c['layout']} {describe(c)} --attention {path}"
            errors = [problem] if problem else compare(logits, grads, want_logits, want_grads)
            if not problem:
                got[path] = logits
            h.record(label, errors, cmd)
            print(f"  {'ok  ' if not errors else 'FAIL'} {label}")
        if len(got) == 2:
            e = rel_err(got["fused"], got["textbook"])
            errors = [] if e <= LOGITS_TOL else [f"fused and textbook logits differ: relative {e:.3g}"]
            label = f"forward {c['layout']} {describe(c)}: the paths agree"
            h.record(label, errors)
            if h.verbose or errors:
                print(f"  {'ok  ' if not errors else 'FAIL'} {label} (relative {e:.2g})")


# --- forward: weights drawn from a seed ---------------------------------------------------------------

SEEDED = [  # (V, C, E, H, L, bias, seed, dropout)
    (50, 7, 12, 3, 2, True, 123, 0.0),
    (33, 5, 8, 1, 1, False, 0, 0.0),
    (64, 10, 16, 4, 3, False, 2**63 + 11, 0.0),
    (40, 8, 12, 2, 2, True, 789, 0.2),
]


def forward_seeded(h, tmp, pool):
    for i, (V, C, E, H, L, bias, seed, drop) in enumerate(SEEDED):
        cfg = make_cfg(V, C, E, H, L, bias, drop)
        tag = f"seed{i}"
        g = torch.Generator().manual_seed(i + 100)
        B, T = (2, C) if i % 2 == 0 else (1, C - 1)
        ids = torch.randint(0, V, (B, T), generator=g)
        G = torch.randn(B, T, V, generator=g)
        inp, gpath = forward_files(tmp, tag, ids, G)
        base = [h.qkv, "forward", "--module", "gpt", "--seed", str(seed), "--vocab-size", str(V),
                "--context-length", str(C), "--d-model", str(E), "--num-heads", str(H), "--num-layers", str(L),
                "--input", inp, "--grad-output", gpath] + (["--qkv-bias"] if bias else [])
        paths = ["auto"] if drop > 0 else PATHS
        if drop > 0:
            base += ["--dropout", str(drop), "--train"]
        runs = {}
        for path in paths:
            out, grads, saved = (os.path.join(tmp, f"{tag}.{path}.{n}") for n in ("out.st", "grads.st", "w.st"))
            cmd = base + ["--output", out, "--grads-out", grads, "--save-weights", saved]
            if path != "auto":
                cmd += ["--attention", path]
            runs[path] = (cmd, saved, pool.submit(forward_run, cmd, out, grads))
        torch.manual_seed(seed)
        m = GPTModel(cfg)
        state = {k: v.detach().clone() for k, v in m.state_dict().items()}
        if drop > 0:  # training mode: the dropout masks come from the generator, after the weights
            m.train()
            want_logits, want_grads = twin_backward(m, ids, G, double=False)
        else:
            m.eval()
            want_logits, want_grads = twin_backward(m, ids, G)
        for path in paths:
            cmd, saved, fut = runs[path]
            logits, grads, problem = fut.result()
            label = (f"forward --seed {seed} V={V} C={C} E={E} H={H} L={L} bias={int(bias)} B={B} T={T}"
                     + (f" --train --dropout {drop}" if drop > 0 else "") + f" --attention {path}")
            if problem:
                errors = [problem]
            else:
                errors = compare(logits, grads, want_logits, want_grads)
                got = safetensors_io.load(saved)
                if set(got) != set(state):
                    errors.append(f"saved state names: qkv only {sorted(set(got) - set(state))}, "
                                  f"twin only {sorted(set(state) - set(got))}")
                errors += [f"init: {k} is not the twin's" + ("" if got[k].shape != v.shape else
                                                             f" (max diff {(got[k] - v).abs().max().item():.3g})")
                           for k, v in state.items()
                           if k in got and (got[k].shape != v.shape or not torch.equal(got[k], v))]
            h.record(label, errors, cmd)
            print(f"  {'ok  ' if not errors else 'FAIL'} {label}")


# --- generation -----------------------------------------------------------------------------------------

class GenModel:
    """A GPT-2-vocabulary model for generation: the twin in float32 and its weights on disk."""

    def __init__(self, name, cfg, tied, layout, seed, prompt, head_scale):
        self.name, self.cfg, self.tied, self.layout, self.prompt = name, cfg, tied, layout, prompt
        # head_scale spreads the logits (an untied head's are small at init, a tied head's large)
        self.twin = twin_model(cfg, tied, seed, head_scale=head_scale)
        self.weights = self.heads = None

    def save(self, tmp, tag):
        self.weights, self.heads = write_weights(self.twin, self.tied, self.layout, os.path.join(tmp, tag))


def twin_generate(model, prompt_ids, new_tokens, temperature, top_k, seed, eos_id=None):
    """torch.manual_seed(seed); the book's generate: the new ids."""
    torch.manual_seed(seed)
    idx = torch.tensor([prompt_ids])
    out = gpt_model.generate(model, idx, new_tokens, model.pos_emb.weight.shape[0],
                             temperature=1.0 if temperature is None else temperature, top_k=top_k, eos_id=eos_id)
    return out[0, len(prompt_ids):].tolist()


def generate_cmd(h, weights, heads, prompt, new_tokens, temperature, top_k, seed, cache, extra=()):
    cmd = [h.qkv, "generate", "--weights", weights] + heads + [
        "--prompt", prompt, "--max-new-tokens", str(new_tokens), "--seed", str(seed), "--json"]
    if temperature is not None:
        cmd += ["--temperature", repr(temperature)]
    if top_k is not None:
        cmd += ["--top-k", str(top_k)]
    if not cache:
        cmd += ["--no-kv-cache"]
    return cmd + list(extra)


def check_generation(cmd, fut, want, prompt_ids, cache):
    try:
        out = fut.result()
    except harness.QkvError as e:
        return [str(e)]
    errors = []
    if out.get("new_ids") != want:
        errors.append(f"new_ids {out.get('new_ids')}\n  twin {want}")
    if out.get("ids") != prompt_ids + want:
        errors.append(f"ids {out.get('ids')} are not the prompt's {prompt_ids} and the new ones")
    for key, value in (("prompt_tokens", len(prompt_ids)), ("new_tokens", len(want)), ("kv_cache", cache),
                       ("stopped", False)):
        if out.get(key) != value:
            errors.append(f"{key} is {out.get(key)!r}, not {value!r}")
    return errors


def encode(h, text):
    return json.loads(harness.check_qkv([h.qkv, "encode", "--text", text]))


def generation(h, tmp, pool):
    models = [
        GenModel("hf directory, untied, biases", make_cfg(GPT2_VOCAB, 8, 16, 4, 2, True), False, "hf-dir", 31,
                 "Every effort moves", head_scale=4.0),
        GenModel("book file, tied, no qkv bias", make_cfg(GPT2_VOCAB, 6, 12, 3, 1, False), True, "book", 32,
                 "Hello, I am", head_scale=0.5),
    ]
    new_tokens = 12
    for i, model in enumerate(models):
        model.save(tmp, f"gen{i}")
        prompt_ids = encode(h, model.prompt)
        if len(prompt_ids) + new_tokens <= model.cfg["context_length"]:
            h.record(f"generate {model.name}: the window slides", ["the prompt and the new ids fit the context"])
        jobs = []
        for label, t, k, seeds in SETTINGS:
            for seed in seeds:
                for cache in CACHES:
                    cmd = generate_cmd(h, model.weights, model.heads, model.prompt, new_tokens, t, k, seed, cache)
                    jobs.append((label, t, k, seed, cache, cmd, pool.submit(harness.qkv_json, cmd)))
        wanted = {}
        for label, t, k, seed, cache, cmd, fut in jobs:
            if (t, k, seed) not in wanted:
                wanted[(t, k, seed)] = twin_generate(model.twin, prompt_ids, new_tokens, t, k, seed)
            want = wanted[(t, k, seed)]
            errors = check_generation(cmd, fut, want, prompt_ids, cache)
            name = f"generate {model.name}: {label}, seed {seed}, {'kv cache' if cache else '--no-kv-cache'}"
            h.record(name, errors, cmd)
            print(f"  {'ok  ' if not errors else 'FAIL'} {name}" + (f": {want}" if h.verbose else ""))
        if i == 0:
            generation_eos(h, tmp, pool, model, prompt_ids, new_tokens)
        else:
            generation_long_prompt(h, pool, model)


def generation_long_prompt(h, pool, model):
    # A prompt longer than the context: the book's generate crops it to the last context_length
    # ids from the first step on (idx[:, -context_size:]), and so does qkv.
    prompt = "one two three four five six seven eight nine ten"
    prompt_ids = encode(h, prompt)
    if len(prompt_ids) <= model.cfg["context_length"]:
        h.record(f"generate {model.name}: a prompt longer than the context", ["the prompt fits the context"])
    for label, t, k, seed in [("greedy", 0.0, None, 0), ("temperature 0.9 + top-k 5", 0.9, 5, 11)]:
        want = twin_generate(model.twin, prompt_ids, 4, t, k, seed)
        for cache in CACHES:
            cmd = generate_cmd(h, model.weights, model.heads, prompt, 4, t, k, seed, cache)
            errors = check_generation(cmd, pool.submit(harness.qkv_json, cmd), want, prompt_ids, cache)
            name = (f"generate {model.name}: a prompt of {len(prompt_ids)} ids, context {model.cfg['context_length']}"
                    f", {label}, {'kv cache' if cache else '--no-kv-cache'}")
            h.record(name, errors, cmd)
            print(f"  {'ok  ' if not errors else 'FAIL'} {name}")


def generation_eos(h, tmp, pool, model, prompt_ids, new_tokens):
    # --eos-id X: X the 4th id the twin samples (it stops at X's first appearance).
    t, seed = 1.0, 11
    free = twin_generate(model.twin, prompt_ids, new_tokens, t, None, seed)
    eos = free[3]
    want = twin_generate(model.twin, prompt_ids, new_tokens, t, None, seed, eos_id=eos)
    for cache in CACHES:
        cmd = generate_cmd(h, model.weights, model.heads, model.prompt, new_tokens, t, None, seed, cache,
                           ["--eos-id", str(eos)])
        errors = check_generation(cmd, pool.submit(harness.qkv_json, cmd), want, prompt_ids, cache)
        name = (f"generate {model.name}: --eos-id {eos} after {len(want)} ids, "
                f"{'kv cache' if cache else '--no-kv-cache'}")
        h.record(name, errors, cmd)
        print(f"  {'ok  ' if not errors else 'FAIL'} {name}")

    # --stop-at-eos: lm_head's row 50256 a multiple of the row of an id greedy picks, so that the
    # twin stops within the run.
    greedy = twin_generate(model.twin, prompt_ids, new_tokens, 0.0, None, 0)
    chosen = None
    for step in range(2, new_tokens):
        twin = copy.deepcopy(model.twin)
        with torch.no_grad():
            twin.out_head.weight[EOT] = 1.5 * twin.out_head.weight[greedy[step]]
        stops = twin_generate(twin, prompt_ids, new_tokens, 0.0, None, 0, eos_id=EOT)
        if 1 <= len(stops) < new_tokens:
            chosen = twin
            break
    if chosen is None:
        h.record("generate --stop-at-eos: a model that stops", ["no edit of lm_head's row 50256 made the twin stop"])
        return
    path, heads = write_weights(chosen, False, "hf-file", os.path.join(tmp, "eos"))
    for t, k, seed in [(0.0, None, 0), (1.0, 3, 4)]:
        want = twin_generate(chosen, prompt_ids, new_tokens, t, k, seed, eos_id=EOT)
        for cache in CACHES:
            cmd = generate_cmd(h, path, heads, model.prompt, new_tokens, t, k, seed, cache, ["--stop-at-eos"])
            errors = check_generation(cmd, pool.submit(harness.qkv_json, cmd), want, prompt_ids, cache)
            name = (f"generate --stop-at-eos, temperature {t}" + (f" top-k {k}" if k else "") +
                    f", seed {seed}: {len(want)} ids, {'kv cache' if cache else '--no-kv-cache'}")
            h.record(name, errors, cmd)
            print(f"  {'ok  ' if not errors else 'FAIL'} {name}")


def generation_preset(h, pool):
    """--model gpt2-small --seed S: torch.manual_seed(S); GPTModel(GPT_CONFIG_124M); generate(...)."""
    prompt, seed, t, k, n = "Every effort moves you", 123, 1.4, 25, 3
    cmd = [h.qkv, "generate", "--model", "gpt2-small", "--seed", str(seed), "--prompt", prompt,
           "--max-new-tokens", str(n), "--temperature", str(t), "--top-k", str(k), "--json"]
    fut = pool.submit(harness.qkv_json, cmd, 300)
    try:
        prompt_ids = encode(h, prompt)
    except harness.QkvError as e:
        h.record("generate --model gpt2-small", [e], cmd)
        return
    torch.manual_seed(seed)
    m = GPTModel(make_cfg(GPT2_VOCAB, 1024, 768, 12, 12, False, 0.1))
    m.eval()
    idx = gpt_model.generate(m, torch.tensor([prompt_ids]), n, 1024, temperature=t, top_k=k)
    want = idx[0, len(prompt_ids):].tolist()
    del m
    errors = check_generation(cmd, fut, want, prompt_ids, True)
    name = f"generate --model gpt2-small --seed {seed}, temperature {t}, top-k {k}"
    h.record(name, errors, cmd)
    print(f"  {'ok  ' if not errors else 'FAIL'} {name}: {want}")


# --- bad input ---------------------------------------------------------------------------------------------

def bad_inputs(h, tmp, pool):
    cfg = make_cfg(30, 6, 8, 2, 2, True)
    m = twin_model(cfg, False, 5)
    p = lambda name: os.path.join(tmp, "bad." + name)  # noqa: E731
    hf = to_hugging_face(m.state_dict())
    book = {k: v.contiguous() for k, v in m.state_dict().items()}
    ids = torch.tensor([[1, 2, 3]])
    safetensors_io.save(p("input.st"), {"input": ids.float()})
    safetensors_io.save(p("long.st"), {"input": torch.zeros(1, 7)})
    safetensors_io.save(p("oov.st"), {"input": torch.tensor([[1.0, 30.0]])})
    safetensors_io.save(p("book.st"), book)
    safetensors_io.save(p("no-tensor.hf.st"), {k: v for k, v in hf.items() if k != "h.1.mlp.c_fc.bias"})
    safetensors_io.save(p("no-tensor.book.st"), {k: v for k, v in book.items() if k != "trf_blocks.0.norm2.shift"})
    shaped = dict(hf)
    shaped["h.0.attn.c_proj.weight"] = torch.randn(8, 9)
    safetensors_io.save(p("shape.hf.st"), shaped)
    shaped = dict(book)
    shaped["trf_blocks.1.ff.layers.0.weight"] = book["trf_blocks.1.ff.layers.0.weight"].T.contiguous()
    safetensors_io.save(p("shape.book.st"), shaped)
    with open(p("book.st"), "rb") as f:
        data = f.read()
    with open(p("truncated.st"), "wb") as f:
        f.write(data[:len(data) // 2])
    # A GPT-2-vocabulary model for generate's checks (context 6, width 12).
    gm = twin_model(make_cfg(GPT2_VOCAB, 6, 12, 3, 1, True), False, 6)
    gpath, gheads = write_weights(gm, False, "hf-file", p("gen"))
    missing = p("does-not-exist.safetensors")

    fwd = [h.qkv, "forward", "--module", "gpt"]
    fwd_in = ["--num-heads", "2", "--input", p("input.st")]
    gen = [h.qkv, "generate", "--prompt", "Hello", "--max-new-tokens", "2", "--json"]
    cases = [  # (label, command, strings the message must hold, an --output that must not appear)
        ("forward: a Hugging Face file missing a tensor",
         fwd + ["--weights", p("no-tensor.hf.st")] + fwd_in + ["--output", p("o1.st")],
         ["h.1.mlp.c_fc.bias"], p("o1.st")),
        ("forward: a book file missing a tensor",
         fwd + ["--weights", p("no-tensor.book.st")] + fwd_in + ["--output", p("o2.st")],
         ["trf_blocks.0.norm2.shift"], p("o2.st")),
        ("forward: a tensor of the wrong shape (Hugging Face)",
         fwd + ["--weights", p("shape.hf.st")] + fwd_in + ["--output", p("o3.st")],
         ["h.0.attn.c_proj.weight", "9"], p("o3.st")),
        ("generate: a tensor of the wrong shape (book)",
         gen + ["--weights", p("shape.book.st"), "--num-heads", "2"], ["trf_blocks.1.ff.layers.0.weight", "32"], None),
        ("generate: a file missing a tensor", gen + ["--weights", p("no-tensor.hf.st"), "--num-heads", "2"],
         ["h.1.mlp.c_fc.bias"], None),
        ("forward: an input longer than the context",
         fwd + ["--weights", p("book.st"), "--num-heads", "2", "--input", p("long.st"), "--output", p("o4.st")],
         ["7", "6"], p("o4.st")),
        ("forward: an input id outside the vocabulary",
         fwd + ["--weights", p("book.st"), "--num-heads", "2", "--input", p("oov.st"), "--output", p("o5.st")],
         ["30"], p("o5.st")),
        ("generate: --top-k 0", gen + ["--weights", gpath] + gheads + ["--top-k", "0"], ["--top-k", "0"], None),
        ("generate: --top-k above the vocabulary", gen + ["--weights", gpath] + gheads + ["--top-k", "50258"],
         ["--top-k", "50258"], None),
        ("generate: --eos-id outside the vocabulary", gen + ["--weights", gpath] + gheads + ["--eos-id", "50257"],
         ["--eos-id", "50257"], None),
        ("generate: an unknown preset", gen + ["--model", "gpt2-tiny"], ["gpt2-tiny"], None),
        ("generate: --num-heads not dividing the width", gen + ["--weights", gpath, "--num-heads", "5"], ["5", "12"],
         None),
        ("forward --seed: --num-heads not dividing --d-model",
         fwd + ["--seed", "1", "--vocab-size", "30", "--context-length", "6", "--d-model", "10", "--num-heads", "4",
                "--num-layers", "1", "--input", p("input.st"), "--output", p("o6.st")], ["10", "4"], p("o6.st")),
        ("forward: a truncated safetensors file",
         fwd + ["--weights", p("truncated.st")] + fwd_in + ["--output", p("o7.st")],
         ["truncated.st"], p("o7.st")),
        ("generate: a truncated safetensors file", gen + ["--weights", p("truncated.st"), "--num-heads", "2"],
         ["truncated.st"], None),
        ("generate: a file that does not exist", gen + ["--weights", missing], ["does-not-exist.safetensors"], None),
        ("forward: a file that does not exist",
         fwd + ["--weights", missing] + fwd_in + ["--output", p("o8.st")],
         ["does-not-exist.safetensors"], p("o8.st")),
    ]
    runs = [pool.submit(harness.run_qkv, cmd) for _, cmd, _, _ in cases]
    for (label, cmd, needles, output), fut in zip(cases, runs):
        run = fut.result()
        errors = []
        text = run.stderr + run.stdout
        if run.returncode == 0:
            errors.append("qkv accepted it (status 0)")
        elif not 0 < run.returncode < 128:
            errors.append(f"qkv ended with status {run.returncode} (a signal?): {run.stderr.strip()[-300:]}")
        for bad in CRASH_WORDS:
            if bad in text:
                errors.append(f"the output holds {bad!r}: {text.strip()[-300:]}")
        if run.returncode != 0 and not run.stderr.strip():
            errors.append("nothing on stderr")
        said = run.stderr.replace(tmp, "<scratch>")  # the values, not digits of the scratch directory's name
        missing_words = [n for n in needles if n not in said]
        if run.returncode != 0 and missing_words:
            errors.append(f"the message does not name {missing_words}: {run.stderr.strip()}")
        if output and os.path.exists(output):
            errors.append(f"{output} was written")
        h.record(f"refused: {label}", errors, cmd)
        print(f"  {'ok  ' if not errors else 'FAIL'} refused: {label}"
              + (f": {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ''}" if h.verbose else ""))


def main():
    h = harness.start("gpt vs pytorch", __doc__, jobs=2, rng_seed=20250301)
    rng = random.Random(h.args.rng_seed)
    with h.scratch("qkv-gpt-twin-") as tmp, concurrent.futures.ThreadPoolExecutor(h.args.jobs) as pool:
        forward_layouts(h, tmp, pool, rng)
        forward_seeded(h, tmp, pool)
        try:
            generation(h, tmp, pool)
            generation_preset(h, pool)
        except harness.QkvError as e:  # qkv encode (GPT-2's vocabulary files)
            h.record("generation: the prompt's ids", [e])
            print("  FAIL generation: the prompt's ids")
        bad_inputs(h, tmp, pool)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
