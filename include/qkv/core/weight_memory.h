// qkv/core/weight_memory.h - where a loaded model keeps its weights: WeightVector<T>.
//
// A decoding step reads every weight once, each product's matrix as one stream. On 4 KiB pages a
// stream meets a new page every 4 KiB: a TLB miss each (a step's 335 MB of Q4_0 Qwen3-0.6B are
// 82,000 pages; the TLBs hold a few thousand), and the hardware prefetchers stop at every page's
// end. The same products read from 2 MiB pages ran at 87-112% of the bandwidth probe's figure (the
// probe reads 2 MiB pages) against 50-89% from 4 KiB pages, and Qwen3-0.6B's decoding steps took
// 0.76-1.0x as long, the gain largest where the host's bandwidth is high (Zen 5 VM,
// docs/benchmarks.md). Most matrices are smaller than a 2 MiB page (Q4_0 Qwen3-0.6B's are 0.3-1.8
// MB), so each is not given memory of its own: weights of 256 KiB and more are carved one after
// another from chunks of 2 MiB-aligned memory advised MADV_HUGEPAGE (Linux grants 2 MiB pages where
// transparent huge pages are "madvise" or "always"; elsewhere the chunks are plain pages and only
// the packing remains). A freed weight's bytes go to the next weights that fit (first fit; a
// loader's temporaries do not leave holes that cost new pages), and a chunk is unmapped when the
// last weight in it is freed.
//
//   WeightVector<T>: a std::vector whose elements start uninitialised (no zero fill: the loader
//     writes them all), whose storage is 64-byte aligned and, from 256 KiB on, in the chunks, its
//     pages mapped when allocated (MADV_POPULATE_WRITE, core/prefault.h).
//   allocate_weight_bytes / free_weight_bytes: the same storage, untyped.
//   weight_chunk_stats(): the chunks now mapped (for tests and reports).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace qkv {

constexpr size_t kWeightChunkFrom = size_t{256} << 10;  // smaller weights come from the heap

void* allocate_weight_bytes(size_t bytes);              // 64-byte aligned, uninitialised; or bad_alloc
void free_weight_bytes(void* p, size_t bytes) noexcept;  // p from allocate_weight_bytes(bytes)

struct WeightChunkStats {
  size_t chunks = 0;        // chunks mapped
  size_t mapped_bytes = 0;  // their size
  size_t live_bytes = 0;    // allocated in them and not yet freed
};
WeightChunkStats weight_chunk_stats();

template <class T>
struct WeightAllocator {
  using value_type = T;
  WeightAllocator() = default;
  template <class U>
  WeightAllocator(const WeightAllocator<U>&) noexcept {}  // NOLINT: allocator rebinding
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(allocate_weight_bytes(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { free_weight_bytes(p, n * sizeof(T)); }
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialised: a trivial type's bytes left as they are
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(static_cast<Args&&>(args)...);
  }
  template <class U>
  bool operator==(const WeightAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using WeightVector = std::vector<T, WeightAllocator<T>>;

}  // namespace qkv
