"""The PyTorch twin of qkv's GPT model (include/qkv/models/gpt.h): chapter 4's GPTModel as the book
describes it, written for these tests, and GPT-2's weights in Hugging Face's layout.

    cfg = {"vocab_size": V, "context_length": C, "emb_dim": E, "n_heads": H, "n_layers": L,
           "drop_rate": p, "qkv_bias": bool}
    torch.manual_seed(s); model = GPTModel(cfg)      # the weights qkv draws from Generator(s)
    logits = model(ids)                              # ids (B, T) long -> (B, T, V)
    hf = to_hugging_face(model.state_dict())         # wte, wpe, h.N.attn.c_attn (Conv1D), ..., lm_head
    generate(model, idx, max_new_tokens, context_size, temperature, top_k, eos_id)   # chapter 5's

The attention is book_classes.MultiHeadAttention (chapter 3). Construction order: tok_emb, pos_emb,
the blocks (att, ff), out_head: the order qkv draws in.
"""

import torch
import torch.nn as nn

from book_classes import MultiHeadAttention


class LayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), GELU(),
                                    nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]))

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = MultiHeadAttention(d_in=cfg["emb_dim"], d_out=cfg["emb_dim"], context_length=cfg["context_length"],
                                      num_heads=cfg["n_heads"], dropout=cfg["drop_rate"], qkv_bias=cfg["qkv_bias"])
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"])
        self.norm2 = LayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x):
        shortcut = x
        x = self.drop_shortcut(self.att(self.norm1(x)))
        x = x + shortcut
        shortcut = x
        x = self.drop_shortcut(self.ff(self.norm2(x)))
        return x + shortcut


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        _, seq_len = in_idx.shape
        x = self.tok_emb(in_idx) + self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = self.trf_blocks(self.drop_emb(x))
        return self.out_head(self.final_norm(x))


def perturb(m, seed, head_scale=1.0):
    """Every LayerNorm's scale and shift and every bias of m moved off its initial value (drawn from
    a generator seeded `seed`), and the final norm's scale times head_scale (to spread the logits):
    a twin whose every parameter matters. Returns m."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith(".scale"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith(".shift") or name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
        m.final_norm.scale.mul_(head_scale)
    return m


def to_hugging_face(state, tied=False):
    """The book's state dict in transformers' GPT2 layout: Conv1D weights (in, out), q | k | v side
    by side in c_attn; lm_head.weight unless the head is tied to wte (then left out)."""
    hf = {"wte.weight": state["tok_emb.weight"], "wpe.weight": state["pos_emb.weight"]}
    n = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("trf_blocks.")) if any(
        k.startswith("trf_blocks.") for k in state) else 0
    for i in range(n):
        b, h = f"trf_blocks.{i}.", f"h.{i}."
        hf[h + "ln_1.weight"], hf[h + "ln_1.bias"] = state[b + "norm1.scale"], state[b + "norm1.shift"]
        hf[h + "attn.c_attn.weight"] = torch.cat([state[b + f"att.{w}.weight"] for w in ("W_query", "W_key", "W_value")]).T
        hf[h + "attn.c_attn.bias"] = torch.cat([state[b + f"att.{w}.bias"] for w in ("W_query", "W_key", "W_value")])
        hf[h + "attn.c_proj.weight"] = state[b + "att.out_proj.weight"].T
        hf[h + "attn.c_proj.bias"] = state[b + "att.out_proj.bias"]
        hf[h + "attn.bias"] = torch.tril(torch.ones(1, 1, 4, 4))  # the buffer transformers saves, to be skipped
        hf[h + "ln_2.weight"], hf[h + "ln_2.bias"] = state[b + "norm2.scale"], state[b + "norm2.shift"]
        hf[h + "mlp.c_fc.weight"], hf[h + "mlp.c_fc.bias"] = state[b + "ff.layers.0.weight"].T, state[b + "ff.layers.0.bias"]
        hf[h + "mlp.c_proj.weight"] = state[b + "ff.layers.2.weight"].T
        hf[h + "mlp.c_proj.bias"] = state[b + "ff.layers.2.bias"]
    hf["ln_f.weight"], hf["ln_f.bias"] = state["final_norm.scale"], state["final_norm.shift"]
    if not tied:
        hf["lm_head.weight"] = state["out_head.weight"]
    return {k: v.contiguous() for k, v in hf.items()}


def generate(model, idx, max_new_tokens, context_size, temperature=0.0, top_k=None, eos_id=None):
    """Chapter 5's generate, as the book writes it."""
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        logits = logits[:, -1, :]
        if top_k is not None:
            top_logits, _ = torch.topk(logits, top_k)
            min_val = top_logits[:, -1]
            logits = torch.where(logits < min_val, torch.tensor(float("-inf")).to(logits.device), logits)
        if temperature > 0.0:
            logits = logits / temperature
            probs = torch.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
        else:
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        if idx_next == eos_id:
            break
        idx = torch.cat((idx, idx_next), dim=1)
    return idx
