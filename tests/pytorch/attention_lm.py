"""The PyTorch twin of qkv's attention-only language model (include/qkv/train/attention_lm.h).

    model = AttentionLM(vocab_size, context_length, d_model, num_heads, num_layers, dropout, qkv_bias,
                        num_kv_heads=0, rope=None, rope_base=10000.0, window=0, alibi=False, softcap=0.0)
    logits = model(ids)        # ids (B, T) long -> (B, T, vocab_size)

With no variant on, each block is the book's MultiHeadAttention; with any (LMConfig's num_kv_heads,
rope "half" | "interleaved", rope_base, window, alibi, softcap), it is GroupedQueryAttention below,
written as the book's bonus code writes it: W_query (d_out rows), W_key and W_value
(num_kv_heads * head_dim rows), out_proj; RoPE from cos/sin precomputed for context_length positions
(angles in float64, rounded to float32, as qkv computes them: variants.rope_params); keys and values
repeat_interleave'd num_kv_groups = num_heads // num_kv_heads times; scores q k^T / sqrt(D), then
softcap * tanh(s / softcap), then - slope_h (i - j) (variants.alibi_slopes), then -inf above the
diagonal (the mask buffer) and where j <= i - window. A test may set after_rope, a function of
(queries, keys, values) applied between RoPE and the scores (to round them as a bf16 cache does).

token embedding + positional embedding -> num_layers x (x = x + MultiHeadAttention(x)) -> out_head.
Submodules are created in the order qkv creates them, so torch.manual_seed(s) followed by this
constructor holds exactly what qkv's AttentionLM built from Generator(s) holds, under the same
state-dict names; and in training mode the attention dropout draws the same masks.

    lr_at(step, max_lr, min_lr, warmup, total)   qkv's warm-up + cosine schedule (lr_schedule.h)
"""

import math

import torch
import torch.nn as nn

from book_classes import MultiHeadAttention
from variants import alibi_slopes, rope_params, rotate_every_two, rotate_half


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias=False,
                 rope=None, rope_base=10000.0, window=0, alibi=False, softcap=0.0):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        assert num_heads % num_kv_heads == 0, "num_heads must be divisible by num_kv_heads"
        self.d_out, self.num_heads, self.num_kv_heads = d_out, num_heads, num_kv_heads
        self.head_dim = d_out // num_heads
        self.num_kv_groups = num_heads // num_kv_heads
        # Created in qkv's order (W_query first), so that one seed gives both the same weights.
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        self.rope, self.window, self.softcap = rope, window, softcap
        if rope:
            cos, sin = rope_params(self.head_dim, rope_base, context_length, rope)  # (context_length, D)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(num_heads)) if alibi else None, persistent=False)
        self.after_rope = None  # set: (queries, keys, values) -> the same, applied after RoPE (a test's rounding)

    def apply_rope(self, x):  # x (b, heads, T, D)
        T = x.shape[2]
        rotated = rotate_half(x) if self.rope == "half" else rotate_every_two(x)
        return x * self.cos[:T] + rotated * self.sin[:T]

    def forward(self, x):
        b, num_tokens, _ = x.shape
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            queries, keys = self.apply_rope(queries), self.apply_rope(keys)
        if self.after_rope is not None:
            queries, keys, values = self.after_rope(queries, keys, values)
        keys = keys.repeat_interleave(self.num_kv_groups, dim=1)      # (b, num_heads, T, D)
        values = values.repeat_interleave(self.num_kv_groups, dim=1)
        attn_scores = queries @ keys.transpose(2, 3) / self.head_dim ** 0.5
        if self.softcap:
            attn_scores = self.softcap * torch.tanh(attn_scores / self.softcap)
        i = torch.arange(num_tokens)[:, None]
        j = torch.arange(num_tokens)[None, :]
        if self.slopes is not None:
            attn_scores = attn_scores - self.slopes.view(-1, 1, 1) * (i - j).float()
        blocked = self.mask.bool()[:num_tokens, :num_tokens]
        if self.window:
            blocked = blocked | (j <= i - self.window)
        attn_weights = self.dropout(torch.softmax(attn_scores.masked_fill(blocked, -torch.inf), dim=-1))
        context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context)


class AttentionLM(nn.Module):
    def __init__(self, vocab_size, context_length, d_model, num_heads, num_layers, dropout=0.0, qkv_bias=False,
                 num_kv_heads=0, rope=None, rope_base=10000.0, window=0, alibi=False, softcap=0.0):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(context_length, d_model)
        G = num_kv_heads or num_heads
        if G == num_heads and not (rope or window or alibi or softcap):
            def block():
                return MultiHeadAttention(d_model, d_model, context_length, dropout, num_heads, qkv_bias)
        else:
            def block():
                return GroupedQueryAttention(d_model, d_model, context_length, dropout, num_heads, G, qkv_bias,
                                             rope, rope_base, window, alibi, softcap)
        self.blocks = nn.ModuleList([block() for _ in range(num_layers)])
        self.out_head = nn.Linear(d_model, vocab_size)

    def forward(self, ids):
        _, t = ids.shape
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(t))
        for block in self.blocks:
            x = x + block(x)
        return self.out_head(x)


def lr_at(step, max_lr, min_lr, warmup, total):
    """The learning rate of update `step` (0-based), as qkv::LrSchedule::at computes it."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(max((step - warmup) / span, 0.0), 1.0)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
