"""qkv.torch.MultiHeadAttention with today's variants (grouped-query heads, RoPE in both layouts,
sliding windows, ALiBi, softcapping, bf16 mode) against the PyTorch reference written from the
formulas (tests/pytorch/variants.py's VariantMHA, the twin the C++ module is checked against):
the same constructor draws the same weights; the output within 1e-5 and the input's and every
parameter's gradient within 1e-4 (relative to max(1, max|torch|), the differential tests'
measure), over random configurations. bf16 mode within bf16's bound of the twin, and off it by more
than float32's error. Bad variants are errors naming the keyword.
"""
import random

import pytest
import torch

import qkv.torch as qt
from module_cases import rel_err
from variants import VariantMHA, describe, random_config

FORWARD_TOLERANCE = 1e-5
GRADIENT_TOLERANCE = 1e-4


def build(cfg, seed, dtype="f32"):
    """The twin and qkv's module from the same seed (the same weights: the same draws in the same order)."""
    args = (cfg["d_in"], cfg["d_out"], cfg["ctx"], 0.0, cfg["H"])
    torch.manual_seed(seed)
    twin = VariantMHA(*args, cfg["G"], cfg["bias"], cfg["rope"], cfg["base"], cfg["window"], cfg["alibi"],
                      cfg["softcap"])
    torch.manual_seed(seed)
    ours = qt.MultiHeadAttention(*args, cfg["bias"], num_kv_heads=cfg["G"], rope=cfg["rope"], rope_base=cfg["base"],
                                 window=cfg["window"], alibi=cfg["alibi"], softcap=cfg["softcap"], dtype=dtype)
    with torch.no_grad():
        for p in twin.parameters():  # off nn.Linear's small initial values, so the variants matter
            p.add_(torch.randn_like(p) * 0.5)
        if not cfg["causal"]:
            twin.mask.zero_()
    ours.load_state_dict(twin.state_dict(), strict=True)
    return twin.eval(), ours.eval()


def run(module, x, grad):
    xg = x.clone().requires_grad_(True)
    y = module(xg)
    y.backward(grad)
    grads = {"input": xg.grad}
    grads.update({n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in module.named_parameters()})
    return y.detach(), grads


def cases(n, seed):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        cfg = random_config(rng, len(out) + 2)  # T >= 1: an empty sequence has no tokens to compare
        if cfg["T"] > 0:
            out.append((cfg, rng.randrange(2**40)))
    return out


@pytest.mark.parametrize("cfg,seed", cases(40, 1234), ids=lambda v: describe(v) if isinstance(v, dict) else "")
def test_variants_match_the_twin(cfg, seed):
    twin, ours = build(cfg, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((cfg["B"], cfg["T"], cfg["d_in"]), generator=g)
    want_y, want = run(twin, x, torch.randn((cfg["B"], cfg["T"], cfg["d_out"]), generator=g))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((cfg["B"], cfg["T"], cfg["d_in"]), generator=g)
    got_y, got = run(ours, x, torch.randn((cfg["B"], cfg["T"], cfg["d_out"]), generator=g))
    err, _ = rel_err(got_y, want_y)
    assert err <= FORWARD_TOLERANCE, f"output: {err:.3g}"
    assert set(got) == set(want)
    for name in want:
        err, i = rel_err(got[name], want[name])
        assert err <= GRADIENT_TOLERANCE, f"d {name}: {err:.3g} at {i}"


def test_the_variants_are_the_pipelines_not_the_books_path():
    """A module with variants says so in its keywords; without them it is the book's class."""
    plain = qt.MultiHeadAttention(4, 4, 8, 0.0, 2)
    assert plain._variants == {}
    gqa = qt.MultiHeadAttention(8, 8, 8, 0.0, 4, num_kv_heads=2, rope="half")
    assert tuple(gqa.W_key.weight.shape) == (4, 8) and tuple(gqa.W_value.weight.shape) == (4, 8)
    assert gqa._variants["kv_heads"] == 2 and gqa._variants["rope"] == "half"


def test_bf16_mode_is_within_bf16s_bound_and_rounds():
    cfg = {"B": 2, "T": 9, "H": 4, "G": 2, "d_in": 16, "d_out": 32, "bias": True, "rope": "half", "base": 10000.0,
           "window": 5, "alibi": True, "softcap": 30.0, "causal": True, "p": 0.0, "ctx": 12}
    twin, ours = build(cfg, 99, dtype=torch.bfloat16)
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(5))
    want = twin(x).detach()
    got = ours(x).detach()
    rel = ((got - want).norm() / want.norm()).item()
    assert 2.0 ** -12 < rel < 1e-2, rel  # bf16 keeps 8 bits: rounded, within the MHA layer's bf16 bound


@pytest.mark.parametrize("kwargs,words", [
    (dict(num_kv_heads=3), "num_kv_heads (3)"),
    (dict(rope="sideways"), "rope is 'sideways'"),
    (dict(window=-1), "window (-1)"),
    (dict(softcap=-2.0), "softcap"),
    (dict(rope_base=0.0, rope="half"), "rope_base"),
    (dict(dtype="fp8"), "dtype is 'fp8'"),
])
def test_bad_variants_name_the_keyword(kwargs, words):
    with pytest.raises(ValueError, match=None) as e:
        qt.MultiHeadAttention(8, 8, 8, 0.0, 4, **kwargs)
    assert words in str(e.value), str(e.value)


def test_a_window_or_causal_of_the_wrong_type_is_refused():
    """window=2.7 was cut to 2 and causal="no" read as True."""
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(TypeError, match=r"qkv.torch.attention: window must be an int, not float \(2.7\)"):
        qt.attention(q, q, q, window=2.7)
    with pytest.raises(TypeError, match=r"qkv.torch.attention: causal must be True or False, not str \('no'\)"):
        qt.attention(q, q, q, causal="no")
    with pytest.raises(TypeError, match=r"MultiHeadAttention: window must be an int, not float"):
        qt.MultiHeadAttention(8, 8, 8, 0.0, 4, window=2.5)
    assert qt.attention(q, q, q, causal=True, window=2).shape == (1, 2, 3, 4)


def test_an_odd_head_dim_with_rope_is_refused():
    with pytest.raises(ValueError) as e:
        qt.MultiHeadAttention(6, 6, 8, 0.0, 2, rope="half")  # head_dim 3
    assert "needs an even head_dim, got 3" in str(e.value), str(e.value)


def test_variants_take_float32_cpu_tensors():
    m = qt.MultiHeadAttention(4, 4, 8, 0.0, 2, window=2)
    with pytest.raises(TypeError) as e:
        m(torch.zeros(1, 3, 4, dtype=torch.float64))
    assert "float32 CPU tensors" in str(e.value)


def test_dropout_with_variants_is_the_kernels_and_trains():
    torch.manual_seed(0)
    m = qt.MultiHeadAttention(8, 8, 16, 0.5, 2, alibi=True).train()
    x = torch.randn(2, 10, 8, requires_grad=True)
    a = m(x)
    a.sum().backward()
    b = m(x)  # another draw of the mask
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert not torch.equal(a, b)
    assert torch.equal(m.eval()(x), m(x))  # eval: no dropout


# --- the KV cache ------------------------------------------------------------------------------------

def decode(module, x, cache, prefill):
    """x's first `prefill` tokens in one step, then one token a step: the outputs concatenated."""
    outs = [module(x[:, :prefill], kv_cache=cache)]
    for t in range(prefill, x.shape[1]):
        outs.append(module(x[:, t:t + 1], kv_cache=cache))
    return torch.cat(outs, dim=1)


CACHED = [
    dict(G=4, rope=None, window=0, alibi=False, softcap=0.0),
    dict(G=2, rope="half", window=0, alibi=False, softcap=0.0),
    dict(G=1, rope="interleaved", window=3, alibi=False, softcap=5.0),
    dict(G=2, rope=None, window=0, alibi=True, softcap=0.0),
    dict(G=4, rope="half", window=4, alibi=True, softcap=30.0),
]


@pytest.mark.parametrize("v", CACHED, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
def test_decoding_with_the_cache_equals_the_whole_forward(v):
    cfg = {"B": 2, "T": 11, "H": 4, "d_in": 12, "d_out": 16, "bias": True, "base": 10000.0, "causal": True, "p": 0.0,
           "ctx": 16, **v}
    twin, ours = build(cfg, 7)
    x = torch.randn(2, 11, 12, generator=torch.Generator().manual_seed(3))
    want = twin(x).detach()
    cache = qt.KVCache(16, cfg["G"], 4, batch=2)
    got = decode(ours, x, cache, prefill=4)
    err, i = rel_err(got, want)
    assert err <= FORWARD_TOLERANCE, f"{err:.3g} at {i}"
    assert cache.length == 11
    assert tuple(cache.keys().shape) == (2, cfg["G"], 11, 4)
    # a bf16 cache rounds the keys and values: within bf16's bound, not float32's
    cache16 = qt.KVCache(16, cfg["G"], 4, batch=2, dtype=torch.bfloat16)
    got16 = decode(ours, x, cache16, prefill=4)
    rel = ((got16 - want).norm() / want.norm()).item()
    assert 2.0 ** -14 < rel < 1e-2, rel
    # reset: a new sequence gives the same numbers again
    cache.reset()
    assert torch.equal(decode(ours, x, cache, prefill=4), got)


def test_a_cache_of_two_layers_commits_when_both_have_appended():
    torch.manual_seed(4)
    a = qt.MultiHeadAttention(8, 8, 12, 0.0, 2, rope="half").eval()
    b = qt.MultiHeadAttention(8, 8, 12, 0.0, 2, rope="half").eval()
    x = torch.randn(1, 6, 8)
    both = qt.KVCache(12, 2, 4, layers=2)
    ya = a(x[:, :2], kv_cache=both, layer=0)
    assert both.length == 0  # layer 1 has not appended yet
    yb = b(ya, kv_cache=both, layer=1)
    assert both.length == 2
    for t in range(2, 6):
        ya = torch.cat([ya, a(x[:, t:t + 1], kv_cache=both, layer=0)], dim=1)
        yb = torch.cat([yb, b(ya[:, t:t + 1], kv_cache=both, layer=1)], dim=1)
    assert both.length == 6
    assert rel_err(ya, a(x).detach())[0] <= FORWARD_TOLERANCE
    assert rel_err(yb, b(a(x)).detach())[0] <= FORWARD_TOLERANCE


def test_cache_misuse_is_an_error_naming_it():
    torch.manual_seed(5)
    m = qt.MultiHeadAttention(8, 8, 12, 0.0, 2, num_kv_heads=1).eval()
    with pytest.raises(ValueError, match=r"the cache holds \(batch 1, kv_heads 2, head_dim 4\) but this call has "
                                         r"\(batch 1, kv_heads 1, head_dim 4\)"):
        m(torch.zeros(1, 1, 8), kv_cache=qt.KVCache(12, 2, 4))
    small = qt.KVCache(3, 1, 4)
    m(torch.zeros(1, 3, 8), kv_cache=small)
    with pytest.raises(ValueError, match="capacity"):
        m(torch.zeros(1, 1, 8), kv_cache=small)
    with pytest.raises(ValueError, match="context_length = 12"):  # past the module's context
        m(torch.zeros(1, 13, 8), kv_cache=qt.KVCache(20, 1, 4))
    with pytest.raises(TypeError, match="qkv.torch.KVCache"):
        m(torch.zeros(1, 1, 8), kv_cache="cache")
    d = qt.MultiHeadAttention(8, 8, 12, 0.5, 2).train()
    with pytest.raises(ValueError, match="for inference"):
        d(torch.zeros(1, 1, 8), kv_cache=qt.KVCache(12, 2, 4))
    with pytest.raises(ValueError, match="dtype is 'fp8'"):
        qt.KVCache(12, 2, 4, dtype="fp8")


# --- qkv.torch.attention's variants ------------------------------------------------------------------

def textbook(q, k, v, causal, window, slopes, softcap):
    """The kernel's formula in PyTorch (qkv/kernels/attention.h): x = q k^T / sqrt(D); capped; minus
    slope_h (i - j); -inf where hidden; softmax; times v. k and v's G heads repeated for H."""
    H, G = q.shape[1], k.shape[1]
    k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
    s = q @ k.transpose(2, 3) / q.shape[-1] ** 0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    T, S = q.shape[2], k.shape[2]
    i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
    if slopes is not None:
        s = s - slopes.view(1, H, 1, 1) * (i - j).float()
    hidden = torch.zeros(T, S, dtype=torch.bool)
    if causal:
        hidden |= j > i
    if window:
        hidden |= j <= i - window
    return torch.softmax(s.masked_fill(hidden, -torch.inf), dim=-1) @ v


@pytest.mark.parametrize("causal,window,alibi,softcap,G", [
    (True, 3, False, 0.0, 4), (True, 0, True, 0.0, 2), (False, 0, False, 2.0, 1), (True, 5, "given", 10.0, 2),
    (False, 4, True, 0.5, 4)])
def test_attention_variants_match_the_formula(causal, window, alibi, softcap, G):
    g = torch.Generator().manual_seed(11)
    B, H, T, D = 2, 4, 9, 8
    q = torch.randn(B, H, T, D, generator=g, requires_grad=True)
    k = torch.randn(B, G, T, D, generator=g, requires_grad=True)
    v = torch.randn(B, G, T, D, generator=g, requires_grad=True)
    slopes = None
    if alibi == "given":
        slopes = torch.tensor([0.5, 0.25, 0.1, 0.02])
    elif alibi:
        slopes = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)])  # the paper's, H a power of two
    want = textbook(q, k, v, causal, window, slopes, softcap)
    grad = torch.randn(want.shape, generator=g)
    want.backward(grad)
    want_grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    got = qt.attention(q, k, v, causal=causal, window=window, alibi=slopes if alibi == "given" else bool(alibi),
                       softcap=softcap)
    got.backward(grad)
    assert rel_err(got.detach(), want.detach())[0] <= FORWARD_TOLERANCE
    for name, t, w in zip("qkv", (q, k, v), want_grads):
        assert rel_err(t.grad, w)[0] <= GRADIENT_TOLERANCE, name


def test_attention_variants_refuse_bad_values():
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(ValueError, match="window"):
        qt.attention(q, q, q, window=-2)
    with pytest.raises(ValueError, match="softcap"):
        qt.attention(q, q, q, softcap=-1.0)
    with pytest.raises(ValueError, match="alibi has 3 slopes; q has 2 heads"):
        qt.attention(q, q, q, alibi=[0.1, 0.2, 0.3])


def test_kv_heads_as_the_spec_reads_them():
    """0 (or None) means as many key/value heads as query heads, as qkv's spec says; below 0 is an
    error naming num_kv_heads; an ALiBi slope that is not finite is an error naming alibi."""
    m = qt.MultiHeadAttention(8, 8, 8, 0.0, 4, num_kv_heads=0)
    assert tuple(m.W_key.weight.shape) == (8, 8) and m._variants == {}
    with pytest.raises(ValueError, match=r"num_kv_heads \(-1\)"):
        qt.MultiHeadAttention(8, 8, 8, 0.0, 4, num_kv_heads=-1)
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"alibi\[1\] \(nan\)"):
        qt.attention(q, q, q, alibi=[0.5, float("nan")])


def test_the_cached_step_sees_weights_changed_in_place():
    """The joined [W_query; W_key; W_value] is kept between decoding steps, and made again when a
    weight changes (an optimiser step, load_state_dict, an in-place edit)."""
    torch.manual_seed(6)
    m = qt.MultiHeadAttention(8, 8, 16, 0.0, 2, qkv_bias=True).eval()
    x = torch.randn(1, 5, 8)
    decode(m, x, qt.KVCache(16, 2, 4), prefill=2)
    with torch.no_grad():
        m.W_key.weight.mul_(2.0)
        m.W_value.bias.add_(1.0)
    assert rel_err(decode(m, x, qt.KVCache(16, 2, 4), prefill=2), m(x).detach())[0] <= FORWARD_TOLERANCE
