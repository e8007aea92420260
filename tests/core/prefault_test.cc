// Buffers written whole at once: their pages mapped in one call (resident before any write), and a
// PrefaultedVector's elements left unwritten by its construction.
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

TEST(Prefault, TheVectorsConstructionLeavesItsElementsUnwritten) {
  // the allocator's construct(p) default-initialises: a trivial type's bytes are not zeroed
  PrefaultedAllocator<uint16_t> a;
  uint16_t* p = a.allocate(64);
  std::memset(p, 0xAB, 64 * sizeof(uint16_t));
  for (size_t i = 0; i < 64; ++i) std::allocator_traits<PrefaultedAllocator<uint16_t>>::construct(a, p + i);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(p[i], 0xABAB) << i;
  std::allocator_traits<PrefaultedAllocator<uint16_t>>::construct(a, p, uint16_t{7});  // a value is written
  EXPECT_EQ(p[0], 7);
  a.deallocate(p, 64);
}

TEST(Prefault, TheAllocatorMapsALargeBuffersPagesAsItAllocatesIt) {
#ifndef __linux__
  GTEST_SKIP() << "MADV_POPULATE_WRITE is Linux's";
#else
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), n = 16 * kMiB / sizeof(uint16_t);
  {
    void* probe = mmap(nullptr, 4 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    const bool supported = prefault_pages(probe, 4 * kMiB);
    munmap(probe, 4 * kMiB);
    if (!supported) GTEST_SKIP() << "this kernel refuses MADV_POPULATE_WRITE (Linux 5.14 has it)";
  }
  PrefaultedAllocator<uint16_t> a;
  uint16_t* p = a.allocate(n);
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + n * sizeof(uint16_t)) / page * page;
  EXPECT_EQ(resident_pages(reinterpret_cast<void*>(first), last - first), (last - first) / page);
  a.deallocate(p, n);
  PrefaultedVector<uint16_t> v(n);  // (a vector of it: constructed, resized, read back as written)
  std::fill(v.begin(), v.end(), uint16_t{3});
  v.resize(n + 1, uint16_t{5});
  EXPECT_EQ(v[n - 1], 3);
  EXPECT_EQ(v[n], 5);
#endif
}

}  // namespace
}  // namespace qkv
