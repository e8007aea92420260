// qkv bench --module ring-attention: ring attention across the MPI ranks (bench_ring.cc, built
// with the MPI layer only).
#pragma once

#include <cstdint>
#include <string>

#include "qkv/kernels/attention_spec.h"

namespace qkv::cli {

struct RingBenchFlags {
  int64_t batch = 1, seq_len = 0;
  // heads, kv_heads, head_dim, causal, dropout and the kernel's variants (window, ALiBi, softcap)
  kernels::AttentionSpec attention = {.heads = 12, .head_dim = 64};
  bool backward = false, json = false;
  int threads = 0, iters = 3, warmup = 1;
  std::string split = "contiguous";
};

// Under mpirun: every rank runs it; rank 0 prints. Returns the exit status.
int run_ring_bench(const RingBenchFlags& flags);

}  // namespace qkv::cli
