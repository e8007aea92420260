// core/gemm_packed.h (private) - qkv's own packed matrix product, behind sgemm (qkv/core/gemm.h).
#pragma once

#include <string>

#include "qkv/core/gemm.h"
#include "qkv/core/thread_pool.h"

namespace qkv {

// C (M, N) = alpha op(A) op(B) + beta C for M, N, K > 0 (sgemm checks the arguments and handles
// the empty shapes). pool: split over its threads; nullptr: on the calling thread alone.
void packed_sgemm(const GemmArgs& g, ThreadPool* pool);

// What the dispatched target computes with: tile MR x NR, blocks KC and MC (from the caches),
// vector width and Highway's target name.
struct PackedGemmShape {
  int mr = 0, nr = 0, kc = 0, mc = 0, vector_bits = 0;
  bool bf16_dot = false;  // bf16 precision runs AVX512_BF16's dot product (else float32 on rounded values)
  int dot_kc = 0, dot_mc = 0;  // that dot product's K block (steps of K) and row block, when bf16_dot
  std::string target;
};
PackedGemmShape packed_gemm_shape();

// For the tile benchmark (bench/attention_microbench.cc, BM_GemmTile): the median seconds of
// `passes` runs of the micro-kernel's K loop for a tile of mr rows x nv vectors, each `reps` times
// over `panels` micro-panels of A (kc, mr) against one panel of B (kc, nv vectors) - B in L1, A
// from L2 when kc mr panels floats exceed L1 - on this thread; 2 mr nv kc panels reps lanes
// FLOPs a run. -1 for a tile the target does not build (the packed product's own tile and, on x86,
// 4x3 on AVX2; 6x2, 4x3, 12x2 and 6x4 on AVX-512).
double packed_tile_seconds(int mr, int nv, int64_t kc, int64_t panels, int64_t reps, int passes);

}  // namespace qkv
