// SHA-256 blocks with the x86 SHA extensions (SHA-NI): sha256rnds2 does two rounds, sha256msg1/2
// extend the message schedule four words at a time. The state lives as ABEF and CDGH.
#include "sha256_blocks.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

namespace qkv::sha256_detail {
namespace {

__attribute__((target("sha,sse4.1,ssse3"))) void blocks_sha(uint32_t state[8], const uint8_t* p, size_t n_blocks) {
  const __m128i byteswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  // (a b c d), (e f g h) -> ABEF = (f e b a), CDGH = (h g d c) as the instructions want them
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
  const __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  const __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);

  for (; n_blocks > 0; --n_blocks, p += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];  // the schedule, four words per slot, slot g % 4 for group g
    for (int g = 0; g < 16; ++g) {
      __m128i& wg = w[g & 3];
      if (g < 4) {
        wg = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * g)), byteswap);
      } else {
        // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16] for the four t of group g
        const __m128i w4 = w[g & 3], w3 = w[(g + 1) & 3], w2 = w[(g + 2) & 3], w1 = w[(g + 3) & 3];
        __m128i t = _mm_sha256msg1_epu32(w4, w3);
        t = _mm_add_epi32(t, _mm_alignr_epi8(w1, w2, 4));
        wg = _mm_sha256msg2_epu32(t, w1);
      }
      __m128i msg = _mm_add_epi32(wg, _mm_load_si128(reinterpret_cast<const __m128i*>(kRound + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, msg);
      msg = _mm_shuffle_epi32(msg, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, msg);
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }

  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  dcba = _mm_blend_epi16(feba, dchg, 0xF0);
  hgfe = _mm_alignr_epi8(dchg, feba, 8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), dcba);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), hgfe);
}

bool cpu_has_sha() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ssse3 && sse41 && (b & (1u << 29));
}

}  // namespace

BlocksFn blocks_x86_sha() { return cpu_has_sha() ? blocks_sha : nullptr; }

}  // namespace qkv::sha256_detail

#else

namespace qkv::sha256_detail {
BlocksFn blocks_x86_sha() { return nullptr; }
}  // namespace qkv::sha256_detail

#endif
