// Weights' storage (qkv/core/weight_memory.h): elements left unwritten by construction, weights of
// 256 KiB and more packed into shared chunks that are unmapped with their last weight, freed bytes
// reused, no two live weights overlapping, poisoned for AddressSanitizer where not live, and pages
// mapped when allocated. (On 2 MiB pages: huge_pages_test.cc.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "qkv/core/weight_memory.h"

namespace qkv {
namespace weight_memory_test {
namespace {

constexpr size_t kKiB = size_t{1} << 10, kMiB = size_t{1} << 20;

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(WeightMemory, TheVectorsConstructionLeavesItsElementsUnwritten) {
  // the allocator's construct(p) default-initialises: a trivial type's bytes are not zeroed
  WeightAllocator<uint16_t> a;
  uint16_t* p = a.allocate(64);
  std::memset(p, 0xAB, 64 * sizeof(uint16_t));
  for (size_t i = 0; i < 64; ++i) std::allocator_traits<WeightAllocator<uint16_t>>::construct(a, p + i);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(p[i], 0xABAB) << i;
  std::allocator_traits<WeightAllocator<uint16_t>>::construct(a, p, uint16_t{7});  // a value is written
  EXPECT_EQ(p[0], 7);
  a.deallocate(p, 64);
}

TEST(WeightMemory, SmallWeightsComeFromTheHeapAlignedToALine) {
  const WeightChunkStats before = weight_chunk_stats();
  WeightVector<uint8_t> a(100), b(kWeightChunkFrom - 1);
  EXPECT_TRUE(aligned64(a.data()));
  EXPECT_TRUE(aligned64(b.data()));
  EXPECT_EQ(weight_chunk_stats().live_bytes, before.live_bytes);
}

// Forty weights of 300 KiB (Q4_0 Qwen3-0.6B's k_proj is 288 KiB): 12 MB in at most one new chunk
// (of 128 MiB), not forty; all of it unmapped once they are freed.
TEST(WeightMemory, WeightsArePackedIntoChunksUnmappedWithTheirLastWeight) {
  const WeightChunkStats before = weight_chunk_stats();
  constexpr size_t kBytes = 300 * kKiB;
  {
    std::vector<WeightVector<uint8_t>> weights;
    for (int i = 0; i < 40; ++i) {
      weights.emplace_back(kBytes);
      EXPECT_TRUE(aligned64(weights.back().data())) << i;
    }
    const WeightChunkStats during = weight_chunk_stats();
    EXPECT_EQ(during.live_bytes - before.live_bytes, 40 * kBytes);
    EXPECT_LE(during.chunks, before.chunks + 1);
    EXPECT_LE(during.mapped_bytes - before.mapped_bytes, 128 * kMiB);
  }
  const WeightChunkStats after = weight_chunk_stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.chunks, before.chunks);
  EXPECT_EQ(after.mapped_bytes, before.mapped_bytes);
}

// A freed weight's bytes, joined to the free bytes on both sides, are where the next weight that
// fits goes (the chunk kept mapped by another weight).
TEST(WeightMemory, FreedBytesJoinTheirNeighboursAndAreReused) {
  WeightVector<uint8_t> keep(300 * kKiB);
  std::unique_ptr<WeightVector<uint8_t>> a, b, d;
  for (auto* w : {&a, &b, &d}) *w = std::make_unique<WeightVector<uint8_t>>(kMiB);
  ASSERT_EQ(b->data(), a->data() + kMiB);  // one after another in a fresh chunk's free range
  ASSERT_EQ(d->data(), b->data() + kMiB);
  uint8_t* const where = a->data();
  a.reset();
  d.reset();
  b.reset();  // between two free ranges
  const WeightChunkStats before = weight_chunk_stats();
  WeightVector<uint8_t> c(3 * kMiB);
  EXPECT_EQ(c.data(), where);
  EXPECT_EQ(weight_chunk_stats().mapped_bytes, before.mapped_bytes);
}

// Weights of mixed sizes (some past a chunk), half of them freed and more allocated in between:
// every live weight keeps the bytes written into it.
TEST(WeightMemory, LiveWeightsNeverOverlap) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<size_t> size(kWeightChunkFrom, 3 * kMiB);
  std::vector<std::unique_ptr<WeightVector<uint32_t>>> weights;
  auto add = [&](size_t bytes) {
    weights.push_back(std::make_unique<WeightVector<uint32_t>>(bytes / 4));
    const auto tag = static_cast<uint32_t>(weights.size());
    for (uint32_t& v : *weights.back()) v = tag;
  };
  for (int i = 0; i < 24; ++i) add(size(rng));
  add(160 * kMiB);  // more than a chunk: a chunk of its own
  for (size_t i = 0; i < weights.size(); i += 2) weights[i].reset();
  for (int i = 0; i < 16; ++i) add(size(rng));
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!weights[i]) continue;
    const auto tag = static_cast<uint32_t>(i + 1);
    size_t wrong = 0;
    for (uint32_t v : *weights[i]) wrong += v != tag;
    EXPECT_EQ(wrong, 0u) << "weight " << i << " of " << weights[i]->size() * 4 << " bytes";
  }
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QKV_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define QKV_TEST_ASAN 1
#endif

// A chunk's bytes past a weight, and a freed weight's, are poisoned as the heap's would be: the
// sanitizer build reports reads there (the hostile-input tests rely on it).
TEST(WeightMemoryDeathTest, ReadsPastAWeightOrOfAFreedOneAreReportedUnderAddressSanitizer) {
#ifndef QKV_TEST_ASAN
  GTEST_SKIP() << "a build without AddressSanitizer";
#else
  WeightVector<uint8_t> before(300 * kKiB), w(300 * kKiB + 3), after(300 * kKiB);
  const volatile uint8_t* past = w.data() + w.size();
  EXPECT_DEATH((void)*past, "AddressSanitizer");
  auto freed = std::make_unique<WeightVector<uint8_t>>(400 * kKiB);
  const volatile uint8_t* gone = freed->data() + 1000;
  freed.reset();
  EXPECT_DEATH((void)*gone, "AddressSanitizer");
  EXPECT_EQ(before.size() + after.size(), 600 * kKiB);
#endif
}

TEST(WeightMemory, ALargeWeightsPagesAreMappedAsItIsAllocated) {
#ifndef __linux__
  GTEST_SKIP() << "MADV_POPULATE_WRITE is Linux's";
#else
  {
    void* probe = mmap(nullptr, 4 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    const bool supported = madvise(probe, 4 * kMiB, 23 /* MADV_POPULATE_WRITE */) == 0;
    munmap(probe, 4 * kMiB);
    if (!supported) GTEST_SKIP() << "this kernel refuses MADV_POPULATE_WRITE (Linux 5.14 has it)";
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), bytes = 6 * kMiB;
  WeightVector<uint8_t> v(bytes);  // nothing written
  const auto begin = reinterpret_cast<uintptr_t>(v.data());
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + bytes) / page * page;
  std::vector<unsigned char> in((last - first) / page);
  ASSERT_EQ(mincore(reinterpret_cast<void*>(first), last - first, in.data()), 0);
  size_t resident = 0;
  for (unsigned char c : in) resident += c & 1;
  EXPECT_EQ(resident, in.size());
#endif
}

}  // namespace
}  // namespace weight_memory_test
}  // namespace qkv
