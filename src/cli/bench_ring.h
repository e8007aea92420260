// qkv bench --module ring-attention: ring attention across the MPI ranks (bench_ring.cc, built
// with the MPI layer only).
#pragma once

#include <cstdint>
#include <string>

namespace qkv::cli {

struct RingBenchFlags {
  int64_t batch = 1, seq_len = 0, num_heads = 12, num_kv_heads = 0, head_dim = 64;
  bool backward = false, no_mask = false, json = false;
  int threads = 0, iters = 3, warmup = 1;
  double dropout = 0.0;
  int64_t window = 0;   // the kernel's variants: sliding window, ALiBi (the paper's slopes), softcap
  bool alibi = false;
  double softcap = 0.0;
  std::string split = "contiguous";
};

// Under mpirun: every rank runs it; rank 0 prints. Returns the exit status.
int run_ring_bench(const RingBenchFlags& flags);

}  // namespace qkv::cli
