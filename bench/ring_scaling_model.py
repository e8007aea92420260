#!/usr/bin/python3
"""The README's scaling model for ring attention, from bench/ring_block_bench.cc's measurements.

    mpirun -np 2 build/bench/qkv_ring_block_bench --json ring_blocks.json
    python3 bench/ring_scaling_model.py ring_blocks.json [more runs' .json ...]

Several files (runs of the benchmark): every measured figure is the lowest of the runs' medians
(on a shared machine other work only adds time); the table shows each row's spread over the runs.

Model (causal, zigzag split, N machines, one rank each, every machine computing like the one
measured; H heads, D = Dv head dim from the JSON). A rank holds Tr = T / N tokens in two runs of
L = Tr / 2. At every ring step but the first it computes two off-diagonal (L x L) pairs (one of
its runs sees both of the block's, the other one of them), so
    compute per step   c(L) = 2 t_full(L)          (step 0: t_full(L) + 2 t_diag(L))
    message per step   m(Tr) = latency + Tr H 2D 4 bytes / bandwidth
                       (each rank sends one block and receives one at once: full-duplex links)
    communication is hidden when c(L) >= m(Tr);  forward time = sum over steps 0 .. N-2 of
    max(c_s, m) + c_(N-1) (the last step sends nothing).
The backward's steps compute 2 t_bwd_full(L) and move the block and its dk, dv accumulator:
twice the bytes. t_full(L) is interpolated between measured block sizes (log-log) and scaled as
L^2 from the nearest measured size outside them: extrapolated. No torch needed.
"""
import json
import math
import sys

LINKS = [(10, 5), (10, 20), (25, 5), (25, 20), (100, 5), (100, 20)]  # (Gbit/s, latency us)
SEQS = [("1M", 1 << 20), ("4M", 1 << 22)]
MACHINES = [8, 16, 32, 64, 128]


def interpolate(points, L):
    """points: sorted [(L, ms)]; log-log between them, ~L^2 beyond them."""
    if L <= points[0][0]:
        return points[0][1] * (L / points[0][0]) ** 2
    if L >= points[-1][0]:
        return points[-1][1] * (L / points[-1][0]) ** 2
    for (a, ta), (b, tb) in zip(points, points[1:]):
        if a <= L <= b:
            f = math.log(L / a) / math.log(b / a)
            return math.exp(math.log(ta) + f * (math.log(tb) - math.log(ta)))
    raise AssertionError


class Model:
    def __init__(self, m):
        self.H, self.D = m["heads"], m["dim"]
        blocks = sorted(m["blocks"], key=lambda b: b["tokens"])
        self.lo, self.hi = blocks[0]["tokens"], blocks[-1]["tokens"]
        self.full = [(b["tokens"], b["fwd_full_ms"]) for b in blocks]
        self.diag = [(b["tokens"], b["fwd_diag_ms"]) for b in blocks]
        self.bfull = [(b["tokens"], b["bwd_full_ms"]) for b in blocks]
        self.bdiag = [(b["tokens"], b["bwd_diag_ms"]) for b in blocks]

    def bytes(self, Tr):  # one rank's k and v block, float32
        return Tr * self.H * 2 * self.D * 4

    def message_ms(self, Tr, gbit, lat_us, backward=False):
        return lat_us * 1e-3 + (2 if backward else 1) * self.bytes(Tr) * 8 / (gbit * 1e9) * 1e3

    def step_ms(self, L, backward=False):
        return 2 * interpolate(self.bfull if backward else self.full, L)

    def total_s(self, T, N, gbit, lat_us, backward=False):
        Tr = T / N
        L = Tr / 2
        c = self.step_ms(L, backward)
        c0 = interpolate(self.bfull if backward else self.full, L) + 2 * interpolate(
            self.bdiag if backward else self.diag, L)
        m = self.message_ms(Tr, gbit, lat_us, backward)
        steps = [c0] + [c] * (N - 1)
        return (sum(max(s, m) for s in steps[:-1]) + steps[-1]) / 1e3

    def hiding_tokens(self, gbit, lat_us, backward=False):
        """The fewest tokens per rank (a power of 2^(1/8)) from which c >= m at every size above."""
        Tr, found = 1 << 24, None
        while Tr >= 2:
            if self.step_ms(Tr / 2, backward) >= self.message_ms(Tr, gbit, lat_us, backward):
                found = Tr
            else:
                break
            Tr /= 2 ** 0.125
        return found


def gflops(L, ms, H, D, pairs):
    return 4.0 * pairs * H * D / (ms * 1e6)


def best_of_runs(runs):
    """One measurement: each figure the lowest over the runs (same block sizes in each), and the
    spread max / min of the forward's and the exchange's times."""
    m = dict(runs[0])
    m["latency_us"] = min(r["latency_us"] for r in runs)
    m["blocks"] = []
    for i, b in enumerate(runs[0]["blocks"]):
        if any(len(r["blocks"]) != len(runs[0]["blocks"]) or r["blocks"][i]["tokens"] != b["tokens"] for r in runs):
            sys.exit("ring_scaling_model.py: the runs measured different block sizes")
        best = {k: (v if k in ("tokens", "kv_bytes") else min(r["blocks"][i][k] for r in runs)) for k, v in b.items()}
        for k in ("fwd_full_ms", "exchange_ms"):
            best[k + "_spread"] = max(r["blocks"][i][k] for r in runs) / best[k]
        m["blocks"].append(best)
    return m


def main():
    args = sys.argv[1:]
    if not args or any(a.startswith("-") for a in args):
        sys.exit("usage: ring_scaling_model.py MEASURED.json [MORE.json ...] (from qkv_ring_block_bench --json)")
    runs = []
    for name in args:
        with open(name) as f:
            runs.append(json.load(f))
    m = best_of_runs(runs)
    model = Model(m)
    H, D = model.H, model.D
    lat = m["latency_us"]
    print(f"Measured ({m['threads']} threads on rank 0, H = {H}, D = {D}; messages between 2 ranks, "
          f"latency {lat:.2f} us one way; the lowest of {len(runs)} runs' medians, spread = slowest / fastest run):")
    print("| L tokens | fwd full ms | fwd GFLOP/s | fwd diag ms | bwd full ms | bwd GFLOP/s | k,v MiB | one-way ms | GB/s | exchange ms | spread fwd, exch |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in sorted(m["blocks"], key=lambda b: b["tokens"]):
        L = b["tokens"]
        pairs = L * L
        mib = b["kv_bytes"] / 2 ** 20
        gbs = b["kv_bytes"] / (b["one_way_ms"] * 1e-3) / 1e9
        print(f"| {L:,} | {b['fwd_full_ms']:.3f} | {gflops(L, b['fwd_full_ms'], H, D, pairs):.0f} | "
              f"{b['fwd_diag_ms']:.3f} | {b['bwd_full_ms']:.3f} | "
              f"{2.5 * gflops(L, b['bwd_full_ms'], H, D, pairs):.0f} | {mib:.2f} | {b['one_way_ms']:.4f} | "
              f"{gbs:.2f} | {b['exchange_ms']:.4f} | {b['fwd_full_ms_spread']:.2f}, {b['exchange_ms_spread']:.1f} |")
    print()
    print("Extrapolated: the fewest tokens per rank Tr (two runs of L = Tr / 2) for which a step's compute "
          "covers its message (c >= m), zigzag, causal:")
    print("| link | forward: Tr | c ms | m ms | fwd+bwd (backward steps): Tr | c ms | m ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for gbit, lat_us in LINKS:
        row = [f"{gbit} Gbit/s, {lat_us} us"]
        for bwd in (False, True):
            Tr = model.hiding_tokens(gbit, lat_us, bwd)
            if Tr is None:
                row += ["never", "", ""]
                continue
            note = "" if model.lo <= Tr / 2 <= model.hi else " (L outside the measured range)"
            row += [f"{Tr:,.0f}{note}", f"{model.step_ms(Tr / 2, bwd):.3f}",
                    f"{model.message_ms(Tr, gbit, lat_us, bwd):.3f}"]
        print("| " + " | ".join(row) + " |")
    print()
    print("Extrapolated: time for T tokens on N machines (causal, zigzag, forward; forward + backward), "
          "the message per step at 10 and 100 Gbit/s with 20 us:")
    print("| T | N | Tr | L | c ms/step | m ms @10G | m ms @100G | hidden @10G | forward s | fwd+bwd s | q,k,v,o GiB/rank |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for name, T in SEQS:
        for N in MACHINES:
            Tr = T // N
            L = Tr / 2
            c = model.step_ms(L)
            m10, m100 = model.message_ms(Tr, 10, 20), model.message_ms(Tr, 100, 20)
            fwd = model.total_s(T, N, 10, 20)
            both = fwd + model.total_s(T, N, 10, 20, backward=True)
            gib = 4 * Tr * H * D * 4 / 2 ** 30
            print(f"| {name} | {N} | {Tr:,} | {L:,.0f} | {c:,.0f} | {m10:.1f} | {m100:.2f} | "
                  f"{'yes' if c >= m10 else 'no'} | {fwd:,.0f} | {both:,.0f} | {gib:.2f} |")


if __name__ == "__main__":
    main()
