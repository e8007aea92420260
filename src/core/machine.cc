// The machine's caches: sysfs, then cpuid, then defaults; where burst prefetches go. See
// include/qkv/core/machine.h.
#include "qkv/core/machine.h"

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define QKV_HAVE_CPUID 1
#else
#define QKV_HAVE_CPUID 0
#endif

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace qkv {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kDefaultL1d = 32 * kKiB, kDefaultL2 = 1024 * kKiB, kDefaultL3 = 8 * 1024 * kKiB;

// The whole (small) file, or "" if it cannot be read.
std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trimmed(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

void take_level(CacheSizes& c, int level, bool data_or_unified, int64_t bytes) {
  if (bytes <= 0) return;
  if (level == 1 && data_or_unified && c.l1d == 0) c.l1d = bytes;
  if (level == 2 && data_or_unified && c.l2 == 0) c.l2 = bytes;
  if (level == 3 && data_or_unified && c.l3 == 0) c.l3 = bytes;
}

#if QKV_HAVE_CPUID
// The deterministic cache parameters leaf (4 on Intel, 0x8000001D on AMD): one subleaf per cache,
// size = ways x partitions x line size x sets.
void read_deterministic_leaf(unsigned leaf, CacheSizes& c) {
  unsigned max_leaf = __get_cpuid_max(leaf & 0x80000000u, nullptr);
  if (max_leaf < leaf) return;
  for (unsigned sub = 0; sub < 16; ++sub) {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __cpuid_count(leaf, sub, eax, ebx, ecx, edx);
    const unsigned type = eax & 0x1f;  // 0 none (the end), 1 data, 2 instruction, 3 unified
    if (type == 0) break;
    const int level = static_cast<int>((eax >> 5) & 0x7);
    const int64_t bytes = int64_t{((ebx >> 22) & 0x3ff) + 1} * (((ebx >> 12) & 0x3ff) + 1) * ((ebx & 0xfff) + 1) *
                          (int64_t{ecx} + 1);
    take_level(c, level, type == 1 || type == 3, bytes);
  }
}

CacheSizes read_cpuid_cache_sizes() {
  CacheSizes c;
  read_deterministic_leaf(4, c);
  read_deterministic_leaf(0x8000001Du, c);
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (c.l1d == 0 && __get_cpuid(0x80000005u, &eax, &ebx, &ecx, &edx)) c.l1d = int64_t{ecx >> 24} * kKiB;
  if ((c.l2 == 0 || c.l3 == 0) && __get_cpuid(0x80000006u, &eax, &ebx, &ecx, &edx)) {
    if (c.l2 == 0) c.l2 = int64_t{ecx >> 16} * kKiB;                // ECX[31:16]: KiB
    if (c.l3 == 0) c.l3 = int64_t{edx >> 18} * 512 * kKiB;          // EDX[31:18]: 512 KiB units
  }
  return c;
}
#else
CacheSizes read_cpuid_cache_sizes() { return {}; }
#endif

}  // namespace

int64_t parse_cache_size(const std::string& text) {
  const std::string s = trimmed(text);
  size_t digits = 0;
  int64_t value = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) {
    if (value > (std::numeric_limits<int64_t>::max() - 9) / 10) return -1;
    value = value * 10 + (s[digits] - '0');
    ++digits;
  }
  if (digits == 0) return -1;
  const std::string suffix = s.substr(digits);
  int64_t unit = 1;
  if (suffix == "K") {
    unit = kKiB;
  } else if (suffix == "M") {
    unit = kKiB * kKiB;
  } else if (suffix == "G") {
    unit = kKiB * kKiB * kKiB;
  } else if (!suffix.empty()) {
    return -1;
  }
  if (value > std::numeric_limits<int64_t>::max() / unit) return -1;
  return value * unit;
}

CacheSizes read_sysfs_cache_sizes(const std::string& dir) {
  CacheSizes c;
  for (int index = 0; index < 16; ++index) {
    const std::string base = dir + "/index" + std::to_string(index) + "/";
    const std::string level_text = trimmed(read_small_file(base + "level"));
    if (level_text.empty()) continue;  // sysfs numbers them densely, but a gap costs nothing
    const std::string type = trimmed(read_small_file(base + "type"));
    const int64_t level = parse_cache_size(level_text);
    take_level(c, static_cast<int>(level), type == "Data" || type == "Unified",
               parse_cache_size(read_small_file(base + "size")));
  }
  return c;
}

CacheSizes read_cache_sizes(const std::string& sysfs_cache_dir) {
  CacheSizes c = read_sysfs_cache_sizes(sysfs_cache_dir);
  const bool any_sysfs = c.l1d > 0 || c.l2 > 0 || c.l3 > 0;
  std::string fallbacks;
  auto fill = [&](int64_t& size, int64_t from, const char* level, const char* source) {
    if (size > 0 || from <= 0) return;
    size = from;
    fallbacks += std::string(fallbacks.empty() ? "" : ", ") + level + " from " + source;
  };
  if (c.l1d == 0 || c.l2 == 0 || c.l3 == 0) {
    const CacheSizes cpuid = read_cpuid_cache_sizes();
    fill(c.l1d, cpuid.l1d, "L1d", "cpuid");
    fill(c.l2, cpuid.l2, "L2", "cpuid");
    fill(c.l3, cpuid.l3, "L3", "cpuid");
  }
  fill(c.l1d, kDefaultL1d, "L1d", "defaults");
  fill(c.l2, kDefaultL2, "L2", "defaults");
  fill(c.l3, kDefaultL3, "L3", "defaults");
  if (any_sysfs) {
    c.source = fallbacks.empty() ? "sysfs" : "sysfs; " + fallbacks;
  } else {
    c.source = fallbacks;  // e.g. "L1d from cpuid, L2 from cpuid, L3 from cpuid"
  }
  return c;
}

const CacheSizes& cache_sizes() {
  static const CacheSizes sizes = read_cache_sizes("/sys/devices/system/cpu/cpu0/cache");
  return sizes;
}

BurstPrefetch burst_prefetch_rule(bool amd, unsigned family, bool avx512f) {
  if (!amd) return BurstPrefetch::kL1AndL2;
  return family == 25 && avx512f ? BurstPrefetch::kL2 : BurstPrefetch::kL1Streamed;
}

const char* burst_prefetch_name(BurstPrefetch b) {
  switch (b) {
    case BurstPrefetch::kL1: return "L1";
    case BurstPrefetch::kL1Streamed: return "L1-NTA";
    case BurstPrefetch::kL2: return "L2";
    case BurstPrefetch::kL1AndL2: return "L1+L2";
  }
  return "?";
}

int64_t decode_serial_bytes_rule(bool intel) { return intel ? int64_t{32} << 10 : int64_t{256} << 10; }

namespace {

// The vendor and family cpuid reports (x86 false elsewhere, or where cpuid fails).
struct CpuKind {
  bool x86 = false, amd = false;
  unsigned family = 0;
};
CpuKind this_cpu_kind() {
  CpuKind k;
#if QKV_HAVE_CPUID
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return k;
  const bool amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;  // "AuthenticAMD"
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return k;
  k.x86 = true;
  k.amd = amd;
  k.family = (eax >> 8) & 0xF;
  if (k.family == 0xF) k.family += (eax >> 20) & 0xFF;  // the extended family
#endif
  return k;
}

BurstPrefetch this_cpu_burst_prefetch() {
#if QKV_HAVE_CPUID
  const CpuKind k = this_cpu_kind();
  if (!k.x86) return BurstPrefetch::kL1;
  // libgcc's check includes the OS's XSAVE support of the AVX-512 state
  return burst_prefetch_rule(k.amd, k.family, __builtin_cpu_supports("avx512f"));
#else
  return BurstPrefetch::kL1;
#endif
}

std::atomic<BurstPrefetch>& burst_prefetch_choice() {
  static std::atomic<BurstPrefetch> choice{[] {
    const char* v = std::getenv("QKV_PREFETCH");
    if (v == nullptr) return this_cpu_burst_prefetch();
    if (std::strcmp(v, "l1") == 0) return BurstPrefetch::kL1;
    if (std::strcmp(v, "l1-nta") == 0) return BurstPrefetch::kL1Streamed;
    if (std::strcmp(v, "l2") == 0) return BurstPrefetch::kL2;
    if (std::strcmp(v, "l1+l2") == 0) return BurstPrefetch::kL1AndL2;
    fail("QKV_PREFETCH: ", excerpt(v), " is not l1, l1-nta, l2 or l1+l2");
  }()};
  return choice;
}

}  // namespace

int64_t decode_serial_bytes() {
  static const int64_t bytes = [] {
    const CpuKind k = this_cpu_kind();
    return decode_serial_bytes_rule(k.x86 && !k.amd);
  }();
  return bytes;
}

BurstPrefetch burst_prefetch() { return burst_prefetch_choice().load(std::memory_order_relaxed); }

BurstPrefetch set_burst_prefetch(BurstPrefetch b) { return burst_prefetch_choice().exchange(b); }

}  // namespace qkv
