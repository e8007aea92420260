"""qkv.load on Llama 3, Qwen2.5 and Qwen3 folders (tests/pytorch/llama_files.py writes them as Hugging Face ships
them, around the PyTorch twin of tests/pytorch/llama_model.py): the logits are the twin's within 1e-5
(relative to the largest), greedy and sampled generation give the twin's ids, stop_at_eos stops at the
family's end token, a BF16 folder keeps its weights in bf16 only (generating; its state_dict() a
qkv.Error saying how to load the floats), and the state dict of a float load has Hugging Face's names."""
import copy
import os

import numpy as np
import pytest
import torch

import llama_model
from llama_files import SPECIALS, make_cfg, small_tokenizer, twin, write_dir
import qkv


@pytest.fixture(scope="module", params=["qwen3", "llama", "qwen2"])
def family_dir(request, tmp_path_factory):
    family = request.param
    tokenizer, V = small_tokenizer(family)
    rope = None if family != "llama" else dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                 original_context_length=8)
    D = 4 if family == "qwen2" else 6  # Qwen2's head_dim is the width over the heads
    cfg = make_cfg(family, V, 16, 24, 2, 4, 2, D, 64, 10000.0, 1e-6, family == "qwen3", rope)
    m = twin(cfg, 70)
    with torch.no_grad():
        m.final_norm.weight.mul_(3.0)  # spread the logits: sampling has clear winners
    path = write_dir(m, str(tmp_path_factory.mktemp(family) / "f32"), "f32", tokenizer)
    return family, m, path, tokenizer, V


def twin_generate(m, ids, n, temperature, top_k, seed, stop_ids=()):
    torch.manual_seed(seed)
    out = llama_model.generate(m, torch.tensor([ids]), n, m.cfg["context_length"], temperature=temperature,
                               top_k=top_k, stop_ids=stop_ids)
    return out[0, len(ids):].tolist()


def test_logits_and_generation_are_the_twins(family_dir):
    family, m, path, _, _ = family_dir
    model = qkv.load(path)
    ids = model.encode("the cat sat on the mat")
    with torch.no_grad():
        want = m.double()(torch.tensor([ids])).float()[0].numpy()
        m.float()
    got = model.logits(ids)
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-5
    for temperature, top_k, seed in [(0.0, None, 0), (1.0, None, 7), (0.8, 5, 11)]:
        want_ids = twin_generate(m, ids, 8, temperature, top_k, seed)
        assert model.generate(ids, max_new_tokens=8, temperature=temperature, top_k=top_k, seed=seed) == want_ids
    names = list(model.state_dict())
    assert names[0] == "model.embed_tokens.weight" and "model.norm.weight" in names
    assert ("model.layers.0.self_attn.q_norm.weight" in names) == (family == "qwen3")
    assert ("model.layers.0.self_attn.q_proj.bias" in names) == (family == "qwen2")


def test_stop_at_eos_stops_at_the_end_token(family_dir, tmp_path):
    family, m, _, tokenizer, V = family_dir
    end = V - len(SPECIALS[family]) + SPECIALS[family].index("<|im_end|>" if family != "llama" else "<|eot_id|>")
    stop = copy.deepcopy(m)
    prompt = qkv.load(write_dir(m, str(tmp_path / "probe"), "f32", tokenizer)).encode("the cat")
    first = twin_generate(m, prompt, 4, 0.0, None, 0)
    with torch.no_grad():
        head = stop.tok_emb.weight if stop.cfg["tied"] else stop.out_head.weight
        head[end] = head[first[2]] * 1.5
    model = qkv.load(write_dir(stop, str(tmp_path / "stop"), "f32", tokenizer))
    assert end in model.end_ids
    want = twin_generate(stop, prompt, 10, 0.0, None, 0, stop_ids=(end,))
    assert len(want) < 10
    assert model.generate(prompt, max_new_tokens=10, temperature=0.0, stop_at_eos=True) == want


def test_a_bf16_folder_keeps_its_weights_in_bf16_only(family_dir, tmp_path):
    family, m, _, tokenizer, _ = family_dir
    path = write_dir(twin(m.cfg, 71, bf16=True), str(tmp_path / "bf16"), "bf16", tokenizer)
    model = qkv.load(path)
    assert "bf16 products" in model.description
    ids = model.encode("the cat")
    assert len(model.generate(ids, max_new_tokens=4, temperature=0.0)) == 4
    with pytest.raises(qkv.Error, match="load it with f32 products"):
        model.state_dict()
    floats = qkv.load(path, dtype="f32")
    assert list(floats.state_dict())[0] == "model.embed_tokens.weight"
    # the same greedy ids in f32 and bf16 products here is not promised: only that both run
    assert len(floats.generate(ids, max_new_tokens=4, temperature=0.0)) == 4


def test_a_template_puts_its_token_before_every_text(family_dir, tmp_path):
    """A tokenizer.json whose post-processor puts <|begin_of_text|> before a text (Meta's Llama 3 files):
    the model reads it first, as Hugging Face's tokenizer(text) gives it, from the folder and from its
    GGUF file (add_bos_token true, as llama.cpp's converter writes it); generation starts from it."""
    import gguf_files
    family, m, _, tokenizer, _ = family_dir
    if family != "llama":
        pytest.skip("Llama 3's template")
    plain = qkv.load(write_dir(m, str(tmp_path / "plain"), "f32", tokenizer))
    bos = plain.encode("<|begin_of_text|>")
    assert len(bos) == 1
    templated = copy.deepcopy(tokenizer)
    templated["post_processor"] = {
        "type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": bos,
                                                      "tokens": ["<|begin_of_text|>"]}}}]}
    folder = qkv.load(write_dir(m, str(tmp_path / "templated"), "f32", templated))
    text = "the cat sat on the mat"
    assert folder.encode(text) == bos + plain.encode(text)
    assert folder.encode("") == bos
    gguf = str(tmp_path / "m.gguf")
    gguf_files.write_gguf(m, gguf, templated, type="f32")
    assert qkv.load(gguf).encode(text) == bos + plain.encode(text)
    plain_gguf = str(tmp_path / "plain.gguf")
    gguf_files.write_gguf(m, plain_gguf, tokenizer, type="f32")
    assert qkv.load(plain_gguf).encode(text) == plain.encode(text)


def test_a_gguf_file_loads_as_its_folder(family_dir, tmp_path):
    """llama.cpp's GGUF file of the twin (tests/pytorch/gguf_files.py writes it as llama.cpp's converter
    does): the same logits, ids and tokenizer as the folder; a Q8_0 file generates from bf16 weights only."""
    import gguf_files
    family, m, path, tokenizer, _ = family_dir
    f32, q8 = str(tmp_path / "m-f32.gguf"), str(tmp_path / "m-q8_0.gguf")
    gguf_files.write_gguf(m, f32, tokenizer, type="f32")
    gguf_files.write_gguf(m, q8, tokenizer, type="q8_0")
    folder, model = qkv.load(path), qkv.load(f32)
    text = "the cat sat on the mat"
    ids = folder.encode(text)
    assert model.encode(text) == ids and model.decode(ids) == folder.decode(ids)
    with torch.no_grad():
        want = m.double()(torch.tensor([ids])).float()[0].numpy()
        m.float()
    assert np.abs(model.logits(ids) - want).max() / np.abs(want).max() <= 1e-5
    for temperature, top_k, seed in [(0.0, None, 0), (0.8, 5, 11)]:
        assert model.generate(ids, max_new_tokens=8, temperature=temperature, top_k=top_k, seed=seed) == \
            twin_generate(m, ids, 8, temperature, top_k, seed)
    quantized = qkv.load(q8)
    assert len(quantized.generate(ids, max_new_tokens=4, temperature=0.0)) == 4
    with pytest.raises(qkv.Error, match="f32"):
        quantized.state_dict()
    assert list(qkv.load(q8, dtype="f32").state_dict()) == list(folder.state_dict())


def test_quantized_weights_from_a_folder_and_from_a_gguf_file():
    """quantize="q8_0" at load: the folder's float weights into Q8_0 blocks, read by integer products;
    the same blocks as the Q8_0 GGUF file of the same weights (written by the definition in
    tests/pytorch/gguf_files.py), so the same logits, bit for bit. dequantize=True on that file: bf16
    weights, whose logits are the twin's on the dequantized weights (rounded to bf16). Bad settings
    are a qkv.Error naming them."""
    import gguf_files
    import tempfile
    tokenizer, V = small_tokenizer("qwen3")
    # rows of 64 and 96 values: whole Q8_0 blocks (32), so every matrix is quantized
    cfg = make_cfg("qwen3", V, 64, 96, 2, 4, 2, 16, 64, 10000.0, 1e-6, True, None)
    m = twin(cfg, 90)
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_dir(m, os.path.join(tmp, "f32"), "f32", tokenizer)
        q8 = os.path.join(tmp, "m-q8_0.gguf")
        gguf_files.write_gguf(m, q8, tokenizer, type="q8_0")
        at_load, from_file = qkv.load(folder, quantize="q8_0"), qkv.load(q8)
        assert "quantized to Q8_0" in at_load.description and "integer products" in at_load.description
        assert "integer products" in from_file.description
        ids = at_load.encode("the cat sat on the mat")
        got = at_load.logits(ids)
        np.testing.assert_array_equal(got, from_file.logits(ids))
        floats = qkv.load(folder).logits(ids)
        rel = np.abs(got - floats).max() / np.abs(floats).max()
        assert 0 < rel < 0.05, rel  # moved by the rounding of weights and activations, not far
        assert len(at_load.generate(ids, max_new_tokens=4, temperature=0.0)) == 4

        decoded = qkv.load(q8, dequantize=True)  # bf16 weights, float products
        assert "integer products" not in decoded.description and "bf16" in decoded.description
        assert len(decoded.generate(ids, max_new_tokens=4, temperature=0.0)) == 4
        with torch.no_grad():  # f32 products: the twin on the file's weights (Q8_0 blocks decoded) within 1e-5
            for name, w in llama_model.to_hugging_face(m).items():
                if w.dim() == 2:
                    w.copy_(torch.from_numpy(gguf_files.dequantize_q8_0(gguf_files.quantize_q8_0(w.numpy()),
                                                                        tuple(w.shape))))
            want = m.double()(torch.tensor([ids])).float()[0].numpy()
            m.float()
        assert np.abs(qkv.load(q8, dtype="f32").logits(ids) - want).max() / np.abs(want).max() <= 1e-5

        with pytest.raises(qkv.Error, match="q5_0 is not a type the integer products read"):
            qkv.load(folder, quantize="q5_0")
        with pytest.raises(qkv.Error, match="Q8_0"):
            qkv.load(q8, quantize="q4_0")
        with pytest.raises(qkv.Error, match="f32 products"):
            qkv.load(folder, quantize="q8_0", dtype="f32")
        with pytest.raises(TypeError, match="quantize must be a str"):
            qkv.load(folder, quantize=8)
