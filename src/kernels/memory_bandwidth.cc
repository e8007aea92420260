// The streaming read bandwidth measurement. See include/qkv/kernels/memory_bandwidth.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/memory_bandwidth.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "hwy/highway.h"
#include "qkv/kernels/memory_bandwidth.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The sum of n floats (n a multiple of 8 vectors) with 8 independent accumulators, so that the
// loads, not the adds' latency, bound the loop.
float SumFloats(const float* HWY_RESTRICT p, size_t n) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t L = hn::Lanes(d);
  V a[8];
  for (V& x : a) x = hn::Zero(d);
  for (size_t i = 0; i + 8 * L <= n; i += 8 * L) {
    HWY_UNROLL(8) for (size_t k = 0; k < 8; ++k) a[k] = hn::Add(a[k], hn::Load(d, p + i + k * L));
  }
  for (size_t k = 1; k < 8; ++k) a[0] = hn::Add(a[0], a[k]);
  return hn::GetLane(hn::SumOfLanes(d, a[0]));
}

}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/core/machine.h"

namespace qkv::kernels {

HWY_EXPORT(SumFloats);

int64_t read_bandwidth_buffer_bytes() {
  return std::clamp<int64_t>(int64_t{8} * cache_sizes().l3, int64_t{256} << 20, int64_t{1} << 30);
}

MemoryBandwidth measure_read_bandwidth(ThreadPool& pool, int passes) {
  QKV_CHECK(passes >= 1, "measure_read_bandwidth: passes must be at least 1, got ", passes);
  const int64_t bytes = read_bandwidth_buffer_bytes();
  check_memory_request(bytes, "the memory bandwidth measurement's buffer");
  const int threads = pool.num_threads();
  // Slices of whole 4 KiB pages (a multiple of any vector width x 8).
  const size_t page_floats = 1024, floats = static_cast<size_t>(bytes) / sizeof(float) / page_floats * page_floats;
  const size_t pages = floats / page_floats;
  std::unique_ptr<float, decltype(&std::free)> buffer(
      static_cast<float*>(std::aligned_alloc(4096, floats * sizeof(float))), &std::free);
  QKV_CHECK(buffer != nullptr, "measure_read_bandwidth: could not allocate ", bytes, " bytes");
#ifdef __linux__
  // 2 MiB pages where the kernel grants them: the first touch of 4 KiB pages costs ~15 us each
  // on some VMs (4 s for 1 GiB); the reads' speed is the same or higher (fewer TLB misses).
  madvise(buffer.get(), floats * sizeof(float), MADV_HUGEPAGE);
#endif
  auto slice = [&](int64_t t, size_t& begin, size_t& n) {
    const size_t first = pages * static_cast<size_t>(t) / static_cast<size_t>(threads);
    const size_t last = pages * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    begin = first * page_floats;
    n = (last - first) * page_floats;
  };
  pool.parallel_for(threads, [&](int64_t t, int) {  // first touch by the thread that reads it
    size_t begin, n;
    slice(t, begin, n);
    std::fill(buffer.get() + begin, buffer.get() + begin + n, 1.0f);
  });
  std::vector<float> sinks(static_cast<size_t>(threads) * 16);
  std::vector<double> gb_s;
  using Clock = std::chrono::steady_clock;
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 warms up (TLB, frequency)
    const auto t0 = Clock::now();
    pool.parallel_for(threads, [&](int64_t t, int) {
      size_t begin, n;
      slice(t, begin, n);
      sinks[static_cast<size_t>(t) * 16] += HWY_DYNAMIC_DISPATCH(SumFloats)(buffer.get() + begin, n);
    });
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (pass > 0) gb_s.push_back(static_cast<double>(floats * sizeof(float)) / dt / 1e9);
  }
  std::sort(gb_s.begin(), gb_s.end());
  MemoryBandwidth r;
  r.gb_s = gb_s[gb_s.size() / 2];
  r.buffer_bytes = static_cast<int64_t>(floats * sizeof(float));
  r.passes = passes;
  return r;
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
