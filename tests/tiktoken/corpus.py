"""The tokenizer test corpus: text found on the machine plus generated hard cases, deterministic.

    documents(min_bytes)   text from licences, package copyright files, man pages and C/C++ headers,
                           split into documents of at most 16 KiB at line ends, sorted by source path
    generated(seed)        CJK, emoji and ZWJ sequences, combining marks, right-to-left scripts, long
                           whitespace and digit runs, contractions in odd cases, special tokens
    random_strings(n, seed) n random Unicode strings over every plane (no surrogates)
    english(min_bytes)     English prose only (licences and copyright files), for the benchmark
"""
import glob
import gzip
import os
import random

CHUNK = 16 * 1024


def _read(path):
    try:
        data = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def _split(text):
    out, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        if size + len(line) > CHUNK and cur:
            out.append("".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += len(line)
    if cur:
        out.append("".join(cur))
    return out


def _collect(patterns, min_bytes, per_file=256 * 1024):
    docs, total = [], 0
    for pattern in patterns:
        for path in sorted(glob.glob(pattern, recursive=True)):
            if not os.path.isfile(path):
                continue
            text = _read(path)[:per_file]
            for d in _split(text):
                docs.append(d)
                total += len(d.encode("utf-8"))
            if total >= min_bytes:
                return docs
    return docs


def english(min_bytes=5_000_000):
    return _collect(["/usr/share/common-licenses/*", "/usr/share/doc/*/copyright",
                     "/usr/share/doc/*/README*", "/usr/share/doc/*/*.txt"], min_bytes)


def documents(min_bytes=5_500_000):
    share = min_bytes // 4
    docs = english(share)
    docs += _collect(["/usr/share/man/man1/*.gz", "/usr/share/man/man3/*.gz", "/usr/share/man/man8/*.gz"], share)
    docs += _collect(["/usr/include/*.h", "/usr/include/c++/12/bits/*.h", "/usr/include/linux/*.h"], share)
    docs += _collect(["/usr/lib/python3/dist-packages/**/*.py", "/usr/share/perl/5.36/**/*.pm"], share)
    return docs


def _pick(rng, ranges, n):
    return "".join(chr(rng.randint(*rng.choice(ranges))) for _ in range(n))


def generated(seed=7, count=3000):
    rng = random.Random(seed)
    cjk = [(0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3), (0x3400, 0x4DBF), (0x20000, 0x2A6DF)]
    rtl = [(0x05D0, 0x05EA), (0x0620, 0x064A), (0x0660, 0x0669), (0x06F0, 0x06F9), (0x0700, 0x074F)]
    combining = [(0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F)]
    emoji = ["\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F3F3\uFE0F\u200D\U0001F308",
             "\U0001F44D\U0001F3FD", "\U0001F1FA\U0001F1F8", "\U0001F1EF\U0001F1F5", "\u2764\uFE0F",
             "\U0001F9D1\U0001F3FB\u200D\U0001F4BB", "\U0001F600", "\U0001FAE0", "#\uFE0F\u20E3",
             "\U0001F469\u200D\u2764\uFE0F\u200D\U0001F48B\u200D\U0001F468"]
    spaces = [" ", "  ", "\t", "\n", "\r\n", "\u00A0", "\u3000", "\u2028", "\u2003", "\u200B", "\u000B", "\u000C"]
    contractions = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'Ll",
                    "'d", "'D", "\u2019s", "''s", "'''", "'", "'x", "'ss", "I'M", "you'RE", "it's'", "'ll've",
                    "can't", "CAN'T", "rock'n'roll", " 's", "'s'"]
    specials = ["<|endoftext|>", "<|endoftext|", "|endoftext|>", "<|endoftext|><|endoftext|>", "< |endoftext|>",
                "<|ENDOFTEXT|>", "<|endoftext|>\n"]
    words = ["the", "journey", "Starts", "with", "ONE", "step", "naïve", "café", "Ünïcödé", "x86_64", "don't"]
    out = []
    for i in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            kind = rng.randrange(10)
            if kind == 0:
                parts.append(_pick(rng, cjk, rng.randint(1, 30)))
            elif kind == 1:
                parts.append("".join(rng.choice(emoji) for _ in range(rng.randint(1, 6))))
            elif kind == 2:
                base = rng.choice(words)
                parts.append("".join(c + _pick(rng, combining, rng.randint(0, 4)) for c in base))
            elif kind == 3:
                parts.append(_pick(rng, rtl, rng.randint(1, 25)) + rng.choice(["\u200F", "\u200E", "", " "]))
            elif kind == 4:
                parts.append("".join(rng.choice(spaces) for _ in range(rng.randint(1, 400 if i % 50 == 0 else 20))))
            elif kind == 5:
                digits = rng.choice(["0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "¹²³⁴⁵", "Ⅳ½"])
                parts.append("".join(rng.choice(digits) for _ in range(rng.randint(1, 2000 if i % 40 == 0 else 30))))
            elif kind == 6:
                parts.append(rng.choice(words) + rng.choice(contractions))
            elif kind == 7:
                parts.append(rng.choice(specials))
            elif kind == 8:
                parts.append("".join(rng.choice("!@#$%^&*()_+-=[]{};:\"',.<>/?\\|`~…—–·•") for _ in range(rng.randint(1, 15))))
            else:
                parts.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 8))))
            if rng.random() < 0.6:
                parts.append(rng.choice(spaces))
        out.append("".join(parts))
    return out


def random_strings(n=10_000, seed=11):
    rng = random.Random(seed)
    planes = [(0x20, 0x7E), (0x00, 0x1F), (0xA0, 0x2FF), (0x370, 0x1FFF), (0x2000, 0x2BFF), (0x3000, 0xD7FF),
              (0xE000, 0xFFFF), (0x10000, 0x1FFFF), (0x20000, 0x3FFFF), (0xE0000, 0x10FFFF)]
    out = []
    for _ in range(n):
        length = rng.choice([0, 1, 2, 3, 5, 8, 13, 40, 100])
        if rng.random() < 0.5:
            out.append(_pick(rng, planes, length))
        else:  # mostly ASCII with a sprinkle, so pre-tokenisation boundaries get exercised
            out.append("".join(chr(rng.randint(0x20, 0x7E)) if rng.random() < 0.8 else _pick(rng, planes, 1)
                               for _ in range(length)))
    return out
