#!/usr/bin/env python3
"""qkv explore in a real browser: makes pages with the qkv binary (the chapter's walkthrough, a
module on GPT-2 tokens, a trained 2-layer x 4-head model, a small Qwen3.5 whose Gated DeltaNet layers
have other heads than its attention layers, a hostile label), works out what their
cells must read from `qkv walkthrough --json` and `qkv forward --attn-weights`, and has
explore_browser.cjs drive headless chromium (npm playwright-core, installed into the build tree
as the tiktoken test installs its packages) over them.

  test_explore.py --qkv build/qkv --npm-dir build/npm [--shots DIR] [--pages-only]

--pages-only makes the pages and checks that each is a whole HTML file, without the browser: the
sanitizer build's run (scripts/test.sh), where the qkv side is what the sanitizers check and the
browser's side - the page's JavaScript, the same bytes in both builds - is the release build's.

The Qwen3.5 folder is drawn by the PyTorch twin: run it with an interpreter that has torch (Debian's
/usr/bin/python3 with python3-torch, as ctest does).
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import npm_packages  # noqa: E402

PACKAGES = ["playwright-core@1.49.1"]
CHROMIUM = "/usr/bin/chromium"
MHA = ["--module", "mha", "--d-in", "6", "--d-out", "8", "--num-heads", "2", "--context-length", "32", "--seed", "123"]
TEXT = "Your journey starts with one step."
VARIANTS = ["--alibi", "--softcap", "1.5"]
# the steps that are not computed from other steps: the input, the parameters, the mask, dropout's draw
MODULE_SOURCES = ["^inputs$", "^mask$", "^dropout_mask$", r"^(W_query|W_key|W_value|out_proj)(\.weight|\.bias)?$"]
HOSTILE = 'a </script><img src=x onerror="window.__pwned=1"> b'
LINEAR_CAPTION = "A: the gated delta rule's exact map"  # a Gated DeltaNet layer's weights, in the pipeline


def ensure_packages(npm_dir):
    npm_packages.ensure(npm_dir, PACKAGES)


def run(cmd, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, m in header.items():
        if name == "__metadata__":
            continue
        a, b = m["data_offsets"]
        out[name] = (m["shape"], struct.unpack(f"<{(b - a) // 4}f", body[a:b]))
    return out


def torch_format(v, integral=False):
    """One element as torch.set_printoptions(precision=4, sci_mode=False) prints it."""
    if v == float("-inf"):
        return "-inf"
    return f"{v:.0f}." if integral else f"{v:.4f}"


def at(shape, data, *index):
    off = 0
    for d, i in zip(shape, index):
        off = off * d + i
    return data[off]


def qwen3_5_folder(path):
    """A small Qwen3.5 from the PyTorch twin (tests/pytorch/qwen3_5_model.py), written as Hugging Face
    ships it: layers linear, attention, linear, attention; the attention's 2 query heads (1 key/value
    head), the linear layers' 4 value heads on 2 key heads. Returns [heads of layer l]."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pytorch"))
    from llama_files import small_tokenizer
    from test_qwen3_5_vs_pytorch import twin, write_dir
    tokenizer, V = small_tokenizer("qwen3")
    types = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
    cfg = dict(vocab_size=V, emb_dim=16, hidden_dim=24, n_layers=4, n_heads=2, n_kv_groups=1, head_dim=8,
               partial_rotary_factor=0.5, rope_base=10000.0, rms_eps=1e-6, context_length=64, layer_types=types,
               linear=dict(key_heads=2, value_heads=4, key_dim=4, value_dim=6, conv_kernel=3), tied=False)
    write_dir(twin(cfg, 7), path, tokenizer=tokenizer)
    return [4 if t == "linear_attention" else 2 for t in types]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--shots", help="keep the screenshots here")
    ap.add_argument("--checkpoint", help="the trained model's page from this checkpoint (2 layers x 4 heads, "
                    "as qkv train's default model) instead of one trained 20 steps here")
    ap.add_argument("--pages-only", action="store_true", help="make and check the pages; no browser")
    args = ap.parse_args()
    if not args.pages_only and not os.path.exists(CHROMIUM):
        raise SystemExit(f"{CHROMIUM} is missing: bash scripts/setup.sh --test installs Debian's chromium")
    if not args.pages_only:
        ensure_packages(args.npm_dir)
    qkv = os.path.abspath(args.qkv)
    with tempfile.TemporaryDirectory() as tmp:
        pages = []
        # 1. the chapter: every value is the walkthrough's
        book = os.path.join(tmp, "book.html")
        run([qkv, "explore", "--text", TEXT, "--out", book])
        w = json.loads(run([qkv, "walkthrough", "--no-gpt", "--text", TEXT, "--json"]))
        cw = w["causal.attn_weights"]
        mw = w["mha.attn_weights"]
        cells = [{"step": "causal.attn_weights", "i": i, "j": j,
                  "expect": f"causal.attn_weights[{i}][{j}] = " + torch_format(at(cw["shape"], cw["data"], i, j))}
                 for i, j in [(0, 0), (2, 1), (5, 3), (1, 4)]]
        cells += [{"step": "mha.attn_weights", "i": 4, "j": 2, "state": {"head": h},
                   "expect": f"mha.attn_weights[0][{h}][4][2] = " + torch_format(at(mw["shape"], mw["data"], 0, h, 4, 2))}
                  for h in (0, 1)]
        dm = w["dropout.ones_p05_seed123"]
        cells.append({"step": "dropout.ones_p05_seed123", "i": 0, "j": 2, "state": {"head": 0},
                      "expect": "dropout.ones_p05_seed123[0][2] = " + torch_format(at(dm["shape"], dm["data"], 0, 2), True)})
        neuron = [{"state": {"head": 1, "query": 5, "layer": 0}, "j": j,
                   "expect": torch_format(at(mw["shape"], mw["data"], 0, 1, 5, j))} for j in (0, 3, 5)]
        pages.append({"name": "book", "file": book, "cells": cells, "neuron": neuron, "thumbs": 2,
                      "sources": ["^inputs$", r"^trainable\.W_(query|key|value)$", r"^causal\.mask_simple$",
                                  r"^dropout\.ones_p05_seed123$"],
                      "linkHover": ["trainable.keys", "causal.attn_weights"]})
        # 2. a module on GPT-2 tokens: the weights are qkv forward --attn-weights'
        mod = os.path.join(tmp, "mha.html")
        run([qkv, "explore", "--text", TEXT, *MHA, "--train", "--dropout", "0.5", "--attention", "textbook", "--out", mod])
        attn = os.path.join(tmp, "attn.safetensors")
        run([qkv, "forward", "--text", TEXT, *MHA, "--train", "--dropout", "0.5", "--attention", "textbook",
             "--attn-weights", attn, "--output", os.path.join(tmp, "y.safetensors")])
        t = read_safetensors(attn)
        shape, data = t["attn_weights"]
        dshape, ddata = t["attn_weights_dropped"]
        T = shape[2]
        cells = [{"step": "attn_weights", "i": i, "j": j, "state": {"head": h},
                  "expect": f"attn_weights[{h}][{i}][{j}] = " + torch_format(at(shape, data, 0, h, i, j))}
                 for h, i, j in [(0, 0, 0), (0, 3, 1), (1, T - 1, 2), (1, 5, 5)]]
        cells += [{"step": "attn_weights_dropped", "i": i, "j": j, "state": {"head": h},
                   "expect": f"attn_weights_dropped[{h}][{i}][{j}] = " + torch_format(at(dshape, ddata, 0, h, i, j))}
                  for h, i, j in [(0, 4, 1), (1, T - 1, 0)]]
        neuron = [{"state": {"head": 0, "query": T - 1, "layer": 0}, "j": j,
                   "expect": torch_format(at(shape, data, 0, 0, T - 1, j))} for j in (0, 2, T - 1)]
        pages.append({"name": "module", "file": mod, "cells": cells, "neuron": neuron, "thumbs": 2,
                      "sources": MODULE_SOURCES, "masked": "masked_scores",
                      "linkHover": ["queries", "scores", "masked_scores", "scaled_scores", "attn_weights",
                                    "attn_weights_dropped", "context", "output"]})
        # 2b. ALiBi and a softcap: the pipeline shows what softmax reads, and softmax of it is qkv
        # forward's weights; the neuron view's scaled score is that same cell
        var = os.path.join(tmp, "variants.html")
        run([qkv, "explore", "--text", TEXT, *MHA, *VARIANTS, "--out", var])
        vattn = os.path.join(tmp, "vattn.safetensors")
        run([qkv, "forward", "--text", TEXT, *MHA, *VARIANTS, "--attn-weights", vattn,
             "--output", os.path.join(tmp, "vy.safetensors")])
        vshape, vdata = read_safetensors(vattn)["attn_weights"]
        T = vshape[2]
        cells = [{"step": "attn_weights", "i": i, "j": j, "state": {"head": h},
                  "expect": f"attn_weights[{h}][{i}][{j}] = " + torch_format(at(vshape, vdata, 0, h, i, j))}
                 for h, i, j in [(0, 2, 1), (1, T - 1, 0)]]
        pages.append({"name": "variants", "file": var, "cells": cells, "thumbs": 2, "sources": MODULE_SOURCES,
                      "softmax": {"step": "masked_scores", "shape": vshape, "weights": list(vdata)},
                      "neuronLogit": "masked_scores", "masked": "masked_scores",
                      "linkHover": ["capped_scores", "alibi_scores", "masked_scores", "attn_weights"]})
        # 2b'. the same page computing its weights in the page: every cell as the stored page's
        vc = os.path.join(tmp, "variants-computed.html")
        run([qkv, "explore", "--text", TEXT, *MHA, *VARIANTS, "--attention-weights", "computed", "--out", vc])
        pages.append({"name": "variants-computed", "file": vc, "thumbs": 2, "sources": MODULE_SOURCES,
                      "weightsLike": {"page": "variants", "tol": 1e-5}})
        # 2c. 8-bit storage: masked cells still read -inf, and only they
        q8 = os.path.join(tmp, "u8.html")
        run([qkv, "explore", "--text", TEXT, *MHA, "--precision", "u8", "--out", q8])
        pages.append({"name": "u8", "file": q8, "thumbs": 2, "masked": "masked_scores", "sources": MODULE_SOURCES})
        # 3. a trained model, 2 layers x 4 heads (qkv train's default model), a few steps
        ckpt = os.path.abspath(args.checkpoint) if args.checkpoint else os.path.join(tmp, "ckpt.safetensors")
        if not args.checkpoint:
            run([qkv, "train", "--steps", "20", "--eval-every", "0", "--checkpoint", ckpt], cwd=tmp)  # its loss curve too
        lm = os.path.join(tmp, "lm.html")
        run([qkv, "explore", "--checkpoint", ckpt, "--text", "deadbeefcafebabe|deadbeefcafebab", "--out", lm])
        pages.append({"name": "checkpoint", "file": lm, "thumbs": 8,
                      "sources": [r"^blocks\.0\.input$", r"\.weight$"],
                      "linkHover": ["blocks.0.queries", "blocks.0.attn_weights", "blocks.0.context", "blocks.0.output"]})
        # 3b. an untrained GPT-2 small continuing its text greedily (--generate): the page's ids are
        # qkv generate's, the generated ones marked; the head-patterns table sorts and opens heads;
        # the logit lens's last row predicts each generated token (greedy: the model's argmax)
        gp = os.path.join(tmp, "gpt.html")
        gpt_args = ["--model", "gpt2-small", "--seed", "123", "--temperature", "0"]
        run([qkv, "explore", *gpt_args, "--text", "Hello, I am", "--generate", "5", "--out", gp])
        g = json.loads(run([qkv, "generate", *gpt_args, "--prompt", "Hello, I am", "--max-new-tokens", "5", "--json"]))
        pages.append({"name": "gpt", "file": gp, "thumbs": 144, "patterns": True,
                      "generated": {"ids": g["ids"], "from": g["prompt_tokens"]},
                      "sources": [r"^trf_blocks\.0\.input$"], "linkHover": ["trf_blocks.0.attn_weights"]})
        pages[-2]["patterns"] = True  # the trained attention LM's table too
        # 3c. the same GPT page computing its weights, its values in 8 bits, the pipeline of layer 1 only
        gc = os.path.join(tmp, "gpt-computed.html")
        run([qkv, "explore", *gpt_args, "--text", "Hello, I am", "--generate", "5", "--attention-weights", "computed",
             "--precision", "u8", "--pipeline-layer", "1", "--out", gc])
        pages.append({"name": "gpt-computed", "file": gc, "thumbs": 144, "pipelineLayer": 1,
                      "weightsLike": {"page": "gpt", "tol": 1e-5}})
        # 3d. Qwen3.5: its Gated DeltaNet layers (4 value heads) show A, the delta rule's exact map
        # (context = A @ values, per head), its attention layers (2 query heads) softmax weights; each
        # layer offers its own heads. The same page computing its weights stores the linear layers' A.
        q35 = qwen3_5_folder(os.path.join(tmp, "qwen3_5"))
        qp = os.path.join(tmp, "qwen3_5.html")
        run([qkv, "explore", "--weights", os.path.join(tmp, "qwen3_5"), "--text", TEXT, "--out", qp])
        pages.append({"name": "qwen3_5", "file": qp, "thumbs": sum(q35), "layerHeads": q35,
                      "linearCaption": LINEAR_CAPTION,
                      "sources": [r"^model\.language_model\.layers\.0\.input$"],
                      "linkHover": [f"model.language_model.layers.0.{s}" for s in ("attn_weights", "context")]})
        qc = os.path.join(tmp, "qwen3_5-computed.html")
        run([qkv, "explore", "--weights", os.path.join(tmp, "qwen3_5"), "--text", TEXT, "--attention-weights",
             "computed", "--out", qc])
        pages.append({"name": "qwen3_5-computed", "file": qc, "thumbs": sum(q35), "layerHeads": q35,
                      "linearCaption": LINEAR_CAPTION, "weightsLike": {"page": "qwen3_5", "tol": 1e-5}})
        # 4. labels that are markup: shown as text, nothing runs
        bad = os.path.join(tmp, "hostile.html")
        run([qkv, "explore", "--text", HOSTILE, *MHA, "--out", bad])
        pages.append({"name": "hostile", "file": bad, "title": HOSTILE})

        if args.pages_only:
            bad_pages = []
            for p in pages:
                with open(p["file"], "rb") as f:
                    page = f.read()
                if not (page.lstrip().lower().startswith(b"<!doctype html") and page.rstrip().endswith(b"</html>")):
                    bad_pages.append(p["name"])
            print(f"pages only: {len(pages) - len(bad_pages)} of {len(pages)} pages are whole HTML files"
                  + (f"; not: {', '.join(bad_pages)}" if bad_pages else ""))
            return 1 if bad_pages or not pages else 0
        shots = args.shots or os.path.join(tmp, "shots")
        os.makedirs(shots, exist_ok=True)
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            json.dump({"pages": pages, "shots": os.path.abspath(shots), "profile": os.path.join(tmp, "profile")}, f)
        r = subprocess.run(["node", os.path.join(HERE, "explore_browser.cjs"), os.path.abspath(args.npm_dir), spec])
        if args.shots:
            for p in pages:
                shutil.copy(p["file"], os.path.join(args.shots, os.path.basename(p["file"])))
        return r.returncode


if __name__ == "__main__":
    sys.exit(main())
