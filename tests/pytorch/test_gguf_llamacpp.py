#!/usr/bin/python3
"""llama.cpp's GGUF files both ways, against the PyTorch twin and llama.cpp itself (npm's
node-llama-cpp 3.22.1, its prebuilt CPU build, driven by tests/llamacpp/greedy.mjs).

    /usr/bin/python3 tests/pytorch/test_gguf_llamacpp.py --qkv build/qkv [--npm-dir DIR] [--verbose] [--keep]

Small twins of both families (Qwen3: QK-norm, no permutation; Llama 3: Q/K rows permuted, head_dim
not the width over the heads, Llama 3 RoPE scaling as rope_freqs.weight, tied heads; vocabularies
padded with [PAD] tokens; widths of 256 for the K-quants' blocks). For each type:
  the twin's file   written as llama.cpp's converter writes the family (tests/pytorch/gguf_files.py:
                    F32, F16, BF16, Q8_0): llama.cpp reads it, and qkv (`qkv forward --dtype f32`,
                    the reference path: dequantized, float32 products) gives the logits of the twin
                    holding the file's numbers within 1e-5 relative (max |qkv - twin| / max |twin|);
  qkv's file        `qkv convert --to gguf --type T` of the twin's Hugging Face folder (F32, F16,
                    BF16, Q8_0, Q4_0, Q4_K, Q6_K): qkv's logits within 1e-5 of the twin holding the
                    weights qkv read back (`--save-weights`); in F32 those are the twin's exactly and
                    qkv's greedy ids are the twin's;
and on each file llama.cpp gives
  f32              the twin's greedy ids and last-position logits within 1e-5 relative;
  f16, bf16, q*    the logits of the twin holding the file's numbers within 3e-3, 3e-2, 6e-2
                   relative (llama.cpp also rounds the activations to the weight's dot-product
                   type: F16, BF16, Q8_0 / Q8_K blocks - as much again as the weights' rounding),
                   and the twin's ids in f16.
GPT-2 ("gpt2": the book's GPTModel, LayerNorm, learned positions, Q, K and V's rows in one attn_qkv
tensor): qkv's F32 and Q8_0 files of its Hugging Face folder; in F32 qkv's logits within 1e-5 of the
twin and its greedy ids, llama.cpp's within 1e-5 of the twin computing GELU as llama.cpp's CPU build
does (a table of halves: 1e-4 off a float32 GELU) and the twin's greedy ids; in Q8_0 llama.cpp's
within 6e-2 of qkv's reference path on the same blocks.
Qwen3.5 ("qwen35": norms as 1 + weight, A_log as -exp, the convolution squeezed, value heads tiled
where the key heads are fewer): qkv's F32, BF16, Q8_0 and Q4_0 files of two twins' Hugging Face
folders (tests/pytorch/qwen3_5_model.py; a tokenizer splitting as Qwen3.5's: pre "qwen35"): qkv's
logits within 1e-5 of the twin holding the weights it read back (in F32 those within 1e-6 of the
twin's, and its greedy ids); llama.cpp's as for the families above.
node-llama-cpp is installed on first use (npm, --omit=optional plus the one platform package,
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true) into --npm-dir, $QKV_NPM_DIR, or npm-llamacpp beside --qkv; when
that fails the test fails, saying why.
"""

import argparse
import copy
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gguf_files  # noqa: E402
import gpt_model  # noqa: E402
import llama_model  # noqa: E402
import qwen3_5_model  # noqa: E402
import safetensors_io  # noqa: E402
from llama_files import make_cfg, small_tokenizer, twin, write_dir  # noqa: E402

GREEDY = os.path.join(os.path.dirname(HERE), "llamacpp", "greedy.mjs")
PACKAGES = ["node-llama-cpp@3.22.1", "@node-llama-cpp/linux-x64@3.22.1"]
TOL = {"f32": 1e-5, "f16": 3e-3, "bf16": 3e-2, "q8_0": 6e-2, "q4_0": 6e-2, "q4_k": 6e-2, "q6_k": 6e-2}
IDS = [5, 40, 100, 7, 200, 33, 260, 12]
NEW = 8
SCALING = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_context_length=16)

# (label, family, extra [PAD] ids, E, F, L, H, G, D, theta, tied, rope_freq, types)
CASES = [
    ("qwen3", "qwen3", 7, 64, 128, 2, 4, 2, 16, 1e6, False, None, ["f32", "f16", "bf16", "q8_0", "q4_0"]),
    ("qwen3 k-quants", "qwen3", 0, 256, 512, 1, 4, 2, 64, 1e6, False, None, ["q4_k", "q6_k"]),
    ("llama k-quants", "llama", 0, 256, 256, 1, 4, 2, 64, 5e5, True, None, ["q4_k", "q6_k"]),
    ("qwen3 tied D=32", "qwen3", 0, 64, 96, 2, 4, 1, 32, 1e4, True, None, ["f32", "q8_0"]),
    ("llama", "llama", 0, 64, 128, 2, 4, 2, 16, 5e5, False, None, ["f32", "f16", "bf16", "q8_0"]),
    ("llama D=8 rope scaling", "llama", 5, 64, 128, 2, 4, 2, 8, 5e5, False, SCALING, ["f32", "q8_0"]),
    ("llama tied D=32", "llama", 0, 64, 128, 1, 2, 2, 32, 1e4, True, None, ["f32"]),
    ("qwen2", "qwen2", 3, 64, 128, 2, 4, 2, 16, 1e6, False, None, ["f32", "bf16", "q8_0", "q4_0"]),
    ("qwen2 tied k-quants", "qwen2", 0, 256, 512, 1, 4, 2, 64, 1e6, True, None, ["q4_k", "q6_k"]),
]


class Unavailable(Exception):
    pass


def ensure_node_llama_cpp(npm_dir):
    """Installs node-llama-cpp and its linux-x64 CPU binaries into npm_dir unless there; raises
    Unavailable saying why it cannot."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise Unavailable(f"node-llama-cpp's prebuilt binaries are pinned for linux x64, this is "
                          f"{sys.platform} {platform.machine()}")
    have = [os.path.isdir(os.path.join(npm_dir, "node_modules", p.rsplit("@", 1)[0])) for p in PACKAGES]
    if all(have):
        return
    os.makedirs(npm_dir, exist_ok=True)
    cmd = ["npm", "install", "--prefix", npm_dir, "--no-audit", "--no-fund", "--loglevel=error",
           "--omit=optional", *PACKAGES]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600,
                           env=dict(os.environ, NODE_LLAMA_CPP_SKIP_DOWNLOAD="true"))
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unavailable(f"npm install of {' '.join(PACKAGES)} failed: {e}") from None
    if p.returncode != 0:
        tail = p.stdout.decode("utf-8", "replace").strip()[-600:]
        raise Unavailable(f"npm install of {' '.join(PACKAGES)} failed (status {p.returncode}): {tail}")


class LlamaCpp:
    """llama.cpp as one process for the whole run (greedy.mjs --serve: its start costs more than a
    small model's run), answering one file's greedy run at a time."""

    def __init__(self, npm_dir):
        self.npm_dir, self.proc, self.log = npm_dir, None, None

    def __call__(self, gguf, ids, new, logits=True):
        """greedy.mjs's JSON for the file: {"ids": [...], "logits": [...]}; raises RuntimeError with
        llama.cpp's message when the job fails or the process ends."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self.log = tempfile.TemporaryFile()
            self.proc = subprocess.Popen(["node", GREEDY, "--serve", "--threads", "1"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.log, text=True,
                                         env=dict(os.environ, QKV_NPM_DIR=self.npm_dir))
        job = {"file": gguf, "ids": list(ids), "new": new, "logits": logits}
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except OSError:
            line = ""
        if not line:
            self.log.seek(0)
            err = self.log.read().decode("utf-8", "replace")[-2000:]
            raise RuntimeError(f"greedy.mjs --serve ended (status {self.proc.wait()}) on {gguf}: {err}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"llama.cpp on {gguf}: {reply['error']}")
        return reply

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
            self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None


def file_twin(m, path):
    """A copy of the twin holding the numbers the GGUF file holds (dequantized, Q/K rows unpermuted)."""
    _, tensors = gguf_files.read_gguf(path)
    state = {}
    for _, hf in llama_model.hf_names(m.cfg):
        x = torch.from_numpy(np.array(gguf_files.tensor_values(*tensors[gguf_files.gguf_name(hf)])))
        if m.cfg["family"] == "llama" and hf.endswith(("q_proj.weight", "k_proj.weight")):
            heads = m.cfg["n_heads"] if hf.endswith("q_proj.weight") else m.cfg["n_kv_groups"]
            x = x.reshape(heads, -1, 2, x.shape[1]).swapaxes(1, 2).reshape(x.shape)  # the inverse
        state[hf] = x
    return twin_holding(m, state)


def qkv_run(qkv, args):
    """qkv's stdout; raises RuntimeError with its stderr when it fails."""
    p = subprocess.run([qkv, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"qkv {' '.join(args)}: status {p.returncode}: {p.stderr.decode('utf-8', 'replace')[-2000:]}")
    return p.stdout.decode()


def qkv_forward(qkv, family, gguf, ids, tmp, save=False):
    """qkv's logits (1, T, V) on `ids` from the GGUF file in float32 products (dequantized: the
    reference path), and with save its state dict as it loaded it (Hugging Face's names)."""
    inp, out, weights = (os.path.join(tmp, n) for n in ("ids.st", "logits.st", "weights.st"))
    safetensors_io.save(inp, {"input": torch.tensor([ids], dtype=torch.float32)})
    args = ["forward", "--module", family, "--weights", gguf, "--dtype", "f32", "--input", inp, "--output", out]
    qkv_run(qkv, args + (["--save-weights", weights] if save else []))
    return safetensors_io.load(out)["output"].double(), safetensors_io.load(weights) if save else None


def twin_holding(m, hf_state):
    """A copy of the twin holding qkv's loaded weights (Hugging Face's names)."""
    r = copy.deepcopy(m)
    if m.cfg["tied"]:
        r.out_head.weight = r.tok_emb.weight
    state = dict(r.named_parameters())
    with torch.no_grad():
        for twin_name, hf in llama_model.hf_names(m.cfg):
            state[twin_name].copy_(hf_state[hf])
    return r


def greedy(m, ids, new):
    seq = list(ids)
    with torch.no_grad():
        for _ in range(new):
            seq.append(int(torch.argmax(m(torch.tensor([seq]))[0, -1])))
    return seq[len(ids):]


def rel(got, want):
    return (got - want).abs().max().item() / want.abs().max().item()


def oracle(llamacpp, path, ref, t, want_ids, errors):
    """llama.cpp's logits and ids on `path` against the twin `ref` holding the file's numbers (errors
    appended to `errors`): (relative difference, ids)."""
    with torch.no_grad():
        want = ref(torch.tensor([IDS]))[0, -1].double()
    got = llamacpp(path, IDS, NEW)
    logits = torch.tensor(got["logits"], dtype=torch.float64)
    if logits.shape != want.shape:
        errors.append(f"llama.cpp gave {logits.shape[0]} logits, the twin {want.shape[0]}")
        return float("nan"), got["ids"]
    r = rel(logits, want)
    if not r <= TOL[t]:
        errors.append(f"llama.cpp's logits: relative difference {r:.3g} from the twin > {TOL[t]:g}")
    if t in ("f32", "f16") and got["ids"] != want_ids:
        errors.append(f"llama.cpp's greedy ids {got['ids']}, the twin's {want_ids}")
    return r, got["ids"]


def exact_weights(m, ref, ids):
    """An error unless the twin holding qkv's read-back weights gives the twin's logits on ids exactly."""
    with torch.no_grad():
        x = torch.tensor([ids])
        if rel(ref(x).double(), m(x).double()) != 0:
            return "qkv's F32 file does not hold the twin's weights exactly"
    return None


def qkv_file_case(qkv, llamacpp, tmp, label, family, folder, path, t, m, want_ids, holding, weights_check):
    """(label, [errors], summary) for qkv's file of type t (`qkv convert --to gguf` of the twin's
    folder): qkv's reference path within 1e-5 of the twin holding the weights qkv read back
    (holding(m, state)); in F32 weights_check(m, that twin, ids) and the twin's greedy ids; llama.cpp on it
    (oracle)."""
    errors = []
    try:
        qkv_run(qkv, ["convert", "--weights", folder, "--to", "gguf", "--type", t, "--out", path])
        got, state = qkv_forward(qkv, family, path, IDS + want_ids, tmp, save=True)
        ref = holding(m, state)
        with torch.no_grad():
            want = ref(torch.tensor([IDS + want_ids])).double()
        q = rel(got, want)
        if not q <= 1e-5:
            errors.append(f"qkv's logits (f32 products) from its file: relative difference {q:.3g} > 1e-5")
        if t == "f32":
            if (e := weights_check(m, ref, IDS + want_ids)) is not None:
                errors.append(e)
            forced = got[0, len(IDS) - 1:-1].argmax(-1).tolist()
            if forced != want_ids:
                errors.append(f"qkv's greedy ids {forced}, the twin's {want_ids}")
        r, ids = oracle(llamacpp, path, ref, t, want_ids, errors)
    except RuntimeError as e:
        return (f"{label} (qkv's file)", [str(e)], "")
    return (f"{label} (qkv's file)", errors, f"{label} qkv's file: llama.cpp rel {r:.2g}, qkv rel {q:.2g}, llama.cpp "
            f"ids {'equal' if ids == want_ids else 'differ: ' + str(ids)}")


def check_case(qkv, llamacpp, tmp, case):
    """[(label, [errors], summary)] for one model in each of its types: the twin's GGUF file read by
    llama.cpp and by qkv, and qkv's (qkv convert --to gguf from the twin's folder) read by llama.cpp."""
    label, family, pad, E, F, L, H, G, D, theta, tied, rope_freq, types = case
    tok, V = small_tokenizer(family)
    m = twin(make_cfg(family, V + pad, E, F, L, H, G, D, 32, theta, 1e-6, tied, rope_freq), 11)
    with torch.no_grad():  # larger weights: logits spread out, the greedy ids decided by wide margins
        for name, p in m.named_parameters():
            if p.dim() == 2:
                p.mul_(3.0)
    want_ids = greedy(m, IDS, NEW)
    stem = os.path.join(tmp, label.replace(" ", "_"))
    folder = write_dir(m, stem + "_hf", "f32", tok)
    results = []

    for t in types:
        # The twin's file (llama.cpp's converter's layout): llama.cpp and qkv read it.
        if t in gguf_files.FILE_TYPES:
            path = f"{stem}_{t}.gguf"
            gguf_files.write_gguf(m, path, tok, type=t)
            ref = m if t == "f32" else file_twin(m, path)
            errors = []
            try:
                r, ids = oracle(llamacpp, path, ref, t, want_ids, errors)
                got, _ = qkv_forward(qkv, family, path, IDS, tmp)
                with torch.no_grad():
                    want = ref(torch.tensor([IDS])).double()
                q = rel(got, want)
                if not q <= 1e-5:
                    errors.append(f"qkv's logits (f32 products) from the twin's file: relative difference {q:.3g} > 1e-5")
            except RuntimeError as e:
                results.append((f"{label} {t} (twin's file)", [str(e)], ""))
                continue
            results.append((f"{label} {t} (twin's file)", errors,
                            f"{label} {t} twin's file: llama.cpp rel {r:.2g}, qkv rel {q:.2g}, llama.cpp ids "
                            f"{'equal' if ids == want_ids else 'differ: ' + str(ids)}"))
        # qkv's file, from the twin's folder: qkv's reference path on it, and llama.cpp on it.
        results.append(qkv_file_case(qkv, llamacpp, tmp, f"{label} {t}", family, folder, f"{stem}_{t}.qkv.gguf", t, m,
                                     want_ids, twin_holding, exact_weights))
    return results


class GgmlGelu(torch.nn.Module):
    """GELU as llama.cpp's CPU build computes it: a table of halves, the input rounded to a half and
    the value a half. Its GPT-2 logits are 1e-4 off a float32 GELU's (measured: 9.4e-5 relative on
    check_gpt2's twin) and 3e-7 off this one's."""

    def forward(self, x):
        return gpt_model.GELU()(x.half().float()).half().float()


def check_gpt2(qkv, llamacpp, tmp):
    """[(label, [errors], summary)] for GPT-2: the book's GPTModel (perturbed biases and norms), its
    Hugging Face folder written as qkv's GGUF file ("gpt2": Q, K and V in one attn_qkv tensor) in F32
    and Q8_0, read by qkv's reference path (f32 products) and by llama.cpp."""
    cfg = dict(vocab_size=50257, context_length=64, emb_dim=64, n_heads=4, n_layers=2, drop_rate=0.0, qkv_bias=True)
    torch.manual_seed(11)
    m = gpt_model.perturb(gpt_model.GPTModel(cfg), 12, head_scale=4.0).eval()
    want_ids = greedy(m, IDS, NEW)
    folder = os.path.join(tmp, "gpt2_hf")
    os.makedirs(folder, exist_ok=True)
    safetensors_io.save(os.path.join(folder, "model.safetensors"), gpt_model.to_hugging_face(m.state_dict()))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 64,
                   "vocab_size": 50257, "layer_norm_epsilon": 1e-5}, f)
    ggml = copy.deepcopy(m)  # the twin with llama.cpp's GELU: the oracle's float32 reference
    for block in ggml.trf_blocks:
        block.ff.layers[1] = GgmlGelu()
    with torch.no_grad():
        want = m(torch.tensor([IDS + want_ids])).double()
        want_ggml = ggml(torch.tensor([IDS])).double()[0, -1]
    results = []
    for t in ("f32", "q8_0"):
        path = os.path.join(tmp, f"gpt2_{t}.qkv.gguf")
        errors = []
        try:
            qkv_run(qkv, ["convert", "--weights", folder, "--to", "gguf", "--type", t, "--out", path])
            got, _ = qkv_forward(qkv, "gpt", path, IDS + want_ids, tmp)
            q = rel(got, want)
            if t == "f32":
                if not q <= 1e-5:
                    errors.append(f"qkv's logits (f32 products) from its file: relative difference {q:.3g} > 1e-5")
                forced = got[0, len(IDS) - 1:-1].argmax(-1).tolist()
                if forced != want_ids:
                    errors.append(f"qkv's greedy ids {forced}, the twin's {want_ids}")
            lc = llamacpp(path, IDS, NEW)
            logits = torch.tensor(lc["logits"], dtype=torch.float64)
            # f32: against the twin with llama.cpp's GELU; q8_0: against qkv's reference path on the
            # same blocks
            ref = want_ggml if t == "f32" else got[0, len(IDS) - 1]
            r = rel(logits, ref)
            if not r <= TOL[t]:
                errors.append(f"llama.cpp's logits: relative difference {r:.3g} from the "
                              f"{'twin (GELU in halves)' if t == 'f32' else 'qkv reference'} > {TOL[t]:g}")
            if t == "f32" and lc["ids"] != want_ids:
                errors.append(f"llama.cpp's greedy ids {lc['ids']}, the twin's {want_ids}")
        except RuntimeError as e:
            results.append((f"gpt2 {t} (qkv's file)", [str(e)], ""))
            continue
        results.append((f"gpt2 {t} (qkv's file)", errors,
                        f"gpt2 {t} qkv's file: llama.cpp rel {r:.2g}, qkv rel {q:.2g}, llama.cpp ids "
                        f"{'equal' if lc['ids'] == want_ids else 'differ: ' + str(lc['ids'])}"))
    return results


QWEN3_5_TYPES = ["f32", "bf16", "q8_0"]


def qwen3_5_cases():
    """(label, cfg, types): small Qwen3.5 models in the layouts llama.cpp's qwen35 reads (full
    attention every n-th layer, key and value heads of one width): 4 value heads over 2 key heads
    (tiled in the file), partial RoPE, untied; and as many value as key heads, tied, every other
    layer full attention, RoPE on the whole head; rows of 32 (Q8_0 and Q4_0's blocks)."""
    base = dict(vocab_size=None, emb_dim=64, hidden_dim=96, n_layers=4, n_heads=4, n_kv_groups=2, head_dim=16,
                partial_rotary_factor=0.25, rope_base=1e7, rms_eps=1e-6, context_length=32,
                layer_types=["linear_attention"] * 3 + ["full_attention"],
                linear=dict(key_heads=2, value_heads=4, key_dim=32, value_dim=32, conv_kernel=4), tied=False)
    other = dict(base, n_layers=2, layer_types=["linear_attention", "full_attention"], partial_rotary_factor=1.0,
                 n_heads=2, n_kv_groups=1, tied=True, linear=dict(key_heads=2, value_heads=2, key_dim=32,
                                                                   value_dim=32, conv_kernel=3))
    return [("qwen3.5 Hv=2Hk", base, QWEN3_5_TYPES), ("qwen3.5 tied", other, ["f32", "q8_0", "q4_0"])]


def qwen3_5_twin_holding(m, hf_state):
    """A copy of the Qwen3.5 twin holding qkv's loaded weights (Hugging Face's names)."""
    r = copy.deepcopy(m)
    params = dict(r.named_parameters())
    with torch.no_grad():
        for twin_name, hf in qwen3_5_model.hf_names(m.cfg):
            params[twin_name].copy_(hf_state[hf].reshape(params[twin_name].shape))
    return r


def close_weights(m, ref, ids):
    """An error unless the twin holding qkv's read-back weights holds the twin's within 1e-6 (Qwen3.5's
    norms and A_log pass through 1 + w and -exp(w))."""
    own = dict(m.named_parameters())
    held = max(rel(p.detach().double(), own[n].detach().double()) for n, p in ref.named_parameters())
    return None if held <= 1e-6 else f"qkv's F32 file reads back {held:.3g} off the twin's weights (> 1e-6)"


def check_qwen3_5(qkv, llamacpp, tmp):
    """[(label, [errors], summary)] for Qwen3.5 ("qwen35": norms as 1 + weight, A_log as -exp, the
    convolution squeezed, value heads tiled): the twin's Hugging Face folder (with a tokenizer
    splitting as Qwen3.5's does: pre "qwen35") written by qkv convert --to gguf in each type, read by
    qkv's reference path (within 1e-5 of the twin holding the weights qkv read back; in F32 those
    within 1e-6 of the twin's own and its greedy ids) and by llama.cpp (f32: the twin's greedy ids and
    logits within 1e-5; the others within the type's tolerance of the twin holding the file's numbers)."""
    tok, V = small_tokenizer("qwen3")
    for p in tok["pre_tokenizer"]["pretokenizers"]:  # Qwen3.5's split: letters' runs take their marks
        if p.get("type") == "Split":
            p["pattern"]["Regex"] = p["pattern"]["Regex"].replace("\\p{L}+|", "[\\p{L}\\p{M}]+|").replace(
                "[^\\s\\p{L}\\p{N}]+", "[^\\s\\p{L}\\p{M}\\p{N}]+")
    results = []
    for label, cfg, types in qwen3_5_cases():
        cfg = dict(cfg, vocab_size=V)
        torch.manual_seed(21)
        m = qwen3_5_model.perturb(qwen3_5_model.Qwen3_5Model(cfg), 22).eval()
        with torch.no_grad():  # larger weights: logits spread out, the greedy ids decided by wide margins
            for name, p in m.named_parameters():
                if p.dim() == 2:
                    p.mul_(3.0)
        want_ids = greedy(m, IDS, NEW)
        folder = os.path.join(tmp, label.replace(" ", "_").replace("=", "") + "_hf")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(qwen3_5_model.config_json(cfg), f)
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            json.dump(tok, f)
        safetensors_io.save(os.path.join(folder, "model.safetensors"), qwen3_5_model.to_hugging_face(m))
        for t in types:
            results.append(qkv_file_case(qkv, llamacpp, tmp, f"{label} {t}", "qwen3_5", folder,
                                         f"{folder}_{t}.qkv.gguf", t, m, want_ids, qwen3_5_twin_holding,
                                         close_weights))
    return results


def default_npm_dir(qkv=None):
    if os.environ.get("QKV_NPM_DIR"):
        return os.environ["QKV_NPM_DIR"]
    if qkv:
        return os.path.join(os.path.dirname(os.path.abspath(qkv)), "npm-llamacpp")
    return os.path.join(tempfile.gettempdir(), "qkv-npm-llamacpp")


# --- as a script (ctest runs tests/pytorch/test_*.py with --qkv) -------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qkv", required=True, help="the qkv executable (npm-llamacpp beside it is the default --npm-dir)")
    ap.add_argument("--npm-dir", help="where node-llama-cpp is (or gets) installed")
    ap.add_argument("--verbose", "-v", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    npm_dir = args.npm_dir or default_npm_dir(args.qkv)
    try:
        ensure_node_llama_cpp(npm_dir)
    except Unavailable as e:  # the oracle is part of the test setup: its absence is a failure
        print(f"gguf vs llama.cpp: FAILED: the oracle is unavailable: {e}", file=sys.stderr)
        return 1
    passed, failed = 0, []
    tmp = tempfile.mkdtemp(prefix="qkv-gguf-")
    llamacpp = LlamaCpp(npm_dir)
    try:
        checks = [lambda c=c: check_case(args.qkv, llamacpp, tmp, c) for c in CASES]
        checks.append(lambda: check_gpt2(args.qkv, llamacpp, tmp))
        checks.append(lambda: check_qwen3_5(args.qkv, llamacpp, tmp))
        for check in checks:
            for label, errors, summary in check():
                if errors:
                    failed.append((label, errors))
                else:
                    passed += 1
                if args.verbose or errors:
                    print(summary or label)
    finally:
        llamacpp.close()
        if args.keep:
            print(f"files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for label, errors in failed:
        print(f"FAILED {label}", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
    print(f"gguf vs llama.cpp: {passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
