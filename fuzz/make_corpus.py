#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into fuzz/corpus/<target>/seed-*: small valid inputs (and
a few near-misses) for each parser, so the fuzzers start from the formats' real structure.

    python3 fuzz/make_corpus.py --qkv build/qkv     # --qkv: for the checkpoints (qkv train --steps 2)

Regression inputs (regress-*) in the same directories are never touched. Everything it writes is
small (the whole corpus stays well under 2 MB)."""
import argparse
import base64
import json
import os
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def safetensors(entries, metadata=None, pad=True):
    """entries: (name, dtype, shape, raw bytes); returns the file's bytes."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def safetensors_seeds():
    f32 = struct.pack("<6f", 1, -2, 3.5, 0, float("inf"), -0.0)
    write("safetensors", "f32", safetensors([("a", "F32", [2, 3], f32)], {"format": "pt"}))
    write("safetensors", "dtypes", safetensors([
        ("half", "F16", [2], struct.pack("<2H", 0x3C00, 0x7C00)),
        ("bf", "BF16", [1, 2], struct.pack("<2H", 0x3F80, 0xFF80)),
        ("dbl", "F64", [2], struct.pack("<2d", 1e300, -1.5)),
        ("scalar", "F32", [], struct.pack("<f", 7)),
        ("empty", "F32", [0, 4], b"")]))
    write("safetensors", "unpadded", safetensors([("x", "F32", [1], struct.pack("<f", 1))], pad=False))
    write("safetensors", "bad-dtype", safetensors([("x", "I8", [1], b"\x01")]))
    write("safetensors", "overlap", struct.pack("<Q", 80) + json.dumps(
        {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
         "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()[:80].ljust(80) + b"\0" * 4)


def gpt_seeds():
    """Tiny GPT models (V 3, E 4, context 2, one block) in Hugging Face's layout, with and without a
    config.json before the separator, and in the book's; values 0.01 * i, LayerNorm scales 1."""
    V, E, C = 3, 4, 2
    meta = {"config": json.dumps({"attention": "auto", "context_length": C, "drop_rate": 0.0, "dtype": "f32",
                                  "emb_dim": E, "n_heads": 2, "n_layers": 1, "qkv_bias": False,
                                  "tied_head": False, "vocab_size": V})}  # what qkv convert --to qkv writes
    def t(name, shape, scale=0.01, dtype="F32"):
        n = 1
        for d in shape:
            n *= d
        if dtype == "BF16":
            return (name, "BF16", list(shape), struct.pack(f"<{n}H", *[0x3C23] * n))
        return (name, "F32", list(shape), struct.pack(f"<{n}f", *[scale * (i % 7 - 3) for i in range(n)]))
    def ones(name, shape):
        return (name, "F32", list(shape), struct.pack(f"<{shape[0]}f", *[1.0] * shape[0]))
    hf = [t("wte.weight", (V, E)), t("wpe.weight", (C, E)), ones("h.0.ln_1.weight", (E,)), t("h.0.ln_1.bias", (E,)),
          t("h.0.attn.c_attn.weight", (E, 3 * E)), t("h.0.attn.c_attn.bias", (3 * E,)),
          t("h.0.attn.c_proj.weight", (E, E)), t("h.0.attn.c_proj.bias", (E,)), ones("h.0.ln_2.weight", (E,)),
          t("h.0.ln_2.bias", (E,)), t("h.0.mlp.c_fc.weight", (E, 4 * E)), t("h.0.mlp.c_fc.bias", (4 * E,)),
          t("h.0.mlp.c_proj.weight", (4 * E, E)), t("h.0.mlp.c_proj.bias", (E,)), ones("ln_f.weight", (E,)),
          t("ln_f.bias", (E,))]
    config = json.dumps({"n_embd": E, "n_head": 2, "n_layer": 1, "n_positions": C, "vocab_size": V,
                         "layer_norm_epsilon": 1e-5})
    sep = b"\n=====\n"
    write("gpt_weights", "hf-dir", config.encode() + sep + safetensors(hf, {"format": "pt"}))
    write("gpt_weights", "hf-untied-prefixed", config.encode() + sep + safetensors(
        [("transformer." + n, d, s, r) for n, d, s, r in hf] + [t("lm_head.weight", (V, E))]))
    write("gpt_weights", "hf-file-bf16", safetensors([t(n, s, dtype="BF16") if n == "wte.weight" else (n, d, s, r)
                                                     for n, d, s, r in hf], meta))
    book = [t("tok_emb.weight", (V, E)), t("pos_emb.weight", (C, E)),
            t("trf_blocks.0.att.W_query.weight", (E, E)), t("trf_blocks.0.att.W_key.weight", (E, E)),
            t("trf_blocks.0.att.W_value.weight", (E, E)), t("trf_blocks.0.att.out_proj.weight", (E, E)),
            t("trf_blocks.0.att.out_proj.bias", (E,)), t("trf_blocks.0.ff.layers.0.weight", (4 * E, E)),
            t("trf_blocks.0.ff.layers.0.bias", (4 * E,)), t("trf_blocks.0.ff.layers.2.weight", (E, 4 * E)),
            t("trf_blocks.0.ff.layers.2.bias", (E,)), ones("trf_blocks.0.norm1.scale", (E,)),
            t("trf_blocks.0.norm1.shift", (E,)), ones("trf_blocks.0.norm2.scale", (E,)),
            t("trf_blocks.0.norm2.shift", (E,)), ones("final_norm.scale", (E,)), t("final_norm.shift", (E,)),
            t("out_head.weight", (V, E), 0.02)]
    write("gpt_weights", "book", safetensors(book, meta))
    write("gpt_weights", "bad-config", b'{"n_embd": 5, "n_head": 0}' + sep + safetensors(hf))


def checkpoint_seeds(qkv):
    with tempfile.TemporaryDirectory() as tmp:
        small = ["--d-model", "4", "--num-heads", "1"]
        for name, flags in [("copy-adamw", ["--task", "copy", "--optimizer", "adamw", *small]),
                            ("reverse-sgd", ["--task", "reverse", "--optimizer", "sgd", "--momentum", "0.9", *small]),
                            # today's variants: grouped W_key/W_value rows and the options that go with them
                            ("copy-variants", ["--task", "copy", "--d-model", "8", "--num-heads", "2",
                                               "--num-kv-heads", "1", "--rope", "half", "--window", "4", "--alibi",
                                               "--softcap", "30"])]:
            path = os.path.join(tmp, name + ".safetensors")
            subprocess.run([qkv, "train", *flags, "--steps", "2",
                            "--num-layers", "1", "--batch-size", "2", "--eval-sequences", "2",
                            "--checkpoint", path, "--svg", "", "--quiet"],
                           check=True, stdout=subprocess.DEVNULL)
            with open(path, "rb") as f:
                write("checkpoint", name, f.read())


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"), ("in", "g")]


def rank_seeds():
    # tiktoken's format: the 256 bytes in GPT-2's order, then merges; base64 and a rank a line.
    byte_order = list(bytes_to_unicode().keys())
    tokens = [bytes([b]) for b in byte_order]
    decode = {v: k for k, v in bytes_to_unicode().items()}
    for a, b in MERGES:
        tokens.append(bytes(decode[c] for c in a + b))
    lines = "".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(tokens))
    write("tiktoken_ranks", "small", lines)
    write("tiktoken_ranks", "bytes-only", "".join(lines.splitlines(keepends=True)[:256]))
    write("tiktoken_ranks", "no-final-newline", lines.rstrip("\n"))
    write("tiktoken_ranks", "bad-base64", "IQ== 0\nnot-base64! 1\n")
    write("tiktoken_ranks", "empty", "")
    # GPT-2's two files, separated by "\n=====\n" (fuzz/gpt2_vocab_fuzz.cc).
    encoder = {c: r for r, c in enumerate(bytes_to_unicode().values())}
    for a, b in MERGES:
        encoder[a + b] = len(encoder)
    vocab_bpe = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in MERGES)
    write("gpt2_vocab", "small", vocab_bpe + "\n=====\n" + json.dumps(encoder, ensure_ascii=False))
    encoder["<|endoftext|>"] = len(encoder)
    write("gpt2_vocab", "with-eot", vocab_bpe + "\n=====\n" + json.dumps(encoder))
    write("gpt2_vocab", "disagree", "#version: 0.2\nh e\n\n=====\n{\"he\": 0}")


def text_seeds():
    texts = {
        "book": "Your journey starts with one step.",
        "contractions": "I'm you'RE they'll 'tis ''s\n",
        "spaces": "a  b\t\tc \n\n  d   \r\n",
        "numbers": "12345 6.7e8 ١٢٣ ⅷ",
        "unicode": "héllo wörld — 你好 🙂 ﬁ ǅ \u0301e",
        "special": "before<|endoftext|>after<|endoftext|>",
        "invalid": b"a\xF0\x9F\x98b \xC0\xAF \xED\xA0\x80 \xFF\xFE end",
        "lines": "line one\nline two\n\nline four",
    }
    for name, t in texts.items():
        for target in ("bpe_gpt2", "utf8"):
            write(target, name, t)
    write("utf8", "truncated", b"\xE2\x82")
    write("utf8", "max", "\U0010FFFF\uFFFD\u0800\u07FF")
    write("utf8", "above-max", b"\xF4\x90\x80\x80\xF8\x88\x80\x80\x80")
    # PCRE2: a pattern line, then the text.
    for name, (pattern, text) in {
        "words": (r"\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]+", "Your journey starts with 12 steps!"),
        "gpt2": (r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", "Hello  world's 42\n"),
        "empty-match": (r"x*", "abc"),
        "backtrack": (r"(a+)+$", "a" * 30 + "b"),
        "lookbehind": (r"(?<=a)b|\X", "abab é"),
        "bad-pattern": (r"(unclosed", "text"),
    }.items():
        write("pretokenize_pcre2", name, pattern + "\n" + text)
    # encode --jsonl: a JSON string a line.
    write("jsonl", "lines", '"Your journey"\n  "starts"  \n"with \\"one\\" step.\\n"\n')
    write("jsonl", "escapes", '"\\u00e9\\ud83d\\ude00\\ud800x\\t\\/\\\\"\n"\\b\\f\\r"')
    write("jsonl", "bad", '"unterminated\n')
    write("jsonl", "not-a-string", '42\n')
    write("jsonl", "empty-lines", '""\n""\n')
    # decode's ids: a JSON array, or integers separated by spaces or commas.
    write("decode_ids", "array", "[89, 111, 117, 114, 256]")
    write("decode_ids", "words", "89 111,117\t114\n256")
    write("decode_ids", "nested", "[[1], 2]")
    write("decode_ids", "negative", "-1 99999999999999999999")
    write("decode_ids", "floats", "[1.5, 2e3, \"x\"]")


def hf_tokenizer(added=(), vocab_edit=None, pre_tokenizer=None, normalizer=None, merges_as_pairs=True):
    """A small byte-level tokenizer.json in the shape Qwen3's and Llama 3's take: the 256 byte
    symbols, MERGES, the added tokens; vocab_edit(vocab) may change the vocabulary."""
    vocab = {c: r for r, c in enumerate(bytes_to_unicode().values())}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    if vocab_edit:
        vocab_edit(vocab)
    n = len(vocab)
    split = {"type": "Split", "pattern": {"Regex": r"\p{L}+| ?[^\s\p{L}]+|\s+"}, "behavior": "Isolated",
             "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return json.dumps({
        "version": "1.0",
        "added_tokens": [dict(id=n + i, content=t, single_word=False, lstrip=False, rstrip=False, normalized=False,
                              special=special) for i, (t, special) in enumerate(added)],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer or {"type": "Sequence", "pretokenizers": [split, byte_level]},
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab,
                  "merges": [[a, b] for a, b in MERGES] if merges_as_pairs else [f"{a} {b}" for a, b in MERGES]},
    }, ensure_ascii=False)


def hf_seeds():
    # tokenizer.json: the real shapes, and the hostile ones issue 41 found (each small here).
    special = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<think>", False)]
    write("hf_tokenizer", "small", hf_tokenizer(special, normalizer={"type": "NFC"}))
    write("hf_tokenizer", "merges-as-strings", hf_tokenizer(special, merges_as_pairs=False))
    write("hf_tokenizer", "shared-prefixes", hf_tokenizer([("<" * k + "|", True) for k in range(1, 200)]))
    write("hf_tokenizer", "long-added-token", hf_tokenizer([("<" + "x" * 2000 + ">", True)]))
    write("hf_tokenizer", "id-1e8", hf_tokenizer(special, vocab_edit=lambda v: v.update({"Ġt": 10 ** 8})))
    write("hf_tokenizer", "id-fraction", hf_tokenizer(special, vocab_edit=lambda v: v.update({"Ġt": 1.5})))
    write("hf_tokenizer", "id-negative", hf_tokenizer(special, vocab_edit=lambda v: v.update({"Ġt": -3})))
    nested = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    for _ in range(40):  # Sequence nesting past its bound (16)
        nested = {"type": "Sequence", "pretokenizers": [nested]}
    write("hf_tokenizer", "nested-sequences", hf_tokenizer(special, pre_tokenizer=nested))
    write("hf_tokenizer", "deep-json", '{"model": ' + "[" * 3000 + "]" * 3000 + "}")  # past json_max_depth
    write("hf_tokenizer", "not-an-object", "[1, 2, 3]")
    # config.json: Llama 3's and Qwen3's, then keys of the wrong type, values past their ranges.
    llama = {"model_type": "llama", "vocab_size": 300, "hidden_size": 16, "intermediate_size": 24,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4,
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 64,
             "tie_word_embeddings": True, "hidden_act": "silu", "attention_bias": False,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 16}}
    qwen3 = dict(llama, model_type="qwen3", rope_scaling=None, tie_word_embeddings=False)
    write("hf_config", "llama", json.dumps(llama))
    write("hf_config", "qwen3", json.dumps(qwen3))
    for name, edit in {
        "layers-100000": {"num_hidden_layers": 100000},
        "vocab-2e63": {"vocab_size": 2 ** 63},
        "vocab-2e63-1": {"vocab_size": 2 ** 63 - 1},
        "rope-scaling-string": {"rope_scaling": "llama3"},
        "rope-factor-0": {"rope_scaling": dict(llama["rope_scaling"], factor=0)},
        "rope-factor-negative": {"rope_scaling": dict(llama["rope_scaling"], factor=-2.5)},
        "rope-type-number": {"rope_scaling": {"rope_type": 3}},
        "tie-string": {"tie_word_embeddings": "yes"},
        "bias-string": {"attention_bias": "no"},
        "width-fraction": {"hidden_size": 16.5},
        "model-type-unknown": {"model_type": "mistral"},
        "model-type-number": {"model_type": 5},
    }.items():
        write("hf_config", name, json.dumps(dict(llama, **edit)))
    write("hf_config", "deep", "[" * 3000 + "]" * 3000)
    write("hf_config", "truncated", json.dumps(llama)[:60])


def gguf(tensors, kvs, alignment=32, version=3):
    """A GGUF file: kvs [(key, type, payload bytes)], tensors [(name, ne, ggml type, data bytes)]."""
    def s(x):
        x = x.encode() if isinstance(x, str) else x
        return struct.pack("<Q", len(x)) + x
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, payload in kvs:
        out += s(key) + struct.pack("<I", t) + payload
    offset, blobs = 0, b""
    for name, ne, t, data in tensors:
        offset = (offset + alignment - 1) // alignment * alignment
        blobs = blobs.ljust(offset, b"\0") + data
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", t, offset)
        offset += len(data)
    out = out.ljust((len(out) + alignment - 1) // alignment * alignment, b"\0")
    return out + blobs


def gguf_seeds():
    string = lambda x: struct.pack("<Q", len(x)) + x.encode()
    kvs = [("general.architecture", 8, string("qwen3")), ("qwen3.block_count", 4, struct.pack("<I", 2)),
           ("qwen3.rope.freq_base", 6, struct.pack("<f", 1e6)), ("general.flag", 7, b"\1"),
           ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + string("a") + string("<|im_end|>")),
           ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 2) + struct.pack("<2f", 0, -1)),
           ("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, 2) + struct.pack("<2i", 1, 3))]
    q8 = struct.pack("<H", 0x3800) + bytes(range(32))
    q4 = struct.pack("<H", 0x4000) + bytes(range(16))
    q4k = struct.pack("<2H", 0x3C00, 0x3800) + bytes(range(12)) + bytes(range(128))
    q6k = bytes(range(128)) + bytes(range(64)) + bytes(range(16)) + struct.pack("<H", 0x3C00)
    tensors = [("token_embd.weight", [4, 2], 0, struct.pack("<8f", *range(8))),
               ("blk.0.attn_q.weight", [32, 1], 8, q8), ("blk.0.attn_k.weight", [32, 1], 2, q4),
               ("blk.0.ffn_up.weight", [256], 12, q4k), ("output.weight", [256], 14, q6k),
               ("blk.0.attn_norm.weight", [4], 1, struct.pack("<4H", 0x3C00, 0x7C00, 0x7E00, 1)),
               ("blk.0.ffn_norm.weight", [4], 30, struct.pack("<4H", 0x3F80, 0, 0xFF80, 0x7FC0))]
    write("gguf", "small", gguf(tensors, kvs))
    write("gguf", "aligned-64", gguf(tensors, kvs + [("general.alignment", 4, struct.pack("<I", 64))], 64))
    write("gguf", "version-2", gguf(tensors[:2], kvs[:2], version=2))
    write("gguf", "truncated", gguf(tensors, kvs)[:-7])
    write("gguf", "count-2e62", b"GGUF" + struct.pack("<IQQ", 3, 2 ** 62, 0))
    write("gguf", "string-2e40", gguf([], [("k", 8, struct.pack("<Q", 2 ** 40))]))
    write("gguf", "array-2e62", gguf([], [("k", 9, struct.pack("<IQ", 4, 2 ** 62))]))
    write("gguf", "duplicate-key", gguf([], kvs[:2] + kvs[:1]))
    write("gguf", "duplicate-tensor", gguf(tensors[:1] + tensors[:1], []))
    write("gguf", "rows-not-blocks", gguf([("w", [33, 1], 8, q8 + q8)], []))
    write("gguf", "unknown-type", gguf([("w", [4], 99, b"\0" * 16)], []))
    write("gguf", "version-1", b"GGUF" + struct.pack("<IQQ", 1, 0, 0))
    write("gguf", "big-endian", b"GGUF" + struct.pack(">IQQ", 3, 0, 0))


def gguf_model_seeds(qkv):
    """Small models of every family qkv reads from GGUF (llama, qwen2, qwen3, gpt2, qwen35), each a
    Hugging Face folder written here (weights from a fixed sequence, norms near 1) and converted by
    `qkv convert --to gguf` with hf_tokenizer()'s small tokenizer.json; rows of 32 and 64 numbers
    (Q8_0's and Q4_0's blocks), one or two layers, a vocabulary of 300."""
    V, E, F = 300, 64, 96
    def f32(name, shape, scale=0.05, base=0.0):
        n = 1
        for d in shape:
            n *= d
        vals = [base + scale * (((i * 2654435761 + len(name)) % 1009) / 504.5 - 1.0) for i in range(n)]
        return (name, "F32", list(shape), struct.pack(f"<{n}f", *vals))
    def llama_layer(p, heads, kv_heads, D, bias=False, qk_norm=False):
        t = [f32(p + "input_layernorm.weight", (E,), 0.1, 1.0), f32(p + "post_attention_layernorm.weight", (E,), 0.1, 1.0),
             f32(p + "self_attn.q_proj.weight", (heads * D, E)), f32(p + "self_attn.k_proj.weight", (kv_heads * D, E)),
             f32(p + "self_attn.v_proj.weight", (kv_heads * D, E)), f32(p + "self_attn.o_proj.weight", (E, heads * D)),
             f32(p + "mlp.gate_proj.weight", (F, E)), f32(p + "mlp.up_proj.weight", (F, E)),
             f32(p + "mlp.down_proj.weight", (E, F))]
        if bias:
            t += [f32(p + f"self_attn.{x}_proj.bias", (n * D,)) for x, n in (("q", heads), ("k", kv_heads), ("v", kv_heads))]
        if qk_norm:
            t += [f32(p + "self_attn.q_norm.weight", (D,), 0.1, 1.0), f32(p + "self_attn.k_norm.weight", (D,), 0.1, 1.0)]
        return t
    llama = {"model_type": "llama", "vocab_size": V, "hidden_size": E, "intermediate_size": F,
             "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 64, "tie_word_embeddings": True,
             "hidden_act": "silu", "attention_bias": False,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 16}}
    qwen3 = dict(llama, model_type="qwen3", rope_scaling=None, tie_word_embeddings=False, rope_theta=1e6)
    qwen2 = dict(llama, model_type="qwen2", rope_scaling=None, head_dim=None, num_attention_heads=2,
                 attention_bias=True)
    del qwen2["head_dim"]
    embed = [f32("model.embed_tokens.weight", (V, E)), f32("model.norm.weight", (E,), 0.1, 1.0)]
    qwen35_text = {"model_type": "qwen3_5_text", "vocab_size": V, "hidden_size": E, "intermediate_size": F,
                   "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                   "rms_norm_eps": 1e-6, "max_position_embeddings": 64, "hidden_act": "silu", "attention_bias": False,
                   "attn_output_gate": True, "layer_types": ["linear_attention", "full_attention"],
                   "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                                       "mrope_interleaved": True, "mrope_section": [11, 11, 10]},
                   "linear_num_value_heads": 2, "linear_num_key_heads": 1, "linear_key_head_dim": 32,
                   "linear_value_head_dim": 32, "linear_conv_kernel_dim": 3, "full_attention_interval": 2}
    lp, fp, C = "model.language_model.layers.0.", "model.language_model.layers.1.", 2 * 32 + 2 * 32
    qwen35 = [f32("model.language_model.embed_tokens.weight", (V, E)),
              f32("model.language_model.norm.weight", (E,), 0.1),
              f32(lp + "input_layernorm.weight", (E,), 0.1), f32(lp + "post_attention_layernorm.weight", (E,), 0.1),
              f32(lp + "linear_attn.in_proj_qkv.weight", (C, E)), f32(lp + "linear_attn.in_proj_z.weight", (64, E)),
              f32(lp + "linear_attn.in_proj_b.weight", (2, E)), f32(lp + "linear_attn.in_proj_a.weight", (2, E)),
              f32(lp + "linear_attn.conv1d.weight", (C, 1, 3), 0.3), f32(lp + "linear_attn.dt_bias", (2,), 0.5),
              f32(lp + "linear_attn.A_log", (2,), 0.5), f32(lp + "linear_attn.norm.weight", (32,), 0.1, 1.0),
              f32(lp + "linear_attn.out_proj.weight", (E, 64)),
              f32(fp + "input_layernorm.weight", (E,), 0.1), f32(fp + "post_attention_layernorm.weight", (E,), 0.1),
              f32(fp + "self_attn.q_proj.weight", (2 * 2 * 32, E)), f32(fp + "self_attn.k_proj.weight", (32, E)),
              f32(fp + "self_attn.v_proj.weight", (32, E)), f32(fp + "self_attn.o_proj.weight", (E, 64)),
              f32(fp + "self_attn.q_norm.weight", (32,), 0.1), f32(fp + "self_attn.k_norm.weight", (32,), 0.1)]
    for p in (lp, fp):
        qwen35 += [f32(p + "mlp.gate_proj.weight", (F, E)), f32(p + "mlp.up_proj.weight", (F, E)),
                   f32(p + "mlp.down_proj.weight", (E, F))]
    gpt = [f32("wte.weight", (V, E)), f32("wpe.weight", (16, E)), f32("ln_f.weight", (E,), 0.1, 1.0), f32("ln_f.bias", (E,))]
    for x, shape in (("ln_1.weight", (E,)), ("ln_1.bias", (E,)), ("attn.c_attn.weight", (E, 3 * E)),
                     ("attn.c_attn.bias", (3 * E,)), ("attn.c_proj.weight", (E, E)), ("attn.c_proj.bias", (E,)),
                     ("ln_2.weight", (E,)), ("ln_2.bias", (E,)), ("mlp.c_fc.weight", (E, 4 * E)),
                     ("mlp.c_fc.bias", (4 * E,)), ("mlp.c_proj.weight", (4 * E, E)), ("mlp.c_proj.bias", (E,))):
        gpt.append(f32("h.0." + x, shape, 0.1, 1.0) if x.endswith("_1.weight") or x.endswith("_2.weight") else f32("h.0." + x, shape))
    special = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<think>", False)]
    cases = [
        ("llama-q4_0", llama, embed + llama_layer("model.layers.0.", 2, 1, 32), "q4_0"),
        ("qwen3-q8_0", qwen3, embed + llama_layer("model.layers.0.", 2, 1, 32, qk_norm=True) +
         [f32("lm_head.weight", (V, E))], "q8_0"),
        ("qwen2-f16", qwen2, embed + llama_layer("model.layers.0.", 2, 1, 32, bias=True), "f16"),
        ("gpt2-q8_0", {"n_embd": E, "n_head": 2, "n_layer": 1, "n_positions": 16, "vocab_size": V,
                       "layer_norm_epsilon": 1e-5}, gpt, "q8_0"),
        ("qwen35-q8_0", {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
                         "tie_word_embeddings": True, "text_config": qwen35_text}, qwen35, "q8_0"),
    ]
    # the splits GGUF names (tokenizer.ggml.pre): Llama 3's, and Qwen's for the others
    letters = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}%s| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    rest = r"\s*[\r\n]+|\s+(?!\S)|\s+"
    splits = {"llama": letters % "{1,3}" + rest, "qwen": letters % "" + rest}
    with tempfile.TemporaryDirectory() as tmp:
        for name, config, tensors, qtype in cases:
            tokenizer = os.path.join(tmp, name + "-tokenizer.json")
            split = {"type": "Split", "pattern": {"Regex": splits["llama" if name.startswith("llama") else "qwen"]},
                     "behavior": "Isolated", "invert": False}
            byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
            with open(tokenizer, "w", encoding="utf-8") as f:
                f.write(hf_tokenizer(special, pre_tokenizer={"type": "Sequence", "pretokenizers": [split, byte_level]}))
            folder = os.path.join(tmp, name)
            os.makedirs(folder)
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(config, f)
            with open(os.path.join(folder, "model.safetensors"), "wb") as f:
                f.write(safetensors(tensors, {"format": "pt"}))
            out = os.path.join(tmp, name + ".gguf")
            subprocess.run([qkv, "convert", "--weights", folder, "--to", "gguf", "--type", qtype,
                            "--tokenizer", tokenizer, "--out", out], check=True, stdout=subprocess.DEVNULL)
            with open(out, "rb") as f:
                write("gguf_model", name, f.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", help="the qkv binary, for the checkpoint seeds (qkv train --steps 2) and the GGUF "
                    "models (qkv convert --to gguf)")
    a = ap.parse_args()
    safetensors_seeds()
    gpt_seeds()
    rank_seeds()
    text_seeds()
    hf_seeds()
    gguf_seeds()
    if a.qkv:
        checkpoint_seeds(a.qkv)
        gguf_model_seeds(a.qkv)


if __name__ == "__main__":
    main()
