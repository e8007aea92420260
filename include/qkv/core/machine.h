// qkv/core/machine.h - the machine's caches, read once, so the kernels size their blocks from
// what this CPU has rather than from one assumed CPU; and which cache level the kernels' bursts of
// prefetches fill on it.
//
//   const CacheSizes& c = cache_sizes();   // e.g. l1d 32 KiB, l2 1 MiB, l3 32 MiB, "sysfs"
//
// Sizes are in bytes, of the cache instance that CPU 0 uses, as the OS reports it: L1d and L2 are
// per core on today's x86; L3 is the whole cache that CPU 0 shares with its neighbours (one CCX on
// AMD, the socket on Intel). Each level comes from the first source that has it:
//   1. sysfs: /sys/devices/system/cpu/cpu0/cache/index*/{level,type,size} (Linux);
//   2. cpuid: the deterministic cache leaves (4 on Intel, 0x8000001D on AMD), else AMD's
//      0x80000005 / 0x80000006 (x86 only);
//   3. defaults: 32 KiB, 1 MiB, 8 MiB.
// `source` says which were used, e.g. "sysfs" or "sysfs; L3 from cpuid".
#pragma once

#include <cstdint>
#include <string>

namespace qkv {

struct CacheSizes {
  int64_t l1d = 0;  // bytes, L1 data
  int64_t l2 = 0;   // bytes
  int64_t l3 = 0;   // bytes; 0 only if the machine has none and no source claimed one
  std::string source;
};

// Where the kernels that ask for a block's many lines at once, ahead of their loads (the quantized
// products' stored panels, decoding attention, the delta rule's decoding step), have them put, and
// with which hint. Which is fastest depends on the CPU, measured with whole decoding steps
// (docs/benchmarks.md, "Prefetching in bursts"):
//   kL1          into L1 (x86: prefetcht0);
//   kL1Streamed  into L1, and a model's weights (read once a step: the AVX-512 Q8_0 / Q4_0 stored
//                panels) with the non-temporal hint (prefetchnta), so that they displace less of
//                what the step reads again; the rest prefetcht0;
//   kL2          into L2 (prefetcht1);
//   kL1AndL2     into L1 as kL1, and the kernels that stream a model's weights (the stored panels,
//                the float and bf16 matrix-vector products) also ask for the lines
//                kFarPrefetchBytes further on into L2: a second, deeper stream of requests that
//                keeps the memory busy while the near one waits on it.
// On Zen 4 into L1 held those kernels to about half the read bandwidth and into L2 a Q4_0 step took
// 0.91x as long; on Zen 5 into L2 the same step took 1.19x as long, and the non-temporal hint 0.93x;
// on an Intel Xeon (family 6 model 207) the hint made Q8_0 steps 2.3x and Q4_0 steps 1.4x as long,
// and the deeper stream into L2 made Q4_0 steps 0.85x and bf16 steps 0.84x as long.
//   burst_prefetch_rule(amd, family, avx512f): the rule: kL2 on Zen 4 (AMD's family 25 with
//     AVX-512; its Zen 3 members lack it), kL1Streamed on AMD's other CPUs (Zen 5 measured; Zen 3's
//     AVX2 kernels never use the hint), kL1AndL2 elsewhere on x86 (Intel's measured);
//   burst_prefetch(): this process's choice, read once: $QKV_PREFETCH (l1, l1-nta, l2 or l1+l2;
//     anything else is a qkv::Error naming it), else the rule for this CPU (kL1 off x86);
//   set_burst_prefetch(b): overrides it (tests, benchmarks); returns the previous choice;
//   burst_prefetch_name(b): "L1", "L1-NTA", "L2" or "L1+L2" ($QKV_PREFETCH's value in capitals), as
//     reports name it;
//   prefetch_bursts_to_l2(): whether the choice is kL2;
//   far_prefetch_bytes(): how far ahead of its loads a kernel streaming weights asks into L2 as well
//     (kFarPrefetchBytes under kL1AndL2, else 0: it does not).
// A kernel reads the choice once a call and passes it down to prefetch_line.
enum class BurstPrefetch : uint8_t { kL1, kL1Streamed, kL2, kL1AndL2 };
BurstPrefetch burst_prefetch_rule(bool amd, unsigned family, bool avx512f);
BurstPrefetch burst_prefetch();
BurstPrefetch set_burst_prefetch(BurstPrefetch b);
const char* burst_prefetch_name(BurstPrefetch b);
// 16 KiB: on the Xeon model 207, 8, 16, 32 and 64 KiB gave Q4_0 decoding steps within 1% of each
// other; bf16's 16 KiB (docs/benchmarks.md, "A second stream into L2 on Intel").
constexpr int64_t kFarPrefetchBytes = 16384;
inline int64_t far_prefetch_bytes() { return burst_prefetch() == BurstPrefetch::kL1AndL2 ? kFarPrefetchBytes : 0; }
inline bool prefetch_bursts_to_l2() { return burst_prefetch() == BurstPrefetch::kL2; }

// Below how many bytes of keys and values a decoding attention call runs its tasks on the calling
// thread alone (kernels/decode.cc; the same tasks either way, so the same bits):
//   decode_serial_bytes_rule(intel): 32 KiB on Intel (non-AMD x86), where in a model's steps the
//     cache comes from memory and two threads' misses overlap (Xeon model 207, Qwen3-0.6B Q4_0,
//     5-54 cached positions: 0.964x and 0.984x the step's time against 256 KiB, AVX2 0.981x);
//     else 256 KiB, Zen 5's crossing (a hot cache: 0.1 MiB alone 6 us, with both threads 8);
//   decode_serial_bytes(): this CPU's.
int64_t decode_serial_bytes_rule(bool intel);
int64_t decode_serial_bytes();

// Asks for the cache line holding p into L2 or L1 (elsewhere than x86, the compiler's hint for it).
// (always inlined: GCC takes a function whose only statement is a prefetch for one without effects,
// and drops calls to it that it has not inlined)
__attribute__((always_inline)) inline void prefetch_line(const void* p, bool to_l2) {
  if (to_l2) {
    __builtin_prefetch(p, 0, 2);
  } else {
    __builtin_prefetch(p, 0, 3);
  }
}
// A weight-streaming kernel's requests for `bytes` bytes of its loads at p: those `near` bytes on
// into L1 and, where far > 0 (far_prefetch_bytes()), those `far` bytes on into L2 as well. A step
// shorter than a line asks only where it is the first step into its line, so each line is asked
// for once (AVX2's bf16 rows step half a line: asked for twice, a Zen 3's BF16 decoding steps took
// about 1.09x as long; core/gemv.cc).
__attribute__((always_inline)) inline void prefetch_ahead(const void* p, int64_t bytes, int64_t near, int64_t far) {
  const char* c = static_cast<const char*>(p);
  if (bytes < 64 && (reinterpret_cast<uintptr_t>(c) & 63) >= static_cast<uintptr_t>(bytes)) return;
  for (int64_t line = 0; line < bytes; line += 64) {
    prefetch_line(c + near + line, false);
    if (far > 0) prefetch_line(c + far + line, true);
  }
}
// As prefetch_line into L1 with the non-temporal hint (prefetchnta), for data read once a pass (a
// model's weights, streamed every decoding step), where burst_prefetch() is kL1Streamed: the lines
// on their way out displace less of what the step reads again (its KV cache, activations) from the
// outer caches.
__attribute__((always_inline)) inline void prefetch_streamed_line(const void* p) { __builtin_prefetch(p, 0, 0); }

// This machine's caches, read on the first call (thread-safe), then kept.
const CacheSizes& cache_sizes();

// What cache_sizes() does, from a given sysfs cache directory (the tests point it at a fake one):
// sysfs first, then cpuid, then the defaults, level by level.
CacheSizes read_cache_sizes(const std::string& sysfs_cache_dir);

// The sysfs part alone: levels it cannot read (no file, an unparsable size) stay 0.
CacheSizes read_sysfs_cache_sizes(const std::string& sysfs_cache_dir);

// A sysfs size: "32K", "1024K", "2M", "1G" or plain bytes "512", with optional trailing
// whitespace; -1 when it is none of these (empty, no digits, an unknown suffix, overflow).
int64_t parse_cache_size(const std::string& text);

}  // namespace qkv
