"""The PyTorch twin of `qkv generate`'s sampling: PyTorch's CPU random engine and the rule that
picks the next id, written from the rule as qkv documents it (not from its code).

    gen = MT19937(seed)                  # the engine torch.manual_seed(seed) sets up
    gen.random()                         # one 32-bit draw
    gen.random64()                       # (first draw << 32) | second draw
    next_id = pick_next(logits, temperature, top_k, gen)
    ids = generate(logits_of, prompt, context_length, max_new_tokens, temperature, top_k, seed)
                                         # logits_of(window): the last position's logits

The engine is the MT19937 of Matsumoto and Nishimura: 624 words of state, seeded from the low 32
bits of the seed (word i = 1812433253 * (w[i-1] ^ (w[i-1] >> 30)) + i), regenerated 624 words at a
time, each output tempered. PyTorch combines two 32-bit draws into a 64-bit one with the first
draw in the high half. Pure Python: generation draws two words per token, so speed is no concern.

The rule, for one position's logits (V float32 values), is the book's generate (chapter 5):
  top-k           logits = torch.where(logits < topk(logits, k)[-1], -inf, logits)  (top_k 0: all;
                  every logit equal to the k-th largest stays)
  temperature 0   torch.argmax(logits): the first largest; no draw.
  otherwise       probs = torch.softmax(logits / temperature); torch.multinomial(probs, 1) with
                  a torch.Generator seeded with the seed: PyTorch itself draws.

generate() re-runs the whole window for every token (no cache): the window is the last
context_length ids, so with more ids than the context holds it slides, and its first id is
always at position 0.
"""

import math

_N, _M = 624, 397
_MATRIX_A, _UPPER, _LOWER = 0x9908B0DF, 0x80000000, 0x7FFFFFFF
_WORD = 0xFFFFFFFF


class MT19937:
    """The 32-bit Mersenne Twister as torch.manual_seed(seed) leaves PyTorch's CPU generator."""

    def __init__(self, seed):
        mt = [seed & _WORD]
        for i in range(1, _N):
            prev = mt[-1]
            mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & _WORD)
        self.mt, self.index = mt, _N  # the first draw regenerates the block

    def _regenerate(self):
        mt = self.mt
        for i in range(_N):
            y = (mt[i] & _UPPER) | (mt[(i + 1) % _N] & _LOWER)
            mt[i] = mt[(i + _M) % _N] ^ (y >> 1) ^ (_MATRIX_A if y & 1 else 0)
        self.index = 0

    def random(self):
        if self.index >= _N:
            self._regenerate()
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y & _WORD

    def random64(self):
        high = self.random()
        return (high << 32) | self.random()

    def uniform_double(self):
        """torch.rand(n, dtype=torch.float64)'s value: the low 53 bits of random64() * 2^-53."""
        return (self.random64() % 2**53) * 2.0**-53

    def uniform_float(self):
        """torch.rand(n)'s value: the low 24 bits of random() * 2^-24."""
        return (self.random() & 0xFFFFFF) * 2.0**-24


def kept_by_top_k(values, top_k):
    """Which logits top-k sampling keeps: all with top_k 0 (or >= V); else those >= the k-th
    largest, ties included."""
    if top_k <= 0 or top_k >= len(values):
        return [True] * len(values)
    cut = sorted(values, reverse=True)[top_k - 1]
    return [v >= cut for v in values]


def pick_next(logits, temperature, top_k, gen, keep=kept_by_top_k):
    """The next id from one position's logits (float32 values) by the book's rule; gen is a
    torch.Generator. `keep` is the top-k rule (a parameter so that a test can swap it)."""
    import torch
    values = torch.tensor([float(v) for v in logits], dtype=torch.float32)
    kept = torch.tensor(keep([float(v) for v in logits], top_k))
    values = torch.where(kept, values, torch.tensor(float("-inf")))
    if temperature == 0:
        return int(torch.argmax(values))
    probs = torch.softmax(values / temperature, dim=-1)
    return int(torch.multinomial(probs, num_samples=1, generator=gen))


def generate(logits_of, prompt, context_length, max_new_tokens, temperature, top_k, seed, pick=pick_next):
    """The new ids. logits_of(window) -> the logits of the window's last position; pick is the
    rule (pick_next, or a test's variant of it)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    ids = list(prompt)
    out = []
    for _ in range(max_new_tokens):
        window = ids[-context_length:]
        next_id = pick(logits_of(window), temperature, top_k, gen)
        ids.append(next_id)
        out.append(next_id)
    return out
