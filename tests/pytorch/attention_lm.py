"""The PyTorch twin of qkv's attention-only language model (include/qkv/train/attention_lm.h).

    model = AttentionLM(vocab_size, context_length, d_model, num_heads, num_layers, dropout, qkv_bias)
    logits = model(ids)        # ids (B, T) long -> (B, T, vocab_size)

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


class AttentionLM(nn.Module):
    def __init__(self, vocab_size, context_length, d_model, num_heads, num_layers, dropout=0.0, qkv_bias=False):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(context_length, d_model)
        self.blocks = nn.ModuleList(
            [MultiHeadAttention(d_model, d_model, context_length, dropout, num_heads, qkv_bias)
             for _ in range(num_layers)])
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
