"""The attention classes of "Build a Large Language Model From Scratch", chapter 3, in PyTorch.

These are the reference implementations the differential tests compare qkv against. They follow
the book's classes step for step: the same submodules created in the same order (so that
torch.manual_seed(S) followed by the constructor draws the same numbers as the book's code), the
same buffers, and the same sequence of tensor operations in forward (so that the results, and
the dropout draws in training mode, are the book's).

The one addition: every class can remember the attention weights of its last forward call, for
comparison with `qkv forward --attn-weights`. Set `record_attention = True` on a module (or call
`enable_recording(module)`) and, after a forward call, read

    module.last_attn_weights          softmax weights before dropout
    module.last_attn_weights_dropped  the weights after dropout (None when dropout did nothing)

Recording only keeps references to detached tensors that forward computes anyway; it never
changes the numerics, the random draws, or the state dict.

    SelfAttention_v1(d_in, d_out)                        input (T, d_in)
    SelfAttention_v2(d_in, d_out, qkv_bias=False)        input (T, d_in)
    CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=False)
                                                         input (B, T, d_in)
    MultiHeadAttentionWrapper(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)
                                                         input (B, T, d_in), output d_out * num_heads
    MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)
                                                         input (B, T, d_in), d_out % num_heads == 0
    GatedMultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)
                                                         the book's bonus ch04/08_deltanet: MultiHeadAttention
                                                         with a sigmoid output gate W_gate
    MultiHeadLatentAttention(d_in, d_out, dropout, num_heads, qkv_bias=False, latent_dim=None)
                                                         the book's bonus ch04/05_mla (no cache here): keys
                                                         and values up-projected from a latent W_DKV(x)
    GatedDeltaNet(d_in, d_out, dropout, num_heads, qkv_bias=False)
                                                         the book's bonus ch04/08_deltanet: the gated delta
                                                         rule, token by token (its gate per token and head)
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "SelfAttention_v1",
    "SelfAttention_v2",
    "CausalAttention",
    "MultiHeadAttentionWrapper",
    "MultiHeadAttention",
    "GatedMultiHeadAttention",
    "MultiHeadLatentAttention",
    "GatedDeltaNet",
    "enable_recording",
]


class _Recorder:
    """Mixin: optional bookkeeping of the last attention weights (no effect on the computation)."""

    def _init_recording(self):
        # Plain attributes (not parameters or buffers): they never reach the state dict.
        self.record_attention = False
        self.last_attn_weights = None
        self.last_attn_weights_dropped = None

    def _record(self, weights, dropped=None):
        if self.record_attention:
            self.last_attn_weights = weights.detach()
            self.last_attn_weights_dropped = None if dropped is None else dropped.detach()


def enable_recording(module, on=True):
    """Turns weight recording on (or off) for `module` and every attention class inside it."""
    for m in module.modules():
        if isinstance(m, _Recorder):
            m.record_attention = on
    return module


def _dropout_changed(dropout, weights):
    """Whether nn.Dropout actually transformed `weights` (training mode with p > 0)."""
    return dropout.training and dropout.p > 0 and weights.numel() > 0


class SelfAttention_v1(nn.Module, _Recorder):
    """Section 3.4.1: the three projections are raw (d_in, d_out) matrices drawn with torch.rand."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self._init_recording()
        # Creation order is draw order: query, then key, then value.
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        attn_scores = queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        self._record(attn_weights)
        return attn_weights @ values


class SelfAttention_v2(nn.Module, _Recorder):
    """Section 3.4.2: the projections become nn.Linear layers (weights stored as (d_out, d_in))."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self._init_recording()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        self._record(attn_weights)
        return attn_weights @ values


class CausalAttention(nn.Module, _Recorder):
    """Section 3.5.3: batched inputs, a causal mask buffer, and dropout on the attention weights."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self._init_recording()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        # Ones strictly above the diagonal: position i may not look at positions j > i.
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        before_dropout = attn_weights
        attn_weights = self.dropout(attn_weights)  # not in place: before_dropout is untouched
        self._record(before_dropout, attn_weights if _dropout_changed(self.dropout, before_dropout) else None)
        return attn_weights @ values


class MultiHeadAttentionWrapper(nn.Module, _Recorder):
    """Section 3.6.1: num_heads independent CausalAttention heads, outputs concatenated."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self._init_recording()
        # Heads are built one after another, so head h draws its weights after heads 0..h-1.
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )

    def forward(self, x):
        if self.record_attention:
            for head in self.heads:
                head.record_attention = True
        # Heads run in order, so in training mode head h's dropout draws follow head h-1's.
        out = torch.cat([head(x) for head in self.heads], dim=-1)
        if self.record_attention:
            # (B, H, T, T), like MultiHeadAttention's per-head weights.
            self.last_attn_weights = torch.stack([h.last_attn_weights for h in self.heads], dim=1)
            dropped = [h.last_attn_weights_dropped for h in self.heads]
            self.last_attn_weights_dropped = None if any(d is None for d in dropped) else torch.stack(dropped, dim=1)
        return out


class MultiHeadAttention(nn.Module, _Recorder):
    """Section 3.6.2: one set of projections split into heads, then an output projection."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self._init_recording()
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)  # always with a bias
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)

        # (b, T, d_out) -> (b, T, H, head_dim) -> (b, H, T, head_dim)
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)

        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        before_dropout = attn_weights
        attn_weights = self.dropout(attn_weights)
        self._record(before_dropout, attn_weights if _dropout_changed(self.dropout, before_dropout) else None)

        # (b, H, T, head_dim) -> (b, T, H, head_dim) -> (b, T, d_out)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


class GatedMultiHeadAttention(nn.Module, _Recorder):
    """The bonus material's gated attention (ch04/08_deltanet): section 3.6.2's class plus an output
    gate. Its submodules in the bonus class's order (W_query, W_gate, W_key, W_value, out_proj), its
    mask registered non-persistent (not in the state dict), masked scores filled with the dtype's
    lowest value rather than -inf."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self._init_recording()
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_gate = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1),
                             persistent=False)

    def forward(self, x):
        b, num_tokens, _ = x.shape
        heads = (b, num_tokens, self.num_heads, self.head_dim)
        queries = self.W_query(x)
        gate = self.W_gate(x)
        keys = self.W_key(x)
        values = self.W_value(x)
        queries = queries.view(heads).transpose(1, 2)
        keys = keys.view(heads).transpose(1, 2)
        values = values.view(heads).transpose(1, 2)

        attn_scores = queries @ keys.transpose(2, 3)
        hidden = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(hidden, torch.finfo(attn_scores.dtype).min)
        attn_weights = torch.softmax(attn_scores / (self.head_dim ** 0.5), dim=-1)
        before_dropout = attn_weights
        attn_weights = self.dropout(attn_weights)
        self._record(before_dropout, attn_weights if _dropout_changed(self.dropout, before_dropout) else None)

        context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context * torch.sigmoid(gate))


class MultiHeadLatentAttention(nn.Module, _Recorder):
    """The bonus material's latent attention (ch04/05_mla) without its KV cache: queries from x, keys
    and values up-projected (W_UK, W_UV) from a latent W_DKV(x) of latent_dim features (default
    max(16, d_out // 8)). Submodules in the bonus class's order (W_query, W_DKV, W_UK, W_UV, out_proj),
    no mask buffer: the causal mask comes from the positions (query i sees keys j <= i)."""

    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False, latent_dim=None):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self._init_recording()
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.latent_dim = latent_dim if latent_dim is not None else max(16, d_out // 8)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_DKV = nn.Linear(d_in, self.latent_dim, bias=qkv_bias)
        self.W_UK = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)
        self.W_UV = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, num_tokens, _ = x.shape
        heads = lambda t: t.view(b, t.shape[1], self.num_heads, self.head_dim).transpose(1, 2)  # noqa: E731
        queries = heads(self.W_query(x))
        latent = self.W_DKV(x)
        keys = heads(self.W_UK(latent))
        values = heads(self.W_UV(latent))

        attn_scores = queries @ keys.transpose(-2, -1)
        positions = torch.arange(num_tokens)
        hidden = positions.unsqueeze(-1) < positions.unsqueeze(0)  # key after query
        attn_scores.masked_fill_(hidden, -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)
        before_dropout = attn_weights
        attn_weights = self.dropout(attn_weights)
        self._record(before_dropout, attn_weights if _dropout_changed(self.dropout, before_dropout) else None)

        context = (attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context)


class _RMSNorm(nn.Module):
    """nn.RMSNorm(dim, eps) of PyTorch 2.4+ (this PyTorch, 1.13, has none): x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


class GatedDeltaNet(nn.Module, _Recorder):
    """The bonus material's simplified Gated DeltaNet (ch04/08_deltanet; no convolution): a (D x D)
    state per head, decayed by alpha and corrected by the delta rule at every token, read by the
    query. Parameters in the bonus class's order (W_query, W_key, W_value, W_gate, W_beta, W_alpha,
    dt_bias = ones, A_log = log(uniform(0, 16)), norm, out_proj). One change: the bonus snippet
    multiplies the context (b, T, H, D) by the gate transposed to (b, H, T, D), which fails unless
    T == H; here each token's head is gated by its own gate (the official implementation's)."""

    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self._init_recording()
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_gate = nn.Linear(d_in, d_out, bias=False)
        self.W_beta = nn.Linear(d_in, d_out, bias=False)
        self.W_alpha = nn.Linear(d_in, num_heads, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(num_heads))
        self.A_log = nn.Parameter(torch.log(torch.empty(num_heads).uniform_(0, 16)))
        self.norm = _RMSNorm(self.head_dim, eps=1e-6)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, T, _ = x.shape
        H, D = self.num_heads, self.head_dim
        per_head = lambda t: t.view(b, T, H, D).transpose(1, 2)  # noqa: E731  (b, H, T, D)
        queries = per_head(self.W_query(x))
        keys = per_head(self.W_key(x))
        values = per_head(self.W_value(x))
        beta = per_head(torch.sigmoid(self.W_beta(x)))
        alpha = torch.exp(-self.A_log.exp().view(1, 1, -1) * F.softplus(self.W_alpha(x) + self.dt_bias))  # (b, T, H)
        gate = self.W_gate(x).view(b, T, H, D)

        queries = _l2norm(queries) / (D ** 0.5)
        keys = _l2norm(keys)
        S = x.new_zeros(b, H, D, D)
        outs = []
        for t in range(T):
            k_t, q_t, v_t, b_t = keys[:, :, t], queries[:, :, t], values[:, :, t], beta[:, :, t]
            S = S * alpha[:, t].unsqueeze(-1).unsqueeze(-1)
            remembered = (S * k_t.unsqueeze(-1)).sum(dim=-2)  # S^T k
            delta = (v_t - remembered) * b_t
            S = S + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
            outs.append((S * q_t.unsqueeze(-1)).sum(dim=-2))  # S^T q
        context = torch.stack(outs, dim=1)  # (b, T, H, D)
        context = self.norm(context) * F.silu(gate)
        context = self.dropout(context.reshape(b, T, self.d_out))
        return self.out_proj(context)


class _GatedRMSNorm(nn.Module):
    """Qwen3.5's gated RMSNorm: x / sqrt(mean(x^2) + eps) * weight * silu(gate), over the last dim."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x, gate):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x * F.silu(gate)


class Qwen3_5GatedDeltaNet(nn.Module, _Recorder):
    """Qwen3.5's linear-attention layer (the book's ch05/16_qwen3.5, as Hugging Face names it): a
    causal depthwise convolution and silu over the projected q, k, v; q and k L2-normalised per key
    head, each key head shared by num_v_heads / num_k_heads value heads; beta = sigmoid(in_proj_b)
    per value head; the decay exp(-exp(A_log) softplus(in_proj_a + dt_bias)); the gated delta rule
    token by token (the reference form); the gated RMSNorm with silu(in_proj_z); out_proj. Modules
    made in the class's order: conv1d, dt_bias, A_log, norm, out_proj, in_proj_qkv, in_proj_z,
    in_proj_b, in_proj_a."""

    def __init__(self, hidden_size, num_v_heads, num_k_heads, head_k_dim, head_v_dim, conv_kernel, eps=1e-6):
        super().__init__()
        assert num_v_heads % num_k_heads == 0
        self._init_recording()
        self.num_v_heads, self.num_k_heads = num_v_heads, num_k_heads
        self.head_k_dim, self.head_v_dim = head_k_dim, head_v_dim
        self.key_dim, self.value_dim = num_k_heads * head_k_dim, num_v_heads * head_v_dim
        conv_dim = 2 * self.key_dim + self.value_dim
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, conv_kernel, groups=conv_dim, padding=conv_kernel - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(num_v_heads))
        self.A_log = nn.Parameter(torch.log(torch.empty(num_v_heads).uniform_(0, 16)))
        self.norm = _GatedRMSNorm(head_v_dim, eps)
        self.out_proj = nn.Linear(self.value_dim, hidden_size, bias=False)
        self.in_proj_qkv = nn.Linear(hidden_size, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden_size, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(hidden_size, num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(hidden_size, num_v_heads, bias=False)

    def forward(self, x):
        b, T, _ = x.shape
        Hv, Dk, Dv = self.num_v_heads, self.head_k_dim, self.head_v_dim
        mixed = F.silu(self.conv1d(self.in_proj_qkv(x).transpose(1, 2))[:, :, :T]).transpose(1, 2)
        q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        share = Hv // self.num_k_heads
        q = _l2norm(q.reshape(b, T, -1, Dk)).repeat_interleave(share, dim=2) / (Dk ** 0.5)  # (b, T, Hv, Dk)
        k = _l2norm(k.reshape(b, T, -1, Dk)).repeat_interleave(share, dim=2)
        v = v.reshape(b, T, Hv, Dv)
        beta = torch.sigmoid(self.in_proj_b(x))                                          # (b, T, Hv)
        alpha = torch.exp(-self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias))
        S = x.new_zeros(b, Hv, Dk, Dv)
        outs = []
        for t in range(T):
            S = S * alpha[:, t, :, None, None]
            remembered = (S * k[:, t, :, :, None]).sum(dim=-2)  # S^T k  (b, Hv, Dv)
            delta = (v[:, t] - remembered) * beta[:, t, :, None]
            S = S + k[:, t, :, :, None] * delta[:, :, None, :]
            outs.append((S * q[:, t, :, :, None]).sum(dim=-2))  # S^T q
        y = torch.stack(outs, dim=1)  # (b, T, Hv, Dv)
        z = self.in_proj_z(x).reshape(b, T, Hv, Dv)
        return self.out_proj(self.norm(y, z).reshape(b, T, self.value_dim))
