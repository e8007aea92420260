// Weights' storage: chunks of 2 MiB pages shared by the weights in them. See
// include/qkv/core/weight_memory.h.
#include "qkv/core/weight_memory.h"

#include "qkv/core/huge_pages.h"
#include "qkv/core/prefault.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#endif

// Under AddressSanitizer a chunk's bytes are poisoned but for its live weights: reading past a
// weight, or a freed one, is reported as it would be on the heap. (No-ops in other builds.)
#if defined(__has_include)
#if __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#endif
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

namespace qkv {
namespace {

constexpr size_t kAlign = 64;                       // every weight starts on a cache line
constexpr size_t kHugePage = size_t{2} << 20;       // chunks start and end on 2 MiB boundaries
constexpr size_t kChunkBytes = size_t{128} << 20;   // a chunk, unless one weight needs more

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// One chunk: its free ranges (offset -> bytes, none touching another), first fit. A freed weight's
// bytes are free again (its pages stay mapped: a loader's temporaries, such as the Q, K and V
// matrices fused into one, leave room that the next weights fill instead of new pages).
struct Chunk {
  uint8_t* base = nullptr;
  size_t size = 0;
  std::map<size_t, size_t> free;
  size_t live_bytes = 0;
  size_t live_count = 0;
};

struct Chunks {
  std::mutex mutex;
  std::vector<Chunk> list;
};

// Never destroyed: weights held by static objects are freed after every static destructor has run.
Chunks& chunks() {
  static Chunks* all = new Chunks;
  return *all;
}

uint8_t* map_chunk(size_t size) {
#ifdef __linux__
  // size + 2 MiB mapped, the aligned size kept, the slack on both sides unmapped
  void* raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto at = reinterpret_cast<uintptr_t>(raw), aligned = round_up(at, kHugePage);
  if (aligned > at) munmap(raw, aligned - at);
  if (aligned + size < at + size + kHugePage) munmap(reinterpret_cast<void*>(aligned + size), at + kHugePage - aligned);
  auto* base = reinterpret_cast<uint8_t*>(aligned);
  advise_huge_pages(base, size);  // refused where transparent huge pages are off: plain pages
#else
  auto* base = static_cast<uint8_t*>(::operator new(size, std::align_val_t{kHugePage}));
#endif
  ASAN_POISON_MEMORY_REGION(base, size);
  return base;
}

void unmap_chunk(uint8_t* base, size_t size) noexcept {
  ASAN_UNPOISON_MEMORY_REGION(base, size);  // memory mapped here later starts clean
#ifdef __linux__
  munmap(base, size);
#else
  (void)size;
  ::operator delete(base, std::align_val_t{kHugePage});
#endif
}

}  // namespace

void* allocate_weight_bytes(size_t bytes) {
  if (bytes < kWeightChunkFrom) return ::operator new(std::max<size_t>(bytes, 1), std::align_val_t{kAlign});
  const size_t need = round_up(bytes, kAlign);
  uint8_t* p = nullptr;
  {
    Chunks& all = chunks();
    std::lock_guard<std::mutex> lock(all.mutex);
    Chunk* chunk = nullptr;
    std::map<size_t, size_t>::iterator range;
    for (Chunk& c : all.list) {
      range = std::find_if(c.free.begin(), c.free.end(), [&](const auto& r) { return r.second >= need; });
      if (range != c.free.end()) {
        chunk = &c;
        break;
      }
    }
    if (chunk == nullptr) {
      Chunk c;
      c.size = std::max(kChunkBytes, round_up(need, kHugePage));
      c.base = map_chunk(c.size);
      c.free.emplace(0, c.size);
      all.list.push_back(std::move(c));
      chunk = &all.list.back();
      range = chunk->free.begin();
    }
    const auto [at, bytes_free] = *range;
    chunk->free.erase(range);
    if (bytes_free > need) chunk->free.emplace(at + need, bytes_free - need);
    p = chunk->base + at;
    ASAN_UNPOISON_MEMORY_REGION(p, bytes);  // not the rounding to a line after it
    chunk->live_bytes += need;
    chunk->live_count += 1;
  }
  map_pages_for_writing(p, need);  // outside the lock: this weight's pages (and those it shares)
  return p;
}

void free_weight_bytes(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kWeightChunkFrom) return ::operator delete(p, std::align_val_t{kAlign});
  const size_t need = round_up(bytes, kAlign);
  auto* at = static_cast<uint8_t*>(p);
  Chunks& all = chunks();
  std::lock_guard<std::mutex> lock(all.mutex);
  auto c = std::find_if(all.list.begin(), all.list.end(),
                        [&](const Chunk& k) { return k.base <= at && at < k.base + k.size; });
  if (c == all.list.end()) return;  // not ours: cannot happen for a pointer from allocate_weight_bytes
  ASAN_POISON_MEMORY_REGION(at, need);
  c->live_bytes -= need;
  c->live_count -= 1;
  if (c->live_count == 0) {
    unmap_chunk(c->base, c->size);
    all.list.erase(c);
    return;
  }
  // the range back among the free ones, joined to its neighbours
  size_t start = static_cast<size_t>(at - c->base), bytes_free = need;
  auto next = c->free.lower_bound(start);
  if (next != c->free.end() && next->first == start + bytes_free) {
    bytes_free += next->second;
    next = c->free.erase(next);
  }
  if (next != c->free.begin()) {
    const auto before = std::prev(next);
    if (before->first + before->second == start) {
      start = before->first;
      bytes_free += before->second;
      c->free.erase(before);
    }
  }
  c->free.emplace(start, bytes_free);
}

WeightChunkStats weight_chunk_stats() {
  Chunks& all = chunks();
  std::lock_guard<std::mutex> lock(all.mutex);
  WeightChunkStats s;
  for (const Chunk& c : all.list) {
    s.chunks += 1;
    s.mapped_bytes += c.size;
    s.live_bytes += c.live_bytes;
  }
  return s;
}

}  // namespace qkv
