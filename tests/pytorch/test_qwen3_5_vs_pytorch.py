#!/usr/bin/python3
"""qkv's Qwen3.5 model against the PyTorch twin (tests/pytorch/qwen3_5_model.py, from the book's notebook).

    /usr/bin/python3 tests/pytorch/test_qwen3_5_vs_pytorch.py --qkv build/qkv [--verbose] [--keep]

Forward and backward (`qkv forward --module qwen3_5 --weights DIR`) on small random Qwen3.5 models drawn
from --rng-seed: vocabulary 20-60, width 8-24, 1-4 query heads with key/value heads dividing them,
head_dim 4 or 8 with partial_rotary_factor 0.25, 0.5 or 1 (2 to 8 rotated dims), 2-4 layers whose
layer_types mix Gated DeltaNet and gated attention (each kind at least once), the linear layers' 1-2 key
heads shared by 1-2x as many value heads, key and value widths 2-6 apart, convolution kernels 2-4,
context 4-12, heads tied and untied; every norm weight and dt_bias off its initial value; written as
Hugging Face ships the model (config.json with text_config and a vision_config, model.safetensors under
model.language_model., F32 or BF16, a vision tower's tensor and an mtp tensor beside the text model's);
B 1-2, T 1 to the context.
  compared  the logits against the twin's in float64 within 1e-5 relative (max |qkv - twin| /
            max |twin|), on the fused and the textbook paths; every parameter's gradient of
            L = sum(logits * G) within 1e-4 relative (to the tensor's largest value, or to 1e-3 of the
            model's largest gradient when smaller), named as Hugging Face names them; and in bf16
            (--dtype bf16 on a BF16 file: bf16 products over the whole sequence, qkv forward keeping the
            float weights; the linear layers compute in f32) within 2e-2 relative.

Generation (`qkv generate --weights DIR --json`, a tokenizer.json in Qwen3's layout around a small
vocabulary): greedy, temperature, top-k, both, seeds up to 2^64 - 1, with the cache (the linear layers'
fixed-size states, the attention's keys and values) and --no-kv-cache, more new tokens than the context
holds (the window slides: the states start again); the twin runs torch.manual_seed(seed) and chapter 5's
loop, and qkv's ids must be its ids.

Training: `qkv train --model qwen3_5 --init DIR` (chapter 5's loop, fine-tuning) against the twin through
the book's loop (test_llama_vs_pytorch.py's fine_tune_case): every evaluation's losses within 1e-4
relative; the checkpoint folder generates.

Bad input, each ending qkv with a nonzero status below 128 and a message naming what is wrong: a
layer_types entry that is neither kind, layer_types not one per layer, a partial_rotary_factor leaving
an odd number of rotated dims, a rope_type other than "default", a text_config missing, a linear layer's
tensor missing.

Prints one line per case and "qwen3.5 vs pytorch: N passed, M failed (T s)"; exits non-zero on a failure.
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

import harness  # noqa: E402
import qwen3_5_model  # noqa: E402
import safetensors_io  # noqa: E402
from llama_files import small_tokenizer  # noqa: E402
from test_llama_vs_pytorch import BF16_TOL, SETTINGS, VERDICT, compare, fine_tune_case, forward_run, rel_err  # noqa: E402

FORWARD_CASES = 8
PATHS = ["fused", "textbook"]


def make_cfg(rng, V=None, C=None):
    H = rng.randint(1, 4)
    G = rng.choice([g for g in range(1, H + 1) if H % g == 0])
    D = rng.choice([4, 8])
    factor = rng.choice([f for f in (0.25, 0.5, 1.0) if int(D * f) % 2 == 0 and int(D * f) >= 2])
    L = rng.randint(2, 4)
    types = [rng.choice(["linear_attention", "full_attention"]) for _ in range(L)]
    types[rng.randrange(L)] = "full_attention"
    types[rng.choice([i for i in range(L) if types[i] == "full_attention" or L > 1])] = "linear_attention"
    if "full_attention" not in types:
        types[0] = "full_attention"
    Hk = rng.randint(1, 2)
    linear = dict(key_heads=Hk, value_heads=Hk * rng.randint(1, 2), key_dim=rng.randint(2, 6),
                  value_dim=rng.randint(2, 6), conv_kernel=rng.randint(2, 4))
    return dict(vocab_size=V or rng.randint(20, 60), emb_dim=rng.randint(8, 24), hidden_dim=rng.randint(8, 24),
                n_layers=L, n_heads=H, n_kv_groups=G, head_dim=D, partial_rotary_factor=factor,
                rope_base=rng.choice([10000.0, 1e7]), rms_eps=1e-6, context_length=C or rng.randint(4, 12),
                layer_types=types, linear=linear, tied=rng.random() < 0.5)


def twin(cfg, seed, bf16=False):
    torch.manual_seed(seed)
    m = qwen3_5_model.perturb(qwen3_5_model.Qwen3_5Model(cfg), seed + 1).eval()
    if bf16:  # the numbers a BF16 file holds
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return m


def write_dir(m, path, bf16=False, tokenizer=None, drop=None, config=None):
    """config.json and model.safetensors (with a vision tower's and an mtp tensor that are not the text model's)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config or qwen3_5_model.config_json(m.cfg), f)
    tensors = qwen3_5_model.to_hugging_face(m)
    tensors["model.visual.patch_embed.proj.weight"] = torch.ones(4, 3)
    tensors["mtp.fc.weight"] = torch.ones(2, 2)
    if drop:
        del tensors[drop]
    safetensors_io.save(os.path.join(path, "model.safetensors"),
                        {k: v.to(torch.bfloat16) for k, v in tensors.items()} if bf16 else tensors)
    if tokenizer is not None:
        with open(os.path.join(path, "tokenizer.json"), "w") as f:
            json.dump(tokenizer, f)
    return path


def twin_backward(m, ids, G):
    ref = copy.deepcopy(m).double()
    ref.cos, ref.sin = qwen3_5_model.rope_params(qwen3_5_model.rotary_dims(m.cfg), m.cfg["rope_base"],
                                                 m.cfg["context_length"])
    logits = ref(ids)
    (logits * G.double()).sum().backward()
    params = dict(ref.named_parameters())
    return logits.detach(), {hf: params[t].grad if params[t].grad is not None else torch.zeros_like(params[t])
                             for t, hf in qwen3_5_model.hf_names(m.cfg)}


def describe(cfg, B, T):
    l = cfg["linear"]
    kinds = "".join("L" if t == "linear_attention" else "A" for t in cfg["layer_types"])
    return (f"V={cfg['vocab_size']} E={cfg['emb_dim']} F={cfg['hidden_dim']} layers {kinds} H={cfg['n_heads']} "
            f"G={cfg['n_kv_groups']} D={cfg['head_dim']} R={qwen3_5_model.rotary_dims(cfg)} Hv={l['value_heads']} "
            f"Hk={l['key_heads']} Dk={l['key_dim']} Dv={l['value_dim']} K={l['conv_kernel']} "
            f"C={cfg['context_length']} {'tied' if cfg['tied'] else 'untied'} B={B} T={T}")


def forward_cases(h, tmp, pool, rng):
    for i in range(FORWARD_CASES):
        cfg = make_cfg(rng)
        C = cfg["context_length"]
        B, T, seed = rng.randint(1, 2), 1 if i == 0 else C if i == 1 else rng.randint(1, C), rng.randint(0, 2**31)
        m, m16 = twin(cfg, seed), twin(cfg, seed, bf16=True)
        weights = write_dir(m, os.path.join(tmp, f"fwd{i}"))
        weights16 = write_dir(m16, os.path.join(tmp, f"fwd{i}-bf16"), bf16=True)
        g = torch.Generator().manual_seed(seed + 2)
        ids = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)
        G = torch.randn(B, T, cfg["vocab_size"], generator=g)
        inp, gpath = os.path.join(tmp, f"fwd{i}.in.st"), os.path.join(tmp, f"fwd{i}.g.st")
        safetensors_io.save(inp, {"input": ids.float()})
        safetensors_io.save(gpath, {"grad_output": G})
        runs = {}
        for path in PATHS + ["bf16"]:
            out = os.path.join(tmp, f"fwd{i}.{path}.out.st")
            grads = os.path.join(tmp, f"fwd{i}.{path}.grads.st") if path != "bf16" else None
            cmd = [h.qkv, "forward", "--module", "qwen3_5", "--weights", weights if grads else weights16,
                   "--input", inp, "--output", out]
            cmd += ["--attention", path] if grads else ["--attention", "fused", "--dtype", "bf16"]
            if grads:
                cmd += ["--grad-output", gpath, "--grads-out", grads]
            runs[path] = (cmd, pool.submit(forward_run, cmd, out, grads))
        want_logits, want_grads = twin_backward(m, ids, G)
        for path in PATHS:
            cmd, fut = runs[path]
            logits, grads, problem = fut.result()
            label = f"forward {describe(cfg, B, T)} --attention {path}"
            errors = [problem] if problem else compare(logits, grads, want_logits, want_grads)
            h.record(label, errors, cmd)
            print(f"  {'ok  ' if not errors else 'FAIL'} {label}")
        cmd, fut = runs["bf16"]
        logits, _, problem = fut.result()
        with torch.no_grad():
            want16 = m16(ids)
        errors = [problem] if problem else []
        if not problem and not rel_err(logits, want16) <= BF16_TOL:
            errors.append(f"bf16 logits: relative error {rel_err(logits, want16):.3g} > {BF16_TOL:g}")
        label = f"forward {describe(cfg, B, T)} --dtype bf16 (bf16 products)"
        h.record(label, errors, cmd)
        print(f"  {'ok  ' if not errors else 'FAIL'} {label}")


def generation(h, tmp, pool, rng):
    new_tokens = 14
    tokenizer, V = small_tokenizer("qwen3")
    cfg = make_cfg(rng, V=V, C=16)
    m = twin(cfg, 41)
    with torch.no_grad():  # spread the logits: sampling then depends on the draws
        m.final_norm.weight.add_(2.0)
    weights = write_dir(m, os.path.join(tmp, "gen"), tokenizer=tokenizer)
    prompt = "the cat sat on the mat"
    jobs = []
    for label, t, topk, seeds in SETTINGS:
        for seed in seeds:
            for cache in (True, False):
                cmd = [h.qkv, "generate", "--weights", weights, "--prompt", prompt, "--max-new-tokens",
                       str(new_tokens), "--seed", str(seed), "--json"]
                cmd += [] if t is None else ["--temperature", repr(t)]
                cmd += [] if topk is None else ["--top-k", str(topk)]
                cmd += [] if cache else ["--no-kv-cache"]
                jobs.append((label, t, topk, seed, cache, cmd, pool.submit(harness.qkv_json, cmd)))
    for label, t, topk, seed, cache, cmd, fut in jobs:
        name = f"generate {describe(cfg, 1, new_tokens)}: {label}, seed {seed}, {'cache' if cache else '--no-kv-cache'}"
        try:
            out = fut.result()
        except harness.QkvError as e:
            h.record(name, [str(e)], cmd)
            print(f"  FAIL {name}")
            continue
        prompt_ids = out["ids"][:out["prompt_tokens"]]
        errors = []
        if len(prompt_ids) + new_tokens <= cfg["context_length"]:
            errors.append("the prompt and the new ids fit the context: the window does not slide")
        torch.manual_seed(seed)
        want = qwen3_5_model.generate(m, torch.tensor([prompt_ids]), new_tokens, cfg["context_length"],
                                      temperature=1.0 if t is None else t, top_k=topk)[0, len(prompt_ids):].tolist()
        if out["new_ids"] != want:
            errors.append(f"new_ids {out['new_ids']}\n  twin {want}")
        h.record(name, errors, cmd)
        print(f"  {'ok  ' if not errors else 'FAIL'} {name}")


def bad_input(h, tmp, rng):
    cfg = make_cfg(rng)
    m = twin(cfg, 5)
    good = qwen3_5_model.config_json(cfg)
    linear = next(i for i, t in enumerate(cfg["layer_types"]) if t == "linear_attention")

    def with_text(**changes):
        j = copy.deepcopy(good)
        j["text_config"].update(changes)
        return j

    odd = dict(good["text_config"]["rope_parameters"], partial_rotary_factor=0.75 if cfg["head_dim"] == 4 else 0.375)
    cases = [
        ("a layer type that is neither", dict(config=with_text(layer_types=["full_attention"] * (cfg["n_layers"] - 1) + ["sliding"])),
         "\"layer_types\"[" + str(cfg["n_layers"] - 1) + "] is \"sliding\"; expected \"full_attention\" or \"linear_attention\""),
        ("layer_types not one per layer", dict(config=with_text(layer_types=cfg["layer_types"] + ["full_attention"])),
         f"\"layer_types\" has {cfg['n_layers'] + 1} entries for \"num_hidden_layers\" ({cfg['n_layers']}): one per layer"),
        ("an odd number of rotated dims", dict(config=with_text(rope_parameters=odd)),
         "\"partial_rotary_factor\" (" + repr(odd["partial_rotary_factor"])),
        ("a rope_type other than default", dict(config=with_text(rope_parameters=dict(odd, rope_type="yarn"))),
         "\"rope_type\" is 'yarn'; Qwen3.5's text model uses \"default\""),
        ("no text_config", dict(config={k: v for k, v in good.items() if k != "text_config"}),
         "\"text_config\" is missing"),
        ("a linear layer's tensor missing",
         dict(drop=f"model.language_model.layers.{linear}.linear_attn.A_log"),
         f"has no tensor 'model.language_model.layers.{linear}.linear_attn.A_log'"),
    ]
    for i, (label, changes, needle) in enumerate(cases):
        d = write_dir(m, os.path.join(tmp, f"bad{i}"), **changes)
        out = os.path.join(tmp, f"bad{i}.out.st")
        inp = os.path.join(tmp, "bad.in.st")
        safetensors_io.save(inp, {"input": torch.zeros(1, 2)})
        cmd = [h.qkv, "forward", "--module", "qwen3_5", "--weights", d, "--input", inp, "--output", out]
        run = harness.run_qkv(cmd)
        errors = []
        if run.returncode == 0 or run.returncode >= 128 or run.returncode < 0:
            errors.append(f"exit status {run.returncode}")
        if needle not in run.stderr:
            errors.append(f"the message does not say {needle!r}: {run.stderr.strip()[:400]}")
        if os.path.exists(out):
            errors.append("an --output was written")
        h.record(f"bad input: {label}", errors, cmd)
        print(f"  {'ok  ' if not errors else 'FAIL'} bad input: {label}")


def training(h, tmp, rng):
    """fine_tune_case (test_llama_vs_pytorch.py) for a Qwen3.5 model of both layer kinds."""
    with open(VERDICT, encoding="utf-8") as f:
        text = f.read()[:2500]
    text_file = os.path.join(tmp, "train.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write(text)
    tokenizer, V = small_tokenizer("qwen3")
    cfg = make_cfg(rng, V=V, C=64)
    m = twin(cfg, 83)
    fine_tune_case(h, tmp, "qwen3_5", m, write_dir(m, os.path.join(tmp, "train"), tokenizer=tokenizer), text,
                   text_file, 8)


def main():
    h = harness.start("qwen3.5 vs pytorch", __doc__, jobs=2, rng_seed=20261129)
    rng = random.Random(h.args.rng_seed)
    with h.scratch("qkv-qwen3_5-") as tmp, concurrent.futures.ThreadPoolExecutor(h.args.jobs) as pool:
        forward_cases(h, tmp, pool, rng)
        generation(h, tmp, pool, rng)
        training(h, tmp, rng)
        bad_input(h, tmp, rng)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
