"""qkv for Python: GPT models, GPT-2's tokenizer with tiktoken's interface, qkv's fused attention kernels.

    import qkv
    model = qkv.load("path/to/gpt2")               # GPT-2's weights (Hugging Face's or the book's layout)
    ids = model.generate("Every effort moves you", max_new_tokens=20)   # greedy; new ids
    print(model.decode(ids))
    enc = qkv.get_encoding("gpt2")                 # as tiktoken.get_encoding("gpt2")
    enc.encode("Your journey starts with one step.")   # [7120, 7002, 4940, 351, 530, 2239, 13]
    o = qkv.attention(q, k, v, causal=True)        # numpy float32 (B, H, T, D) arrays

    import qkv.torch                               # PyTorch: autograd Function and the book's modules

Everything here is qkv's C++ library (the compiled extension qkv._qkv); this file only names it.
The kernels' thread count: qkv.set_num_threads(n), else $QKV_NUM_THREADS, else the cores.
"""
import atexit
import functools
import json
import operator
import os
import queue
import threading

from ._qkv import (  # noqa: F401
    Encoding,
    Error,
    attention,
    attention_backward,
    attention_weights,
    get_num_threads,
)
from . import _qkv

__all__ = [
    "Encoding",
    "Error",
    "attention",
    "attention_backward",
    "attention_weights",
    "Model",
    "get_encoding",
    "load",
    "make_model",
    "get_num_threads",
    "list_encoding_names",
    "set_num_threads",
]


def _whole(fn, name, value, low, high):
    """value as an int in [low, high): a TypeError or ValueError naming fn, name and value (pybind's
    own refusal names neither: "incompatible function arguments")."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be an int, not {type(value).__name__} ({value!r})") from None
    if not low <= v < high:
        raise ValueError(f"{fn}: {name} is {v}; expected an int in [{low}, {high})")
    return v


def set_num_threads(n):
    """Threads the kernels use in the calls that start from now on (running calls keep theirs; replaces
    $QKV_NUM_THREADS, whose value, else the cores, is the default)."""
    _qkv.set_num_threads(_whole("set_num_threads", "n", n, 1, 1025))


def _dtype_name(fn, dtype):
    """dtype as the library's name ("f32", "bf16") or None; anything else a TypeError naming fn."""
    if dtype is None or isinstance(dtype, str):
        return dtype
    raise TypeError(f"{fn}: dtype must be \"f32\", \"bf16\" or None, not {type(dtype).__name__} ({dtype!r})")


def _without_lone_surrogates(text):
    """text with each lone surrogate ('\\ud800', which UTF-8 cannot hold) as U+FFFD, as tiktoken's
    encode and qkv.Encoding.encode read it; a surrogate pair is its character."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


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


class Model:
    """A language model loaded by qkv.load or drawn by qkv.make_model (qkv's front door, qkv/qkv.h).

    generate(prompt, ...) gives the ids `qkv generate` gives for the same model, options and seed;
    logits(ids) the forward's float32 logits; state_dict() the weights under the model's names
    (the book's GPTModel names for GPT models: load them with torch's load_state_dict).
    """

    def __init__(self, model):
        self._m = model
        self._streams = 0  # streams of this model still open: other calls would wait for them

    def _not_streaming(self, call):
        # A stream still open holds the model until it is read to its end or closed: a call on the
        # same model meanwhile would wait for the reader, who is usually this very caller.
        if self._streams:
            raise Error(f"{call}: the model is in the middle of a streamed generate(); read it to its end or "
                        "close it (it.close(), or leave its for loop) first")

    def __repr__(self):
        return f"qkv.Model({self._m.description})"

    @property
    def description(self):
        """What was loaded, for people."""
        return self._m.description

    @property
    def config(self):
        """The model's configuration as a dict (the book's cfg keys for GPT models)."""
        return json.loads(self._m.config_json)

    @property
    def vocab_size(self):
        return self._m.vocab_size

    @property
    def context_length(self):
        return self._m.context_length

    @property
    def eos_id(self):
        """The tokenizer's end-of-text id (GPT-2's <|endoftext|>; Qwen3's <|im_end|>; Llama 3's <|eot_id|>), or None."""
        return self._m.eos_id

    @property
    def end_ids(self):
        """Every token that ends a turn or the text (Qwen3's <|im_end|>, <|endoftext|>; Llama 3's
        <|eot_id|>, <|eom_id|>, <|end_of_text|>): stop_at_eos stops at each; [] when none."""
        return list(self._m.end_ids)

    def encode(self, text):
        """The model's ids for `text` (GPT-2's tokenizer for GPT models)."""
        if not isinstance(text, str):  # bytes would pass as UTF-8 unchecked, as tiktoken's encode refuses them
            raise TypeError(f"encode: text must be a str, not {type(text).__name__}")
        return self._m.encode(_without_lone_surrogates(text))

    def decode(self, ids):
        """The text of `ids`."""
        return self._m.decode([operator.index(i) for i in ids])

    def logits(self, ids):
        """Logits of every position: ids (T) -> float32 (T, V); (B, T) -> (B, T, V)."""
        self._not_streaming("logits")
        return self._m.logits(ids)

    def state_dict(self):
        """{name: float32 numpy array}, copies, in the model's state_dict order."""
        self._not_streaming("state_dict")
        return self._m.state_dict()

    def generate(self, prompt, max_new_tokens=None, temperature=0.0, top_k=None, seed=None, stream=False,
                 stop_at_eos=False):
        """The new ids after `prompt` (a str, encoded with the model's tokenizer, or a list of ids).

        temperature 0 is greedy; otherwise softmax(logits / temperature) sampled as torch.multinomial
        draws, from Generator(seed) (None: a preset continues the generator its weights came from, as
        `qkv generate --model` does; a loaded model starts from seed 123, the command's default).
        top_k keeps the k largest logits. stop_at_eos stops before the tokenizer's end-of-text id.
        max_new_tokens None: the model's default (50). stream=True returns an iterator yielding each
        id as it is picked (closing it early stops the generation).
        """
        self._not_streaming("generate")
        if isinstance(prompt, (bytes, bytearray)):  # not ids: b"Hello" would be [72, 101, ...]
            raise TypeError(f"generate: prompt must be a str or a list of ids, not {type(prompt).__name__}")
        ids = self._m.encode(_without_lone_surrogates(prompt)) if isinstance(prompt, str) else \
            [operator.index(i) for i in prompt]
        if max_new_tokens is not None:
            max_new_tokens = _whole("generate", "max_new_tokens", max_new_tokens, -2**63, 2**63)
        if top_k is not None:
            top_k = _whole("generate", "top_k", top_k, -2**63, 2**63)  # (its range: the vocabulary's)
        if seed is not None:
            seed = _whole("generate", "seed", seed, 0, 2**64)
        args = dict(max_new_tokens=max_new_tokens, temperature=float(temperature), top_k=top_k, seed=seed,
                    stop_at_eos=stop_at_eos)
        if not stream:
            return self._m.generate(ids, **args)
        return _Stream(self, ids, args)

    def _stream(self, ids, args, release):
        # The generation runs on a thread of its own (the GIL released but between tokens) and hands
        # each id over a queue of one: it picks the next token only once the reader has taken the
        # last, so an iterator left unread costs nothing. Closing it stops the generation.
        tokens, end, stop, failure = queue.Queue(maxsize=1), object(), threading.Event(), []

        def hand_over(item):
            while not stop.is_set():
                try:
                    tokens.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    pass
            return False

        def on_token(i):
            return hand_over(i) and not stop.is_set()

        def run():
            try:
                self._m.generate(ids, on_token=on_token, **args)
            except BaseException as e:  # handed to the consumer
                failure.append(e)
            finally:
                hand_over(end)

        worker = threading.Thread(target=run, name="qkv.generate", daemon=True)
        running = (stop, worker)
        _running_streams.add(running)
        worker.start()
        try:
            while True:
                item = tokens.get()
                if item is end:
                    break
                yield item
        finally:
            stop.set()
            worker.join()
            _running_streams.discard(running)
            release()
        if failure:
            raise failure[0]


class _Stream:
    """The iterator generate(stream=True) returns. The model counts it as open from the call on, not
    from its first read: a second stream (or any call on the model) made before this one is read is
    a qkv.Error, where it used to pass and then wait for this stream's reader forever. Open until read
    to its end, closed, or collected."""

    def __init__(self, model, ids, args):
        model._streams += 1
        held = [True]

        def release():  # once; refers to no _Stream, so that dropping one collects it at once
            if held[0]:
                held[0] = False
                model._streams -= 1

        self._release = release
        self._gen = model._stream(ids, args, release)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._gen)

    def close(self):
        """Stops the generation (a stream never read has not started one) and frees the model."""
        self._gen.close()
        self._release()

    def __del__(self):
        if hasattr(self, "_gen"):
            self.close()


# Streams left open (an iterator abandoned part-way, never closed): at the interpreter's exit each
# is asked to stop and its thread joined, before the interpreter tears down the threads it knows.
_running_streams = set()


@atexit.register
def _stop_running_streams():
    for stop, worker in list(_running_streams):
        stop.set()
        worker.join()
    _running_streams.clear()


def load(path, *, dtype=None, vocab_dir="", num_heads=None, quantize=None, dequantize=False):
    """The model in `path`: GPT-2's weights (Hugging Face's model.safetensors or a directory holding
    it and config.json, or the book's state-dict names), a Llama 3, Qwen2.5 or Qwen3 folder as Hugging Face
    ships it (config.json, model.safetensors or shards, tokenizer.json) or as llama.cpp's GGUF file
    (F32, F16, BF16 and the quantized types, whose blocks generation reads with integer products as
    llama.cpp does), or a checkpoint `qkv train` wrote.

    dtype "f32" or "bf16" (None: as saved; a bf16 Llama/Qwen3 model keeps its weights in bf16 only,
    and its state_dict() then needs dtype="f32"); num_heads for a GPT file without config.json.
    quantize "q8_0", "q4_0", "q4_k" or "q6_k": a Llama 3 / Qwen3 model's float weights (a folder, an
    F32/F16/BF16 GGUF file) quantized at load into that type's blocks (a matrix whose rows are not
    whole blocks stays bf16; `description` says what was kept); dequantize=True: a quantized GGUF
    file's blocks decoded into bf16 weights instead (the float path, to compare with).
    A path that holds no model, or settings that do not go together, is a qkv.Error naming them.
    """
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise TypeError(f"qkv.load: path must be a str or os.PathLike, not {type(path).__name__}")
    if num_heads is not None and operator.index(num_heads) < 1:
        raise Error(f"qkv.load: num_heads is {num_heads}; expected a positive number of heads")
    if quantize is not None and not isinstance(quantize, str):
        raise TypeError(f"qkv.load: quantize must be a str such as \"q8_0\" or None, not {type(quantize).__name__}")
    return Model(_qkv.load(os.fspath(path), dtype=_dtype_name("qkv.load", dtype), vocab_dir=vocab_dir,
                           num_heads=num_heads, quantize=quantize, dequantize=bool(dequantize)))


def make_model(preset, seed=123, *, dtype=None, vocab_dir=""):
    """An untrained model of a preset: GPT-2's (gpt2-small, gpt2-medium, gpt2-large, gpt2-xl), its
    weights drawn as torch.manual_seed(seed); GPTModel(cfg) draws them; or Llama 3's, Qwen2.5's and
    Qwen3's (llama-3.2-1b, llama-3.2-3b, qwen2.5-0.5b, qwen3-0.6b, qwen3-1.7b) with the installed
    vocabulary."""
    return Model(_qkv.make_model(preset, seed=_whole("make_model", "seed", seed, 0, 2**64),
                                 dtype=_dtype_name("make_model", dtype),
                                 vocab_dir=vocab_dir))
