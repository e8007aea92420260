"""qkv.torch against the book's PyTorch classes (tests/pytorch/book_classes.py) and autograd:
the same seed gives the same state dict, the forward agrees within 1e-5 and every gradient
(input and parameters) within 1e-4, over random configurations; and qkv.torch.attention's
backward against autograd through textbook attention."""
import random

import pytest
import torch

import book_classes as book
import qkv
import qkv.torch as qt
from conftest import attention_reference

FWD_TOL = 1e-5
GRAD_TOL = 1e-4
CLASSES = ["SelfAttention_v1", "SelfAttention_v2", "CausalAttention", "MultiHeadAttentionWrapper",
           "MultiHeadAttention", "GatedMultiHeadAttention", "MultiHeadLatentAttention"]


def rel_err(got, want):
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).abs().max() / max(1.0, float(want.abs().max()))) if want.numel() else 0.0


def random_config(name, rng):
    d_in, T, B = rng.randint(1, 12), rng.randint(1, 20), rng.randint(1, 3)
    heads = rng.randint(1, 4)
    split = ("MultiHeadAttention", "GatedMultiHeadAttention", "MultiHeadLatentAttention")
    d_out = rng.randint(1, 8) * (heads if name in split else 1)
    bias = rng.random() < 0.5
    context = T + rng.randint(0, 5)
    dropout = rng.choice([0.0, 0.0, 0.1, 0.5])
    args = {
        "SelfAttention_v1": (d_in, d_out),
        "SelfAttention_v2": (d_in, d_out, bias),
        "CausalAttention": (d_in, d_out, context, dropout, bias),
        "MultiHeadAttentionWrapper": (d_in, d_out, context, dropout, heads, bias),
        "MultiHeadAttention": (d_in, d_out, context, dropout, heads, bias),
        "GatedMultiHeadAttention": (d_in, d_out, context, dropout, heads, bias),
        "MultiHeadLatentAttention": (d_in, d_out, dropout, heads, bias, rng.choice([None, rng.randint(1, 9)])),
    }[name]
    shape = (T, d_in) if name.startswith("SelfAttention") else (B, T, d_in)
    return args, shape


def run(module, x, grad_seed):
    x = x.clone().requires_grad_(True)
    y = module(x)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(grad_seed))
    (y * g).sum().backward()
    return y, x.grad, {n: p.grad.clone() for n, p in module.named_parameters()}  # (not live: a module may run again)


def seeded_pair(name, args, seed, train):
    """The book's class and qkv.torch's, each made after torch.manual_seed(seed): the same state."""
    torch.manual_seed(seed)
    ref = getattr(book, name)(*args)
    torch.manual_seed(seed)
    mine = getattr(qt, name)(*args)
    assert list(mine.state_dict()) == list(ref.state_dict())
    for k, v in ref.state_dict().items():
        assert torch.equal(mine.state_dict()[k], v), k
    return ref.train(train), mine.train(train)


@pytest.mark.parametrize("name", CLASSES)
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_forward_and_backward_match_the_book(name, train):
    rng = random.Random(hash((name, train)) % 1000)
    for case in range(15):
        args, shape = random_config(name, rng)
        seed = rng.randint(0, 10_000)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed + 1))
        ref, mine = seeded_pair(name, args, seed, train)
        torch.manual_seed(seed + 2)  # dropout draws (training mode) start from here in both
        y_ref, dx_ref, dp_ref = run(ref, x, seed + 3)
        torch.manual_seed(seed + 2)
        y, dx, dp = run(mine, x, seed + 3)
        where = f"{name}{args} x{tuple(shape)} seed {seed}"
        assert y.shape == y_ref.shape, where
        assert rel_err(y, y_ref) < FWD_TOL, where
        assert rel_err(dx, dx_ref) < GRAD_TOL, where
        for n in dp_ref:
            assert rel_err(dp[n], dp_ref[n]) < GRAD_TOL, f"{where}: {n}"


def deltanet_config(name, rng):
    B, T, d_in = rng.randint(1, 3), rng.randint(1, 20), rng.randint(1, 12)
    if name == "GatedDeltaNet":
        heads = rng.randint(1, 4)
        return (d_in, rng.randint(1, 6) * heads, rng.choice([0.0, 0.0, 0.1, 0.5]), heads, rng.random() < 0.5), (B, T, d_in)
    key_heads = rng.randint(1, 3)
    return (d_in, key_heads * rng.randint(1, 2), key_heads, rng.randint(1, 6), rng.randint(1, 6),
            rng.randint(2, 4)), (B, T, d_in)


# The two Gated DeltaNets (their recurrence in qkv, in float64) against the book's classes run in
# float64: within the tolerances, or within 2x the float32 class's own farthest distance on x and
# nudged copies of it where float32 arithmetic cannot reach them (heads of width 1 or 2; as the
# differential tests judge qkv forward's).
@pytest.mark.parametrize("name", ["GatedDeltaNet", "Qwen3_5GatedDeltaNet"])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_the_gated_deltanets_match_the_book_in_float64(name, train):
    import copy

    from module_cases import nudged_inputs
    rng = random.Random(f"{name} {train}")  # (a str seed: the same cases in every process)
    for case in range(12):
        args, shape = deltanet_config(name, rng)
        seed = rng.randint(0, 10_000)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed + 1))
        ref, mine = seeded_pair(name, args, seed, train)
        ref64 = copy.deepcopy(ref).double()
        torch.manual_seed(seed + 2)  # dropout draws (training mode) start from here in every run
        want = run(ref64, x.double(), seed + 3)
        runs = []
        for xi in nudged_inputs(x, seed):
            torch.manual_seed(seed + 2)
            ref.zero_grad()
            runs.append(run(ref, xi, seed + 3))
        torch.manual_seed(seed + 2)
        got = run(mine, x, seed + 3)
        where = f"{name}{args} x{tuple(shape)} seed {seed}"

        def check(pick, tol, what):
            bound = max(tol, 2 * max(rel_err(pick(r), pick(want)) for r in runs))
            assert rel_err(pick(got), pick(want)) <= bound, f"{where}: {what}"

        check(lambda r: r[0], FWD_TOL, "output")
        check(lambda r: r[1], GRAD_TOL, "d input")
        for n in want[2]:
            check(lambda r: r[2][n], GRAD_TOL, f"d {n}")


def test_delta_rule_bad_shapes_name_the_array():
    q = torch.randn(1, 3, 2, 4)
    with pytest.raises(ValueError, match=r"qkv.delta_rule: v has shape \(1, 3, 3, 5\); expected \(B, T, H, Dv\)"):
        qt.delta_rule(q, q, torch.randn(1, 3, 3, 5), torch.rand(1, 3, 2), torch.rand(1, 3, 2))
    with pytest.raises(ValueError, match=r"qkv.delta_rule: alpha must be \(B, T, H\), got shape \(1, 3\)"):
        qt.delta_rule(q, q, torch.randn(1, 3, 2, 5), torch.rand(1, 3, 2), torch.rand(1, 3))
    with pytest.raises(TypeError, match=r"qkv.delta_rule: beta has dtype object; qkv computes in float32"):
        qkv._qkv.delta_rule(q.numpy(), q.numpy(), q.numpy(), None, torch.rand(1, 3, 2).numpy())
    with pytest.raises(ValueError, match=r"qkv.delta_rule_backward: states has shape \(\); expected \(B, H, T, Dk, Dv\)"):
        qkv._qkv.delta_rule_backward(q.numpy(), q.numpy(), q.numpy(), torch.rand(1, 3, 2).numpy(),
                                     torch.rand(1, 3, 2).numpy(), None, q.numpy())
    with pytest.raises(TypeError, match=r"qkv.delta_rule_backward: states must be the float64 array"):
        qkv._qkv.delta_rule_backward(q.numpy(), q.numpy(), q.numpy(), torch.rand(1, 3, 2).numpy(),
                                     torch.rand(1, 3, 2).numpy(), "states", q.numpy())
    with pytest.raises(ValueError, match=r"Qwen3_5GatedDeltaNet: num_v_heads \(3\) must be a multiple of num_k_heads \(2\)"):
        qt.Qwen3_5GatedDeltaNet(4, 3, 2, 2, 2, 4)


def test_an_optimizer_step_matches_the_book():
    torch.manual_seed(5)
    ref = book.MultiHeadAttention(8, 12, 16, 0.0, num_heads=3)
    torch.manual_seed(5)
    mine = qt.MultiHeadAttention(8, 12, 16, 0.0, num_heads=3)
    x = torch.randn(2, 16, 8)
    for m in (ref, mine):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
    for (n, a), (_, b) in zip(ref.named_parameters(), mine.named_parameters()):
        assert rel_err(b, a) < 1e-5, n


def test_state_dicts_load_both_ways():
    torch.manual_seed(1)
    ref = book.MultiHeadAttention(4, 6, 8, 0.0, num_heads=2, qkv_bias=True)
    mine = qt.MultiHeadAttention(4, 6, 8, 0.0, num_heads=2, qkv_bias=True)
    mine.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(3, 8, 4)
    assert rel_err(mine(x), ref(x)) < FWD_TOL
    torch.manual_seed(2)
    mine2 = qt.MultiHeadAttentionWrapper(4, 3, 8, 0.0, num_heads=2)
    ref2 = book.MultiHeadAttentionWrapper(4, 3, 8, 0.0, num_heads=2)
    ref2.load_state_dict(mine2.state_dict(), strict=True)
    assert rel_err(mine2(x), ref2(x)) < FWD_TOL


def test_a_loaded_mask_that_is_not_causal_is_used_as_loaded():
    torch.manual_seed(3)
    ref = book.CausalAttention(4, 5, 10, 0.0)
    mine = qt.CausalAttention(4, 5, 10, 0.0)
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(2, 10, 4)
    assert rel_err(mine(x), ref(x)) < FWD_TOL
    mask = (torch.rand(10, 10) < 0.5).float()
    mask.fill_diagonal_(0)  # every query sees itself: no all-hidden row (PyTorch gives NaN there)
    state = ref.state_dict()
    state["mask"] = mask
    ref.load_state_dict(state)
    mine.load_state_dict(state)
    assert rel_err(mine(x), ref(x)) < FWD_TOL
    mine.mask.copy_(torch.triu(torch.ones(10, 10), diagonal=1))  # an in-place edit is seen too
    ref.mask.copy_(mine.mask)
    assert rel_err(mine(x), ref(x)) < FWD_TOL


def test_book_dropout_in_training_and_fused_dropout_on_request():
    torch.manual_seed(4)
    mine = qt.MultiHeadAttention(6, 6, 12, 0.5, num_heads=2)
    x = torch.randn(2, 12, 6)
    mine.eval()
    clean = mine(x)
    mine.train()
    mine.fused_dropout = True
    torch.manual_seed(9)
    a = mine(x)
    torch.manual_seed(9)
    b = mine(x)
    assert torch.equal(a, b)  # the kernel's seed comes from PyTorch's generator
    assert rel_err(a, clean) > 1e-3  # and dropout did something
    a.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in mine.parameters())


def test_qkv_torch_attention_gradients_match_autograd():
    rng = random.Random(7)
    for _ in range(12):
        B, H, T, D = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 40), rng.choice([1, 3, 8, 64])
        G = rng.choice([g for g in range(1, H + 1) if H % g == 0])
        S = T if rng.random() < 0.5 else rng.randint(1, 40)
        causal = S == T and rng.random() < 0.7
        q, k, v = torch.randn(B, H, T, D), torch.randn(B, G, S, D), torch.randn(B, G, S, D)
        g = torch.randn(B, H, T, D)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        qt.attention(*leaves, causal=causal).mul(g).sum().backward()
        ref = [t.double().requires_grad_(True) for t in (q, k, v)]
        attention_reference(*ref, causal=causal).mul(g.double()).sum().backward()
        for name, a, b in zip("qkv", leaves, ref):
            assert rel_err(a.grad, b.grad) < GRAD_TOL, (name, B, H, G, T, S, D, causal)


def test_qkv_torch_attention_reads_head_views_in_place():
    """The output of a (B, T, H, D) view comes back token-major, so merging heads copies nothing."""
    x = torch.randn(2, 7, 12)
    heads = x.view(2, 7, 3, 4).transpose(1, 2)
    o = qt.attention(heads, heads, heads, causal=True)
    assert o.transpose(1, 2).is_contiguous()
    want = attention_reference(*(heads.double(),) * 3, causal=True)
    assert rel_err(o, want) < FWD_TOL


def test_bad_inputs():
    f = torch.ones(1, 1, 4, 2)
    with pytest.raises(TypeError, match="torch.int64"):
        qt.attention(torch.ones(1, 1, 4, 2, dtype=torch.long), f, f)
    with pytest.raises(TypeError, match="torch.Tensor"):
        qt.attention([[1.0]], f, f)
    with pytest.raises(ValueError, match=r"\(4, 2\)"):
        qt.attention(torch.ones(4, 2), f, f)
    o = qt.attention(f.double(), f.double(), f.double())
    assert o.dtype == torch.float64  # converted in, and the result back
    ca = qt.CausalAttention(2, 2, 4, 0.0)
    with pytest.raises(ValueError, match="6 tokens but the mask covers only context_length = 4"):
        ca(torch.ones(1, 6, 2))
    with pytest.raises(ValueError, match=r"\(B, T, d_in\)"):
        ca(torch.ones(6, 2))
    with pytest.raises(ValueError, match=r"\(T, d_in\)"):
        qt.SelfAttention_v2(2, 2)(torch.ones(1, 6, 2))
    with pytest.raises(ValueError, match="divisible"):
        qt.MultiHeadAttention(2, 5, 4, 0.0, num_heads=2)
    with pytest.raises(qkv.Error, match="dropout p"):
        qt.attention(f, f, f, dropout_p=1.0)
    # a mask, scale or slopes to learn would get no gradient, silently: refused (detached, or under
    # no_grad, they are read as before)
    learned = dict(mask=torch.zeros(4, 4, requires_grad=True), scale=torch.tensor(0.5, requires_grad=True),
                   alibi=torch.ones(1, requires_grad=True))
    for name, t in learned.items():
        with pytest.raises(ValueError, match=f"{name} requires grad, but qkv's fused backward gives gradients of q, k"):
            qt.attention(f, f, f, **{name: t})
        want = qt.attention(f, f, f, **{name: t.detach()})
        assert torch.equal(qt.attention(f, f, f, **{name: t.detach()}), want)
        with torch.no_grad():
            assert torch.equal(qt.attention(f, f, f, **{name: t}), want)


@pytest.mark.parametrize("name", ["CausalAttention", "MultiHeadAttention"])
def test_float32_modules_run_qkvs_pipeline_and_other_dtypes_do_not(name, monkeypatch):
    calls = []
    for fn in ("mha_forward", "mha_backward"):
        real = getattr(qkv._qkv, fn)
        monkeypatch.setattr(qkv._qkv, fn, lambda *a, _real=real, _fn=fn, **k: calls.append(_fn) or _real(*a, **k))
    torch.manual_seed(1)
    module = getattr(qt, name)(4, 6, 8, 0.0, *([2] if name == "MultiHeadAttention" else []))
    x = torch.randn(2, 5, 4, requires_grad=True)
    module(x).sum().backward()
    assert calls == ["mha_forward", "mha_backward"]
    assert len(module._workspaces) == 1  # the graph is gone: its node gave the workspace back
    y1 = module(x)  # a backward to come: the workspace is held by the graph's node
    assert module._workspaces == []
    with torch.no_grad():
        y = module(x)  # none to come: its workspace goes back at once
    assert calls[-1] == "mha_forward" and len(module._workspaces) == 1
    y1.sum().backward()  # read the first forward's workspace, not the second's
    assert len(module._workspaces) == 1  # y1's graph still holds its node (a second backward may come)
    assert torch.equal(y, y1.detach())
    del y1  # the graph freed: the workspace goes back
    assert len(module._workspaces) == 2
    calls.clear()
    with pytest.raises(RuntimeError):  # the book's nn.Linear refuses float64 input with float32 weights; so does qkv
        module(x.detach().double())
    assert calls == []


def test_pipeline_bad_inputs_say_what_is_wrong():
    import numpy as np
    ws = qkv._qkv.MhaWorkspace()
    x = np.ones((1, 3, 4), np.float32)
    w = np.ones((6, 4), np.float32)
    with pytest.raises(ValueError, match=r"w_qkv has shape \(5, 4\)"):
        qkv._qkv.mha_forward(x, np.ones((5, 4), np.float32), None, None, None, heads=1, workspace=ws)
    with pytest.raises(ValueError, match=r"w_qkv has shape \(6, 4\); x \(1, 3, 4\) with 3 heads and 3 kv_heads needs "
                       r"\(\(heads \+ 2 kv_heads\) head_dim, 4\)"):  # 6 rows are not (3 + 2 * 3) D
        qkv._qkv.mha_forward(x, w, None, None, None, heads=3, workspace=ws)
    with pytest.raises(ValueError, match=r"kv_heads \(2\) must divide heads \(3\)"):
        qkv._qkv.mha_forward(x, w, None, None, None, heads=3, kv_heads=2, workspace=ws)
    with pytest.raises(ValueError, match=r"softcap"):
        qkv._qkv.mha_forward(x, w, None, None, None, heads=1, softcap=-1.0, workspace=ws)
    with pytest.raises(ValueError, match=r"w_out has shape \(3, 2\), expected \(2, 2\)"):
        qkv._qkv.mha_forward(x, w, None, np.ones((3, 2), np.float32), None, heads=1, workspace=ws)
    with pytest.raises(ValueError, match=r"b_qkv has shape \(5,\), expected \(6,\)"):
        qkv._qkv.mha_forward(x, w, np.ones(5, np.float32), None, None, heads=1, workspace=ws)
    with pytest.raises(TypeError, match="int64"):
        qkv._qkv.mha_forward(np.ones((1, 3, 4), np.int64), w, None, None, None, heads=1, workspace=ws)
    with pytest.raises(ValueError, match="the workspace does not hold a forward of these shapes"):
        qkv._qkv.mha_backward(x, np.ones((1, 3, 2), np.float32), w, None, None, None, heads=1, workspace=ws)
    y = qkv._qkv.mha_forward(x, w, None, None, None, heads=1, workspace=ws)
    assert y.shape == (1, 3, 2)
    with pytest.raises(ValueError, match=r"grad_y has shape \(1, 3, 5\), y's is \(1, 3, 2\)"):
        qkv._qkv.mha_backward(x, np.ones((1, 3, 5), np.float32), w, None, None, None, heads=1, workspace=ws)
    with pytest.raises(ValueError, match="the workspace does not hold a forward of these shapes"):
        qkv._qkv.mha_backward(np.ones((2, 3, 4), np.float32), np.ones((2, 3, 2), np.float32), w, None, None, None,
                              heads=1, workspace=ws)
    dx, dw, db, dwo, dbo = qkv._qkv.mha_backward(x, np.ones((1, 3, 2), np.float32), w, None, None, None, heads=1,
                                                 workspace=ws)
    assert dx.shape == (1, 3, 4) and dw.shape == (6, 4) and db is None and dwo is None and dbo is None


# --- hostile use of autograd (issue 26): kept graphs, in-place mask edits, double backward --------


def _book_and_qkv_mha(seed=3):
    torch.manual_seed(seed)
    mine = qt.MultiHeadAttention(16, 16, 8, 0.0, 4)
    torch.manual_seed(seed)
    theirs = book.MultiHeadAttention(16, 16, 8, 0.0, 4)
    assert all(torch.equal(a, b) for a, b in zip(mine.state_dict().values(), theirs.state_dict().values()))
    return mine, theirs


def test_a_kept_graph_gives_its_own_gradients_after_later_forwards():
    mine, theirs = _book_and_qkv_mha()
    gen = torch.Generator().manual_seed(7)
    x1 = torch.randn(2, 8, 16, generator=gen, requires_grad=True)
    x2 = torch.randn(2, 8, 16, generator=gen, requires_grad=True)
    g = torch.randn(2, 8, 16, generator=gen)
    want = torch.autograd.grad(theirs(x1), x1, g)[0]
    y1 = mine(x1)
    first = torch.autograd.grad(y1, x1, g, retain_graph=True)[0]
    mine(x2).sum().backward()  # a later forward and backward of the same module
    second = torch.autograd.grad(y1, x1, g, retain_graph=True)[0]  # the kept graph, again
    third = torch.autograd.grad(y1, x1, g)[0]
    for got in (first, second, third):
        assert rel_err(got, want) < GRAD_TOL
    # Backward twice over one kept graph, then two forwards: each has a workspace of its own.
    y3, y4 = mine(x1), mine(x2)
    assert rel_err(torch.autograd.grad(y3, x1, g)[0], want) < GRAD_TOL
    assert rel_err(torch.autograd.grad(y4, x2, g)[0], torch.autograd.grad(theirs(x2), x2, g)[0]) < GRAD_TOL


def test_the_workspace_a_later_forward_overwrote_is_refused():
    import numpy as np
    x = np.random.rand(1, 5, 6).astype(np.float32)
    w = np.random.rand(18, 6).astype(np.float32)
    ws = qkv._qkv.MhaWorkspace()
    qkv._qkv.mha_forward(x, w, None, None, None, heads=2, workspace=ws)
    first = ws.forward_id
    qkv._qkv.mha_forward(x, w, None, None, None, heads=2, workspace=ws)
    with pytest.raises(ValueError, match="a later forward overwrote"):
        qkv._qkv.mha_backward(x, np.ones((1, 5, 6), np.float32), w, None, None, None, heads=2, workspace=ws,
                              forward_id=first)


@pytest.mark.parametrize("edit", ["data", "numpy", "copy", "load_state_dict"])
def test_every_in_place_edit_of_the_mask_is_honoured(edit):
    mine, theirs = _book_and_qkv_mha()
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1))
    mine(x)  # a forward with the causal mask first, so any cache of it would be stale
    new = torch.zeros(8, 8)
    new[:, 5:] = 1  # keys 5.. hidden from every query; not the causal triangle
    if edit == "data":
        mine.mask.data.zero_()
        mine.mask.data[:, 5:] = 1
    elif edit == "numpy":
        mine.mask.numpy()[:] = new.numpy()
    elif edit == "copy":
        with torch.no_grad():
            mine.mask.copy_(new)
    else:
        mine.load_state_dict({**mine.state_dict(), "mask": new})
    theirs.mask.copy_(new)
    assert rel_err(mine(x), theirs(x)) < FWD_TOL


def test_double_backward_says_it_is_not_supported():
    torch.manual_seed(0)
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    y = qt.attention(q, q, q, causal=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(y.sum(), q, create_graph=True)
    mine, _ = _book_and_qkv_mha()
    x = torch.randn(2, 8, 16, requires_grad=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(mine(x).sum(), x, create_graph=True)


def test_empty_batches_and_sequences_give_empty_results():
    # PyTorch hands an empty tensor to numpy with zero strides, which the output check took for a
    # broadcast view ("out has a zero stride"); the book's classes return empty results, and so do
    # these, forward and backward
    q = torch.rand(0, 2, 4, 8, requires_grad=True)
    o = qt.attention(q, q, q, causal=True)
    o.sum().backward()
    assert o.shape == (0, 2, 4, 8) and q.grad.shape == q.shape
    assert qt.attention(torch.rand(1, 2, 0, 8), torch.rand(1, 2, 0, 8), torch.rand(1, 2, 0, 8)).shape == (1, 2, 0, 8)
    torch.manual_seed(1)
    assert qt.SelfAttention_v2(3, 2)(torch.rand(0, 3)).shape == (0, 2)
    m = qt.MultiHeadAttention(3, 4, 6, 0.0, num_heads=2)
    x = torch.rand(0, 6, 3, requires_grad=True)
    m(x).sum().backward()
    assert x.grad.shape == x.shape


@pytest.mark.parametrize("make", [
    lambda: qt.CausalAttention(4, 4, 6, 0.0),
    lambda: qt.MultiHeadAttention(4, 4, 6, 0.0, num_heads=2, qkv_bias=True),
    lambda: qt.MultiHeadAttention(4, 4, 6, 0.0, num_heads=2, num_kv_heads=1, rope="half"),
    lambda: qt.MultiHeadAttentionWrapper(4, 2, 6, 0.0, num_heads=2),
    lambda: qt.GatedMultiHeadAttention(4, 4, 6, 0.0, num_heads=2),
    lambda: qt.MultiHeadLatentAttention(4, 4, 0.0, num_heads=2, latent_dim=3),
    lambda: qt.GatedDeltaNet(4, 4, 0.0, num_heads=2),
    lambda: qt.Qwen3_5GatedDeltaNet(4, 2, 1, 4, 4, 3),
])
@pytest.mark.parametrize("shape", [(2, 0), (0, 5)])
def test_no_tokens_give_zero_weight_gradients(make, shape):
    """No token contributes, so every parameter's gradient is zero, as the book's classes give it
    (MultiHeadAttention and CausalAttention left theirs unwritten: whatever the memory held)."""
    torch.manual_seed(3)
    m = make()
    x = torch.rand(*shape, 4, requires_grad=True)
    if isinstance(m, qt.Qwen3_5GatedDeltaNet) and shape[1] == 0:
        with pytest.raises(RuntimeError, match="zero batch or zero channel"):  # torch's conv1d, as in HF's layer
            m(x)
        return
    y = m(x)
    assert y.shape[:2] == shape
    y.sum().backward()
    assert x.grad.shape == x.shape
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
        assert torch.count_nonzero(p.grad) == 0, (name, p.grad)


def test_cached_decoding_sees_weights_changed_through_data():
    """p.data.mul_() (a manual update, an EMA) keeps the parameter's version: a decoding step still
    uses the weights as they are now, equal to the full forward."""
    torch.manual_seed(0)
    m = qt.MultiHeadAttention(16, 16, 32, 0.0, 4).eval()
    x = torch.randn(1, 8, 16)
    m(x[:, :4], kv_cache=qt.KVCache(32, 4, 4))
    for p in (m.W_query.weight, m.W_key.weight, m.W_value.weight):
        p.data.mul_(2)
    cache = qt.KVCache(32, 4, 4)
    with torch.no_grad():
        cached = torch.cat([m(x[:, :4], kv_cache=cache), m(x[:, 4:8], kv_cache=cache)], 1)
        full = m(x)
    assert (cached - full).abs().max() <= 1e-5 * full.abs().max()


def test_attention_modules_copy_after_a_forward():
    """copy.deepcopy, pickle and torch.save of a module that ran (its C++ scratch is not state)."""
    import copy
    import io
    import pickle
    x = torch.randn(1, 3, 4)
    for make in (lambda: qt.MultiHeadAttention(4, 4, 8, 0.0, 2), lambda: qt.CausalAttention(4, 4, 8, 0.0),
                 lambda: qt.GatedMultiHeadAttention(4, 4, 8, 0.0, 2)):
        torch.manual_seed(0)
        m = make()
        y = m(x).detach()
        m(x).sum().backward()
        with torch.no_grad():
            m(x)
        buffer = io.BytesIO()
        torch.save(m, buffer)
        buffer.seek(0)
        for twin in (copy.deepcopy(m), pickle.loads(pickle.dumps(m)), torch.load(buffer)):
            assert torch.equal(twin(x).detach(), y), type(m).__name__
    mha = qt.MultiHeadAttention(4, 4, 8, 0.0, 2).eval()
    mha(x, kv_cache=qt.KVCache(8, 2, 2))
    copy.deepcopy(mha)


def test_delta_rule_returns_its_inputs_dtype():
    """As qkv.torch.attention does: float64 in, float64 out (not float32's precision); the Gated
    DeltaNets run in bf16."""
    g = torch.Generator().manual_seed(0)
    t = lambda *s: torch.rand(*s, dtype=torch.float64, generator=g)  # noqa: E731
    q, k, v, beta, alpha = t(1, 3, 2, 4), t(1, 3, 2, 4), t(1, 3, 2, 4), t(1, 3, 2), t(1, 3, 2)
    assert qt.delta_rule(q, k, v, beta, alpha).dtype == torch.float64
    assert qt.delta_rule(*(a.float() for a in (q, k, v, beta, alpha))).dtype == torch.float32
    # an integer input is refused in delta_rule's name (it said qkv.torch.attention)
    with pytest.raises(TypeError, match=r"qkv.torch.delta_rule: k has dtype torch.int64"):
        qt.delta_rule(q, k.long(), v, beta, alpha)
    torch.manual_seed(0)
    y = qt.GatedDeltaNet(8, 8, 0.0, 2).to(torch.bfloat16)(torch.randn(2, 5, 8, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16 and y.shape == (2, 5, 8)


def test_a_head_count_of_zero_or_not_an_int_names_it():
    for make in (lambda n: qt.MultiHeadAttention(4, 4, 8, 0.0, n), lambda n: qt.GatedMultiHeadAttention(4, 4, 8, 0.0, n),
                 lambda n: qt.MultiHeadLatentAttention(4, 4, 0.0, n), lambda n: qt.GatedDeltaNet(4, 4, 0.0, n)):
        with pytest.raises(ValueError, match=r"num_heads is 0; expected an int in \[1, "):
            make(0)
        with pytest.raises(TypeError, match=r"num_heads must be an int, not float \(2.0\)"):
            make(2.0)
    with pytest.raises(ValueError, match=r"Qwen3_5GatedDeltaNet: num_k_heads is 0"):
        qt.Qwen3_5GatedDeltaNet(8, 2, 0, 4, 4, 2)


def test_a_cache_or_a_load_of_the_wrong_types_names_the_argument():
    """KVCache's sizes and dtype, load's and make_model's dtype: pybind's refusal ("incompatible function
    arguments") named neither the argument nor the value."""
    with pytest.raises(TypeError, match=r"KVCache: capacity must be an int, not float \(8.5\)"):
        qt.KVCache(8.5, 2, 2)
    with pytest.raises(ValueError, match=r"KVCache: num_kv_heads is 0; expected an int in \[1, "):
        qt.KVCache(8, 0, 2)
    with pytest.raises(TypeError, match=r"KVCache: layers must be an int, not str"):
        qt.KVCache(8, 2, 2, layers="2")
    with pytest.raises(TypeError, match=r"KVCache: dtype must be \"f32\", \"bf16\", torch.float32 or torch.bfloat16, "
                                        r"not dtype \(torch.float16\)"):
        qt.KVCache(8, 2, 2, dtype=torch.float16)
    cache = qt.KVCache(8, 2, 2, dtype=torch.bfloat16)
    assert cache.dtype == "bf16" and cache.capacity == 8
    with pytest.raises(TypeError, match=r"KVCache.truncate: n must be an int, not float"):
        cache.truncate(1.5)
    with pytest.raises(TypeError, match=r"qkv.load: dtype must be \"f32\", \"bf16\" or None, not int \(3\)"):
        qkv.load("nowhere.safetensors", dtype=3)
    with pytest.raises(TypeError, match=r"make_model: dtype must be"):
        qkv.make_model("gpt2-small", dtype=torch.float32)
