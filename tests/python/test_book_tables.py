"""The book's tables (tests/data/book.json, the notebooks' numbers recorded with PyTorch 1.13)
through qkv.torch modules built after torch.manual_seed, as the notebooks build theirs."""
import pytest
import torch

import qkv.torch as qt
from conftest import book_tensor


@pytest.fixture
def inputs(book):
    return book_tensor(book["inputs"])


def check(book, name, got, tol=1e-6):
    want = book_tensor(book[name])
    assert tuple(got.shape) == tuple(want.shape), name
    assert float((got.detach() - want).abs().max()) <= tol, name


def test_self_attention_v1(book, inputs):
    for seed, name in ((123, "sa_v1.seed123"), (700, "sa_v1.seed700")):
        torch.manual_seed(seed)
        check(book, name, qt.SelfAttention_v1(3, 2)(inputs))
    torch.manual_seed(123)
    sa = qt.SelfAttention_v1(3, 2)
    check(book, "trainable.W_query", sa.W_query, 0)
    check(book, "trainable.W_key", sa.W_key, 0)
    check(book, "trainable.W_value", sa.W_value, 0)


def test_self_attention_v2_and_exercise_3_1(book, inputs):
    torch.manual_seed(789)
    v2 = qt.SelfAttention_v2(3, 2)
    check(book, "sa_v2.seed789", v2(inputs))
    check(book, "sa_v2.seed789.W_query.weight", v2.W_query.weight, 0)
    torch.manual_seed(123)
    check(book, "sa_v2.seed123", qt.SelfAttention_v2(3, 2)(inputs))
    v1 = qt.SelfAttention_v1(3, 2)
    with torch.no_grad():
        v1.W_query.copy_(v2.W_query.weight.T)
        v1.W_key.copy_(v2.W_key.weight.T)
        v1.W_value.copy_(v2.W_value.weight.T)
    check(book, "exercise_3_1.v1_from_v2_seed789", v1(inputs))


def test_causal_attention_and_multi_head(book, inputs):
    batch = torch.stack((inputs, inputs), dim=0)
    torch.manual_seed(123)
    check(book, "causal_attention.seed123", qt.CausalAttention(3, 2, batch.shape[1], 0.0)(batch))
    torch.manual_seed(123)
    check(book, "mha_wrapper.seed123", qt.MultiHeadAttentionWrapper(3, 2, batch.shape[1], 0.0, num_heads=2)(batch))
    torch.manual_seed(123)
    check(book, "mha.seed123", qt.MultiHeadAttention(3, 2, batch.shape[1], 0.0, num_heads=2)(batch))


def test_causal_attention_with_dropout_in_training_mode(book, inputs):
    """Training-mode dropout is nn.Dropout's: the draws after the weights' are the book's."""
    batch = torch.stack((inputs, inputs), dim=0)
    torch.manual_seed(123)
    ca = qt.CausalAttention(3, 2, 6, 0.5)
    ca.train()
    check(book, "causal_attention.dropout05_seed123", ca(batch))


def test_gpt2_small_parameter_count(book):
    mha = qt.MultiHeadAttention(768, 768, 1024, 0.0, num_heads=12)
    assert sum(p.numel() for p in mha.parameters()) == book["exercise_3_3.gpt2_small_mha_params"]["expected"]
