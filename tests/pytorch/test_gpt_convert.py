#!/usr/bin/python3
"""`qkv convert` between GPT-2's layouts, bit for bit, against the book's PyTorch model.

    /usr/bin/python3 tests/pytorch/test_gpt_convert.py --qkv build/qkv

For small GPT models drawn by the twin (tests/pytorch/gpt_model.py; untied and tied heads):
  - the twin's Hugging Face file -> qkv convert --to book -> the book's GPTModel loads it with
    load_state_dict(strict=True) (masks included) and holds exactly the twin's state;
  - -> qkv convert --to huggingface -> every tensor of the original file, bit for bit (the
    attn.bias buffers transformers saves are skipped on the way in and not written back), and the
    config.json it writes says the model's sizes;
  - -> qkv convert --to qkv -> --to book: the same bytes as the first conversion's tensors;
  - a book file without the mask buffers converts too.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import harness  # noqa: E402
import safetensors_io  # noqa: E402
from gpt_model import GPTModel, to_hugging_face  # noqa: E402


def main():
    h = harness.start("gpt convert", __doc__)
    with h.scratch("qkv-gpt-convert-") as tmp:
        for label, cfg, tied in [
            ("untied", dict(vocab_size=61, context_length=9, emb_dim=12, n_heads=3, n_layers=2, drop_rate=0.0,
                            qkv_bias=True), False),
            ("tied", dict(vocab_size=40, context_length=7, emb_dim=8, n_heads=2, n_layers=1, drop_rate=0.0,
                          qkv_bias=True), True),
        ]:
            errors = []
            torch.manual_seed(5)
            twin = GPTModel(cfg)
            if tied:
                twin.out_head.weight = twin.tok_emb.weight
            state = twin.state_dict()
            p = lambda name: os.path.join(tmp, f"{label}.{name}")  # noqa: E731
            hf = to_hugging_face(state, tied=tied)
            safetensors_io.save(p("hf.st"), hf)
            heads = ["--num-heads", str(cfg["n_heads"])]
            try:
                harness.check_qkv([h.qkv, "convert", "--weights", p("hf.st"), "--to", "book", "--out", p("book.st")] + heads)
                book = {k: v for k, v in safetensors_io.load(p("book.st")).items()}
                loaded = GPTModel(cfg)
                loaded.load_state_dict(book, strict=True)
                for k, v in state.items():
                    if not torch.equal(loaded.state_dict()[k], v):
                        errors.append(f"book layout: {k} differs from the twin's")
                harness.check_qkv([h.qkv, "convert", "--weights", p("book.st"), "--to", "huggingface", "--out",
                                   p("hf2.st"), "--config", p("config.json")] + heads)
                back = safetensors_io.load(p("hf2.st"))
                want = {k: v for k, v in hf.items() if not k.endswith(".attn.bias")}
                if set(back) != set(want):
                    errors.append(f"Hugging Face names: {sorted(set(back) ^ set(want))} differ")
                errors += [f"{k} is not the original's bits" for k in want if k in back and not torch.equal(back[k], want[k])]
                config = json.load(open(p("config.json")))
                for key, value in (("n_embd", cfg["emb_dim"]), ("n_head", cfg["n_heads"]), ("n_layer", cfg["n_layers"]),
                                   ("n_positions", cfg["context_length"]), ("vocab_size", cfg["vocab_size"]),
                                   ("tie_word_embeddings", tied)):
                    if config.get(key) != value:
                        errors.append(f"config.json's {key} is {config.get(key)!r}, not {value!r}")
                harness.check_qkv([h.qkv, "convert", "--weights", p("hf2.st"), "--to", "qkv", "--out", p("qkv.st")] + heads)
                harness.check_qkv([h.qkv, "convert", "--weights", p("qkv.st"), "--to", "book", "--out", p("book2.st")])
                book2 = safetensors_io.load(p("book2.st"))
                errors += [f"qkv -> book: {k} changed" for k in book if not torch.equal(book[k], book2[k])]
                safetensors_io.save(p("nomask.st"), {k: v for k, v in book.items() if not k.endswith(".mask")})
                harness.check_qkv([h.qkv, "convert", "--weights", p("nomask.st"), "--to", "book", "--out", p("book3.st")] + heads)
                book3 = safetensors_io.load(p("book3.st"))
                errors += [f"without masks: {k} changed" for k in book if not torch.equal(book[k], book3[k])]
            except harness.QkvError as e:
                errors.append(str(e))
            print(f"  {'ok  ' if not errors else 'FAIL'} {label}")
            h.record(label, errors)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
