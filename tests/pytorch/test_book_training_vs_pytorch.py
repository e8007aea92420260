#!/usr/bin/python3
"""Chapter 5's training of the GPT model: `qkv train --model gpt` against the book's loop in PyTorch.

    /usr/bin/python3 tests/pytorch/test_book_training_vs_pytorch.py --qkv build/qkv [--verbose]

The twin is the book's code as chapter 5 describes it, written here: the text split at
int(train_ratio * len(text)) characters, GPTDatasetV1's windows (stride = context_length), a
shuffled DataLoader with drop_last for training and one in order for validation (torch's own
DataLoader), torch.manual_seed(seed); GPTModel(cfg) (tests/pytorch/gpt_model.py); AdamW(lr 4e-4,
weight_decay 0.1); train_model_simple: an evaluation every eval_freq steps over eval_iter batches of
each loader (iterating both loaders, which draws their seeds from the global generator), and a greedy
50-token sample from "Every effort moves you" after each epoch. The text is the book's,
tests/data/the-verdict.txt; its tokens come from `qkv encode` (checked against tiktoken by
tests/tiktoken).

The runs use small models (the book's recipe at small sizes, dropout 0.1, so the dropout masks, the
shuffles and the loaders' draws all have to agree): every evaluation's train and validation losses
within 1e-4 relative of the twin's, through whole epochs, and the same tokens seen. The samples
(greedy, so a near tie could flip a token) are compared too. Prints a line per run and
"book training vs pytorch: N passed, M failed".
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import harness  # noqa: E402
from gpt_model import GPTModel  # noqa: E402

VERDICT = os.path.join(os.path.dirname(HERE), "data", "the-verdict.txt")
TOL = 1e-4


class GPTDatasetV1(Dataset):
    def __init__(self, token_ids, max_length, stride):
        self.input_ids, self.target_ids = [], []
        for i in range(0, len(token_ids) - max_length, stride):
            self.input_ids.append(torch.tensor(token_ids[i:i + max_length]))
            self.target_ids.append(torch.tensor(token_ids[i + 1:i + max_length + 1]))

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, idx):
        return self.input_ids[idx], self.target_ids[idx]


def calc_loss_batch(input_batch, target_batch, model):
    logits = model(input_batch)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target_batch.flatten())


def calc_loss_loader(data_loader, model, num_batches=None):
    total_loss = 0.
    if len(data_loader) == 0:
        return float("nan")
    num_batches = len(data_loader) if num_batches is None else min(num_batches, len(data_loader))
    for i, (input_batch, target_batch) in enumerate(data_loader):
        if i < num_batches:
            total_loss += calc_loss_batch(input_batch, target_batch, model).item()
        else:
            break
    return total_loss / num_batches


def generate_text_simple(model, idx, max_new_tokens, context_size):
    for _ in range(max_new_tokens):
        with torch.no_grad():
            logits = model(idx[:, -context_size:])[:, -1, :]
        idx = torch.cat((idx, torch.argmax(logits, dim=-1, keepdim=True)), dim=1)
    return idx


def book_run(encode, decode, text, cfg, seed, epochs, eval_freq, eval_iter, batch_size, sample_tokens):
    split_idx = int(0.90 * len(text))
    train_data, val_data = text[:split_idx], text[split_idx:]
    torch.manual_seed(seed)
    train_loader = DataLoader(GPTDatasetV1(encode(train_data), cfg["context_length"], cfg["context_length"]),
                              batch_size=batch_size, shuffle=True, drop_last=True, num_workers=0)
    val_loader = DataLoader(GPTDatasetV1(encode(val_data), cfg["context_length"], cfg["context_length"]),
                            batch_size=batch_size, shuffle=False, drop_last=False, num_workers=0)
    torch.manual_seed(seed)
    model = GPTModel(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0004, weight_decay=0.1)
    evals, samples = [], []
    tokens_seen, global_step = 0, -1
    start = torch.tensor([encode("Every effort moves you")])
    for epoch in range(epochs):
        model.train()
        for input_batch, target_batch in train_loader:
            optimizer.zero_grad()
            loss = calc_loss_batch(input_batch, target_batch, model)
            loss.backward()
            optimizer.step()
            tokens_seen += input_batch.numel()
            global_step += 1
            if global_step % eval_freq == 0:
                model.eval()
                with torch.no_grad():
                    train_loss = calc_loss_loader(train_loader, model, eval_iter)
                    val_loss = calc_loss_loader(val_loader, model, eval_iter)
                model.train()
                evals.append((epoch + 1, global_step, tokens_seen, train_loss, val_loss))
        model.eval()
        ids = generate_text_simple(model, start, sample_tokens, cfg["context_length"])
        samples.append(decode(ids[0].tolist()).replace("\n", " "))
        model.train()
    return evals, samples


def main():
    h = harness.start("book training vs pytorch", __doc__)
    text = open(VERDICT, encoding="utf-8").read()

    def encode(s):
        with h.scratch("qkv-book-enc-") as tmp:
            path = os.path.join(tmp, "part.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(s)
            return json.loads(harness.check_qkv([h.qkv, "encode", "--file", path]))

    def decode(ids):
        # `qkv decode` ends its output with a newline unless the text already ends with one: a
        # sentinel token ('.', id 13) after the ids makes the text's own end unambiguous.
        out = harness.check_qkv([h.qkv, "decode", json.dumps(ids + [13])])
        out = out[:-1] if out.endswith("\n") else out
        assert out.endswith("."), out
        return out[:-1]

    runs = [  # (label, cfg, seed, epochs, eval_freq, eval_iter, batch_size)
        ("E 32, 2 layers x 2 heads, context 32, dropout 0.1", dict(context_length=32, emb_dim=32, n_heads=2, n_layers=2,
                                                                  drop_rate=0.1, qkv_bias=False), 123, 2, 10, 2, 2),
        ("E 24, 1 layer x 3 heads, context 48, qkv bias, dropout 0.2, batch 4", dict(
            context_length=48, emb_dim=24, n_heads=3, n_layers=1, drop_rate=0.2, qkv_bias=True), 7, 1, 3, 4, 4),
    ]
    for label, cfg, seed, epochs, eval_freq, eval_iter, batch in runs:
        cfg = dict(cfg, vocab_size=50257)
        want_evals, want_samples = book_run(encode, decode, text, cfg, seed, epochs, eval_freq, eval_iter, batch, 12)
        with h.scratch("qkv-book-train-") as tmp:
            cmd = [h.qkv, "train", "--model", "gpt", "--text-file", VERDICT, "--context-length",
                   str(cfg["context_length"]), "--d-model", str(cfg["emb_dim"]), "--num-heads", str(cfg["n_heads"]),
                   "--num-layers", str(cfg["n_layers"]), "--dropout", str(cfg["drop_rate"]), "--seed", str(seed),
                   "--epochs", str(epochs), "--eval-freq", str(eval_freq), "--eval-iter", str(eval_iter),
                   "--batch-size", str(batch), "--sample-tokens", "12", "--json", "--quiet",
                   "--checkpoint", os.path.join(tmp, "w.st"), "--svg", ""]
            if cfg["qkv_bias"]:
                cmd.append("--qkv-bias")
            run = harness.run_qkv(cmd, timeout=900)
            errors = []
            if run.problem():
                errors.append(run.problem())
            else:
                got = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
                if len(got) != len(want_evals):
                    errors.append(f"{len(got)} evaluations, the twin made {len(want_evals)}")
                worst = 0.0
                for g, (epoch, step, seen, tl, vl) in zip(got, want_evals):
                    if (g["epoch"], g["step"], g["tokens_seen"]) != (epoch, step, seen):
                        errors.append(f"evaluation at ({g['epoch']}, {g['step']}, {g['tokens_seen']}), the twin's at "
                                      f"({epoch}, {step}, {seen})")
                        break
                    for name, a, b in (("train", g["train_loss"], tl), ("val", g["val_loss"], vl)):
                        rel = abs(a - b) / abs(b)
                        worst = max(worst, rel)
                        if rel > TOL:
                            errors.append(f"step {step}: {name} loss {a:.7f}, the twin's {b:.7f} (relative {rel:.2e})")
                samples = [line for line in run.stderr.splitlines() if line.startswith("Every effort moves you")]
                if samples != want_samples:
                    errors.append(f"the samples differ:\n    qkv:  {samples}\n    twin: {want_samples}")
                print(f"  {'ok  ' if not errors else 'FAIL'} {label}: {len(got)} evaluations, worst relative "
                      f"difference {worst:.2e}")
            h.record(label, errors, cmd)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())
