"""The Llama 3 / Qwen2.5 / Qwen3 twin (tests/pytorch/llama_model.py) written as llama.cpp's GGUF v3 file, laid out
as llama.cpp's convert_hf_to_gguf.py writes the Hugging Face model the twin stands for (checked against
the llama.cpp source node-llama-cpp 3.22.1 bundles). A small serializer of its own (struct-packing),
depending only on numpy, torch and the standard library.

    m = llama_files.twin(llama_files.make_cfg(...), seed)
    tokenizer, V = llama_files.small_tokenizer("qwen3" | "llama")
    write_gguf(m, "model.gguf", tokenizer, type="f32" | "f16" | "bf16" | "q8_0")
    kv, tensors = read_gguf("model.gguf")     # {key: value}, {name: (ggml type, ne, bytes)}: for checks

What convert writes, and so this:
  metadata  general.architecture ("llama" | "qwen2" | "qwen3"), general.type "model", general.name,
            {arch}.block_count, context_length, embedding_length, feed_forward_length,
            attention.head_count, attention.head_count_kv, rope.freq_base (f32),
            attention.layer_norm_rms_epsilon (f32), attention.key_length and value_length (head_dim:
            written whenever config.json has head_dim, which the twin's has but for qwen2), general.file_type
            (0 F32, 1 F16, 32 BF16, 7 Q8_0), and for "llama" also llama.vocab_size and
            llama.rope.dimension_count (= head_dim); general.quantization_version 2. Integers are
            UINT32, floats FLOAT32. Llama 3 RoPE scaling is no key: it is the tensor rope_freqs.weight
            (F32, head_dim/2 factors by which llama.cpp divides each frequency), written first.
  tensors   token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm
            (qwen3), ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output (absent when tied), all
            ".weight", and blk.N.attn_{q,k,v}.bias (qwen2), in the order of the Hugging Face names sorted (a safetensors file's order);
            dimensions stored reversed (ne0 = the row length = in_features). 1-D tensors and names
            ending "_norm.weight" stay F32; 2-D ones take the type (Q8_0 falls back to F16 for a tensor
            whose rows are not a multiple of 32). For "llama", attn_q and attn_k rows are permuted from
            Hugging Face's rotate-half layout to llama.cpp's adjacent pairs: within each head of D rows,
            new row 2*i + j = old row j*D/2 + i (i < D/2, j in {0, 1}); attn_k per KV head.
  tokenizer tokenizer.ggml.model "gpt2", .pre ("qwen2" | "llama-bpe"), .tokens (ids 0..V-1: the
            byte-level strings; ids the tokenizer lacks are "[PAD<id>]"), .token_type (INT32: 1 normal,
            3 control = a special added token or one that looks like "<|...|>", 4 user-defined = another
            added token, 5 unused = [PAD]), .merges ("a b"; a space inside a pair's part written as
            U+0120), then the special ids (UINT32) and add_bos_token (BOOL) as convert derives them
            from the official repos' tokenizer_config.json / config.json (see SPECIAL_IDS).
"""

import struct

import numpy as np
import torch

import llama_model

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# GGUF value types
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
# ggml tensor types
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
# llama_ftype (general.file_type) and the ggml type of the 2-D weights for each requested type
FILE_TYPES = {"f32": (0, GGML_F32), "f16": (1, GGML_F16), "bf16": (32, GGML_BF16), "q8_0": (7, GGML_Q8_0)}
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5

ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
PRE = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2"}
# What convert writes for the official repos (meta-llama/Llama-3.2-*-Instruct, Qwen/Qwen3-*), in its
# order: [(kind, token text)], then add_bos_token (None: from the tokenizer.json's post-processor,
# template_adds_bos). Llama 3: bos from tokenizer_config's bos_token, eos from its eos_token
# (<|eot_id|> for Instruct, <|end_of_text|> for base), add_bos from the TemplateProcessing
# post-processor (Meta's files have one: true); Qwen3: eos <|im_end|> and pad <|endoftext|> from
# tokenizer_config, bos 151643 (<|endoftext|>) from config.json's bos_token_id, add_bos_token false;
# Qwen2.5-*-Instruct the same.
SPECIAL_IDS = {
    "qwen2": ([("eos", "<|im_end|>"), ("padding", "<|endoftext|>"), ("bos", "<|endoftext|>")], False),
    "llama": ([("bos", "<|begin_of_text|>"), ("eos", "<|eot_id|>")], None),
    "qwen3": ([("eos", "<|im_end|>"), ("padding", "<|endoftext|>"), ("bos", "<|endoftext|>")], False),
}


def template_adds_bos(tokenizer):
    """Whether the tokenizer.json dict's post-processor puts a special token before a text, as
    llama.cpp's converter reads it (a TemplateProcessing whose `single` starts with a SpecialToken,
    alone or in a Sequence)."""
    post = tokenizer.get("post_processor") or {}
    for p in post.get("processors", []) if post.get("type") == "Sequence" else [post]:
        if p.get("type") == "TemplateProcessing" and p.get("single") and "SpecialToken" in p["single"][0]:
            return True
    return False


# --- the serializer ---------------------------------------------------------------------------------

def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


_SCALARS = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i", FLOAT32: "<f",
            BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}


def _value(vtype, value):
    if vtype == STRING:
        return _string(value)
    return struct.pack(_SCALARS[vtype], value)


def _kv(key, vtype, value, elem_type=None):
    """One key/value pair; an array is (ARRAY, list, elem_type)."""
    out = _string(key) + struct.pack("<I", vtype)
    if vtype != ARRAY:
        return out + _value(vtype, value)
    out += struct.pack("<IQ", elem_type, len(value))
    if elem_type == STRING:
        return out + b"".join(_string(v) for v in value)
    return out + np.asarray(value, dtype=_SCALARS[elem_type]).tobytes()


def _pad(n, alignment):
    return (alignment - n % alignment) % alignment


def write_file(path, kvs, tensors, alignment=ALIGNMENT):
    """kvs: [(key, vtype, value[, elem_type])]; tensors: [(name, ggml type, ne (ggml order), bytes)]."""
    head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kvs))
    head += b"".join(_kv(*kv) for kv in kvs)
    offset = 0
    for name, ggml_type, ne, data in tensors:
        head += _string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        head += struct.pack("<IQ", ggml_type, offset)
        offset += len(data) + _pad(len(data), alignment)
    with open(path, "wb") as f:
        f.write(head + b"\0" * _pad(len(head), alignment))
        for _, _, _, data in tensors:
            f.write(data + b"\0" * _pad(len(data), alignment))
    return path


# --- ggml's number formats --------------------------------------------------------------------------

def to_bf16_bytes(x):
    """float32 -> bfloat16 bits, rounding to nearest even (ggml_compute_fp32_to_bf16; NaN kept quiet)."""
    n = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (n & 0x7FFFFFFF) > 0x7F800000
    rounded = (n + 0x7FFF + ((n >> 16) & 1)) >> 16
    bits = np.where(nan, (n >> 16) | 64, rounded)
    return bits.astype(np.uint16).tobytes()


def quantize_q8_0(x):
    """ggml's block_q8_0 for rows of a multiple of 32 values: per block of 32, d = amax / 127 (stored
    fp16), q = round-half-away(x / d) as int8 (x * (1/d), d still f32, as quantize_row_q8_0_ref)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    blocks = x.reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    v = np.abs(blocks * inv)
    whole = np.floor(v)
    q = np.sign(blocks) * (whole + (v - whole >= 0.5))  # roundf: halves away from zero, exactly
    out = np.concatenate([d.astype("<f2").view(np.uint8), q.astype(np.int8).view(np.uint8)], axis=1)
    return out.tobytes()


def dequantize_q8_0(data, shape):
    blocks = np.frombuffer(data, dtype=np.uint8).reshape(-1, 34)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(shape)


def encode_tensor(x, ggml_type):
    """(ggml type actually used, bytes) of a float32 numpy array."""
    if ggml_type == GGML_Q8_0 and x.shape[-1] % 32 != 0:
        ggml_type = GGML_F16  # convert's fallback (QuantError)
    if ggml_type == GGML_F32:
        return ggml_type, np.ascontiguousarray(x, dtype="<f4").tobytes()
    if ggml_type == GGML_F16:
        return ggml_type, np.ascontiguousarray(x, dtype=np.float32).astype("<f2").tobytes()
    if ggml_type == GGML_BF16:
        return ggml_type, to_bf16_bytes(x)
    if ggml_type == GGML_Q8_0:
        return ggml_type, quantize_q8_0(x)
    raise ValueError(f"ggml type {ggml_type}")


# --- the model --------------------------------------------------------------------------------------

def permute_rope_rows(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rows from rotate-half order (i, i + D/2)
    to adjacent pairs (2i, 2i + 1)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg):
    """rope_freqs.weight as convert computes it (generate_extra_tensors): per frequency the divisor."""
    f, D = cfg["rope_freq"], cfg["head_dim"]
    freqs = 1.0 / (cfg["rope_base"] ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    low, high, factor = f["low_freq_factor"], f["high_freq_factor"], f["factor"]
    old = f["original_context_length"]
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for freq in freqs.tolist():
        wavelen = 2 * np.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


_LAYER_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(hf):
    """llama.cpp's tensor name for a Hugging Face Llama / Qwen name (Qwen2's q, k, v biases too)."""
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.N.<module...>.weight
    if parts[:2] != ["model", "layers"] or parts[-1] not in ("weight", "bias"):
        raise ValueError(f"no GGUF name for {hf}")
    return f"blk.{parts[2]}.{_LAYER_NAMES['.'.join(parts[3:-1])]}.{parts[-1]}"


def tokenizer_arrays(tokenizer, vocab_size):
    """(tokens, token types, merges) as convert's get_vocab_base and SpecialVocab make them."""
    by_id = {i: t for t, i in tokenizer["model"]["vocab"].items()}
    added = {a["id"]: a for a in tokenizer.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    if max(by_id) >= vocab_size:
        raise ValueError(f"the tokenizer has id {max(by_id)}, the model's vocabulary {vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(TOKEN_UNUSED)
            continue
        t = by_id[i]
        tokens.append(t)
        if i in added:
            looks_special = t.startswith("<|") and t.endswith("|>")
            types.append(TOKEN_CONTROL if added[i].get("special") or looks_special else TOKEN_USER_DEFINED)
        else:
            types.append(TOKEN_NORMAL)
    merges = []
    for mg in tokenizer["model"].get("merges", []):
        if isinstance(mg, str):
            merges.append(mg)
        else:  # [a, b] (tokenizers >= 0.20): spaces inside a part written as U+0120
            merges.append(" ".join(p.replace(" ", "\u0120") for p in mg))
    return tokens, types, merges


def write_gguf(m, path, tokenizer, type="f32", name="qkv twin", alignment=None, specials=None):
    """The twin `m` (its cfg's family "llama", "qwen2" or "qwen3") as a GGUF v3 file at `path`, with the
    tokenizer.json dict `tokenizer`, the 2-D weights in `type`. `specials` overrides SPECIAL_IDS[family]:
    ([(kind, token text)], add_bos). `alignment` other than 32 is written as general.alignment."""
    cfg = m.cfg
    family = cfg["family"]
    arch = ARCH[family]
    file_type, weight_type = FILE_TYPES[type]
    E, H, G, D = cfg["emb_dim"], cfg["n_heads"], cfg["n_kv_groups"], cfg["head_dim"]
    V = cfg["vocab_size"]

    kvs = [("general.architecture", STRING, arch), ("general.type", STRING, "model"),
           ("general.name", STRING, name)]
    if alignment is not None and alignment != ALIGNMENT:
        kvs.append(("general.alignment", UINT32, alignment))
    a = arch + "."
    kvs += [(a + "block_count", UINT32, cfg["n_layers"]), (a + "context_length", UINT32, cfg["context_length"]),
            (a + "embedding_length", UINT32, E), (a + "feed_forward_length", UINT32, cfg["hidden_dim"]),
            (a + "attention.head_count", UINT32, H), (a + "attention.head_count_kv", UINT32, G),
            (a + "rope.freq_base", FLOAT32, float(cfg["rope_base"])),
            (a + "attention.layer_norm_rms_epsilon", FLOAT32, float(cfg["rms_eps"])),
            ("general.file_type", UINT32, file_type)]
    if family != "qwen2":  # Qwen2's config.json has no head_dim: convert writes no key_length
        kvs[-1:-1] = [(a + "attention.key_length", UINT32, D), (a + "attention.value_length", UINT32, D)]
    if family == "llama":
        kvs += [(a + "vocab_size", UINT32, V), (a + "rope.dimension_count", UINT32, D)]
    elif cfg["rope_freq"] is not None:
        raise ValueError("Llama 3 RoPE scaling on a qwen3 model: convert writes no such thing")
    kvs.append(("general.quantization_version", UINT32, 2))

    tokens, types, merges = tokenizer_arrays(tokenizer, V)
    kvs += [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, PRE[family]),
            ("tokenizer.ggml.tokens", ARRAY, tokens, STRING), ("tokenizer.ggml.token_type", ARRAY, types, INT32),
            ("tokenizer.ggml.merges", ARRAY, merges, STRING)]
    ids_of, add_bos = specials if specials is not None else SPECIAL_IDS[family]
    if add_bos is None:
        add_bos = template_adds_bos(tokenizer)
    text_to_id = {t: i for i, t in enumerate(tokens)}
    for kind, text in ids_of:
        if text in text_to_id:
            kvs.append((f"tokenizer.ggml.{kind}_token_id", UINT32, text_to_id[text]))
    kvs.append(("tokenizer.ggml.add_bos_token", BOOL, add_bos))

    tensors = []
    if cfg["rope_freq"] is not None:  # convert's generate_extra_tensors come first
        f = llama3_rope_factors(cfg)
        tensors.append(("rope_freqs.weight", GGML_F32, (f.shape[0],), f.tobytes()))
    hf = llama_model.to_hugging_face(m)
    for hf_name in sorted(hf):
        w = hf[hf_name].detach().to(torch.float32).cpu()
        if family == "llama" and hf_name.endswith("self_attn.q_proj.weight"):
            w = permute_rope_rows(w, H)
        elif family == "llama" and hf_name.endswith("self_attn.k_proj.weight"):
            w = permute_rope_rows(w, G)
        x = w.numpy()
        gname = gguf_name(hf_name)
        t = GGML_F32 if x.ndim <= 1 or gname.endswith("_norm.weight") else weight_type
        t, data = encode_tensor(x, t)
        tensors.append((gname, t, tuple(reversed(x.shape)), data))
    return write_file(path, kvs, tensors, alignment or ALIGNMENT)


# --- a reader, for checks ---------------------------------------------------------------------------

_TYPE_SIZE = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_BF16: (1, 2), GGML_Q8_0: (32, 34), 2: (32, 18), 12: (256, 144),
              14: (256, 210)}  # and Q4_0, Q4_K, Q6_K: their sizes only (the bench counts bytes)


def read_gguf(path):
    """({key: value}, {name: (ggml type, ne, bytes)}) of a GGUF v3 file this module can write."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v if len(v) > 1 else v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(vtype):
        if vtype == STRING:
            return string()
        if vtype == ARRAY:
            et, n = take("<IQ")
            return [value(et) for _ in range(n)]
        return take(_SCALARS[vtype])

    if buf[:4] != GGUF_MAGIC:
        raise ValueError(f"{path}: not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    if version != GGUF_VERSION:
        raise ValueError(f"{path}: GGUF version {version}")
    kv = {}
    for _ in range(n_kv):
        key = string()
        kv[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("<I")
        ne = struct.unpack_from(f"<{nd}Q", buf, pos)
        pos += 8 * nd
        t, off = take("<IQ")
        infos.append((name, t, ne, off))
    alignment = kv.get("general.alignment", ALIGNMENT)
    start = pos + _pad(pos, alignment)
    tensors = {}
    for name, t, ne, off in infos:
        block, size = _TYPE_SIZE[t]
        nbytes = int(np.prod(ne)) // block * size
        tensors[name] = (t, ne, buf[start + off:start + off + nbytes])
    return kv, tensors


def tensor_values(t, ne, data):
    """A tensor read by read_gguf as float32 numpy, in PyTorch's order (shape = reversed ne)."""
    shape = tuple(reversed(ne))
    if t == GGML_F32:
        return np.frombuffer(data, dtype="<f4").reshape(shape)
    if t == GGML_F16:
        return np.frombuffer(data, dtype="<f2").astype(np.float32).reshape(shape)
    if t == GGML_BF16:
        return (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if t == GGML_Q8_0:
        return dequantize_q8_0(data, shape)
    raise ValueError(f"ggml type {t}")
