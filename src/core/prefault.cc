// qkv/core/prefault.h's page mapping.
#include "qkv/core/prefault.h"

#include <cstdint>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace qkv {

bool prefault_pages(void* p, size_t bytes) {
  constexpr uintptr_t kPage = 4096, kFrom = uintptr_t{2} << 20;
  if (p == nullptr || bytes < kFrom) return false;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kPage - 1) / kPage * kPage, last = (begin + bytes) / kPage * kPage;
  if (last <= first) return false;
#if defined(__linux__)
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14's value; older headers lack the name
#endif
  // (a refusal, EINVAL on an older kernel, leaves the pages to fault one by one: nothing to report)
  return madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE) == 0;
#else
  return false;
#endif
}

}  // namespace qkv
