// Large buffers on 2 MiB pages: what is advised and what is not, and, where Linux grants huge
// pages on advice, that an advised buffer is backed by them once touched, and so are weights
// smaller than a page, packed together (qkv/core/weight_memory.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/core/huge_pages.h"
#include "qkv/core/weight_memory.h"

namespace qkv {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HugePages, NothingIsAskedBelowTwoMebibytesOrForNoBuffer) {
  std::vector<uint8_t> small(kMiB);
  EXPECT_FALSE(advise_huge_pages(small.data(), small.size()));
  EXPECT_FALSE(advise_huge_pages(small.data(), 2 * kMiB - 1));
  EXPECT_FALSE(advise_huge_pages(nullptr, 64 * kMiB));
}

// The kilobytes /proc/self/smaps counts as AnonHugePages in the mapping holding p (-1: not found).
long long anon_huge_kb_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stoll(line.substr(14));
  }
  return -1;
}

// The transparent huge pages mode ("always [madvise] never"), or why it does not grant them on
// advice (empty when it does).
std::string refusal(std::string& mode) {
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::getline(mode_file, mode);
  if (mode.find("[madvise]") == std::string::npos && mode.find("[always]") == std::string::npos)
    return "transparent huge pages are off here (" + (mode.empty() ? std::string("no sysfs file") : mode) + ")";
  return "";
}

TEST(HugePages, AnAdvisedBufferIsBackedByThemWhereTheKernelGrantsThemOnAdvice) {
#ifndef __linux__
  GTEST_SKIP() << "transparent huge pages are Linux's";
#else
  std::string mode;
  if (const std::string why = refusal(mode); !why.empty()) GTEST_SKIP() << why;
  const size_t bytes = 16 * kMiB;
  std::unique_ptr<uint8_t, decltype(&std::free)> buffer(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)),
                                                        &std::free);
  ASSERT_NE(buffer, nullptr);
  EXPECT_TRUE(advise_huge_pages(buffer.get(), bytes));
  std::fill(buffer.get(), buffer.get() + bytes, uint8_t{1});  // first touch
  const long long kb = anon_huge_kb_at(buffer.get() + 8 * kMiB);
  ASSERT_GE(kb, 0) << "no mapping in /proc/self/smaps holds the buffer";
  // 16 MiB hold at least seven whole aligned 2 MiB stretches
  EXPECT_GE(kb, 2048) << "the kernel (transparent huge pages: " << mode
                      << ") backed none of an advised 16 MiB buffer with 2 MiB pages";
#endif
}

// Eight weights of 1 MiB (each under a page, as most of Q4_0 Qwen3-0.6B's matrices are), written
// as a loader writes them: their 8 MiB hold at least three whole 2 MiB pages, all granted.
TEST(HugePages, WeightsSmallerThanAPageAreBackedByThemTogether) {
#ifndef __linux__
  GTEST_SKIP() << "transparent huge pages are Linux's";
#else
  std::string mode;
  if (const std::string why = refusal(mode); !why.empty()) GTEST_SKIP() << why;
  std::vector<WeightVector<uint8_t>> weights;
  for (int i = 0; i < 8; ++i) {
    weights.emplace_back(kMiB);
    std::fill(weights.back().begin(), weights.back().end(), uint8_t{1});
  }
  for (int i = 1; i < 8; ++i)  // (one after another: the test's reading of smaps assumes so)
    ASSERT_EQ(weights[static_cast<size_t>(i)].data(), weights[static_cast<size_t>(i - 1)].data() + kMiB) << i;
  const long long kb = anon_huge_kb_at(weights[4].data());
  ASSERT_GE(kb, 0) << "no mapping in /proc/self/smaps holds the weights";
  EXPECT_GE(kb, 3 * 2048) << "the kernel (transparent huge pages: " << mode
                          << ") backed less than three 2 MiB pages of 8 MiB of weights packed together";
#endif
}

}  // namespace
}  // namespace qkv
