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

#include "hwy/highway.h"
#include "qkv/kernels/memory_bandwidth.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The sum of n floats (n a multiple of 8 vectors) with 8 independent accumulators, so that the
// loads, not the adds' latency, bound the loop. p need not be aligned (sum_floats reads a state's
// share from any float; the measurement's buffer is page-aligned, where LoadU costs the same).
float SumFloats(const float* HWY_RESTRICT p, size_t n) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t L = hn::Lanes(d);
  V a[8];
  for (V& x : a) x = hn::Zero(d);
  for (size_t i = 0; i + 8 * L <= n; i += 8 * L) {
    HWY_UNROLL(8) for (size_t k = 0; k < 8; ++k) a[k] = hn::Add(a[k], hn::LoadU(d, p + i + k * L));
  }
  for (size_t k = 1; k < 8; ++k) a[0] = hn::Add(a[0], a[k]);
  return hn::GetLane(hn::SumOfLanes(d, a[0]));
}

// p[i] *= a for n floats (n a multiple of 8 vectors): each vector read and written back in place.
void ScaleFloats(float* HWY_RESTRICT p, size_t n, float a) {
  const hn::ScalableTag<float> d;
  const size_t L = hn::Lanes(d);
  const auto va = hn::Set(d, a);
  for (size_t i = 0; i + 8 * L <= n; i += 8 * L) {
    HWY_UNROLL(8) for (size_t k = 0; k < 8; ++k) hn::StoreU(hn::Mul(hn::LoadU(d, p + i + k * L), va), d, p + i + k * L);
  }
}

}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "qkv/core/error.h"
#include "qkv/core/huge_pages.h"
#include "qkv/core/limits.h"
#include "qkv/core/machine.h"

namespace qkv::kernels {

HWY_EXPORT(SumFloats);

int64_t read_bandwidth_buffer_bytes() {
  return std::clamp<int64_t>(int64_t{8} * cache_sizes().l3, int64_t{256} << 20, int64_t{1} << 30);
}

float sum_floats(const float* p, size_t n) {
  const size_t whole = n / 256 * 256;  // whole iterations of the loop at any vector width up to 32 floats
  float tail = 0;
  for (size_t i = whole; i < n; ++i) tail += p[i];
  return HWY_DYNAMIC_DISPATCH(SumFloats)(p, whole) + tail;
}

HWY_EXPORT(ScaleFloats);

void scale_floats(float* p, size_t n, float a) {
  const size_t whole = n / 256 * 256;
  for (size_t i = whole; i < n; ++i) p[i] *= a;
  HWY_DYNAMIC_DISPATCH(ScaleFloats)(p, whole, a);
}

StreamBuffer::StreamBuffer(ThreadPool& pool) : threads_(pool.num_threads()) {
  const int64_t bytes = read_bandwidth_buffer_bytes();
  check_memory_request(bytes, "the memory bandwidth measurement's buffer");
  // Slices of whole 4 KiB pages (a multiple of any vector width x 8).
  const size_t page_floats = 1024;
  floats_ = static_cast<size_t>(bytes) / sizeof(float) / page_floats * page_floats;
  pages_ = floats_ / page_floats;
  buffer_.reset(static_cast<float*>(std::aligned_alloc(4096, floats_ * sizeof(float))));
  QKV_CHECK(buffer_ != nullptr, "the memory bandwidth measurement: could not allocate ", bytes, " bytes");
  // 2 MiB pages where the kernel grants them: the first touch of 4 KiB pages costs ~15 us each on
  // some VMs (4 s for 1 GiB); the reads' speed is the same or higher (fewer TLB misses).
  advise_huge_pages(buffer_.get(), floats_ * sizeof(float));
  pool.parallel_for(threads_, [&](int64_t t, int) {  // first touch by the thread that reads it
    const auto [begin, n] = slice(t);
    std::fill(buffer_.get() + begin, buffer_.get() + begin + n, 1.0f);
  });
  sinks_.assign(static_cast<size_t>(threads_) * 16, 0.0f);
}

std::pair<size_t, size_t> StreamBuffer::slice(int64_t t) const {
  const size_t page_floats = 1024;
  const size_t first = pages_ * static_cast<size_t>(t) / static_cast<size_t>(threads_);
  const size_t last = pages_ * static_cast<size_t>(t + 1) / static_cast<size_t>(threads_);
  return {first * page_floats, (last - first) * page_floats};
}

double StreamBuffer::read(ThreadPool& pool) {
  QKV_CHECK(pool.num_threads() == threads_, "StreamBuffer::read: made for ", threads_, " threads, read by ",
            pool.num_threads());
  const auto t0 = std::chrono::steady_clock::now();
  pool.parallel_for(threads_, [&](int64_t t, int) {
    const auto [begin, n] = slice(t);
    sinks_[static_cast<size_t>(t) * 16] += HWY_DYNAMIC_DISPATCH(SumFloats)(buffer_.get() + begin, n);
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

MemoryBandwidth measure_read_bandwidth(ThreadPool& pool, int passes) {
  StreamBuffer buffer(pool);
  return measure_read_bandwidth(buffer, pool, passes);
}

MemoryBandwidth measure_read_bandwidth(StreamBuffer& buffer, ThreadPool& pool, int passes) {
  QKV_CHECK(passes >= 1, "measure_read_bandwidth: passes must be at least 1, got ", passes);
  std::vector<double> gb_s;
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 warms up (TLB, frequency)
    const double dt = buffer.read(pool);
    if (pass > 0) gb_s.push_back(static_cast<double>(buffer.bytes()) / dt / 1e9);
  }
  std::sort(gb_s.begin(), gb_s.end());
  MemoryBandwidth r;
  r.gb_s = gb_s[gb_s.size() / 2];
  r.buffer_bytes = buffer.bytes();
  r.passes = passes;
  return r;
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
