"""qkv.attention / attention_backward / attention_weights on numpy arrays, against textbook attention
written out in PyTorch float64 (conftest.attention_reference) and its autograd; and every bad input."""
import math
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

import qkv
from conftest import attention_reference

FWD_TOL = 1e-5
GRAD_TOL = 1e-4


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def max_rel_err(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want))))) if want.size else 0.0


def reference_with_grads(q, k, v, do, **kw):
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    o = attention_reference(tq, tk, tv, **kw)
    o.backward(torch.tensor(do, dtype=torch.float64))
    return o.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()


CONFIGS = [  # B, H, G, T, S, D, Dv, kind
    (1, 1, 1, 6, 6, 3, 3, "none"),
    (2, 2, 2, 6, 6, 2, 2, "causal"),
    (2, 3, 3, 17, 17, 8, 8, "causal"),
    (1, 4, 2, 33, 33, 16, 16, "causal"),  # grouped-query heads
    (2, 2, 1, 9, 13, 5, 7, "none"),       # S != T, Dv != D, multi-query
    (1, 2, 2, 70, 70, 64, 64, "causal"),  # GPT-2's head size, several blocks
    (2, 1, 1, 12, 10, 4, 4, "additive"),
    (1, 2, 2, 11, 11, 6, 6, "bool"),
    (1, 1, 1, 1, 1, 1, 1, "none"),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "x".join(map(str, c[:7])) + "-" + c[7])
def test_forward_and_backward_match_the_textbook(cfg):
    B, H, G, T, S, D, Dv, kind = cfg
    rng = np.random.default_rng(sum(cfg[:7]))
    q, k, v, do = rand(rng, B, H, T, D), rand(rng, B, G, S, D), rand(rng, B, G, S, Dv), rand(rng, B, H, T, Dv)
    kw, tkw = {}, {}
    if kind == "causal":
        kw = tkw = {"causal": True}
    elif kind == "additive":
        m = rand(rng, T, S)
        m[:, 0] = -np.inf  # -inf hides, as in notebook 002
        kw, tkw = {"mask": m}, {"mask": torch.tensor(m, dtype=torch.float64)}
    elif kind == "bool":
        m = rng.random((T, S)) < 0.4
        m[:, 0] = False  # every row sees a key
        kw, tkw = {"mask": m}, {"mask": torch.tensor(m)}
    o, lse = qkv.attention(q, k, v, return_lse=True, **kw)
    ro, rdq, rdk, rdv = reference_with_grads(q, k, v, do, **tkw)
    assert o.dtype == np.float32 and o.shape == (B, H, T, Dv)
    assert lse.shape == (B, H, T)
    assert max_rel_err(o, ro) < FWD_TOL
    dq, dk, dv = qkv.attention_backward(q, k, v, o, lse, do, **kw)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    for name, got, want in (("dq", dq, rdq), ("dk", dk, rdk), ("dv", dv, rdv)):
        assert max_rel_err(got, want) < GRAD_TOL, name


def test_lse_is_the_log_sum_exp_of_the_scaled_scores():
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 1, 2, 5, 4), rand(rng, 1, 2, 7, 4), rand(rng, 1, 2, 7, 4)
    _, lse = qkv.attention(q, k, v, scale=0.3, return_lse=True)
    s = np.einsum("bhtd,bhsd->bhts", q.astype(np.float64), k.astype(np.float64)) * 0.3
    want = np.log(np.exp(s).sum(-1))
    assert np.max(np.abs(lse - want)) < 1e-5


def test_the_float64_lse_keeps_the_backward_exact_at_large_scores():
    # lse comes back in float64: the float the kernel keeps plus the digits a float drops. At scores
    # in the hundreds a float32 lse is off by up to |lse| 2^-25 for a whole row, and every weight
    # the backward recomputes from it carries that; dv (a sum of weights) shows it. Given the
    # float64 lse, dv lands within float rounding of the float64 reference; given the same lse cast
    # to float32 (accepted as before), several times further.
    rng = np.random.default_rng(5)
    q, k, v, do = (rand(rng, 1, 2, 40, 16) for _ in range(4))
    q *= 8.0
    k *= 8.0
    o, lse = qkv.attention(q, k, v, causal=True, return_lse=True)
    assert lse.dtype == np.float64 and lse.shape == (1, 2, 40)
    assert np.max(np.abs(lse)) > 100.0, "the case must have scores in the hundreds"
    _, _, _, rdv = reference_with_grads(q, k, v, do, causal=True)
    _, _, dv = qkv.attention_backward(q, k, v, o, lse, do, causal=True)
    _, _, dv32 = qkv.attention_backward(q, k, v, o, lse.astype(np.float32), do, causal=True)
    exact, rounded = max_rel_err(dv, rdv), max_rel_err(dv32, rdv)
    assert exact < 1e-6
    assert rounded > 3 * exact, (rounded, exact)


def test_scale_is_used():
    rng = np.random.default_rng(2)
    q, k, v = rand(rng, 1, 1, 4, 3), rand(rng, 1, 1, 4, 3), rand(rng, 1, 1, 4, 3)
    want = attention_reference(*(torch.tensor(a, dtype=torch.float64) for a in (q, k, v)), scale=2.0)
    assert max_rel_err(qkv.attention(q, k, v, scale=2.0), want) < FWD_TOL
    assert max_rel_err(qkv.attention(q, k, v), want) > 1e-3  # the default, 1/sqrt(3), differs
    # a finite double beyond float32's range is named as given (it read "scale must be finite, got inf")
    with pytest.raises(ValueError, match=r"scale is 1e\+300, beyond float32's range"):
        qkv.attention(q, k, v, scale=1e300)
    with pytest.raises(ValueError, match="scale must be finite"):
        qkv.attention(q, k, v, scale=float("inf"))


def test_book_sdpa_table(book):
    """Notebook 002's scaled_dot_product_attention weights (q, k as printed) from the kernel's weights."""
    q = np.array(book["sdpa_numpy.q"]["expected"]["data"], dtype=np.float32).reshape(1, 1, 4, 8)
    k = np.array(book["sdpa_numpy.k"]["expected"]["data"], dtype=np.float32).reshape(1, 1, 4, 8)
    for causal, name in ((True, "sdpa_numpy.attention_causal"), (False, "sdpa_numpy.attention_nomask")):
        _, lse = qkv.attention(q, k, k, causal=causal, return_lse=True)
        w = qkv.attention_weights(q, k, lse, causal=causal)[0, 0]
        want = np.array(book[name]["expected"]["data"], dtype=np.float64).reshape(4, 4)
        assert np.max(np.abs(w - want)) < 1e-6, name


def test_dropout_forward_backward_and_mask_agree():
    """The forward's output is its dropped weights times v; the mask those weights carry is Philox's
    for the seed (the same seed gives it again, another seed another); the backward is the
    textbook's gradient through that very mask."""
    rng = np.random.default_rng(3)
    B, H, T, D, p = 2, 2, 40, 8, 0.3
    q, k, v, do = rand(rng, B, H, T, D), rand(rng, B, H, T, D), rand(rng, B, H, T, D), rand(rng, B, H, T, D)
    o, lse = qkv.attention(q, k, v, causal=True, dropout_p=p, seed=11, return_lse=True)
    w = qkv.attention_weights(q, k, lse, causal=True, dropout_p=p, seed=11)
    wd = qkv.attention_weights(q, k, lse, causal=True, dropout_p=p, seed=11, after_dropout=True)
    visible = w > 0
    keep = (wd > 0) & visible
    # dropped weights are 0 or w / (1 - p)
    assert np.allclose(wd[keep], w[keep] / (1 - p), rtol=1e-5)
    assert np.all(wd[visible & ~keep] == 0)
    kept = keep.sum() / visible.sum()
    assert abs(kept - (1 - p)) < 0.05, kept
    assert max_rel_err(o, wd @ v) < FWD_TOL
    # same seed, same output; another seed, another mask
    assert np.array_equal(o, qkv.attention(q, k, v, causal=True, dropout_p=p, seed=11))
    assert not np.allclose(o, qkv.attention(q, k, v, causal=True, dropout_p=p, seed=12))
    # backward against autograd through the saved mask
    ro, rdq, rdk, rdv = reference_with_grads(q, k, v, do, causal=True, keep=torch.tensor(keep), p=p)
    assert max_rel_err(o, ro) < FWD_TOL
    dq, dk, dv = qkv.attention_backward(q, k, v, o, lse, do, causal=True, dropout_p=p, seed=11)
    for name, got, want in (("dq", dq, rdq), ("dk", dk, rdk), ("dv", dv, rdv)):
        assert max_rel_err(got, want) < GRAD_TOL, name


def test_views_are_read_in_place_and_out_is_written():
    """A (B, T, H, D) projection viewed as heads, and a token-major out=, give the contiguous answer."""
    rng = np.random.default_rng(4)
    B, T, H, D = 2, 9, 3, 4
    x = rand(rng, B, T, 3 * H * D)  # one fused projection: q | k | v
    q, k, v = (x[:, :, i * H * D:(i + 1) * H * D].reshape(B, T, H, D).transpose(0, 2, 1, 3) for i in range(3))
    assert not q.flags.c_contiguous
    want = qkv.attention(*(np.ascontiguousarray(a) for a in (q, k, v)), causal=True)
    out_storage = np.full((B, T, H, D), np.nan, dtype=np.float32)
    out = out_storage.transpose(0, 2, 1, 3)
    got = qkv.attention(q, k, v, causal=True, out=out)
    assert np.shares_memory(got, out_storage)
    assert np.array_equal(out, want)
    assert np.array_equal(got, want)


def test_reversed_and_float64_inputs_are_converted():
    rng = np.random.default_rng(5)
    q, k, v = rand(rng, 1, 2, 6, 4), rand(rng, 1, 2, 6, 4), rand(rng, 1, 2, 6, 4)
    want = qkv.attention(q, k, v, causal=True)
    q_rev = np.ascontiguousarray(q[:, :, ::-1])[:, :, ::-1]  # negative strides
    assert q_rev.strides[2] < 0
    assert np.array_equal(qkv.attention(q_rev, k, v, causal=True), want)
    got = qkv.attention(q.astype(np.float64), k.astype(np.float16).astype(np.float64), v, causal=True)
    assert got.dtype == np.float32
    assert max_rel_err(got, qkv.attention(q, k.astype(np.float16).astype(np.float32), v, causal=True)) == 0
    assert np.array_equal(qkv.attention(q.tolist(), k, v, causal=True), want)  # nested lists: float64 arrays


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.complex64])
def test_non_float_dtypes_are_a_type_error_naming_the_dtype(dtype):
    a = np.ones((1, 1, 4, 2), dtype=dtype)
    f = np.ones((1, 1, 4, 2), dtype=np.float32)
    with pytest.raises(TypeError, match=np.dtype(dtype).name):
        qkv.attention(a, f, f)
    with pytest.raises(TypeError, match=np.dtype(dtype).name):
        qkv.attention(f, f, a)
    with pytest.raises(TypeError, match="mask has dtype " + np.dtype(dtype).name):
        if dtype is not np.bool_:
            qkv.attention(f, f, f, mask=np.zeros((4, 4), dtype=dtype))
        else:
            raise TypeError("mask has dtype bool")  # a boolean mask is valid: checked below
    with pytest.raises(TypeError, match="q has dtype object"):
        qkv.attention(object(), f, f)


def test_wrong_ranks_and_shapes_are_value_errors_with_the_shapes():
    f = np.ones((2, 2, 4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"q must be \(B, H, T, D\), got shape \(4, 3\)"):
        qkv.attention(np.ones((4, 3), dtype=np.float32), f, f)
    with pytest.raises(ValueError, match=r"\(2, 2, 4, 5\)"):
        qkv.attention(f, np.ones((2, 2, 4, 5), dtype=np.float32), f)  # D differs
    with pytest.raises(ValueError, match=r"\(2, 2, 6, 3\)"):
        qkv.attention(f, f, np.ones((2, 2, 6, 3), dtype=np.float32))  # S differs between k and v
    with pytest.raises(ValueError, match=r"\(3, 2, 4, 3\)"):
        qkv.attention(f, np.ones((3, 2, 4, 3), dtype=np.float32), f)  # B differs
    with pytest.raises(ValueError, match=r"mask must be \(T, S\) = \(4, 4\), got shape \(4, 5\)"):
        qkv.attention(f, f, f, mask=np.zeros((4, 5), dtype=np.float32))
    with pytest.raises(ValueError, match="not both"):
        qkv.attention(f, f, f, causal=True, mask=np.zeros((4, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"out has shape \(2, 2, 4, 4\)"):
        qkv.attention(f, f, f, out=np.zeros((2, 2, 4, 4), dtype=np.float32))
    ro = np.zeros((2, 2, 4, 3), dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        qkv.attention(f, f, f, out=ro)
    with pytest.raises(TypeError, match="float32"):
        qkv.attention(f, f, f, out=np.zeros((2, 2, 4, 3)))
    q = np.random.default_rng(3).random((2, 2, 4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="out overlaps q in memory"):
        qkv.attention(q, f, f, out=q)  # the kernel would overwrite q while reading it
    o, lse = qkv.attention(f, f, f, return_lse=True)
    with pytest.raises(ValueError, match="dq overlaps grad_out in memory"):
        qkv.attention_backward(f, f, f, o, lse, q, dq=q)
    buf = np.empty((2, 2, 4, 6), dtype=np.float32)
    with pytest.raises(ValueError, match="dq overlaps dk in memory"):
        qkv.attention_backward(f, f, f, o, lse, o, dq=buf[..., :3], dk=buf[..., 2:5])
    # a mask kept inside out (read in place) would be overwritten as the kernel writes out (it gave
    # wrong numbers, silently); so would a mask inside dq, dk or dv in the backward
    f4 = np.ones((2, 2, 4, 4), dtype=np.float32)
    o2 = np.zeros((2, 2, 4, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="out overlaps mask in memory"):
        qkv.attention(f4, f4, f4, mask=o2[1, 1], out=o2)
    o4, l4 = qkv.attention(f4, f4, f4, mask=np.zeros((4, 4), dtype=np.float32), return_lse=True)
    with pytest.raises(ValueError, match="dq overlaps mask in memory"):
        qkv.attention_backward(f4, f4, f4, o4, l4, o4, mask=o2[0, 0], dq=o2)
    # a copy too large for memory raises numpy's MemoryError (it came out as pybind's "Internal error")
    with pytest.raises(MemoryError):
        huge = np.broadcast_to(np.float64(0.5), (1, 1, 2**40, 8))
        qkv.attention(huge, huge, huge)
    with pytest.raises(ValueError, match=r"lse must be \(B, H, T\), got shape \(2, 2\)"):
        qkv.attention_backward(f, f, f, o, lse[:, :, 0], o)
    with pytest.raises(ValueError, match=r"lse has shape \(2, 2, 3\); q \(2, 2, 4, 3\) needs"):
        qkv.attention_backward(f, f, f, o, lse[:, :, :3], o)


def test_library_errors_surface_with_the_library_message():
    f = np.ones((1, 1, 4, 2), dtype=np.float32)
    with pytest.raises(qkv.Error, match=r"dropout p must be in \[0, 1\), got 1.5"):
        qkv.attention(f, f, f, dropout_p=1.5)
    assert issubclass(qkv.Error, ValueError)
    with pytest.raises(ValueError, match="head dims must be at least 1"):
        qkv.attention(np.ones((1, 1, 4, 0), dtype=np.float32), np.ones((1, 1, 4, 0), dtype=np.float32), f)
    with pytest.raises(ValueError, match="key/value heads"):
        qkv.attention(np.ones((1, 3, 4, 2), dtype=np.float32), np.ones((1, 2, 4, 2), dtype=np.float32),
                      np.ones((1, 2, 4, 2), dtype=np.float32))
    o, lse = qkv.attention(f, f, f, return_lse=True, dropout_p=0.5, seed=1)
    with pytest.raises(ValueError, match="needs the forward's seed"):
        qkv.attention_backward(f, f, f, o, lse, o, dropout_p=0.5)
    with pytest.raises(ValueError, match="seed must be in"):
        qkv.attention(f, f, f, dropout_p=0.5, seed=-1)
    with pytest.raises(ValueError, match="seed must be in"):
        qkv.attention(f, f, f, dropout_p=0.5, seed=2**64)


def test_thread_count_does_not_change_results():
    rng = np.random.default_rng(6)
    q, k, v = rand(rng, 2, 4, 130, 64), rand(rng, 2, 4, 130, 64), rand(rng, 2, 4, 130, 64)
    before = qkv.get_num_threads()
    try:
        qkv.set_num_threads(1)
        assert qkv.get_num_threads() == 1
        one = qkv.attention(q, k, v, causal=True)
        qkv.set_num_threads(2)
        assert qkv.get_num_threads() == 2
        assert np.array_equal(one, qkv.attention(q, k, v, causal=True))
        with pytest.raises(ValueError, match=r"set_num_threads: n is 0; expected an int in \[1, 1025\)"):
            qkv.set_num_threads(0)
        # pybind's refusal named neither the function's argument nor the value
        with pytest.raises(TypeError, match=r"set_num_threads: n must be an int, not float \(2.0\)"):
            qkv.set_num_threads(2.0)
        with pytest.raises(ValueError, match=r"n is 1000000; expected an int in \[1, 1025\)"):
            qkv.set_num_threads(10**6)
        assert qkv.get_num_threads() == 2
    finally:
        qkv.set_num_threads(before)


def test_the_gil_is_released_while_a_kernel_runs():
    """Another Python thread runs while a long kernel call is in progress."""
    rng = np.random.default_rng(7)
    q = rand(rng, 1, 1, 2048, 64)
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.01)
    start = len(ticks)
    t0 = time.perf_counter()
    for _ in range(3):
        qkv.attention(q, q, q)
    t1 = time.perf_counter()
    stop.set()
    t.join()
    during = [x for x in ticks[start:] if t0 <= x <= t1]
    assert (t1 - t0) < 0.05 or len(during) >= 5, (t1 - t0, len(during))


def test_ctrl_c_during_a_call_raises_keyboard_interrupt_when_it_returns():
    """SIGINT arriving while the kernel runs (GIL released): the call raises KeyboardInterrupt
    instead of returning its result. The call is sized from this build's speed to last about half a
    second or more, far longer than the 0.05 s before the signal (T = 8,192 on two Zen 5 cores; the
    sanitizer build's kernels are a hundred times slower, and a shorter T is enough there)."""
    rng = np.random.default_rng(8)
    small = rand(rng, 1, 8, 1024, 64)
    t0 = time.perf_counter()
    qkv.attention(small, small, small)
    took = time.perf_counter() - t0
    T = 1024
    while took * (T / 1024) ** 2 < 0.5 and T < 16384:  # the work grows as T^2
        T *= 2
    q = rand(rng, 1, 8, T, 64)

    def interrupt():
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    result = None
    t = threading.Thread(target=interrupt)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        result = qkv.attention(q, q, q)
    t.join()
    assert result is None
