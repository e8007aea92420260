// Buffers written whole at once: their pages mapped in one call (resident before any write).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "qkv/core/prefault.h"

namespace qkv {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(Prefault, NothingIsAskedBelowTwoMebibytesOrForNoBuffer) {
  std::vector<uint8_t> small(kMiB);
  EXPECT_FALSE(prefault_pages(small.data(), small.size()));
  EXPECT_FALSE(prefault_pages(small.data(), 2 * kMiB - 1));
  EXPECT_FALSE(prefault_pages(nullptr, 64 * kMiB));
}

#ifdef __linux__
// How many of the pages of [p, p + bytes) (p page-aligned) are resident.
size_t resident_pages(void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), n = (bytes + page - 1) / page;
  std::vector<unsigned char> in(n);
  if (mincore(p, bytes, in.data()) != 0) return 0;
  size_t count = 0;
  for (unsigned char c : in) count += c & 1;
  return count;
}
#endif

TEST(Prefault, AFreshMappingIsResidentBeforeAnyWrite) {
#ifndef __linux__
  GTEST_SKIP() << "MADV_POPULATE_WRITE is Linux's";
#else
  const size_t bytes = 16 * kMiB, page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::unique_ptr<void, void (*)(void*)> unmap(p, [](void* q) { munmap(q, 16 * kMiB); });
  madvise(p, bytes, MADV_NOHUGEPAGE);  // counted in 4 KiB pages, whatever the huge-page mode
  ASSERT_LT(resident_pages(p, bytes), bytes / page / 2) << "a fresh mapping already resident";
  if (!prefault_pages(p, bytes)) GTEST_SKIP() << "this kernel refuses MADV_POPULATE_WRITE (Linux 5.14 has it)";
  EXPECT_EQ(resident_pages(p, bytes), bytes / page);
  EXPECT_EQ(static_cast<const uint8_t*>(p)[bytes / 2], 0);  // anonymous pages read as zeros
#endif
}

}  // namespace
}  // namespace qkv
