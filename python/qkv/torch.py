"""qkv inside PyTorch: the fused attention as an autograd Function, the book's chapter-3 modules and
its chapter-4 GPTModel (the whole model in qkv's C++).

    import torch, qkv.torch
    o = qkv.torch.attention(q, k, v, causal=True)      # q (B, H, T, D) ... CPU tensors; o.backward() works
    torch.manual_seed(123)
    mha = qkv.torch.MultiHeadAttention(3, 2, 6, 0.0, num_heads=2)   # the book's numbers, the book's state dict

The modules' parameters are the book's nn.Linear layers (or nn.Parameter matrices for
SelfAttention_v1), created in the book's order, so `torch.manual_seed(s)` before the constructor
gives the book's weights and `state_dict()` has the book's names; torch's optimisers train them.
What runs:
- MultiHeadAttention and CausalAttention (float32 CPU tensors): qkv's whole pipeline
  (qkv._qkv.mha_forward / mha_backward, the C++ of `qkv bench --module mha`): the three
  projections as one product (qkv's own matrix product, at the CPU's vector width), the fused
  attention reading the heads in place, out_proj; the backward in the pipeline's backward, the
  weights' gradients handed to autograd as views of one (3 d_out, d_in) gradient.
- Otherwise (SelfAttention_v1/v2, other dtypes): the projections in PyTorch and the attention core
  (scores, mask, softmax, weighted sum, forward and backward) in qkv's fused kernel
  (qkv._qkv.attention / attention_backward), reading and writing the tensors' memory through
  numpy without copies.

Dropout. In training mode with p > 0 a module computes attention the book's way, in PyTorch
(scores, masked_fill, softmax, nn.Dropout, weighted sum): nn.Dropout draws PyTorch's mask from
PyTorch's generator, so `torch.manual_seed(s)` gives the book's numbers. The fused kernel's own
dropout (Philox, keyed by a seed and the position) draws a different mask; set
`module.fused_dropout = True` to use it anyway (faster; one seed drawn per call from PyTorch's
generator, so runs stay reproducible under torch.manual_seed, but they are not the book's).
In eval mode, or with p = 0, dropout does nothing and the kernel runs.

GatedMultiHeadAttention and MultiHeadLatentAttention are the book's bonus gated attention
(ch04/08_deltanet) and latent attention (ch04/05_mla, without its cache), seed for seed;
GatedDeltaNet the bonus Gated DeltaNet and Qwen3_5GatedDeltaNet Qwen3.5's linear-attention layer
(Hugging Face's names), seed for seed, their recurrence (delta_rule) in qkv, token by token.

Beyond the book: MultiHeadAttention takes today's variants as keywords (num_kv_heads, rope,
rope_base, window, alibi, softcap, dtype="bf16") and decodes with a KVCache
(mha(x, kv_cache=cache, layer=l)), both in qkv's pipeline.

Where the modules differ from the book's classes, as qkv does everywhere: more tokens than
context_length is a ValueError saying so (PyTorch fails inside masked_fill), and a query row whose
keys a loaded mask hides entirely gets zeros instead of NaN.
"""
import torch
import torch.nn as nn

from . import _qkv
from . import _whole as _qkv_whole

__all__ = [
    "attention",
    "SelfAttention_v1",
    "SelfAttention_v2",
    "CausalAttention",
    "MultiHeadAttentionWrapper",
    "MultiHeadAttention",
    "GatedMultiHeadAttention",
    "MultiHeadLatentAttention",
    "delta_rule",
    "GatedDeltaNet",
    "Qwen3_5GatedDeltaNet",
    "LayerNorm",
    "GELU",
    "FeedForward",
    "TransformerBlock",
    "GPTModel",
    "KVCache",
]


def _array(t, name, fn="qkv.torch.attention"):
    """A CPU float32 tensor's memory as a numpy array (no copy; the binding copies what it cannot read);
    fn names the function in errors."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{fn}: {name} is on {t.device}; qkv's kernels run on the CPU")
    if t.dtype != torch.float32:
        if not t.dtype.is_floating_point:
            raise TypeError(f"{fn}: {name} has dtype {t.dtype}; qkv computes in float32 and "
                            "converts only floating-point tensors")
        t = t.float()
    return t.detach().numpy()


def _mask_array(mask):
    if mask is None:
        return None
    if isinstance(mask, torch.Tensor):
        return mask.detach().cpu().numpy()
    return mask


def _draw_seed():
    """A dropout seed for the fused kernel, drawn from PyTorch's generator (torch.manual_seed repeats it)."""
    return int(torch.randint(0, 2**62, (1,)).item())


def _empty_like_order(like, shape):
    """A float32 tensor of `shape` (B, H, N, X) laid out as `like` is: token-major (B, N, H, X) when
    `like` is a (B, N, H, X) projection viewed as heads, else contiguous."""
    B, H, N, X = shape
    if like.dim() == 4 and H > 1 and N > 1 and like.stride(1) < like.stride(2):
        return torch.empty_strided(shape, (N * H * X, X, H * X, 1), dtype=torch.float32)
    return torch.empty(shape, dtype=torch.float32)


def _refuse_double_backward(what):
    """A backward running with gradients on (backward(create_graph=True), autograd.grad(...,
    create_graph=True)) would be differentiated again: qkv's kernels have no second derivative."""
    if torch.is_grad_enabled():
        raise RuntimeError(f"{what}: double backward (create_graph=True) is not supported: qkv's fused kernels "
                           "compute first derivatives only; use the book's PyTorch classes for higher ones")


class _FusedAttention(torch.autograd.Function):
    """o = softmax(scale * q k^T + mask) (dropout) v in qkv's fused kernel; backward in qkv's fused backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal, mask, dropout_p, scale, seed, variants):
        qa, ka, va = _array(q, "q"), _array(k, "k"), _array(v, "v")
        if qa.ndim != 4:
            raise ValueError(f"qkv.torch.attention: q must be (B, H, T, D), got shape {tuple(q.shape)}")
        if va.ndim != 4:
            raise ValueError(f"qkv.torch.attention: v must be (B, G, S, Dv), got shape {tuple(v.shape)}")
        m = _mask_array(mask)
        o = _empty_like_order(q, (qa.shape[0], qa.shape[1], qa.shape[2], va.shape[3]))
        _, lse = _qkv.attention(qa, ka, va, causal=causal, mask=m, dropout_p=dropout_p, scale=scale,
                                return_lse=True, seed=seed, out=o.numpy(), **variants)
        lse = torch.from_numpy(lse)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = dict(causal=causal, mask=m, dropout_p=dropout_p, scale=scale, seed=seed, **variants)
        return o.to(q.dtype) if q.dtype.is_floating_point and q.dtype != torch.float32 else o

    @staticmethod
    def backward(ctx, grad_out):
        _refuse_double_backward("qkv.torch.attention")
        q, k, v, o, lse = ctx.saved_tensors
        dq = _empty_like_order(q, tuple(q.shape))
        dk = _empty_like_order(k, tuple(k.shape))
        dv = _empty_like_order(v, tuple(v.shape))
        _qkv.attention_backward(_array(q, "q"), _array(k, "k"), _array(v, "v"), o.numpy(), lse.numpy(),
                                _array(grad_out, "grad_out"), dq=dq.numpy(), dk=dk.numpy(), dv=dv.numpy(),
                                **ctx.options)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None, None


def attention(q, k, v, *, causal=False, mask=None, dropout_p=0.0, scale=None, seed=None, window=0, alibi=False,
              softcap=0.0):
    """qkv's fused attention on CPU tensors, differentiable (backward: qkv's fused backward).

    q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv) -> (B, H, T, Dv); G divides H. causal=True hides
    key j from query i when j > i; mask: (T, S), boolean (True hides, the book's mask.bool()) or
    floating-point (added to the scores). scale defaults to 1 / sqrt(D). Dropout (p in [0, 1)) is
    the kernel's Philox mask for `seed` (drawn from PyTorch's generator when None), not nn.Dropout's.
    Float32 tensors are read in place (views of (B, T, H, D) projections included); other floating
    types are converted; other dtypes are a TypeError. Today's variants: window (query i sees keys
    j > i - window), alibi (True: the paper's slopes; or H slopes; scores - slope_h (i - j)), softcap
    (scores capped as softcap * tanh(s / softcap), before ALiBi and the mask).
    """
    for name, t in (("mask", mask), ("scale", scale), ("alibi", alibi)):
        if isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled():
            raise ValueError(f"qkv.torch.attention: {name} requires grad, but qkv's fused backward gives gradients "
                             f"of q, k and v only (it would get none); pass {name}.detach(), or use PyTorch's "
                             "attention to learn it")
    dropout_p = float(dropout_p)
    if dropout_p > 0 and seed is None:
        seed = _draw_seed()
    if not isinstance(alibi, bool) and alibi is not None:
        alibi = _array(torch.as_tensor(alibi, dtype=torch.float32), "alibi")
    if not isinstance(causal, bool) and type(causal).__name__ != "bool_":  # ("no" read as True)
        raise TypeError(f"qkv.torch.attention: causal must be True or False, not {type(causal).__name__} ({causal!r})")
    variants = dict(window=_qkv_whole("qkv.torch.attention", "window", window, -2**62, 2**62), alibi=alibi,
                    softcap=float(softcap))
    return _FusedAttention.apply(q, k, v, bool(causal), mask, dropout_p, scale, seed, variants)


class _Lease:
    """A workspace held by one autograd node: given back to its module's pool when the node is freed
    (the graph released, retain_graph or not), so no later forward can overwrite what the node's
    backward reads, however often that backward runs."""

    def __init__(self, ws, pool):
        self.ws, self.pool = ws, pool

    def __del__(self):
        self.pool.append(self.ws)


class _PipelineMHA(torch.autograd.Function):
    """y = out_proj(attention(split(x [W_query; W_key; W_value]^T + b))) in qkv's MHA pipeline; no
    out_proj when wo is None (CausalAttention). Backward: the pipeline's backward."""

    @staticmethod
    def forward(ctx, x, wq, wk, wv, bq, bk, bv, wo, bo, heads, mask, dropout_p, seed, workspaces, backward_follows,
                variants):
        w_qkv = torch.cat([wq.detach(), wk.detach(), wv.detach()])
        b_qkv = None if bq is None else torch.cat([bq.detach(), bk.detach(), bv.detach()])
        ws = workspaces.pop() if workspaces else _qkv.MhaWorkspace()
        opts = dict(heads=heads, causal=mask is None, mask=_mask_array(mask), dropout_p=dropout_p, seed=seed,
                    **variants)
        ctx.rows = (wq.shape[0], wk.shape[0])  # W_query's and W_key's (= W_value's) rows of w_qkv
        y = _qkv.mha_forward(x.detach().numpy(), w_qkv.numpy(), _numpy_or_none(b_qkv), _numpy_or_none(wo),
                             _numpy_or_none(bo), workspace=ws, **opts)
        ctx.save_for_backward(x, w_qkv, b_qkv, wo, bo)
        ctx.opts, ctx.forward_id = opts, ws.forward_id
        if backward_follows:  # (autograd runs forward with gradients off: the caller tells)
            ctx.lease = _Lease(ws, workspaces)  # the node holds it until the graph is freed
        else:
            workspaces.append(ws)  # no backward will read it: the next forward may reuse it
        return torch.from_numpy(y)

    @staticmethod
    def backward(ctx, grad_y):
        _refuse_double_backward("qkv.torch's MHA pipeline")
        x, w_qkv, b_qkv, wo, bo = ctx.saved_tensors
        dx, dw_qkv, db_qkv, dwo, dbo = _qkv.mha_backward(
            x.detach().numpy(), grad_y.detach().float().numpy(), w_qkv.numpy(), _numpy_or_none(b_qkv),
            _numpy_or_none(wo), _numpy_or_none(bo), workspace=ctx.lease.ws, need_dx=ctx.needs_input_grad[0],
            forward_id=ctx.forward_id, **ctx.opts)
        q, kv = ctx.rows
        dw = torch.from_numpy(dw_qkv)
        db = None if db_qkv is None else torch.from_numpy(db_qkv)
        return (None if dx is None else torch.from_numpy(dx), dw[:q], dw[q:q + kv], dw[q + kv:],
                None if db is None else db[:q], None if db is None else db[q:q + kv], None if db is None else db[q + kv:],
                None if dwo is None else torch.from_numpy(dwo), None if dbo is None else torch.from_numpy(dbo),
                None, None, None, None, None, None, None)


def _numpy_or_none(t):
    return None if t is None else t.detach().numpy()


def _pipeline_runs(x, *params):
    """Whether qkv's MHA pipeline can run this call: float32 CPU tensors throughout."""
    return all(t is None or (t.dtype == torch.float32 and t.device.type == "cpu") for t in (x,) + params)


# --- the book's modules ---------------------------------------------------------------------------


class _CausalMask:
    """Mixin for modules with the book's `mask` buffer (triu(ones(context_length, context_length), 1)).

    The kernel takes the causal mask as a flag; the buffer stays for the state dict. Every call
    compares the buffer's (T, T) corner with the causal triangle - from its contents, so no way of
    editing it (load_state_dict, mask.data.zero_(), mask.numpy()[:] = 0, ...) goes unseen - and
    passes a corner that is not causal to the kernel as a boolean mask, as loaded."""

    def __getstate__(self):  # copy.deepcopy, pickling, torch.save(module): the C++ scratch is made again
        state = self.__dict__.copy()
        for scratch in ("_workspaces", "_decode_workspace", "_causal"):
            state.pop(scratch, None)
        return state

    def _add_projections(self, d_in, d_out, qkv_bias, kv_out=None):
        # The book's order (its seeds draw W_query's weights first, then W_key's, then W_value's);
        # W_key and W_value have kv_out rows with grouped-query heads.
        kv_out = d_out if kv_out is None else kv_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, kv_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, kv_out, bias=qkv_bias)
        self._variants = {}  # today's variants as _qkv.mha_forward's keywords (MultiHeadAttention's)

    def _add_dropout_and_mask(self, dropout, context_length, persistent=True):
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1),
                             persistent=persistent)
        self.fused_dropout = False

    def _kernel_mask(self, num_tokens):
        n = self.mask.shape[0]
        if num_tokens > n or num_tokens > self.mask.shape[1]:
            raise ValueError(f"{type(self).__name__}: the input has {num_tokens} tokens but the mask covers only "
                             f"context_length = {n}")
        m = self.mask.detach()[:num_tokens, :num_tokens].bool()
        causal = getattr(self, "_causal", None)
        if causal is None or causal.shape[0] != num_tokens:
            causal = self._causal = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
        return None if torch.equal(m, causal) else m

    def _book_dropout(self):
        """Whether this call runs the book's PyTorch computation (training-mode nn.Dropout with p > 0;
        never with today's variants, which are not the book's: the kernel's dropout then)."""
        return self.training and self.dropout.p > 0 and not self.fused_dropout and not self._variants

    def _fused(self, queries, keys, values, num_tokens):
        """The fused core on (B, H, T, D) heads, with this module's mask and (fused) dropout."""
        m = self._kernel_mask(num_tokens)
        p = self.dropout.p if self.training else 0.0
        return attention(queries, keys, values, causal=m is None, mask=m, dropout_p=p)

    def _pipeline(self, x, heads, out_proj):
        """The whole module in qkv's MHA pipeline (projections, fused attention, out_proj or none)."""
        m = self._kernel_mask(x.shape[1])
        p = self.dropout.p if self.training else 0.0
        seed = _draw_seed() if p > 0 else None
        if not hasattr(self, "_workspaces"):
            self._workspaces = []  # workspaces no pending backward holds, for the next forward
        tensors = (x, self.W_query.weight, self.W_key.weight, self.W_value.weight, self.W_query.bias, self.W_key.bias,
                   self.W_value.bias, None if out_proj is None else out_proj.weight,
                   None if out_proj is None else out_proj.bias)
        backward_follows = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
        return _PipelineMHA.apply(*tensors, heads, m, p, seed, self._workspaces, backward_follows, self._variants)

    def _runs_pipeline(self, x, out_proj):
        params = [self.W_query.weight, self.W_key.weight, self.W_value.weight, self.W_query.bias]
        if out_proj is not None:
            params += [out_proj.weight, out_proj.bias]
        return _pipeline_runs(x, *params)


def _single_head(queries, keys, values):
    """Unmasked attention of (T, D) rows through the kernel, as a (1, 1, T, D) problem."""
    return attention(queries[None, None], keys[None, None], values[None, None])[0, 0]


def _check_rank(module, x, rank, shape):
    if x.dim() != rank:
        raise ValueError(f"{type(module).__name__} takes {shape}, as the book's class does; got shape {tuple(x.shape)}")


class SelfAttention_v1(nn.Module):
    """Section 3.4.1: W_query, W_key, W_value drawn with torch.rand(d_in, d_out), in that order. Input (T, d_in)."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        _check_rank(self, x, 2, "(T, d_in)")
        return _single_head(x @ self.W_query, x @ self.W_key, x @ self.W_value)


class SelfAttention_v2(nn.Module):
    """Section 3.4.2: nn.Linear projections (weight (d_out, d_in)). Input (T, d_in)."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        _check_rank(self, x, 2, "(T, d_in)")
        return _single_head(self.W_query(x), self.W_key(x), self.W_value(x))


class CausalAttention(_CausalMask, nn.Module):
    """Section 3.5.3: batched input (B, T, d_in), the causal mask buffer, dropout on the weights."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self._add_projections(d_in, d_out, qkv_bias)
        self._add_dropout_and_mask(dropout, context_length)

    def forward(self, x):
        _check_rank(self, x, 3, "(B, T, d_in)")
        b, num_tokens, d_in = x.shape
        if not self._book_dropout() and self._runs_pipeline(x, None):
            return self._pipeline(x, 1, None)
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        if self._book_dropout():
            self._kernel_mask(num_tokens)  # the same check of num_tokens as the kernel path
            attn_scores = queries @ keys.transpose(1, 2)
            attn_scores = attn_scores.masked_fill(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
            attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
            return attn_weights @ values
        return self._fused(queries[:, None], keys[:, None], values[:, None], num_tokens)[:, 0]


class MultiHeadAttentionWrapper(nn.Module):
    """Section 3.6.1: num_heads CausalAttention heads built in order, outputs concatenated (d_out * num_heads)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class MultiHeadAttention(_CausalMask, nn.Module):
    """Section 3.6.2: one set of projections split into num_heads heads, then out_proj (with a bias).

    Today's variants, keywords beyond the book's arguments (all off by default), as qkv's C++ module
    and `qkv forward --module mha` have them: num_kv_heads (grouped-query heads: W_key and W_value
    have num_kv_heads * head_dim rows, query head h reads key/value head h // (num_heads /
    num_kv_heads)), rope ("half" pairs i with i + D/2, Hugging Face's Llama; "interleaved" pairs 2i
    with 2i + 1) with rope_base, window (query i sees keys j > i - window), alibi (the paper's
    slopes), softcap (scores capped as softcap * tanh(s / softcap)), dtype ("bf16" or
    torch.bfloat16: bf16 mode, the products' operands rounded to bf16, float32 sums and weights).
    A module with any of them runs qkv's pipeline (float32 CPU tensors; other inputs are a
    TypeError) and in training mode with dropout the kernel's dropout mask, not nn.Dropout's.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, *, num_kv_heads=None,
                 rope=None, rope_base=10000.0, window=0, alibi=False, softcap=0.0, dtype="f32"):
        super().__init__()
        num_heads = _qkv_whole("MultiHeadAttention", "num_heads", num_heads, 1, 2**31)
        if d_out % num_heads != 0:
            raise ValueError(f"MultiHeadAttention: d_out ({d_out}) must be divisible by num_heads ({num_heads})")
        kv = num_heads if num_kv_heads is None else num_kv_heads
        given = dict(kv_heads=None if kv in (num_heads, 0) else kv, rope=rope, rope_base=float(rope_base),
                     window=_qkv_whole("MultiHeadAttention", "window", window, -2**62, 2**62), alibi=bool(alibi),
                     softcap=float(softcap),
                     dtype={torch.float32: "f32", torch.bfloat16: "bf16"}.get(dtype, dtype))
        _qkv.check_attention_spec(num_heads, d_out // num_heads, **given)  # qkv's one validation of the spec
        kv = given["kv_heads"] or num_heads  # 0 and None: as many as the heads, as qkv's spec says
        self.d_out = d_out
        self.num_heads = num_heads
        self.num_kv_heads = kv
        self.head_dim = d_out // num_heads
        self._add_projections(d_in, d_out, qkv_bias, kv * self.head_dim)
        self.out_proj = nn.Linear(d_out, d_out)
        self._add_dropout_and_mask(dropout, context_length)
        if given != dict(kv_heads=None, rope=None, rope_base=float(rope_base), window=0, alibi=False, softcap=0.0,
                         dtype="f32"):
            self._variants = given

    def forward(self, x, kv_cache=None, layer=0):
        """x (B, T, d_in) -> (B, T, d_out). With kv_cache (a KVCache), a decoding step: x's tokens
        at the cache's next positions, their keys and values kept in its `layer`, attention over
        every position kept so far (inference: no gradient, no dropout)."""
        _check_rank(self, x, 3, "(B, T, d_in)")
        if kv_cache is not None:
            return self._cached(x, kv_cache, layer)
        b, num_tokens, d_in = x.shape
        if self._variants and not self._runs_pipeline(x, self.out_proj):
            raise TypeError("MultiHeadAttention with variants (num_kv_heads, rope, window, alibi, softcap, dtype) runs "
                            f"qkv's pipeline, which takes float32 CPU tensors; got x {x.dtype} on {x.device.type}")
        if not self._book_dropout() and self._runs_pipeline(x, self.out_proj):
            return self._pipeline(x, self.num_heads, self.out_proj)
        # (b, T, d_out) -> (b, T, H, head_dim) -> (b, H, T, head_dim): views, which the kernel reads in place
        split = lambda t: t.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # noqa: E731
        keys = split(self.W_key(x))
        queries = split(self.W_query(x))
        values = split(self.W_value(x))
        if self._book_dropout():
            self._kernel_mask(num_tokens)
            attn_scores = queries @ keys.transpose(2, 3)
            attn_scores = attn_scores.masked_fill(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
            attn_weights = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
            context = attn_weights @ values
        else:
            context = self._fused(queries, keys, values, num_tokens)  # written token-major: no copy below
        context_vec = context.transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


    def _cached(self, x, cache, layer):
        if not isinstance(cache, KVCache):
            raise TypeError(f"MultiHeadAttention: kv_cache must be a qkv.torch.KVCache, got {type(cache).__name__}")
        if self.training and self.dropout.p > 0:
            raise ValueError("MultiHeadAttention: a KV cache is for inference; call eval() first (dropout is on)")
        if self._kernel_mask(cache.length + x.shape[1]) is not None:
            raise ValueError("MultiHeadAttention: a KV cache needs the causal mask; this module's mask buffer is not")
        if not self._runs_pipeline(x, self.out_proj):
            raise TypeError(f"MultiHeadAttention: the KV cache takes float32 CPU tensors; got x {x.dtype}")
        if not hasattr(self, "_decode_workspace"):
            self._decode_workspace = _qkv.MhaWorkspace()
        with torch.no_grad():
            w_qkv, b_qkv = self._joined_projections()
            y = _qkv.mha_forward_cached(x.detach().numpy(), w_qkv.numpy(), _numpy_or_none(b_qkv),
                                        self.out_proj.weight.detach().numpy(), self.out_proj.bias.detach().numpy(),
                                        heads=self.num_heads, cache=cache._cache, layer=layer,
                                        workspace=self._decode_workspace, **self._variants)
        cache._appended()
        return torch.from_numpy(y)

    def _joined_projections(self):
        """[W_query; W_key; W_value] and their biases as one matrix (and vector), joined at every
        decoding step: a weight changed through .data (p.data.mul_(2), an EMA's copy_) keeps its
        version, so a join kept between steps would go stale unseen."""
        params = (self.W_query.weight, self.W_key.weight, self.W_value.weight, self.W_query.bias, self.W_key.bias,
                  self.W_value.bias)
        return torch.cat(params[:3]), None if params[3] is None else torch.cat(params[3:])


class GatedMultiHeadAttention(_CausalMask, nn.Module):
    """The book's bonus gated attention (ch04/08_deltanet; Qwen3-Next's and Qwen3.5's full-attention
    layers): MultiHeadAttention whose context is multiplied by sigmoid(W_gate(x)) before out_proj.
    Its submodules in the bonus class's order (W_query, W_gate, W_key, W_value, out_proj), so
    torch.manual_seed(s) gives its weights; its mask buffer non-persistent (not in the state dict),
    as the bonus class registers it. The attention runs in qkv's pipeline (float32 CPU tensors)
    without out_proj; the gate and out_proj in PyTorch."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        num_heads = _qkv_whole("GatedMultiHeadAttention", "num_heads", num_heads, 1, 2**31)
        if d_out % num_heads != 0:
            raise ValueError(f"GatedMultiHeadAttention: d_out ({d_out}) must be divisible by num_heads ({num_heads})")
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_gate = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self._variants = {}
        self.out_proj = nn.Linear(d_out, d_out)
        self._add_dropout_and_mask(dropout, context_length, persistent=False)

    def forward(self, x):
        """x (B, T, d_in) -> out_proj(context * sigmoid(W_gate(x))) (B, T, d_out)."""
        _check_rank(self, x, 3, "(B, T, d_in)")
        b, num_tokens, _ = x.shape
        gate = torch.sigmoid(self.W_gate(x))
        if not self._book_dropout() and self._runs_pipeline(x, None):
            context = self._pipeline(x, self.num_heads, None)  # (B, T, d_out), the heads merged
        else:
            split = lambda t: t.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # noqa: E731
            queries, keys, values = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))
            if self._book_dropout():
                self._kernel_mask(num_tokens)
                attn_scores = queries @ keys.transpose(2, 3)
                attn_scores = attn_scores.masked_fill(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
                heads = self.dropout(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)) @ values
            else:
                heads = self._fused(queries, keys, values, num_tokens)
            context = heads.transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context * gate)


class MultiHeadLatentAttention(nn.Module):
    """The book's bonus latent attention (ch04/05_mla; DeepSeek V2/V3): queries from x, keys and values
    up-projected (W_UK, W_UV) from a latent W_DKV(x) of latent_dim features (default
    max(16, d_out // 8)). Its submodules in the bonus class's order (W_query, W_DKV, W_UK, W_UV,
    out_proj), no mask buffer (causal by positions). The projections run in PyTorch, the attention
    in qkv's fused kernel; in training mode with dropout the book's PyTorch computation (nn.Dropout's
    mask). No KV cache here (the bonus class's latent cache is not built yet)."""

    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False, latent_dim=None):
        super().__init__()
        num_heads = _qkv_whole("MultiHeadLatentAttention", "num_heads", num_heads, 1, 2**31)
        if d_out % num_heads != 0:
            raise ValueError(f"MultiHeadLatentAttention: d_out ({d_out}) must be divisible by num_heads ({num_heads})")
        self.latent_dim = latent_dim if latent_dim is not None else max(16, d_out // 8)
        if self.latent_dim < 1:
            raise ValueError(f"MultiHeadLatentAttention: latent_dim ({self.latent_dim}) must be positive")
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_DKV = nn.Linear(d_in, self.latent_dim, bias=qkv_bias)
        self.W_UK = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)
        self.W_UV = nn.Linear(self.latent_dim, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x (B, T, d_in) -> (B, T, d_out)."""
        _check_rank(self, x, 3, "(B, T, d_in)")
        b, num_tokens, _ = x.shape
        split = lambda t: t.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # noqa: E731
        latent = self.W_DKV(x)
        queries, keys, values = split(self.W_query(x)), split(self.W_UK(latent)), split(self.W_UV(latent))
        if self.training and self.dropout.p > 0:
            attn_scores = queries @ keys.transpose(2, 3)
            hidden = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
            attn_scores = attn_scores.masked_fill(hidden, -torch.inf)
            heads = self.dropout(torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)) @ values
        else:
            heads = attention(queries, keys, values, causal=True)
        return self.out_proj(heads.transpose(1, 2).contiguous().view(b, num_tokens, self.d_out))


class _DeltaRule(torch.autograd.Function):
    """The gated delta rule token by token in qkv (its state in float64); backward from the kept states."""

    @staticmethod
    def forward(ctx, q, k, v, beta, alpha):
        f = "qkv.torch.delta_rule"
        y, states = _qkv.delta_rule(_array(q, "q", f), _array(k, "k", f), _array(v, "v", f), _array(beta, "beta", f),
                                    _array(alpha, "alpha", f))
        ctx.save_for_backward(q, k, v, beta, alpha)
        ctx.states = states
        return torch.from_numpy(y)

    @staticmethod
    def backward(ctx, dy):
        _refuse_double_backward("qkv.torch.delta_rule")
        q, k, v, beta, alpha = ctx.saved_tensors
        f = "qkv.torch.delta_rule"
        grads = _qkv.delta_rule_backward(_array(q, "q", f), _array(k, "k", f), _array(v, "v", f),
                                         _array(beta, "beta", f), _array(alpha, "alpha", f), ctx.states,
                                         _array(dy.contiguous(), "dy", f))
        return tuple(torch.from_numpy(g) for g in grads)


def delta_rule(q, k, v, beta, alpha):
    """The gated delta rule, differentiable, per sequence and head from a zero state S (Dk x Dv):
    S = alpha_t S; delta = (v_t - S^T k_t) * beta_t; S = S + k_t delta^T; y_t = S^T q_t.

    q, k (B, T, H, Dk); v (B, T, H, Dv); beta (B, T, H) per head or (B, T, H, Dv) per channel; alpha
    (B, T, H) -> y (B, T, H, Dv). Token by token in qkv (the state in float64); the backward keeps
    every token's state (B H T Dk Dv float64 numbers). y is in q's dtype (computed in float32 and
    float64, as qkv.torch.attention returns its inputs' dtype)."""
    y = _DeltaRule.apply(q, k, v, beta, alpha)
    return y if y.dtype == q.dtype else y.to(q.dtype)


def _l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


class _RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension (nn.RMSNorm of PyTorch 2.4+)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, gate=None):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return y if gate is None else y * torch.nn.functional.silu(gate)


class GatedDeltaNet(nn.Module):
    """The book's bonus Gated DeltaNet (ch04/08_deltanet; no convolution): per head a (D x D) state,
    decayed by alpha = exp(-exp(A_log) softplus(W_alpha(x) + dt_bias)) and corrected by the delta
    rule with beta = sigmoid(W_beta(x)) per channel; out_proj(dropout(rmsnorm(y) silu(W_gate(x)))).
    Parameters in the bonus class's order (torch.manual_seed(s) gives its weights); the recurrence
    in qkv (delta_rule). Each token's head is gated by its own gate (the bonus snippet's transposed
    gate fails unless T == H)."""

    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False):
        super().__init__()
        num_heads = _qkv_whole("GatedDeltaNet", "num_heads", num_heads, 1, 2**31)
        if d_out % num_heads != 0:
            raise ValueError(f"GatedDeltaNet: d_out ({d_out}) must be divisible by num_heads ({num_heads})")
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
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
        """x (B, T, d_in) -> (B, T, d_out)."""
        _check_rank(self, x, 3, "(B, T, d_in)")
        b, T, _ = x.shape
        H, D = self.num_heads, self.head_dim
        heads = lambda t: t.view(b, T, H, D)  # noqa: E731
        q = _l2norm(heads(self.W_query(x))) / (D ** 0.5)
        k = _l2norm(heads(self.W_key(x)))
        beta = heads(torch.sigmoid(self.W_beta(x)))
        alpha = torch.exp(-self.A_log.exp() * torch.nn.functional.softplus(self.W_alpha(x) + self.dt_bias))
        y = delta_rule(q, k, heads(self.W_value(x)), beta, alpha)  # (B, T, H, D)
        context = self.norm(y, heads(self.W_gate(x)))
        return self.out_proj(self.dropout(context.reshape(b, T, self.d_out)))


class Qwen3_5GatedDeltaNet(nn.Module):
    """Qwen3.5's linear-attention layer, with Hugging Face's names (the book's ch05/16_qwen3.5): a
    causal depthwise convolution and silu over in_proj_qkv(x); q and k L2-normalised per key head,
    each shared by num_v_heads / num_k_heads value heads; beta = sigmoid(in_proj_b(x)) per head; the
    decay from A_log, dt_bias and in_proj_a(x); the gated delta rule (delta_rule, in qkv); the gated
    RMSNorm with silu(in_proj_z(x)); out_proj. Modules made in the class's order, so
    torch.manual_seed(s) gives its weights."""

    def __init__(self, hidden_size, num_v_heads, num_k_heads, head_k_dim, head_v_dim, conv_kernel, eps=1e-6):
        super().__init__()
        num_v_heads = _qkv_whole("Qwen3_5GatedDeltaNet", "num_v_heads", num_v_heads, 1, 2**31)
        num_k_heads = _qkv_whole("Qwen3_5GatedDeltaNet", "num_k_heads", num_k_heads, 1, 2**31)
        if num_v_heads % num_k_heads != 0:
            raise ValueError(f"Qwen3_5GatedDeltaNet: num_v_heads ({num_v_heads}) must be a multiple of num_k_heads "
                             f"({num_k_heads})")
        self.num_v_heads, self.num_k_heads = num_v_heads, num_k_heads
        self.head_k_dim, self.head_v_dim = head_k_dim, head_v_dim
        self.key_dim, self.value_dim = num_k_heads * head_k_dim, num_v_heads * head_v_dim
        conv_dim = 2 * self.key_dim + self.value_dim
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, conv_kernel, groups=conv_dim, padding=conv_kernel - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(num_v_heads))
        self.A_log = nn.Parameter(torch.log(torch.empty(num_v_heads).uniform_(0, 16)))
        self.norm = _RMSNorm(head_v_dim, eps)
        self.out_proj = nn.Linear(self.value_dim, hidden_size, bias=False)
        self.in_proj_qkv = nn.Linear(hidden_size, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden_size, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(hidden_size, num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(hidden_size, num_v_heads, bias=False)

    def forward(self, x):
        """x (B, T, hidden_size) -> (B, T, hidden_size)."""
        _check_rank(self, x, 3, "(B, T, hidden_size)")
        b, T, _ = x.shape
        Hv, Dk, Dv = self.num_v_heads, self.head_k_dim, self.head_v_dim
        silu = torch.nn.functional.silu
        mixed = silu(self.conv1d(self.in_proj_qkv(x).transpose(1, 2))[:, :, :T]).transpose(1, 2)
        q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        share = Hv // self.num_k_heads
        Hk = self.num_k_heads  # (named: reshape cannot infer a -1 of an empty batch or sequence)
        q = _l2norm(q.reshape(b, T, Hk, Dk)).repeat_interleave(share, dim=2) / (Dk ** 0.5)
        k = _l2norm(k.reshape(b, T, Hk, Dk)).repeat_interleave(share, dim=2)
        beta = torch.sigmoid(self.in_proj_b(x))
        alpha = torch.exp(-self.A_log.exp() * torch.nn.functional.softplus(self.in_proj_a(x) + self.dt_bias))
        y = delta_rule(q, k, v.reshape(b, T, Hv, Dv), beta, alpha)
        z = self.in_proj_z(x).reshape(b, T, Hv, Dv)
        return self.out_proj(self.norm(y, z).reshape(b, T, self.value_dim))


class KVCache:
    """The keys and values of past positions for decoding with MultiHeadAttention(x, kv_cache=cache,
    layer=l): one cache for a model's `layers` attention layers, (batch, num_kv_heads, capacity,
    head_dim) per layer, allocated once, float32 or bf16 (dtype="bf16": half the memory, keys and
    values rounded to bf16). A step appends the same tokens to every layer in turn; when the last
    layer has appended, the step is committed (`length` grows). reset() starts a new sequence;
    truncate(n) keeps the first n positions. Positions are absolute (RoPE and ALiBi see them)."""

    def __init__(self, capacity, num_kv_heads, head_dim, *, batch=1, layers=1, dtype="f32"):
        dtype = {torch.float32: "f32", torch.bfloat16: "bf16"}.get(dtype, dtype)
        if not isinstance(dtype, str):
            raise TypeError(f"KVCache: dtype must be \"f32\", \"bf16\", torch.float32 or torch.bfloat16, not "
                            f"{type(dtype).__name__} ({dtype!r})")
        sizes = [_qkv_whole("KVCache", name, value, 1, 2**62) for name, value in
                 [("layers", layers), ("batch", batch), ("num_kv_heads", num_kv_heads), ("capacity", capacity),
                  ("head_dim", head_dim)]]
        self._cache = _qkv.KvCache(*sizes, dtype)

    def _appended(self):
        if all(self._cache.appended(l) for l in range(self._cache.layers)):
            self._cache.commit()

    length = property(lambda self: self._cache.length, doc="Positions kept (committed)")
    capacity = property(lambda self: self._cache.capacity)
    layers = property(lambda self: self._cache.layers)
    dtype = property(lambda self: self._cache.dtype)
    nbytes = property(lambda self: self._cache.bytes)

    def reset(self):
        self._cache.reset()

    def truncate(self, n):
        self._cache.truncate(_qkv_whole("KVCache.truncate", "n", n, 0, 2**62))

    def keys(self, layer=0):
        """The keys kept in `layer`, as float32 (batch, num_kv_heads, length, head_dim) (after RoPE)."""
        return torch.from_numpy(self._cache.keys(layer))

    def values(self, layer=0):
        return torch.from_numpy(self._cache.values(layer))


# --- chapter 4: the GPT model ------------------------------------------------------------------


class LayerNorm(nn.Module):
    """Section 4.2: normalise each row over its last dimension (biased variance, eps 1e-5), then
    scale and shift."""

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
    """Section 4.3: GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""

    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))


class FeedForward(nn.Module):
    """Section 4.3: Linear(E, 4E) -> GELU -> Linear(4E, E), as layers.0 and layers.2."""

    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), GELU(),
                                    nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]))

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    """Section 4.5: x + drop(att(norm1(x))), then x + drop(ff(norm2(x))); att is qkv's
    MultiHeadAttention (the fused pipeline, as above)."""

    def __init__(self, cfg):
        super().__init__()
        self.att = MultiHeadAttention(d_in=cfg["emb_dim"], d_out=cfg["emb_dim"], context_length=cfg["context_length"],
                                      num_heads=cfg["n_heads"], dropout=cfg["drop_rate"], qkv_bias=cfg["qkv_bias"])
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"])
        self.norm2 = LayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


_GPT_KEYS = ("vocab_size", "context_length", "emb_dim", "n_heads", "n_layers", "drop_rate", "qkv_bias")


class GPTModel(nn.Module):
    """Section 4.6: the book's GPTModel(cfg), cfg the book's dict (GPT_CONFIG_124M's keys).

    The book's constructor, names and draw order: torch.manual_seed(s); GPTModel(cfg) holds the
    book's weights, and the book's state dict (torch.load("model.pth"), or qkv.load(...).state_dict()
    through torch.from_numpy) loads with strict=True. The parameters are PyTorch's; forward and
    backward run qkv's C++ GPT model (_qkv.GptCore) behind one autograd Function, the parameters
    copied in at each forward and the gradients out at each backward. While dropout draws (training,
    drop_rate > 0), for parameters that are not unshared float32 CPU tensors, or with
    whole_model_in_qkv = False, the book's lines run in PyTorch instead, each block's attention in
    qkv's MultiHeadAttention (PyTorch's dropout masks).
    """

    def __init__(self, cfg):
        super().__init__()
        missing = [k for k in _GPT_KEYS if k not in cfg]
        if missing:
            raise ValueError(f"GPTModel: cfg lacks {missing} (the book's keys: {list(_GPT_KEYS)})")
        for k in ("vocab_size", "context_length", "emb_dim", "n_heads", "n_layers"):
            if not isinstance(cfg[k], int) or cfg[k] < (0 if k == "n_layers" else 1):
                raise ValueError(f"GPTModel: cfg['{k}'] is {cfg[k]!r}, expected a positive integer")
        if not 0.0 <= float(cfg["drop_rate"]) < 1.0:
            raise ValueError(f"GPTModel: cfg['drop_rate'] is {cfg['drop_rate']!r}, expected a rate in [0, 1)")
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)
        self._cfg = {k: cfg[k] for k in _GPT_KEYS}
        self._gpt_core = None
        self.whole_model_in_qkv = True  # False: only the attention in qkv, the rest in PyTorch's ops
        # the parameters' names as built: a parameter tied to another (out_head.weight =
        # tok_emb.weight) drops out of named_parameters(), which lists a shared one once
        self._param_names = [n for n, _ in self.named_parameters()]
        self._param_shapes = [tuple(p.shape) for _, p in self.named_parameters()]
        self._module_types = [(n, type(m)) for n, m in self.named_modules()]

    def _as_built(self, seq_len, named):
        """Whether the model is still the book's model the C++ core computes: the same modules (no
        layer swapped for another), the parameters' shapes, no forward or backward hooks, the norms'
        eps and the dropout rates as built, and every block's mask causal (a loaded mask that is not
        is honoured by the book's lines, as the attention modules honour it)."""
        from torch.nn.modules import module as torch_module
        if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
            return False
        if [tuple(p.shape) for _, p in named] != self._param_shapes:
            return False
        modules = list(self.named_modules())
        if [(n, type(m)) for n, m in modules] != self._module_types:
            return False
        for _, m in modules:
            if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks:
                return False
            if (isinstance(m, LayerNorm) and m.eps != 1e-5) or \
                    (isinstance(m, nn.Dropout) and m.p != self._cfg["drop_rate"]):
                return False
        return all(block.att._kernel_mask(seq_len) is None for block in self.trf_blocks)

    def _runs_core(self, in_idx, named):
        """Whether the whole model runs in qkv's C++: float32 CPU parameters and long CPU ids, no
        dropout drawing (eval mode or drop_rate 0), no parameter shared or replaced (tied), and the
        model as built (_as_built)."""
        if not self.whole_model_in_qkv or in_idx.dtype != torch.long or in_idx.device.type != "cpu":
            return False
        if in_idx.numel() == 0:
            return False  # no tokens: the book's path gives its empty (B, 0, V) logits
        if self.training and self._cfg["drop_rate"] > 0:
            return False  # PyTorch's masks: the book's path
        return ([n for n, _ in named] == self._param_names
                and all(p.dtype == torch.float32 and p.device.type == "cpu" for _, p in named)
                and self._as_built(in_idx.shape[1], named))

    def _core(self, named):
        if self._gpt_core is None:
            import json
            self._gpt_core = _qkv.GptCore(json.dumps(self._cfg), [n for n, _ in named])
        return self._gpt_core

    def __getstate__(self):  # the C++ core is rebuilt on demand (copy.deepcopy, pickling)
        state = self.__dict__.copy()
        state["_gpt_core"] = None
        return state

    def forward(self, in_idx):
        _check_rank(self, in_idx, 2, "(B, T) token ids")
        _, seq_len = in_idx.shape
        if seq_len > self.pos_emb.num_embeddings:
            raise ValueError(f"GPTModel: {seq_len} tokens but context_length is {self.pos_emb.num_embeddings}")
        named = list(self.named_parameters())
        if self._runs_core(in_idx, named):
            return _GptFunction.apply(in_idx, self._core(named), *[p for _, p in named])
        x = self.tok_emb(in_idx) + self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = self.trf_blocks(self.drop_emb(x))
        return self.out_head(self.final_norm(x))


class _GptFunction(torch.autograd.Function):
    """The whole GPTModel in qkv's C++ (_qkv.GptCore): the parameters copied in at each forward,
    the logits out; the backward's gradients of every parameter out (none for the ids)."""

    @staticmethod
    def forward(ctx, in_idx, core, *params):
        arrays = [p.detach().numpy() for p in params]
        logits = core.forward(in_idx.detach().contiguous().numpy(), arrays)
        ctx.core, ctx.forward_id = core, core.forward_id
        return torch.from_numpy(logits)

    @staticmethod
    def backward(ctx, grad_logits):
        _refuse_double_backward("qkv.torch.GPTModel")
        grads = ctx.core.backward(grad_logits.detach().contiguous().numpy(), ctx.forward_id)
        return (None, None, *[torch.from_numpy(g) for g in grads])
