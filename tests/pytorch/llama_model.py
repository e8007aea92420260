"""The PyTorch twin of qkv's Llama 3, Qwen2.5 and Qwen3 models (include/qkv/models/llama.h), written for these
tests from the formulas, as the book's bonus chapters (Llama 3.2 and Qwen3 from scratch) write them:

    cfg = {"family": "llama" | "qwen2" | "qwen3", "vocab_size": V, "emb_dim": E, "hidden_dim": F, "n_layers": L,
           "n_heads": H, "n_kv_groups": G, "head_dim": D, "rope_base": theta, "rms_eps": eps,
           "context_length": C, "rope_freq": None | {"factor", "low_freq_factor", "high_freq_factor",
           "original_context_length"}, "tied": bool}
    model = LlamaModel(cfg)
    logits = model(ids)                              # ids (B, T) long -> (B, T, V)
    hf = to_hugging_face(model)                      # Hugging Face's tensor names
    config_json(cfg)                                 # Hugging Face's config.json for it
    generate(model, idx, max_new_tokens, context_size, temperature, top_k, stop_ids)   # chapter 5's loop

Blocks: x = x + att(norm1(x)); x = x + ff(norm2(x)); RMSNorm everywhere (weight only); the attention
is grouped-query with RoPE (the "rotate half" layout) and, for Qwen3, an RMSNorm over each head's
queries and keys before RoPE; no biases but Qwen2's on the query, key and value projections (head_dim
then emb_dim / n_heads, as Qwen2's config.json has none); FeedForward fc3(silu(fc1(x)) * fc2(x)).
"""

import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps))


def rope_params(head_dim, theta_base, context_length, freq_config=None, dtype=torch.float64):
    """(cos, sin), each (context_length, head_dim): angles t * inv_freq[i] for the pair (i, i + D/2)."""
    inv_freq = 1.0 / (theta_base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if freq_config is not None:  # Llama 3's: long wavelengths slowed by factor, a smooth band between
        factor = freq_config["factor"]
        low, high = freq_config["low_freq_factor"], freq_config["high_freq_factor"]
        original = freq_config["original_context_length"]
        low_freq_wavelen, high_freq_wavelen = original / low, original / high
        wavelen = 2 * torch.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (original / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * (inv_freq / factor) + smooth * inv_freq
        medium = (wavelen <= low_freq_wavelen) & (wavelen >= high_freq_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    positions = torch.arange(context_length, dtype=torch.float64)
    angles = positions[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=1)
    return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)


def apply_rope(x, cos, sin):
    """x (B, heads, T, D): rotate each pair (i, i + D/2) by its angle at its position."""
    T, D = x.shape[2], x.shape[3]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos[:T].to(x.dtype) + rotated * sin[:T].to(x.dtype)


class GroupedQueryAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, H, G, D = cfg["emb_dim"], cfg["n_heads"], cfg["n_kv_groups"], cfg["head_dim"]
        self.H, self.G, self.D = H, G, D
        bias = cfg["family"] == "qwen2"
        self.W_query = nn.Linear(E, H * D, bias=bias)
        self.W_key = nn.Linear(E, G * D, bias=bias)
        self.W_value = nn.Linear(E, G * D, bias=bias)
        self.out_proj = nn.Linear(H * D, E, bias=False)
        self.qk_norm = cfg["family"] == "qwen3"
        if self.qk_norm:
            self.q_norm = RMSNorm(D, cfg["rms_eps"])
            self.k_norm = RMSNorm(D, cfg["rms_eps"])

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.W_query(x).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.W_key(x).view(B, T, self.G, self.D).transpose(1, 2)
        v = self.W_value(x).view(B, T, self.G, self.D).transpose(1, 2)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k = k.repeat_interleave(self.H // self.G, dim=1)
        v = v.repeat_interleave(self.H // self.G, dim=1)
        scores = q @ k.transpose(2, 3)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, -torch.inf)
        weights = torch.softmax(scores / self.D ** 0.5, dim=-1)
        ctx = (weights @ v).transpose(1, 2).reshape(B, T, self.H * self.D)
        return self.out_proj(ctx)


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], bias=False)  # gate
        self.fc2 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], bias=False)  # up
        self.fc3 = nn.Linear(cfg["hidden_dim"], cfg["emb_dim"], bias=False)  # down

    def forward(self, x):
        return self.fc3(nn.functional.silu(self.fc1(x)) * self.fc2(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm1 = RMSNorm(cfg["emb_dim"], cfg["rms_eps"])
        self.att = GroupedQueryAttention(cfg)
        self.norm2 = RMSNorm(cfg["emb_dim"], cfg["rms_eps"])
        self.ff = FeedForward(cfg)

    def forward(self, x, cos, sin):
        x = x + self.att(self.norm1(x), cos, sin)
        return x + self.ff(self.norm2(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.trf_blocks = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = RMSNorm(cfg["emb_dim"], cfg["rms_eps"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)
        if cfg["tied"]:
            self.out_head.weight = self.tok_emb.weight
        self.cos, self.sin = rope_params(cfg["head_dim"], cfg["rope_base"], cfg["context_length"], cfg["rope_freq"])

    def forward(self, ids):
        x = self.tok_emb(ids)
        for block in self.trf_blocks:
            x = block(x, self.cos, self.sin)
        return self.out_head(self.final_norm(x))


# Hugging Face's names for the twin's parameters (llama.h's state names).
def hf_names(cfg):
    """[(twin name, Hugging Face name)] for every parameter (the head only when untied)."""
    pairs = [("tok_emb.weight", "model.embed_tokens.weight")]
    for i in range(cfg["n_layers"]):
        t, h = f"trf_blocks.{i}.", f"model.layers.{i}."
        pairs += [(t + "norm1.weight", h + "input_layernorm.weight"),
                  (t + "att.W_query.weight", h + "self_attn.q_proj.weight"),
                  (t + "att.W_key.weight", h + "self_attn.k_proj.weight"),
                  (t + "att.W_value.weight", h + "self_attn.v_proj.weight"),
                  (t + "att.out_proj.weight", h + "self_attn.o_proj.weight")]
        if cfg["family"] == "qwen2":
            pairs += [(t + f"att.{w}.bias", h + f"self_attn.{p}.bias")
                      for w, p in [("W_query", "q_proj"), ("W_key", "k_proj"), ("W_value", "v_proj")]]
        if cfg["family"] == "qwen3":
            pairs += [(t + "att.q_norm.weight", h + "self_attn.q_norm.weight"),
                      (t + "att.k_norm.weight", h + "self_attn.k_norm.weight")]
        pairs += [(t + "norm2.weight", h + "post_attention_layernorm.weight"),
                  (t + "ff.fc1.weight", h + "mlp.gate_proj.weight"),
                  (t + "ff.fc2.weight", h + "mlp.up_proj.weight"),
                  (t + "ff.fc3.weight", h + "mlp.down_proj.weight")]
    pairs.append(("final_norm.weight", "model.norm.weight"))
    if not cfg["tied"]:
        pairs.append(("out_head.weight", "lm_head.weight"))
    return pairs


def to_hugging_face(model):
    state = dict(model.named_parameters())
    return {hf: state[twin].detach().contiguous() for twin, hf in hf_names(model.cfg)}


def config_json(cfg):
    j = {"model_type": cfg["family"], "vocab_size": cfg["vocab_size"], "hidden_size": cfg["emb_dim"],
         "intermediate_size": cfg["hidden_dim"], "num_hidden_layers": cfg["n_layers"],
         "num_attention_heads": cfg["n_heads"], "num_key_value_heads": cfg["n_kv_groups"],
         "head_dim": cfg["head_dim"], "rms_norm_eps": cfg["rms_eps"], "rope_theta": cfg["rope_base"],
         "max_position_embeddings": cfg["context_length"], "tie_word_embeddings": cfg["tied"],
         "hidden_act": "silu", "attention_bias": False, "torch_dtype": "float32"}
    if cfg["family"] == "qwen2":  # Qwen2's config.json: no head_dim, no attention_bias (q, k, v always have one)
        assert cfg["head_dim"] * cfg["n_heads"] == cfg["emb_dim"], "Qwen2's head_dim is emb_dim / n_heads"
        del j["head_dim"], j["attention_bias"]
        j.update(use_sliding_window=False, sliding_window=cfg["context_length"], max_window_layers=cfg["n_layers"])
    if cfg["rope_freq"] is not None:
        f = cfg["rope_freq"]
        j["rope_scaling"] = {"rope_type": "llama3", "factor": f["factor"], "low_freq_factor": f["low_freq_factor"],
                             "high_freq_factor": f["high_freq_factor"],
                             "original_max_position_embeddings": f["original_context_length"]}
    return j


def perturb(model, seed):
    """Every RMSNorm's weight moved off 1 (so that one taken for another shows); the draws from
    torch.Generator(seed)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight") or "_norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
    return model


def generate(model, idx, max_new_tokens, context_size, temperature=0.0, top_k=None, stop_ids=()):
    """Chapter 5's loop: top-k, temperature, torch.multinomial; stops (without adding it) at a stop id."""
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)[:, -1, :]
        if top_k is not None:
            top_logits, _ = torch.topk(logits, top_k)
            logits = torch.where(logits < top_logits[:, -1], torch.tensor(float("-inf")), logits)
        if temperature > 0.0:
            probs = torch.softmax(logits / temperature, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
        else:
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        if idx_next.item() in stop_ids:
            break
        idx = torch.cat((idx, idx_next), dim=1)
    return idx
