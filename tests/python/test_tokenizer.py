"""qkv.get_encoding("gpt2") against tiktoken: its interface and exceptions, and its ids on the
tokenizer test corpus (tests/tiktoken/corpus.py), with the npm oracles the tiktoken tests use
(installed into $QKV_NPM_DIR, default build/npm, by test_tiktoken_differential.ensure_packages)."""
import json
import os
import pickle
import subprocess
import sys
import tempfile

import pytest

import corpus
import qkv
import test_tiktoken_differential as oracle

ENCODE_JS = os.path.join(os.path.dirname(corpus.__file__), "tiktoken_encode.cjs")
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def enc():
    return qkv.get_encoding("gpt2")


def tiktoken_message(token):
    """tiktoken's ValueError text for a disallowed special token (tiktoken/core.py)."""
    r = repr(token)
    return (f"Encountered text corresponding to disallowed special token {r}.\n"
            "If you want this text to be encoded as a special token, "
            f"pass it to `allowed_special`, e.g. `allowed_special={{{r}, ...}}`.\n"
            "If you want this text to be encoded as normal text, disable the check for this token "
            f"by passing `disallowed_special=(enc.special_tokens_set - {{{r}}})`.\n"
            "To disable this check for all special tokens, pass `disallowed_special=()`.\n")


# --- the interface, on the book's cases (tests/data/book.json, recorded with tiktoken) -------------

def test_book_cases(enc, book):
    c = book["gpt2.encode"]["expected"]
    assert enc.encode(c["text"], allowed_special={EOT}) == c["ids"]
    assert [enc.decode_single_token_bytes(i).decode("utf-8") for i in c["ids"]] == c["pieces"]
    assert enc.n_vocab == c["n_vocab"]
    for i, text in book["gpt2.decode_single_token"]["expected"].items():
        assert enc.decode_single_token_bytes(int(i)).decode("utf-8", errors="replace") == text
    c = book["gpt2.encode_special"]["expected"]
    ids = enc.encode(c["text"], allowed_special={EOT})
    assert ids == c["ids"]
    assert enc.decode(ids) == c["text"]


def test_attributes(enc):
    assert enc.name == "gpt2"
    assert enc.n_vocab == 50257 and enc.max_token_value == 50256
    assert enc.eot_token == 50256
    assert enc.special_tokens_set == {EOT}
    assert repr(enc) == "<Encoding 'gpt2'>"
    assert qkv.get_encoding("gpt2") is enc  # loaded once
    assert qkv.list_encoding_names() == ["gpt2"]
    with pytest.raises(ValueError, match="Unknown encoding cl100k_base"):
        qkv.get_encoding("cl100k_base")


def test_pickles_by_name_as_tiktoken(enc):
    """A DataLoader worker (or any process) gets the encoding through pickle, as tiktoken's do: by
    name, found again as get_encoding finds it (it raised TypeError: cannot pickle)."""
    data = pickle.dumps(enc)
    assert len(data) < 200  # the name, not the vocabulary
    assert pickle.loads(data) is enc
    text = "Hello, do you like tea? <|endoftext|> In the sunlit terraces"
    out = subprocess.run([sys.executable, "-c", "import pickle, sys; e = pickle.loads(sys.stdin.buffer.read()); "
                          f"print(e.encode({text!r}, allowed_special='all'))"],
                         input=data, capture_output=True, check=True, env=os.environ)
    assert json.loads(out.stdout) == enc.encode(text, allowed_special="all")


def test_special_tokens_as_tiktoken(enc):
    text = "Hello <|endoftext|> world"
    with pytest.raises(ValueError) as e:
        enc.encode(text)
    assert str(e.value) == tiktoken_message(EOT)
    assert enc.encode(text, allowed_special="all") == enc.encode(text, allowed_special={EOT})
    assert 50256 in enc.encode(text, allowed_special="all")
    plain = enc.encode(text, disallowed_special=())
    assert 50256 not in plain and plain == enc.encode_ordinary(text)
    assert enc.encode(text, disallowed_special=set()) == plain
    assert enc.encode(text, allowed_special={"<|not a special token|>"}, disallowed_special=()) == plain
    with pytest.raises(TypeError):
        enc.encode(text, {EOT})  # keyword-only, as in tiktoken
    with pytest.raises(TypeError, match="collection"):
        enc.encode(text, allowed_special="<|endoftext|>")
    with pytest.raises(TypeError, match="str"):
        enc.encode(b"bytes")
    assert enc.encode_single_token(EOT) == 50256
    assert enc.encode_single_token(b" step") == 2239
    with pytest.raises(KeyError):
        enc.encode_single_token("not one token")
    assert enc.is_special_token(50256) and not enc.is_special_token(13)


def test_decoding(enc):
    ids = enc.encode("Your journey starts with one step.")
    assert ids == [7120, 7002, 4940, 351, 530, 2239, 13]
    assert enc.decode(ids) == "Your journey starts with one step."
    assert enc.decode_bytes(ids) == b"Your journey starts with one step."
    assert enc.decode_tokens_bytes(ids)[:2] == [b"Your", b" journey"]
    smile = enc.encode("\U0001F600")
    assert len(smile) > 1
    half = smile[:1]  # a token that ends inside the character
    assert enc.decode(half) == "\ufffd" * len(enc.decode_bytes(half).decode("utf-8", errors="replace"))
    assert enc.decode(half) == enc.decode_bytes(half).decode("utf-8", errors="replace")
    assert enc.decode(half, errors="ignore") == ""
    with pytest.raises(UnicodeDecodeError):
        enc.decode(half, errors="strict")
    for bad in ([50257], [-1], [7120, 2**40]):
        with pytest.raises(KeyError):
            enc.decode(bad)
        with pytest.raises(KeyError):
            enc.decode_bytes(bad)
    with pytest.raises(KeyError):
        enc.decode_single_token_bytes(50300)
    with pytest.raises(TypeError):
        enc.decode("not ids")
    # an id beyond int64 is no token either (it said "tokens must be a sequence of int, not list");
    # the element of the wrong type is named
    with pytest.raises(KeyError, match=r"tokens\[1\] is 18446744073709551616, which is no token id"):
        enc.decode([7120, 2**64])
    with pytest.raises(TypeError, match=r"tokens\[2\] must be an int, not float"):
        enc.decode_bytes([1, 2, 3.0])


def test_lone_surrogates_are_replaced_as_tiktoken_does(enc):
    assert enc.encode("a\ud800b") == enc.encode("a\ufffdb")
    assert enc.encode_batch(["a\udfffb"]) == [enc.encode("a\ufffdb")]


def test_batch(enc):
    texts = ["Your journey starts with one step.", "", "x" * 1000, "Hello <|endoftext|>", "étoile"]
    want = [enc.encode(t, allowed_special="all") for t in texts]
    assert enc.encode_batch(texts, allowed_special="all") == want
    assert enc.encode_batch(texts, num_threads=1, allowed_special="all") == want
    assert enc.encode_ordinary_batch(texts) == [enc.encode_ordinary(t) for t in texts]
    with pytest.raises(ValueError) as e:
        enc.encode_batch(texts)  # text 4 spells <|endoftext|>
    assert str(e.value) == tiktoken_message(EOT)
    with pytest.raises(TypeError):
        enc.encode_batch("a string, not a list")
    with pytest.raises(TypeError):
        enc.encode_batch(["ok", 3])
    with pytest.raises(ValueError, match="num_threads"):
        enc.encode_batch(texts, num_threads=0)


# --- against tiktoken itself, on the tokenizer corpus ----------------------------------------------

@pytest.fixture(scope="module")
def npm_dir():
    d = os.environ.get("QKV_NPM_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "qkv", "npm")
    oracle.ensure_packages(d)
    return d


def tiktoken_ids(npm_dir, backend, texts):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "in.jsonl")
        oracle.write_jsonl(path, texts)
        out = subprocess.run(["node", ENCODE_JS, npm_dir, backend, path], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def first_mismatch(texts, got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"#{i} {texts[i][:60]!r}: qkv {g[:12]} tiktoken {w[:12]}"
    return None


def test_corpus_against_tiktoken(enc, npm_dir):
    texts = corpus.documents() + corpus.generated()
    assert sum(len(t) for t in texts) > 4_000_000
    got = enc.encode_batch(texts, num_threads=2, allowed_special="all")
    want = tiktoken_ids(npm_dir, "wasm", texts)
    assert len(got) == len(want) == len(texts)
    assert got == want, first_mismatch(texts, got, want)
    got = enc.encode_ordinary_batch(texts, num_threads=2)
    want = tiktoken_ids(npm_dir, "wasm-ordinary", texts)
    assert got == want, first_mismatch(texts, got, want)
    # decode(encode(x)) == x
    assert enc.decode([i for ids in got for i in ids]) == "".join(texts)


def test_random_strings_against_tiktoken(enc, npm_dir):
    texts = corpus.random_strings()
    got = [enc.encode(t, allowed_special="all") for t in texts]
    want = tiktoken_ids(npm_dir, "wasm", texts)
    # tiktoken-rs and the WASM build disagree on letters Unicode 16 added; qkv follows the WASM build.
    assert got == want, first_mismatch(texts, got, want)


def test_special_token_errors_against_tiktoken(enc, npm_dir):
    """With tiktoken's defaults, the same texts are refused (ValueError) and the rest encoded alike."""
    texts = [t for t in corpus.generated() if len(t) < 4000][:300]
    texts += ["<|endoftext|>", "a<|endoftext|>b", "<|endoftext", "<|endoftext|", "|endoftext|>", "<|ENDOFTEXT|>",
              "x <|endoftext|><|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>"]
    want = tiktoken_ids(npm_dir, "wasm-default", texts)
    refused = 0
    for text, w in zip(texts, want):
        if w == "disallowed":
            refused += 1
            with pytest.raises(ValueError, match="disallowed special token '<\\|endoftext\\|>'"):
                enc.encode(text)
        else:
            assert enc.encode(text) == w, repr(text[:60])
    assert refused >= 3
