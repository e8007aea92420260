"""qkv.torch.GPTModel against the PyTorch twin of the book's GPTModel (tests/pytorch/gpt_model.py):
the same seed gives the same state dict (names, order, values); forward within 1e-5 and every
parameter's gradient within 1e-4 (relative to the largest), in eval mode and in training mode with
dropout (PyTorch's masks: the same draws), the whole model in qkv's C++ and only its attention;
gradients accumulate over backward passes and a backward must follow its own forward; the book's state dict loads strictly, and so does a
model qkv.load read; bad configurations and inputs are ValueErrors naming them."""
import random

import pytest
import torch

import gpt_model
import qkv.torch as qt

FWD_TOL = 1e-5
GRAD_TOL = 1e-4


def rel_err(got, want, floor=0.0):
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).abs().max() / max(1e-30, floor, float(want.abs().max())))


def random_cfg(rng):
    # emb_dim >= 3: LayerNorm over one or two values is degenerate (its output is the shift, or
    # +-sqrt(var / (var + eps)) whatever the input), so the gradients below it are zero in exact
    # arithmetic, or eps-sized, and only rounding would be compared.
    H = rng.randint(1, 4)
    E = H * rng.randint(1, 6)
    while E < 3:
        H = rng.randint(1, 4)
        E = H * rng.randint(1, 6)
    return dict(vocab_size=rng.randint(5, 60), context_length=rng.randint(4, 16), emb_dim=E,
                n_heads=H, n_layers=rng.randint(0, 3), drop_rate=rng.choice([0.0, 0.0, 0.1, 0.5]),
                qkv_bias=rng.random() < 0.5)


def pair(cfg, seed):
    torch.manual_seed(seed)
    want = gpt_model.GPTModel(cfg)
    torch.manual_seed(seed)
    got = qt.GPTModel(cfg)
    return got, want


def test_forward_and_gradients_match_the_twin():
    rng = random.Random(11)
    for case in range(24):
        cfg = random_cfg(rng)
        got, want = pair(cfg, 100 + case)
        sg, sw = got.state_dict(), want.state_dict()
        assert list(sg) == list(sw), cfg
        for k in sw:
            assert torch.equal(sg[k], sw[k]), (cfg, k)
        B, T = rng.randint(1, 3), rng.randint(1, cfg["context_length"])
        ids = torch.randint(0, cfg["vocab_size"], (B, T))
        G = torch.randn(B, T, cfg["vocab_size"])
        for training, whole in ((False, True), (True, True), (False, False), (True, False)):
            got.whole_model_in_qkv = whole  # the whole model in qkv's C++, or only the attention
            got.train(training)
            want.train(training)
            got.zero_grad()
            want.zero_grad()
            torch.manual_seed(7 + case)
            yg = got(ids)
            torch.manual_seed(7 + case)
            yw = want(ids)
            assert rel_err(yg, yw) < FWD_TOL, (cfg, training, whole)
            (yg * G).sum().backward()
            (yw * G).sum().backward()
            grads = dict(want.named_parameters())
            for (name, pg), (_, pw) in zip(got.named_parameters(), want.named_parameters()):
                # The queries' and keys' gradients can be zero in exact arithmetic (the key bias always: it
                # adds q . b_k to every score of a query, which the softmax cancels; both with one token):
                # judged against the scale of their neighbour, the same block's W_value.weight gradient.
                floor = 0.0
                if ".att.W_query." in name or ".att.W_key." in name:
                    floor = float(grads[name.split(".att.")[0] + ".att.W_value.weight"].grad.abs().max())
                assert rel_err(pg.grad, pw.grad, floor) < GRAD_TOL, (cfg, training, whole, name)


def test_the_books_state_dict_loads_strictly():
    cfg = dict(vocab_size=50, context_length=8, emb_dim=12, n_heads=3, n_layers=2, drop_rate=0.1, qkv_bias=True)
    torch.manual_seed(1)
    book = gpt_model.GPTModel(cfg)
    torch.manual_seed(2)
    model = qt.GPTModel(cfg)
    model.load_state_dict(book.state_dict(), strict=True)
    book.eval()
    model.eval()
    ids = torch.randint(0, 50, (2, 8))
    assert rel_err(model(ids), book(ids)) < FWD_TOL
    with pytest.raises(RuntimeError, match="out_head.weight"):
        qt.GPTModel(cfg).load_state_dict({k: v for k, v in book.state_dict().items() if k != "out_head.weight"})


def test_bad_configurations_and_inputs_are_value_errors():
    good = dict(vocab_size=50, context_length=8, emb_dim=12, n_heads=3, n_layers=1, drop_rate=0.0, qkv_bias=False)
    for change, words in [({"emb_dim": 10}, "divisible by num_heads"), ({"vocab_size": 0}, "vocab_size"),
                          ({"drop_rate": 1.0}, "drop_rate"), ({"n_layers": -1}, "n_layers")]:
        with pytest.raises(ValueError, match=words):
            qt.GPTModel(dict(good, **change))
    with pytest.raises(ValueError, match="lacks"):
        qt.GPTModel({k: v for k, v in good.items() if k != "qkv_bias"})
    model = qt.GPTModel(good).eval()
    with pytest.raises(ValueError, match="9 tokens but context_length is 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(B, T\) token ids"):
        model(torch.zeros(9, dtype=torch.long))


def test_no_tokens_give_the_twins_empty_logits_and_zero_gradients():
    """(B, 0) or (0, T) ids: the book's model returns empty logits and its gradients are zero (the
    C++ core raised qkv.Error)."""
    cfg = dict(vocab_size=50, context_length=8, emb_dim=12, n_heads=3, n_layers=2, drop_rate=0.0, qkv_bias=True)
    for shape in [(1, 0), (0, 3), (2, 0)]:
        got, want = pair(cfg, 5)
        ids = torch.zeros(shape, dtype=torch.long)
        g, w = got(ids), want(ids)
        assert g.shape == w.shape == (*shape, 50)
        g.sum().backward()
        w.sum().backward()
        for (name, p), (_, q) in zip(got.named_parameters(), want.named_parameters()):
            assert p.grad is not None and torch.equal(p.grad, q.grad), name


def test_gradients_accumulate_and_a_backward_follows_its_own_forward():
    import copy

    cfg = dict(vocab_size=30, context_length=6, emb_dim=8, n_heads=2, n_layers=2, drop_rate=0.0, qkv_bias=True)
    torch.manual_seed(3)
    want = gpt_model.GPTModel(cfg)
    torch.manual_seed(3)
    got = qt.GPTModel(cfg)
    a, b = torch.randint(0, 30, (2, 6)), torch.randint(0, 30, (1, 4))
    for m in (got, want):  # two backward passes add into .grad
        m(a).square().sum().backward()
        m(b).sum().backward()
    for (name, pg), (_, pw) in zip(got.named_parameters(), want.named_parameters()):
        floor = float(dict(want.named_parameters())[name.split(".att.")[0] + ".att.W_value.weight"].grad.abs().max()) \
            if (".att.W_query." in name or ".att.W_key." in name) else 0.0
        assert rel_err(pg.grad, pw.grad, floor) < GRAD_TOL, name
    # an optimiser step changes the parameters; the next forward reads them
    torch.optim.SGD(got.parameters(), lr=0.1).step()
    torch.optim.SGD(want.parameters(), lr=0.1).step()
    assert rel_err(got(a), want(a)) < FWD_TOL
    first = got(a)
    got(b)  # a second forward before the first one's backward
    with pytest.raises(ValueError, match="followed by another"):
        first.sum().backward()
    twin = copy.deepcopy(got)  # its own C++ model, built again on demand
    assert rel_err(twin(a), want(a)) < FWD_TOL



def test_logits_held_by_the_caller_are_left_alone_and_the_next_ones_reuse_memory():
    # `logits = model(ids)` in a loop holds the last logits while the next forward runs: that
    # forward must not write into them, and should write into the ones dropped before (a fresh
    # 103 MB array took 0.1-0.2 s a step on a Zen 5 VM: numpy asks for huge pages, which the kernel
    # zeroes and compacts memory for)
    import weakref

    cfg = dict(vocab_size=50, context_length=8, emb_dim=8, n_heads=2, n_layers=1, drop_rate=0.0, qkv_bias=False)
    torch.manual_seed(5)
    got = qt.GPTModel(cfg)
    torch.manual_seed(5)
    want = gpt_model.GPTModel(cfg)
    a, b = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8))
    with torch.no_grad():
        logits = got(a)
        held = got(b)  # `logits` held meanwhile
        assert rel_err(logits, want(a)) < FWD_TOL and rel_err(held, want(b)) < FWD_TOL
        del logits, held
        # the binding's arrays themselves (torch.from_numpy keeps no handle to them)
        named = list(got.named_parameters())
        core, params = got._core(named), [p.detach().numpy() for _, p in named]
        dropped = core.forward(a.numpy(), params)
        dropped_ref = weakref.ref(dropped)
        kept = core.forward(b.numpy(), params)
        del dropped
        assert dropped_ref() is not None  # still the binding's, for the next forward
        again = core.forward(a.numpy(), params)
        assert again is dropped_ref() and again is not kept
        assert rel_err(torch.from_numpy(kept), want(b)) < FWD_TOL
        assert rel_err(torch.from_numpy(again), want(a)) < FWD_TOL


def test_a_tied_head_runs_on_the_books_path_and_double_backward_is_refused():
    # A head tied to the embedding (GPT-2's weights are): named_parameters() lists the shared weight
    # once, so the C++ core, built for separate ones, cannot hold it; the model runs on the book's
    # path (PyTorch's ops around qkv's attention), where it used to raise "the module's parameters
    # (30) are not the book's GPTModel's (31)". Forward and the shared weight's gradient (both uses
    # summed) as the twin's.
    cfg = dict(vocab_size=23, context_length=8, emb_dim=6, n_heads=2, n_layers=2, drop_rate=0.0, qkv_bias=True)
    got, want = pair(cfg, 7)
    got.out_head.weight = got.tok_emb.weight
    want.out_head.weight = want.tok_emb.weight
    ids = torch.randint(0, cfg["vocab_size"], (2, 6))
    G = torch.randn(2, 6, cfg["vocab_size"])
    lg, lw = got(ids), want(ids)
    assert rel_err(lg, lw) < FWD_TOL
    (lg * G).sum().backward()
    (lw * G).sum().backward()
    assert rel_err(got.tok_emb.weight.grad, want.tok_emb.weight.grad) < GRAD_TOL
    # A second derivative through the C++ core is refused, as qkv.torch's attention refuses it (it
    # used to return first-order gradients marked constant: a gradient penalty then came out wrong)
    model = qt.GPTModel(cfg)
    loss = model(ids).sum()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(loss, list(model.parameters()), create_graph=True)


def test_a_model_changed_after_it_was_built_runs_as_changed():
    """The C++ core computes the book's model as built; a model changed since - a block's mask loaded
    non-causal, a layer swapped, a norm's eps, a hook, a head of another size - gives the book's
    class's result (the changes are seen, by the book's lines in PyTorch), not the unchanged model's."""
    cfg = dict(vocab_size=50, context_length=12, emb_dim=16, n_heads=4, n_layers=2, drop_rate=0.0, qkv_bias=False)
    ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(5))

    def changed(edit):
        got, want = pair(cfg, 0)
        got.eval(), want.eval()
        edit(got), edit(want)
        return rel_err(got(ids), want(ids))

    def zero_masks(m):
        m.load_state_dict({k: (torch.zeros_like(v) if k.endswith("att.mask") else v) for k, v in m.state_dict().items()})

    def relu(m):
        m.trf_blocks[0].ff.layers[1] = torch.nn.ReLU()

    def eps(m):
        m.final_norm.eps = 0.1

    def hook(m):
        m.trf_blocks[0].register_forward_hook(lambda mod, i, o: o * 0)

    def head(m):
        torch.manual_seed(1)
        m.out_head = torch.nn.Linear(16, 2, bias=False)

    for edit in (zero_masks, relu, eps, hook, head):
        assert changed(edit) <= FWD_TOL, edit.__name__
    calls = []
    got, _ = pair(cfg, 0)
    got.trf_blocks[1].register_forward_hook(lambda mod, i, o: calls.append(tuple(o.shape)))
    got(ids)
    assert calls == [(2, 7, 16)]
    got, want = pair(cfg, 0)  # unchanged: the core (the same numbers as the book's)
    assert got._runs_core(ids, list(got.named_parameters()))
    assert rel_err(got(ids), want(ids)) <= FWD_TOL


def test_a_model_copies_after_it_ran():
    """copy.deepcopy and pickling after forwards on both paths (the C++ scratch is not state)."""
    import copy
    import pickle
    cfg = dict(vocab_size=30, context_length=8, emb_dim=8, n_heads=2, n_layers=1, drop_rate=0.0, qkv_bias=False)
    got, _ = pair(cfg, 0)
    ids = torch.tensor([[1, 2, 3]])
    y = got(ids).detach()
    got.whole_model_in_qkv = False
    got(ids).sum().backward()
    for twin in (copy.deepcopy(got), pickle.loads(pickle.dumps(got))):
        twin.whole_model_in_qkv = True
        assert torch.equal(twin(ids).detach(), y)
