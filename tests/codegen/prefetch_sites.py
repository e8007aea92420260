#!/usr/bin/env python3
"""The prefetches that decide memory speed are in the compiled code (x86-64).

GCC takes a function whose only statements are prefetches for one without effects, and drops the
calls to it that it has not inlined: no warning, the same results, only slower. It happened twice
(docs/benchmarks.md, "A block's softmax under the next block's scores"): the decoding kernel's
first pipelined loop read its cache 1.85x as long from memory, and the fused attention's row packing
had held no prefetch instruction at all for weeks. Each site below is a function of the release
build's static libraries whose loop asks for what it reads next; for every SIMD target named, each
function of that name (one per file that instantiates it) must hold at least the site's floor of
prefetch instructions. A site that matches no function (renamed, or now inlined into its caller)
fails too: update the list, do not drop it.

    prefetch_sites.py --objdump objdump LIB.a [LIB.a ...]
"""
import argparse
import re
import subprocess
import sys

# (what reads memory, a regex on the demangled name after "N_<TARGET>::" and an anonymous namespace
# if any, the targets, a floor):
# each function must hold at least `floor` prefetch instructions. The floors are half of what GCC 12
# gave on 2026-12-06 (the decoding kernels hold several loops' prefetches, and one lost helper took
# the float kernel's from 18-20 to 5-6), so they catch a loop's prefetches lost, not a compiler's
# other choices. When the prefetching changes on purpose, set them again.
SITES = [
    ("decoding attention over a bf16 cache, heads of 128 on AVX-512 (kernels/decode.cc)",
     r"ChunkTask<unsigned short, 8>", ["AVX2", "AVX3"], 7),
    ("decoding attention over a float cache, heads of 64 (kernels/decode.cc)",
     r"ChunkTask<float, 4>", ["AVX2", "AVX3"], 9),
    ("fused attention's packing of float rows (kernels/attention_blocks-inl.h, PrefetchRow)",
     r"PackRows<float>", ["AVX2", "AVX3"], 1),
    ("fused attention's packing of bf16 rows (kernels/attention_blocks-inl.h, PrefetchRow)",
     r"PackRows<unsigned short>", ["AVX2", "AVX3"], 1),
    ("bf16 and float weights' decoding product (core/gemv.cc)", r"RowsRange<unsigned short>", ["AVX2", "AVX3"], 1),
    ("Q4_0 rows' decoding product (core/quant_matvec.cc)", r"Rows32<1, true>", ["AVX2", "AVX3"], 2),
    ("Q4_0 stored panels' decoding product (core/quant_gemm.cc)", r"StoredHalfRows<\d+, \d+, true, 1>",
     ["AVX2", "AVX3"], 2),
    ("Q4_0 stored panels' decoding product, VNNI (core/quant_gemm.cc)", r"StoredPanelRows<1, 1, true>",
     ["AVX3_DL"], 5),
    ("Q4_K stored panels' decoding product (core/quant_gemm.cc)", r"StoredQ4KRow", ["AVX2", "AVX3", "AVX3_DL"], 1),
]

HEADER = re.compile(r"^[0-9a-f]+ <(.*)>:$")
PREFETCH = re.compile(r"\bprefetch(t0|t1|t2|nta|w)\b")


def prefetches_by_function(objdump, libs):
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", "-C", *libs], capture_output=True, text=True,
                         check=True).stdout
    counts, name = {}, None
    for line in out.splitlines():
        m = HEADER.match(line)
        if m:
            name = m.group(1)
            counts.setdefault(name, 0)
        elif name is not None and PREFETCH.search(line):
            counts[name] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objdump", default="objdump")
    ap.add_argument("libs", nargs="+")
    a = ap.parse_args()
    counts = prefetches_by_function(a.objdump, a.libs)
    failures = []
    for what, pattern, targets, floor in SITES:
        for target in targets:
            site = re.compile(r"(^|[ :])N_" + target + r"::(\(anonymous namespace\)::)?" + pattern + r"(\(|$)")
            found = {n: c for n, c in counts.items() if site.search(n) and ".cold" not in n}
            if not found:
                failures.append(f"{what}, {target}: no function matches N_{target}::{pattern}")
                continue
            print(f"{min(found.values()):4d}+ prefetch instructions in each of {len(found)} function(s): {what}, {target}")
            for n, c in sorted(found.items()):
                if c < floor:
                    failures.append(f"{what}, {target}: {c} prefetch instructions, fewer than its floor of {floor}, "
                                    f"in {n}")
    for f in failures:
        print("FAIL " + f)
    print(f"prefetch_sites: {len(failures)} failures over {sum(len(t) for _, _, t, _ in SITES)} site-targets")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
