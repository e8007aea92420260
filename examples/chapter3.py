#!/usr/bin/python3
"""Chapter 3 of "Build a Large Language Model From Scratch" with qkv in ordinary PyTorch code.

    PYTHONPATH=build/python /usr/bin/python3 examples/chapter3.py

The notebooks' code, with the book's classes replaced by qkv.torch's (same constructors, same
state dicts, same numbers under torch.manual_seed) and tiktoken by qkv's tokenizer. The attention
inside the modules runs in qkv's fused kernel, forward and backward.
"""
import torch

import qkv
import qkv.torch as qt

torch.set_printoptions(precision=4, sci_mode=False)

print("== 2.5 Byte pair encoding (qkv.get_encoding is tiktoken.get_encoding) ==")
tokenizer = qkv.get_encoding("gpt2")
text = "Hello, do you like tea? <|endoftext|> In the sunlit terraces of someunknownPlace."
ids = tokenizer.encode(text, allowed_special={"<|endoftext|>"})
print(ids)
print(tokenizer.decode(ids))

inputs = torch.tensor(
    [[0.43, 0.15, 0.89],  # Your     (x^1)
     [0.55, 0.87, 0.66],  # journey  (x^2)
     [0.57, 0.85, 0.64],  # starts   (x^3)
     [0.22, 0.58, 0.33],  # with     (x^4)
     [0.77, 0.25, 0.10],  # one      (x^5)
     [0.05, 0.80, 0.55]]  # step     (x^6)
)

print("\n== 3.3.1 A simple self-attention mechanism without trainable weights ==")
query = inputs[1]
attn_scores_2 = inputs @ query
print("attn_scores_2:", attn_scores_2)
attn_weights_2 = torch.softmax(attn_scores_2, dim=0)
print("attn_weights_2:", attn_weights_2)
print("context_vec_2:", attn_weights_2 @ inputs)
attn_weights = torch.softmax(inputs @ inputs.T, dim=-1)
print("all_context_vecs:\n", attn_weights @ inputs)

print("\n== 3.4 Self-attention with trainable weights (qkv.torch.SelfAttention_v1 / _v2) ==")
torch.manual_seed(123)
sa_v1 = qt.SelfAttention_v1(3, 2)
print("W_query:\n", sa_v1.W_query.data)
print("sa_v1(inputs):\n", sa_v1(inputs))
torch.manual_seed(789)
sa_v2 = qt.SelfAttention_v2(3, 2)
print("sa_v2(inputs):\n", sa_v2(inputs))

print("\n== 3.5 Causal attention (qkv.torch.CausalAttention) ==")
batch = torch.stack((inputs, inputs), dim=0)
print("batch.shape:", batch.shape)
torch.manual_seed(123)
ca = qt.CausalAttention(3, 2, batch.shape[1], 0.0)
context_vecs = ca(batch)
print("context_vecs:\n", context_vecs)
print("context_vecs.shape:", context_vecs.shape)
torch.manual_seed(123)
ca_drop = qt.CausalAttention(3, 2, batch.shape[1], 0.5)  # training mode: nn.Dropout's mask, the book's
print("with dropout 0.5 (training mode):\n", ca_drop(batch))

print("\n== 3.6 Multi-head attention (qkv.torch.MultiHeadAttentionWrapper / MultiHeadAttention) ==")
torch.manual_seed(123)
mha_wrapper = qt.MultiHeadAttentionWrapper(3, 2, batch.shape[1], 0.0, num_heads=2)
print("wrapper:\n", mha_wrapper(batch))
torch.manual_seed(123)
mha = qt.MultiHeadAttention(3, 2, batch.shape[1], 0.0, num_heads=2)
context_vecs = mha(batch)
print("mha:\n", context_vecs)
print("context_vecs.shape:", context_vecs.shape)
gpt2_mha = qt.MultiHeadAttention(768, 768, 1024, 0.0, num_heads=12)
print("Exercise 3.3, GPT-2 small's attention: parameters =", sum(p.numel() for p in gpt2_mha.parameters()))

print("\n== Training it: loss.backward() runs qkv's fused backward ==")
torch.manual_seed(123)
mha = qt.MultiHeadAttention(3, 2, batch.shape[1], 0.0, num_heads=2)
optimizer = torch.optim.SGD(mha.parameters(), lr=0.5)
target = torch.zeros(2, 6, 2)
for step in range(3):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(mha(batch), target)
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.6f}")
