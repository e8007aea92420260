// qkv/kernels/memory_bandwidth.h - the machine's measured streaming read bandwidth, the yardstick
// of memory-bound kernels (decoding over a KV cache) as the FMA peak (fma_peak.h) is of
// compute-bound ones.
//
// A buffer well beyond the last-level cache (8 x L3 from qkv/core/machine.h, at least 256 MiB,
// at most 1 GiB: no L3 one thread fills is near 128 MiB, and a VM may report the whole package's
// L3 as one - 508 MiB on an EPYC Zen 5 guest, whose 4 GiB buffer took 13 s to touch) is split into one contiguous slice per pool thread; every thread sums its slice with SIMD
// loads into independent accumulators (the best target this CPU supports), all at the same
// time. A pass is the whole buffer over the wall time; the result is the median of `passes`
// passes, in GB/s (1e9 bytes per second). The buffer is written once first (so its pages exist),
// by the pool's threads, and freed on return.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "qkv/core/thread_pool.h"

namespace qkv::kernels {

struct MemoryBandwidth {
  double gb_s = 0.0;       // median of the passes
  int64_t buffer_bytes = 0;
  int passes = 0;
};

MemoryBandwidth measure_read_bandwidth(ThreadPool& pool, int passes = 7);

// The buffer measure_read_bandwidth reads: 8 x L3 within [256 MiB, 1 GiB].
int64_t read_bandwidth_buffer_bytes();

// That buffer, kept: made (and its pages touched) by the pool's threads, each reading its own slice
// of it. measure_read_bandwidth times reads of one; a benchmark reads one between its timed steps
// to leave nothing of its data in the caches, as a model's weights, streamed between two visits to
// a layer, leave nothing of the layer's state.
class StreamBuffer {
 public:
  explicit StreamBuffer(ThreadPool& pool);  // read_bandwidth_buffer_bytes(), checked against memory
  double read(ThreadPool& pool);             // one read of the whole buffer; its wall time in seconds
  int64_t bytes() const { return static_cast<int64_t>(floats_ * sizeof(float)); }

 private:
  std::pair<size_t, size_t> slice(int64_t thread) const;  // (first float, floats)

  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  int threads_;
  size_t floats_ = 0, pages_ = 0;
  std::unique_ptr<float, Free> buffer_;
  std::vector<float> sinks_;  // one per thread, a cache line apart: the sums, so the reads stay
};

// The sum of p[0, n) by the measurement's loop (SIMD loads into independent accumulators): a plain
// read of n floats, the ceiling a benchmark compares a kernel reading the same bytes with.
float sum_floats(const float* p, size_t n);

// p[i] *= a for i in [0, n) by the same SIMD loop: a plain update in place, each float read and
// written back (a = 1 leaves them as they were): the ceiling of a kernel that reads and rewrites the
// same bytes (a decoding step's linear-attention states).
void scale_floats(float* p, size_t n, float a);

// The same measurement on a buffer the caller keeps (and may read again between timed steps).
MemoryBandwidth measure_read_bandwidth(StreamBuffer& buffer, ThreadPool& pool, int passes = 7);

}  // namespace qkv::kernels
