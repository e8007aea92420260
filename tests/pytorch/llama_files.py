"""The Llama 3 / Qwen3 twin's files, as Hugging Face ships a model: config.json, the weights (F32, BF16 or
two shards with model.safetensors.index.json), a tokenizer.json in the family's real layout around a
small vocabulary. Shared by tests/pytorch/test_llama_vs_pytorch.py and tests/python/test_llama_models.py.

    m = twin(make_cfg(...), seed)                    # llama_model.LlamaModel(cfg), norms off 1
    write_dir(m, path, "f32" | "bf16" | "shards", tokenizer)
    tokenizer, V = small_tokenizer("qwen3" | "qwen2" | "llama")
"""

import json
import os

import torch

import llama_model
import safetensors_io


def make_cfg(family, V, E, F, L, H, G, D, C, theta, eps, tied, rope_freq):
    return dict(family=family, vocab_size=V, emb_dim=E, hidden_dim=F, n_layers=L, n_heads=H, n_kv_groups=G,
                head_dim=D, context_length=C, rope_base=theta, rms_eps=eps, tied=tied, rope_freq=rope_freq)


def twin(cfg, seed, bf16=False):
    torch.manual_seed(seed)
    m = llama_model.perturb(llama_model.LlamaModel(cfg), seed + 1).eval()
    if bf16:  # the numbers a BF16 file holds
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return m


def write_dir(m, path, storage, tokenizer=None):
    """config.json and the weights (F32, BF16 or two F32 shards with the index) into `path`."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(llama_model.config_json(m.cfg), f)
    tensors = llama_model.to_hugging_face(m)
    if storage == "bf16":
        safetensors_io.save(os.path.join(path, "model.safetensors"),
                            {k: v.to(torch.bfloat16) for k, v in tensors.items()})
    elif storage == "shards":
        names = list(tensors)
        half = len(names) // 2
        shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
        weight_map = {}
        for file, part in shards.items():
            safetensors_io.save(os.path.join(path, file), {k: tensors[k] for k in part})
            weight_map.update({k: file for k in part})
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    else:
        safetensors_io.save(os.path.join(path, "model.safetensors"), tensors)
    if tokenizer is not None:
        with open(os.path.join(path, "tokenizer.json"), "w") as f:
            json.dump(tokenizer, f)
    return path


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest from U+0100 on."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


SPECIALS = {"qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            "llama": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                      "<|eom_id|>", "<|eot_id|>"]}
INSTALLED = {"qwen3": "qwen3", "qwen2": "qwen3", "llama": "llama3"}  # Qwen2.5's tokenizer is Qwen3's


def small_tokenizer(family):
    """The family's installed tokenizer.json with its vocabulary replaced: the 256 bytes, merges of
    a few common pairs, and the family's special tokens after them."""
    home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    with open(os.path.join(home, "qkv", INSTALLED[family], "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    alphabet = bytes_to_unicode()
    vocab = {alphabet[b]: i for i, b in enumerate(sorted(alphabet))}
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("o", "n"), ("Ġ", "a")]:
        merges.append([a, b] if family != "llama" else f"{a} {b}")
        vocab[a + b] = len(vocab)
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = merges
    j["added_tokens"] = [dict(id=len(vocab) + k, content=t, single_word=False, lstrip=False, rstrip=False,
                              normalized=False, special=True) for k, t in enumerate(SPECIALS[family])]
    return j, len(vocab) + len(SPECIALS[family])
