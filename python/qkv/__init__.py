"""qkv for Python: GPT-2's tokenizer with tiktoken's interface, and qkv's fused attention kernels.

    import qkv
    enc = qkv.get_encoding("gpt2")                 # as tiktoken.get_encoding("gpt2")
    enc.encode("Your journey starts with one step.")   # [7120, 7002, 4940, 351, 530, 2239, 13]
    o = qkv.attention(q, k, v, causal=True)        # numpy float32 (B, H, T, D) arrays

    import qkv.torch                               # PyTorch: autograd Function and the book's modules

Everything here is qkv's C++ library (the compiled extension qkv._qkv); this file only names it.
The kernels' thread count: qkv.set_num_threads(n), else $QKV_NUM_THREADS, else the cores.
"""
import functools

from ._qkv import (  # noqa: F401
    Encoding,
    Error,
    attention,
    attention_backward,
    attention_weights,
    get_num_threads,
    set_num_threads,
)
from . import _qkv

__all__ = [
    "Encoding",
    "Error",
    "attention",
    "attention_backward",
    "attention_weights",
    "get_encoding",
    "get_num_threads",
    "list_encoding_names",
    "set_num_threads",
]


def list_encoding_names():
    """The encodings get_encoding knows (tiktoken's function of the same name)."""
    return ["gpt2"]


@functools.lru_cache(maxsize=None)
def get_encoding(encoding_name):
    """The named encoding, loaded once (tiktoken.get_encoding). qkv has GPT-2's: "gpt2".

    The vocabulary files are found as `qkv encode` finds them: $QKV_VOCAB_DIR, then
    ~/.local/share/qkv/gpt2 (installed by scripts/setup.sh), then /usr/local/share and /usr/share.
    """
    if encoding_name != "gpt2":
        raise ValueError(f"Unknown encoding {encoding_name}. qkv has: {list_encoding_names()}")
    return _qkv.load_gpt2()
