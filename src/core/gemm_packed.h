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
  std::string target;
};
PackedGemmShape packed_gemm_shape();

}  // namespace qkv
