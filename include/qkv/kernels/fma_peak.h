// qkv/kernels/fma_peak.h - the machine's measured float32 FMA ceiling, the yardstick the
// benchmarks report against ("% of peak"), and its bf16 dot-product ceiling.
//
// Each pool thread runs 12 or 16 independent chains of fused multiply-adds on full SIMD vectors of the
// best target this CPU supports (so no chain waits on another and nothing touches memory), at
// the same time; the peak is the total FLOPs (2 per lane per FMA) over the wall time, best of
// `repeats` runs.
#pragma once

#include "qkv/core/thread_pool.h"

namespace qkv::kernels {

double measure_fma_peak_gflops(ThreadPool& pool, double seconds = 0.1, int repeats = 5);

// The bf16 dot-product ceiling the same way: 16 chains of vdpbf16ps (AVX512_BF16: 2 bf16 products
// added into each float32 lane, 64 FLOPs an instruction) per thread. 0 where bf16_dot_allowed() is
// false (no AVX512_BF16, or QKV_BF16_DOT=off).
double measure_bf16_dot_peak_gflops(ThreadPool& pool, double seconds = 0.1, int repeats = 5);

}  // namespace qkv::kernels
