"""qkv.load / qkv.make_model against a PyTorch twin of the book's GPTModel (tests/pytorch/gpt_model.py)
and against the command line: files the twin writes in Hugging Face's and the book's layouts load,
their logits agree within 1e-5 (relative to the largest), the state dict is the twin's (and loads
into it strictly), generation gives the twin's ids and `qkv generate`'s for the same seed (greedy,
sampled, top-k), streaming gives the same ids and stops when closed; bad input is a Python
exception naming the problem."""
import json
import os
import random
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import gpt_model
import safetensors_io
import qkv

V = 50257  # GPT-2's vocabulary: the loaded model reads text with GPT-2's tokenizer
QKV = os.environ.get("QKV_BINARY")


def twin(E, H, L, C, bias, seed):
    """torch.manual_seed(seed); GPTModel(cfg), every LayerNorm and bias moved off its initial value."""
    torch.manual_seed(seed)
    m = gpt_model.GPTModel(dict(vocab_size=V, context_length=C, emb_dim=E, n_heads=H, n_layers=L, drop_rate=0.0,
                                qkv_bias=bias))
    return gpt_model.perturb(m, seed + 1, head_scale=4.0).eval()  # spread logits: sampling has clear winners


def write(m, layout, base):
    """The twin's weights in `layout` ("hf-dir": model.safetensors + config.json; "book": one file)."""
    state = m.state_dict()
    if layout == "hf-dir":
        os.makedirs(base, exist_ok=True)
        safetensors_io.save(os.path.join(base, "model.safetensors"), gpt_model.to_hugging_face(state))
        cfg = {"model_type": "gpt2", "n_embd": m.tok_emb.weight.shape[1], "n_head": m.trf_blocks[0].att.num_heads,
               "n_layer": len(m.trf_blocks), "n_positions": m.pos_emb.weight.shape[0], "vocab_size": V,
               "layer_norm_epsilon": 1e-5}
        with open(os.path.join(base, "config.json"), "w") as f:
            json.dump(cfg, f)
        return base
    path = base + ".safetensors"
    safetensors_io.save(path, {k: v.contiguous() for k, v in state.items()})
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    out = []
    for i, (E, H, L, C, bias, layout) in enumerate([(16, 4, 2, 12, True, "hf-dir"), (12, 3, 1, 10, False, "book")]):
        m = twin(E, H, L, C, bias, 40 + i)
        path = write(m, layout, str(tmp / f"m{i}"))
        out.append((m, path, H))
    return out


def rel_err(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.abs(got - want).max() / max(1e-30, np.abs(want).max()))


def test_logits_and_state_dict_are_the_twins(models):
    rng = np.random.default_rng(3)
    for m, path, H in models:
        model = qkv.load(path, num_heads=H)
        C = m.pos_emb.weight.shape[0]
        assert model.vocab_size == V and model.context_length == C
        assert model.config["n_heads"] == H and model.config["emb_dim"] == m.tok_emb.weight.shape[1]
        for B, T in [(1, 1), (1, C), (3, C - 2)]:
            ids = rng.integers(0, V, size=(B, T))
            with torch.no_grad():
                want = m(torch.from_numpy(ids)).numpy()
            got = model.logits(ids)
            assert got.dtype == np.float32 and got.shape == (B, T, V)
            assert rel_err(got, want) < 1e-5, (path, B, T)
        one = model.logits([5, 6, 7])  # a list of T ids: (T, V)
        assert one.shape == (3, V)
        state = model.state_dict()
        want_state = m.state_dict()
        assert list(state) == list(want_state)  # the book's names, its order
        for name, t in want_state.items():
            np.testing.assert_array_equal(state[name], t.numpy(), err_msg=name)
        back = twin(m.tok_emb.weight.shape[1], H, len(m.trf_blocks), C, m.trf_blocks[0].att.W_query.bias is not None,
                    99)
        back.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
        assert torch.equal(back.out_head.weight, m.out_head.weight)


def cli_new_ids(path, H, prompt, n, seed, temperature, top_k):
    cmd = [QKV, "generate", "--weights", path, "--num-heads", str(H), "--prompt", prompt, "--max-new-tokens", str(n),
           "--seed", str(seed), "--temperature", repr(temperature), "--json"]
    if top_k is not None:
        cmd += ["--top-k", str(top_k)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["new_ids"]


@pytest.mark.skipif(QKV is None, reason="QKV_BINARY (the qkv command) is not set")
def test_generate_gives_the_twins_and_the_command_lines_ids(models):
    m, path, H = models[0]
    model = qkv.load(path, num_heads=H)
    prompt = "Every effort moves"
    prompt_ids = model.encode(prompt)
    for temperature, top_k, seed in [(0.0, None, 123), (1.0, None, 7), (0.8, 20, 11), (1.5, 3, 123)]:
        n = 8
        torch.manual_seed(seed)
        want = gpt_model.generate(m, torch.tensor([prompt_ids]), n, m.pos_emb.weight.shape[0], temperature=temperature,
                                  top_k=top_k)[0, len(prompt_ids):].tolist()
        got = model.generate(prompt, max_new_tokens=n, temperature=temperature, top_k=top_k, seed=seed)
        assert got == want, (temperature, top_k, seed)
        assert got == cli_new_ids(path, H, prompt, n, seed, temperature, top_k)
        assert model.generate(prompt_ids, max_new_tokens=n, temperature=temperature, top_k=top_k, seed=seed) == want
        assert list(model.generate(prompt, max_new_tokens=n, temperature=temperature, top_k=top_k, seed=seed,
                                   stream=True)) == want
    # A loaded model without a seed draws as the command does without --seed (123).
    assert model.generate(prompt, max_new_tokens=6, temperature=1.0) == cli_new_ids(path, H, prompt, 6, 123, 1.0, None)


def test_a_preset_continues_its_weights_generator():
    # torch.manual_seed(123); GPTModel(GPT-2 small); generate(...): the draws continue the weights'.
    model = qkv.make_model("gpt2-small", seed=123)
    prompt = model.encode("Hello, I am")
    torch.manual_seed(123)
    m = gpt_model.GPTModel(dict(vocab_size=V, context_length=1024, emb_dim=768, n_heads=12, n_layers=12, drop_rate=0.1,
                                qkv_bias=False)).eval()
    want = gpt_model.generate(m, torch.tensor([prompt]), 4, 1024, temperature=1.0, top_k=5)[0, len(prompt):].tolist()
    assert model.generate(prompt, max_new_tokens=4, temperature=1.0, top_k=5) == want
    greedy = gpt_model.generate(m, torch.tensor([prompt]), 5, 1024)[0, len(prompt):].tolist()
    assert model.generate(prompt, max_new_tokens=5) == greedy
    assert model.decode(greedy) == " Featureiman Byeswickattribute"  # the book's untrained model, chapter 4


def test_streaming_stops_when_closed(models):
    m, path, H = models[0]
    model = qkv.load(path, num_heads=H)
    seen = []
    for i in model.generate("Every effort", max_new_tokens=5, stream=True):
        seen.append(i)
        if len(seen) == 2:
            break
    assert len(seen) == 2
    # the model is free again, and on_token's exceptions reach the caller
    assert model.generate("Every effort", max_new_tokens=5)[:2] == seen
    stream = model.generate("Every effort", max_new_tokens=5, stream=True)
    assert next(stream) == seen[0]
    stream.close()
    assert len(model.generate("Every effort", max_new_tokens=3)) == 3


def test_set_num_threads_does_not_wait_for_a_running_generate(models, tmp_path):
    """set_num_threads takes effect for the calls after it and waits for none that run: a generate
    keeps the pool it started with to its end. Its ids do not depend on the thread count."""
    m, path, H = models[0]
    # From a stream's consumer (a generate running on the stream's thread, waiting for this reader):
    # it used to deadlock there, so it runs in a process of its own, with a time limit.
    script = tmp_path / "threads_in_stream.py"
    script.write_text(f"import qkv\nm = qkv.load({path!r}, num_heads={H})\n"
                      "qkv.set_num_threads(2)\n"
                      "want = m.generate('Every effort', max_new_tokens=6)\n"
                      "got = []\n"
                      "for i in m.generate('Every effort', max_new_tokens=6, stream=True):\n"
                      "    qkv.set_num_threads(1 + len(got) % 2)\n"
                      "    assert qkv.get_num_threads() == 1 + len(got) % 2\n"
                      "    got.append(i)\n"
                      "assert got == want, (got, want)\n"
                      "print(len(got))\n")
    try:
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail("set_num_threads inside a stream's loop did not return in 60 s")
    assert r.returncode == 0 and r.stdout.strip() == "6", (r.returncode, r.stdout, r.stderr[-800:])

    # From another thread while a generate waits inside its on_token: it used to wait for the
    # generate's end, here for ever, since the generate ends only after set_num_threads returned.
    model = qkv.load(path, num_heads=H)
    before = qkv.get_num_threads()
    want = model.generate([1, 2, 3], max_new_tokens=4)
    inside, go_on, got = threading.Event(), threading.Event(), []

    def on_token(i):
        inside.set()
        go_on.wait(120)

    def run():
        got.extend(model._m.generate([1, 2, 3], max_new_tokens=4, temperature=0.0, top_k=None, seed=None,
                                     stop_at_eos=False, on_token=on_token))

    gen = threading.Thread(target=run)
    gen.start()
    try:
        assert inside.wait(60)
        setter = threading.Thread(target=qkv.set_num_threads, args=(1 if before != 1 else 2,))
        setter.start()
        setter.join(30)
        returned = not setter.is_alive()
    finally:
        go_on.set()
        gen.join(120)
    try:
        assert returned, "set_num_threads waited for a generate that was waiting for it"
        assert qkv.get_num_threads() == (1 if before != 1 else 2)
        assert got == want
        assert model.generate([1, 2, 3], max_new_tokens=4) == want  # the next call, on the new pool
    finally:
        qkv.set_num_threads(before)


def test_an_unknown_quantize_type_is_named_for_every_family(models):
    """quantize="q2" on GPT-2's weights suggested `qkv convert ... --type q2`, which is refused too."""
    m, path, H = models[0]
    with pytest.raises(qkv.Error, match="q2 is not a type the integer products read; expected q8_0") as e:
        qkv.load(path, num_heads=H, quantize="q2")
    assert "convert" not in str(e.value)
    with pytest.raises(qkv.Error, match="GPT-2's weights in .* are quantized by writing them as GGUF"):
        qkv.load(path, num_heads=H, quantize="q8_0")


def test_a_stream_left_open_at_exit_and_a_callback_into_the_model(models, tmp_path):
    m, path, H = models[0]
    # A stream abandoned part-way, the interpreter exiting with its thread still generating: the
    # thread is stopped and joined at exit (it used to abort: "terminate called without an active
    # exception"). Several lengths, so the exit finds the thread at different points.
    for n in [10**6, 50, 3]:
        script = tmp_path / "left_open.py"
        script.write_text(f"import qkv\nm = qkv.load({path!r}, num_heads={H})\n"
                          f"it = m.generate('Every effort', max_new_tokens={n}, temperature=1.0, stream=True)\n"
                          "print(next(it))\n")
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ))
        assert r.returncode == 0 and "terminate" not in r.stderr, (n, r.returncode, r.stderr[-500:])
        assert int(r.stdout) >= 0
    # on_token calling back into the model that is generating: a qkv.Error, not a wait for itself
    model = qkv.load(path, num_heads=H)
    for call in [lambda: model.generate([1, 2], max_new_tokens=1), lambda: model.logits([1]),
                 lambda: model.state_dict()]:
        with pytest.raises(qkv.Error, match="in the middle of a generate"):
            model._m.generate([1, 2, 3], max_new_tokens=2, temperature=0.0, top_k=None, seed=None,
                              stop_at_eos=False, on_token=lambda i, call=call: call())
    assert len(model.generate([1, 2, 3], max_new_tokens=2)) == 2  # and the model is free afterwards
    # a stream left open holds the model: a call meanwhile is a qkv.Error, not a wait for the reader;
    # the stream picks no token it has not been asked for, and once closed the model is free
    stream = model.generate("Every effort", max_new_tokens=10**6, temperature=1.0, stream=True)
    first = next(stream)
    for call in [lambda: model.logits([1]), lambda: model.generate([1], max_new_tokens=1), model.state_dict]:
        with pytest.raises(qkv.Error, match="in the middle of a streamed generate"):
            call()
    stream.close()
    assert first >= 0 and model.logits([1]).shape == (1, V)
    # two streams asked for before either is read: the second is refused at once (it used to pass,
    # then wait for the first's reader, who was waiting for it: a hang Ctrl-C could not break); a
    # stream never read and closed, or dropped, frees the model as well
    a = model.generate("Hi", max_new_tokens=3, stream=True)
    with pytest.raises(qkv.Error, match="in the middle of a streamed generate"):
        model.generate("Yo", max_new_tokens=3, stream=True)
    a.close()
    b = model.generate("Yo", max_new_tokens=3, stream=True)
    del b
    assert len(list(model.generate("Hi", max_new_tokens=3, stream=True))) == 3
    # a batch whose (B, T, V) logits cannot fit is refused before any work, naming the size
    with pytest.raises(qkv.Error, match=r"logits: the \(B, T, V\) output needs \d+ bytes"):
        model.logits(np.ones((200_000, model.context_length), dtype=np.int64))


def test_bad_input_is_a_clear_exception(models, tmp_path):
    m, path, H = models[0]
    model = qkv.load(path, num_heads=H)
    C = model.context_length
    not_a_model = tmp_path / "notes.txt"
    not_a_model.write_text("hello")
    cases = [
        (lambda: qkv.load(str(not_a_model)), qkv.Error, "notes.txt"),
        (lambda: qkv.load(str(tmp_path / "missing.safetensors")), qkv.Error, "missing.safetensors"),
        (lambda: qkv.load(path, dtype="f16"), qkv.Error, "f16"),
        (lambda: qkv.make_model("gpt2-tiny"), qkv.Error, "gpt2-tiny"),
        (lambda: model.generate(b"Hello", max_new_tokens=1), TypeError, "not bytes"),  # were ids 72, 101, ...
        (lambda: model.encode(b"a\xff"), TypeError, "text must be a str, not bytes"),
        (lambda: model.logits(np.array([1.5, 2.0])), TypeError, "integers"),
        (lambda: model.logits(np.zeros((1, 2, 3), dtype=np.int64)), ValueError, "(T) or (B, T)"),
        (lambda: model.logits([V]), qkv.Error, str(V)),
        (lambda: model.logits([-1]), qkv.Error, "-1"),
        (lambda: model.logits(list(range(C + 1))), qkv.Error, "context_length"),
        (lambda: model.logits([]), ValueError, "at least one token"),
        # rows past the context refused before the ids are copied (a broadcast array of 2^31 crashed)
        (lambda: model.logits(np.broadcast_to(np.int64(0), (1, 2**31))), qkv.Error, "context_length of"),
        (lambda: model.logits(np.array([[2**63]], dtype=np.uint64)), qkv.Error, str(2**63)),
        (lambda: model.logits(np.array([[2**64 - 1]], dtype=np.uint64)), qkv.Error, str(2**64 - 1)),
        (lambda: qkv.load(None), TypeError, "str or os.PathLike"),
        (lambda: qkv.load(path.encode()), TypeError, "not bytes"),
        (lambda: qkv.load(path, num_heads=0), qkv.Error, "num_heads is 0"),
        (lambda: model.generate([], max_new_tokens=2), qkv.Error, "prompt is empty"),
        (lambda: model.generate([V + 5], max_new_tokens=2), qkv.Error, str(V + 5)),
        (lambda: model.generate("a", max_new_tokens=-1), qkv.Error, "max_new_tokens"),
        (lambda: model.generate("a", top_k=0), qkv.Error, "top_k (0)"),
        (lambda: model.generate("a", temperature=-1.0), qkv.Error, "temperature"),
        (lambda: model.generate([1.5]), TypeError, ""),
        # a value out of its C type's range or of another type names itself (pybind's refusal,
        # "incompatible function arguments", named neither)
        (lambda: model.generate("a", seed=-1), ValueError, "generate: seed is -1; expected an int in [0, "),
        (lambda: model.generate("a", seed=2**64), ValueError, f"seed is {2**64}"),
        (lambda: model.generate("a", top_k=5.5), TypeError, "generate: top_k must be an int, not float (5.5)"),
        (lambda: model.generate("a", top_k=2**64), ValueError, f"top_k is {2**64}"),
        (lambda: model.generate("a", max_new_tokens="3"), TypeError, "max_new_tokens must be an int, not str"),
        (lambda: qkv.make_model("gpt2-small", seed=-3), ValueError, "make_model: seed is -3"),
        (lambda: model.decode([V]), qkv.Error, str(V)),
    ]
    for i, (call, kind, words) in enumerate(cases):
        with pytest.raises(kind) as e:
            call()
        assert words in str(e.value), (i, str(e.value))

    def boom(_):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        model._m.generate(model.encode("a"), max_new_tokens=3, on_token=boom)
    assert len(model.generate("a", max_new_tokens=2)) == 2  # still usable


def test_lone_surrogates_read_as_the_replacement_character(tmp_path):
    """A str holding a lone surrogate (which UTF-8 cannot hold) encodes as qkv.Encoding and tiktoken
    read it, U+FFFD, in encode and in generate's prompt; a surrogate pair is its character. Each was
    pybind's "incompatible function arguments"."""
    model = qkv.make_model("gpt2-small", seed=1)
    enc = qkv.get_encoding("gpt2")
    assert model.encode("a\ud800b") == enc.encode("a\ud800b") == enc.encode("a\ufffdb")
    assert model.encode("\ud83d\ude00") == enc.encode("\U0001F600")
    assert len(model.generate("a\ud800b", max_new_tokens=1)) == 1


def test_a_file_named_gguf_without_the_magic_says_so(tmp_path):
    for name, data, said in [("empty.gguf", b"", "it is empty"),
                             ("text.gguf", b'{"a": 1}', "its first bytes are 0x7b 0x22 0x61 0x22")]:
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(qkv.Error, match="is named .gguf but does not begin with GGUF's magic bytes") as e:
            qkv.load(str(path))
        assert said in str(e.value) and "safetensors" not in str(e.value)
