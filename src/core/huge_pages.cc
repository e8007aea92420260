// qkv/core/huge_pages.h's advice.
#include "qkv/core/huge_pages.h"

#include <cstdint>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace qkv {

bool advise_huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kPage = 4096, kHuge = uintptr_t{2} << 20;
  if (p == nullptr || bytes < kHuge) return false;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + kPage - 1) / kPage * kPage, last = (begin + bytes) / kPage * kPage;
  if (last <= first) return false;
#ifdef __linux__
  // (a refusal, e.g. a kernel without transparent huge pages, leaves 4 KiB pages: nothing to report)
  return madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) == 0;
#else
  return false;
#endif
}

}  // namespace qkv
