"""The PyTorch twin of qkv's Qwen3.5 model (include/qkv/models/qwen3_5.h), written for these tests from the
book's notebook (ch05/16_qwen3.5), its linear-attention layer book_classes.Qwen3_5GatedDeltaNet:

    cfg = {"vocab_size": V, "emb_dim": E, "hidden_dim": F, "n_layers": L, "n_heads": H, "n_kv_groups": G,
           "head_dim": D, "partial_rotary_factor": f, "rope_base": theta, "rms_eps": eps, "context_length": C,
           "layer_types": [...], "linear": {"value_heads", "key_heads", "key_dim", "value_dim", "conv_kernel"},
           "tied": bool}
    model = Qwen3_5Model(cfg)                        # drawn as the notebook's model draws
    logits = model(ids)                              # ids (B, T) long -> (B, T, V)
    hf = to_hugging_face(model)                      # Hugging Face's tensor names (model.language_model.*)
    config_json(cfg)                                 # Hugging Face's config.json for it
    generate(model, idx, max_new_tokens, context_size, temperature, top_k, stop_ids)   # llama_model's loop

Blocks: x = x + mixer(norm1(x)); x = x + ff(norm2(x)); the mixer is the gated attention
(full_attention: W_query (2 H D, E) packs each head's D query rows then its D gate rows; QK-norm; RoPE
"rotate half" on the first R = D f dims; context * sigmoid(gate); out_proj) or the Gated DeltaNet
(linear_attention). Every RMSNorm but the DeltaNet's gated one scales by 1 + weight, zero-initialised.
"""

import torch
import torch.nn as nn

from book_classes import Qwen3_5GatedDeltaNet
from llama_model import generate  # noqa: F401  (chapter 5's loop, the same for every twin)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def rotary_dims(cfg):
    return int(cfg["head_dim"] * cfg["partial_rotary_factor"])


def rope_params(rotary_dim, theta_base, context_length, dtype=torch.float64):
    """(cos, sin), each (context_length, R): angles t * inv_freq[i] for the pair (i, i + R/2)."""
    inv_freq = 1.0 / (theta_base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    angles = torch.arange(context_length, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=1)
    return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)


def apply_rope(x, cos, sin):
    """x (B, heads, T, D): the first R dims rotated (pairs i, i + R/2), the rest passed."""
    T, R = x.shape[2], cos.shape[1]
    head, rest = x[..., :R], x[..., R:]
    rotated = torch.cat((-head[..., R // 2:], head[..., :R // 2]), dim=-1)
    return torch.cat([head * cos[:T].to(x.dtype) + rotated * sin[:T].to(x.dtype), rest], dim=-1)


class GatedAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, H, G, D = cfg["emb_dim"], cfg["n_heads"], cfg["n_kv_groups"], cfg["head_dim"]
        self.H, self.G, self.D = H, G, D
        self.W_query = nn.Linear(E, 2 * H * D, bias=False)
        self.W_key = nn.Linear(E, G * D, bias=False)
        self.W_value = nn.Linear(E, G * D, bias=False)
        self.out_proj = nn.Linear(H * D, E, bias=False)
        self.q_norm = RMSNorm(D, cfg["rms_eps"])
        self.k_norm = RMSNorm(D, cfg["rms_eps"])

    def forward(self, x, cos, sin):
        b, T, _ = x.shape
        H, G, D = self.H, self.G, self.D
        q, gate = torch.chunk(self.W_query(x).view(b, T, H, 2 * D), 2, dim=-1)
        gate = gate.reshape(b, T, H * D)
        q = self.q_norm(q.transpose(1, 2))
        k = self.k_norm(self.W_key(x).view(b, T, G, D).transpose(1, 2))
        v = self.W_value(x).view(b, T, G, D).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
        scores = (q @ k.transpose(2, 3)).masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        context = (torch.softmax(scores / D ** 0.5, dim=-1) @ v).transpose(1, 2).reshape(b, T, H * D)
        return self.out_proj(context * torch.sigmoid(gate))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], bias=False)
        self.fc2 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], bias=False)
        self.fc3 = nn.Linear(cfg["hidden_dim"], cfg["emb_dim"], bias=False)

    def forward(self, x):
        return self.fc3(nn.functional.silu(self.fc1(x)) * self.fc2(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg, layer_type):
        super().__init__()
        self.layer_type = layer_type
        if layer_type == "full_attention":
            self.token_mixer = GatedAttention(cfg)
        else:
            l = cfg["linear"]
            self.token_mixer = Qwen3_5GatedDeltaNet(cfg["emb_dim"], l["value_heads"], l["key_heads"], l["key_dim"],
                                                    l["value_dim"], l["conv_kernel"], eps=cfg["rms_eps"])
        self.ff = FeedForward(cfg)
        self.norm1 = RMSNorm(cfg["emb_dim"], cfg["rms_eps"])
        self.norm2 = RMSNorm(cfg["emb_dim"], cfg["rms_eps"])

    def forward(self, x, cos, sin):
        h = self.norm1(x)
        x = x + (self.token_mixer(h, cos, sin) if self.layer_type == "full_attention" else self.token_mixer(h))
        return x + self.ff(self.norm2(x))


class Qwen3_5Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.trf_blocks = nn.ModuleList([TransformerBlock(cfg, t) for t in cfg["layer_types"]])
        self.final_norm = RMSNorm(cfg["emb_dim"], cfg["rms_eps"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)
        if cfg["tied"]:
            self.out_head.weight = self.tok_emb.weight
        self.cos, self.sin = rope_params(rotary_dims(cfg), cfg["rope_base"], cfg["context_length"], torch.float32)

    def forward(self, ids):
        x = self.tok_emb(ids)
        for block in self.trf_blocks:
            x = block(x, self.cos, self.sin)
        return self.out_head(self.final_norm(x))


def hf_names(cfg):
    """[(twin name, Hugging Face name)] for every parameter (the head only when untied)."""
    p = "model.language_model."
    pairs = [("tok_emb.weight", p + "embed_tokens.weight")]
    for i, kind in enumerate(cfg["layer_types"]):
        t, h = f"trf_blocks.{i}.", f"{p}layers.{i}."
        if kind == "full_attention":
            pairs += [(t + "token_mixer." + a, h + "self_attn." + b) for a, b in [
                ("W_query.weight", "q_proj.weight"), ("W_key.weight", "k_proj.weight"),
                ("W_value.weight", "v_proj.weight"), ("out_proj.weight", "o_proj.weight"),
                ("q_norm.weight", "q_norm.weight"), ("k_norm.weight", "k_norm.weight")]]
        else:
            pairs += [(t + "token_mixer." + n, h + "linear_attn." + n) for n in [
                "conv1d.weight", "dt_bias", "A_log", "norm.weight", "out_proj.weight", "in_proj_qkv.weight",
                "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight"]]
        pairs += [(t + "ff.fc1.weight", h + "mlp.gate_proj.weight"), (t + "ff.fc2.weight", h + "mlp.up_proj.weight"),
                  (t + "ff.fc3.weight", h + "mlp.down_proj.weight"), (t + "norm1.weight", h + "input_layernorm.weight"),
                  (t + "norm2.weight", h + "post_attention_layernorm.weight")]
    pairs.append(("final_norm.weight", p + "norm.weight"))
    if not cfg["tied"]:
        pairs.append(("out_head.weight", "lm_head.weight"))
    return pairs


def to_hugging_face(model):
    state = dict(model.named_parameters())
    return {hf: state[twin].detach().contiguous() for twin, hf in hf_names(model.cfg)}


def config_json(cfg):
    l = cfg["linear"]
    text = {"model_type": "qwen3_5_text", "vocab_size": cfg["vocab_size"], "hidden_size": cfg["emb_dim"],
            "intermediate_size": cfg["hidden_dim"], "num_hidden_layers": cfg["n_layers"],
            "num_attention_heads": cfg["n_heads"], "num_key_value_heads": cfg["n_kv_groups"],
            "head_dim": cfg["head_dim"], "rms_norm_eps": cfg["rms_eps"],
            "max_position_embeddings": cfg["context_length"], "hidden_act": "silu", "attention_bias": False,
            "attn_output_gate": True, "layer_types": cfg["layer_types"],
            "rope_parameters": {"rope_type": "default", "rope_theta": cfg["rope_base"],
                                "partial_rotary_factor": cfg["partial_rotary_factor"],
                                "mrope_interleaved": True, "mrope_section": [11, 11, 10]},
            "linear_num_value_heads": l["value_heads"], "linear_num_key_heads": l["key_heads"],
            "linear_key_head_dim": l["key_dim"], "linear_value_head_dim": l["value_dim"],
            "linear_conv_kernel_dim": l["conv_kernel"], "full_attention_interval": 4}
    return {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
            "tie_word_embeddings": cfg["tied"], "text_config": text,
            "vision_config": {"model_type": "qwen3_5_vision", "depth": 1}}


def perturb(model, seed):
    """Every norm's weight and the DeltaNet's dt_bias moved off their initial values (so that one taken
    for another shows); the draws from torch.Generator(seed)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("dt_bias"):
                p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model
