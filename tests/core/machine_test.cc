// The machine's caches: the sysfs reader on a fake cache directory (sizes in every unit sysfs
// uses, instruction caches skipped, malformed files falling back), and this machine's answer.
#include <gtest/gtest.h>

#include <cstdlib>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "qkv/core/machine.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

// A fake /sys/devices/system/cpu/cpu0/cache, removed at the end.
class FakeCacheDir {
 public:
  FakeCacheDir() : dir_(fs::temp_directory_path() / ("qkv_machine_test_" + std::to_string(getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~FakeCacheDir() { fs::remove_all(dir_); }
  // index<i>/{level,type,size}, as sysfs writes them (with a newline)
  void add(int index, const std::string& level, const std::string& type, const std::string& size) {
    const fs::path d = dir_ / ("index" + std::to_string(index));
    fs::create_directories(d);
    std::ofstream(d / "level") << level << "\n";
    std::ofstream(d / "type") << type << "\n";
    std::ofstream(d / "size") << size << "\n";
  }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

TEST(Machine, ParsesSysfsSizes) {
  EXPECT_EQ(parse_cache_size("32K"), 32 * 1024);
  EXPECT_EQ(parse_cache_size("1024K\n"), 1024 * 1024);
  EXPECT_EQ(parse_cache_size("32768K"), int64_t{32} * 1024 * 1024);
  EXPECT_EQ(parse_cache_size("2M"), 2 * 1024 * 1024);
  EXPECT_EQ(parse_cache_size("1G"), int64_t{1} << 30);
  EXPECT_EQ(parse_cache_size("512"), 512);
  for (const char* bad : {"", "\n", "K", "12Q", "-4K", "4 K", "0x10K", "1.5M", "99999999999999999999K"})
    EXPECT_EQ(parse_cache_size(bad), -1) << "'" << bad << "'";
}

TEST(Machine, ReadsTheLevelsFromAFakeSysfsDirectory) {
  FakeCacheDir fake;
  fake.add(0, "1", "Data", "48K");
  fake.add(1, "1", "Instruction", "32K");  // not a data cache: ignored
  fake.add(2, "2", "Unified", "2M");
  fake.add(3, "3", "Unified", "32768K");
  const CacheSizes c = read_cache_sizes(fake.path());
  EXPECT_EQ(c.l1d, 48 * 1024);
  EXPECT_EQ(c.l2, 2 * 1024 * 1024);
  EXPECT_EQ(c.l3, int64_t{32} * 1024 * 1024);
  EXPECT_EQ(c.source, "sysfs");
}

TEST(Machine, MalformedOrMissingLevelsFallBack) {
  FakeCacheDir fake;
  fake.add(0, "1", "Data", "48K");
  fake.add(2, "2", "Unified", "lots");  // malformed: L2 comes from cpuid or the defaults
  // no L3 at all
  const CacheSizes sysfs = read_sysfs_cache_sizes(fake.path());
  EXPECT_EQ(sysfs.l1d, 48 * 1024);
  EXPECT_EQ(sysfs.l2, 0);
  EXPECT_EQ(sysfs.l3, 0);
  const CacheSizes c = read_cache_sizes(fake.path());
  EXPECT_EQ(c.l1d, 48 * 1024);
  EXPECT_GT(c.l2, 0);
  EXPECT_GT(c.l3, 0);
  EXPECT_EQ(c.source.rfind("sysfs; ", 0), 0u) << c.source;
  EXPECT_NE(c.source.find("L2 from "), std::string::npos) << c.source;
  EXPECT_NE(c.source.find("L3 from "), std::string::npos) << c.source;
  EXPECT_EQ(c.source.find("L1d from "), std::string::npos) << c.source;
}

TEST(Machine, NoSysfsAtAllStillGivesEveryLevel) {
  const CacheSizes c = read_cache_sizes("/nonexistent/qkv/cache");
  EXPECT_GT(c.l1d, 0);
  EXPECT_GT(c.l2, 0);
  EXPECT_GT(c.l3, 0);
  EXPECT_EQ(c.source.find("sysfs"), std::string::npos) << c.source;
  EXPECT_NE(c.source.find("L2 from "), std::string::npos) << c.source;
}

TEST(Machine, ThisMachinesCachesArePlausible) {
  const CacheSizes& c = cache_sizes();
  EXPECT_EQ(&c, &cache_sizes()) << "read once";
  EXPECT_GE(c.l1d, 4 * 1024);
  EXPECT_GE(c.l2, c.l1d);
  EXPECT_GE(c.l3, 0);
  EXPECT_FALSE(c.source.empty());
}

// Where lines asked for in bursts go: into L2 on Zen 4 only (AMD, family 25, with AVX-512), where
// it was measured faster; into L1 elsewhere, a model's weights with the non-temporal hint on AMD's
// other CPUs (faster on Zen 5), without it on Intel's (the hint made a Xeon's Q8_0 decoding steps
// 2.3x as long), where a second stream into L2 runs further ahead of the weights' loads (a Xeon's
// Q4_0 decoding steps 0.84x as long). The second stream is kL1AndL2's only.
TEST(Machine, BurstPrefetchesFollowTheCpu) {
  EXPECT_EQ(burst_prefetch_rule(true, 25, true), BurstPrefetch::kL2);           // Zen 4
  EXPECT_EQ(burst_prefetch_rule(true, 25, false), BurstPrefetch::kL1Streamed);  // Zen 3 (no AVX-512)
  EXPECT_EQ(burst_prefetch_rule(true, 26, true), BurstPrefetch::kL1Streamed);   // Zen 5
  EXPECT_EQ(burst_prefetch_rule(true, 23, false), BurstPrefetch::kL1Streamed);  // Zen 2
  EXPECT_EQ(burst_prefetch_rule(false, 6, true), BurstPrefetch::kL1AndL2);      // Intel's Xeons
  EXPECT_EQ(burst_prefetch_rule(false, 6, false), BurstPrefetch::kL1AndL2);     // Intel without AVX-512
  EXPECT_STREQ(burst_prefetch_name(BurstPrefetch::kL1), "L1");
  EXPECT_STREQ(burst_prefetch_name(BurstPrefetch::kL1Streamed), "L1-NTA");
  EXPECT_STREQ(burst_prefetch_name(BurstPrefetch::kL2), "L2");
  EXPECT_STREQ(burst_prefetch_name(BurstPrefetch::kL1AndL2), "L1+L2");
}

// A decoding attention call runs alone on the calling thread below 32 KiB on Intel, 256 KiB
// elsewhere; this CPU's is one of the two, by its vendor.
TEST(Machine, TheDecodingAttentionsSerialBytesFollowTheCpu) {
  EXPECT_EQ(decode_serial_bytes_rule(true), 32 * 1024);
  EXPECT_EQ(decode_serial_bytes_rule(false), 256 * 1024);
  // without $QKV_PREFETCH the burst choice is the rule's, kL1AndL2 on Intel only
  if (std::getenv("QKV_PREFETCH") == nullptr) {
    EXPECT_EQ(decode_serial_bytes(), decode_serial_bytes_rule(burst_prefetch() == BurstPrefetch::kL1AndL2));
  }
}

TEST(Machine, TheBurstPrefetchChoiceCanBeSetAndRestored) {
  const BurstPrefetch was = burst_prefetch();
  for (const BurstPrefetch b :
       {BurstPrefetch::kL1, BurstPrefetch::kL1Streamed, BurstPrefetch::kL2, BurstPrefetch::kL1AndL2}) {
    const BurstPrefetch before = burst_prefetch();
    EXPECT_EQ(set_burst_prefetch(b), before);
    EXPECT_EQ(burst_prefetch(), b);
    EXPECT_EQ(prefetch_bursts_to_l2(), b == BurstPrefetch::kL2);
    EXPECT_EQ(far_prefetch_bytes(), b == BurstPrefetch::kL1AndL2 ? kFarPrefetchBytes : 0);
  }
  set_burst_prefetch(was);
  EXPECT_EQ(burst_prefetch(), was);
}

}  // namespace
}  // namespace qkv
