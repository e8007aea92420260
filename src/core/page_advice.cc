// The madvise calls behind qkv/core/huge_pages.h (2 MiB pages on first touch) and
// qkv/core/prefault.h (every page mapped now): the first two ask for the whole 4 KiB pages inside a
// buffer of at least 2 MiB; map_pages_for_writing for every page a range of any size touches.
#include <cstdint>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "qkv/core/huge_pages.h"
#include "qkv/core/prefault.h"

namespace qkv {
namespace {

// madvise(advice) on the whole pages inside [p, p + bytes) when the range spans 2 MiB or more.
// A refusal (a kernel without transparent huge pages, or without MADV_POPULATE_WRITE: EINVAL)
// leaves 4 KiB pages faulted one by one: nothing to report but the false returned.
bool advise_whole_pages([[maybe_unused]] void* p, [[maybe_unused]] size_t bytes, [[maybe_unused]] int advice) {
  constexpr uintptr_t kPage = 4096, kFrom = uintptr_t{2} << 20;
  if (p == nullptr || bytes < kFrom) return false;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kPage - 1) / kPage * kPage, last = (begin + bytes) / kPage * kPage;
  if (last <= first) return false;
#ifdef __linux__
  return madvise(reinterpret_cast<void*>(first), last - first, advice) == 0;
#else
  return false;
#endif
}

#ifdef __linux__
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14's value; older headers lack the name
#endif
constexpr int kHugePage = MADV_HUGEPAGE, kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kHugePage = 0, kPopulateWrite = 0;
#endif

}  // namespace

bool advise_huge_pages(void* p, size_t bytes) { return advise_whole_pages(p, bytes, kHugePage); }

bool prefault_pages(void* p, size_t bytes) { return advise_whole_pages(p, bytes, kPopulateWrite); }

bool map_pages_for_writing([[maybe_unused]] void* p, [[maybe_unused]] size_t bytes) {
  if (p == nullptr || bytes == 0) return false;
#ifdef __linux__
  constexpr uintptr_t kPage = 4096;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = begin / kPage * kPage, last = (begin + bytes + kPage - 1) / kPage * kPage;
  return madvise(reinterpret_cast<void*>(first), last - first, kPopulateWrite) == 0;
#else
  return false;
#endif
}

}  // namespace qkv
