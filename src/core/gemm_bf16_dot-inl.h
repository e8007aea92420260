// The bf16 dot-product path of qkv's packed matrix product (AVX512_BF16's vdpbf16ps), included
// by core/gemm_packed.cc inside its per-target namespace, on the AVX-512 target only. Everything
// here is compiled for avx512bf16 and has internal linkage; it runs only after the run-time check
// bf16_dot_allowed() (qkv/core/bf16.h), so no other code can reach an instruction the CPU lacks.
//
// Packed layout: one 32-bit word holds two bf16 values of op(A) or op(B) at K = 2q and 2q + 1
// (low half 2q): word (q, n) of a B~ panel is at q NR + n, word (q, r) of an A~ micro-panel at
// q MR + r. An odd K's last word has a zero high half. vdpbf16ps then adds a(2q) b(2q) +
// a(2q+1) b(2q+1) into each float32 lane of C: one instruction does two steps of K.
//
// Legend as in gemm_packed.cc: MR x NR tiles, KC a block of K, kp = ceil(kc / 2) word rows.
QKV_AVX512BF16_BEGIN

// The bf16 bits of an operand's element (a float rounded to nearest even, or a bf16 as it is).
HWY_INLINE uint32_t Bits(float x) { return float_to_bf16(x); }
HWY_INLINE uint32_t Bits(uint16_t x) { return x; }
template <typename T>
HWY_INLINE uint32_t PairWord(const T* x, size_t k, size_t kc, size_t stride) {  // x[k], x[k + 1] (if < kc)
  const uint32_t lo = Bits(x[k * stride]);
  return k + 1 < kc ? lo | Bits(x[(k + 1) * stride]) << 16 : lo;
}

// 16 words from 32 consecutive elements of a run along K: word i = (x[2i], x[2i + 1]).
HWY_INLINE __m512i WordsAlongRun(const float* x) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x)));
}
HWY_INLINE __m512i WordsAlongRun(const uint16_t* x) { return _mm512_loadu_si512(x); }

// 16 words from two rows at K = 2q and 2q + 1, 16 consecutive columns: word i = (r0[i], r1[i]).
HWY_INLINE __m512i WordsOfRows(const float* r0, const float* r1) {
  const __m512i lo = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(r0))));
  const __m512i hi = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(r1))));
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}
HWY_INLINE __m512i WordsOfRows(const uint16_t* r0, const uint16_t* r1) {
  const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0)));
  const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1)));
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

// Run x[0, kc) along K as words written with stride `stride`: dst[q stride] = word q.
template <typename T>
void ScatterRunWords(const T* HWY_RESTRICT x, size_t kc, uint32_t* HWY_RESTRICT dst, size_t stride) {
  size_t k = 0;
  HWY_ALIGN uint32_t words[16];
  for (; k + 32 <= kc; k += 32) {
    _mm512_store_si512(words, WordsAlongRun(x + k));
    HWY_UNROLL(16) for (size_t i = 0; i < 16; ++i) dst[(k / 2 + i) * stride] = words[i];
  }
  for (; k < kc; k += 2) dst[(k / 2) * stride] = PairWord(x, k, kc, 1);
}

// Panels [j0, j1) of B~ for rows [k0, k0 + kc) of op(B), as words (see the top); zero past N.
template <typename T>
void PackPanelsBDot(const GemmArgs& g, const T* B, size_t k0, size_t kc, size_t j0, size_t j1, uint32_t* HWY_RESTRICT dst) {
  const size_t N = static_cast<size_t>(g.N), ldb = static_cast<size_t>(g.ldb), kp = (kc + 1) / 2;
  for (size_t j = j0; j < j1; ++j) {
    const size_t n0 = j * kNR, cols = std::min(kNR, N - n0);
    uint32_t* panel = dst + j * kp * kNR;
    if (g.trans_b) {  // op(B)(k, n) = B[n ldb + k]: column n is a run along K (nn.Linear's weight)
      for (size_t n = 0; n < kNR; ++n) {
        if (n < cols) ScatterRunWords(B + (n0 + n) * ldb + k0, kc, panel + n, kNR);
        else for (size_t q = 0; q < kp; ++q) panel[q * kNR + n] = 0;
      }
      continue;
    }
    // op(B)(k, n) = B[k ldb + n]: rows 2q and 2q + 1 interleaved, 16 columns at a time
    for (size_t q = 0; q < kp; ++q) {
      const T* r0 = B + (k0 + 2 * q) * ldb + n0;
      const bool pair = 2 * q + 1 < kc;
      uint32_t* out = panel + q * kNR;
      size_t n = 0;
      if (pair)
        for (; n + 16 <= cols; n += 16) _mm512_storeu_si512(out + n, WordsOfRows(r0 + n, r0 + ldb + n));
      for (; n < cols; ++n) out[n] = PairWord(r0 + n, 0, pair ? 2 : 1, ldb);
      for (; n < kNR; ++n) out[n] = 0;
    }
  }
}

// Rows [i0, i0 + rows) and columns [k0, k0 + kc) of op(A) as word micro-panels of MR rows, each
// (kp, MR); zero past the rows.
template <typename T>
void PackBlockADot(const GemmArgs& g, const T* A, size_t i0, size_t rows, size_t k0, size_t kc, uint32_t* HWY_RESTRICT dst) {
  const size_t lda = static_cast<size_t>(g.lda), kp = (kc + 1) / 2;
  const size_t panels = (rows + kMR - 1) / kMR;
  if (g.trans_a) {  // op(A)(m, k) = A[k lda + m]: rows 2q and 2q + 1 of A interleaved, 16 rows of op(A) at a time
    static_assert(16 % kMR == 0, "16 words fill whole micro-panel rows");
    for (size_t q = 0; q < kp; ++q) {
      const T* r0 = A + (k0 + 2 * q) * lda + i0;
      const bool pair = 2 * q + 1 < kc;
      size_t m = 0;
      if (pair) {
        HWY_ALIGN uint32_t words[16];
        for (; m + 16 <= rows; m += 16) {
          _mm512_store_si512(words, WordsOfRows(r0 + m, r0 + lda + m));
          for (size_t h = 0; h < 16; h += kMR)
            std::memcpy(dst + ((m + h) / kMR) * kp * kMR + q * kMR, words + h, kMR * sizeof(uint32_t));
        }
      }
      for (; m < panels * kMR; ++m)
        dst[(m / kMR) * kp * kMR + q * kMR + m % kMR] = m < rows ? PairWord(r0 + m, 0, pair ? 2 : 1, lda) : 0;
    }
    return;
  }
  // op(A)(m, k) = A[m lda + k]: each row a run along K, its words written with stride MR
  for (size_t p = 0; p < panels; ++p) {
    uint32_t* panel = dst + p * kp * kMR;
    for (size_t r = 0; r < kMR; ++r) {
      const size_t m = p * kMR + r;
      if (m < rows) {
        if (m + 2 < rows)
          for (size_t k = 0; k < kc; k += 16) hwy::Prefetch(A + (i0 + m + 2) * lda + k0 + k);
        ScatterRunWords(A + (i0 + m) * lda + k0, kc, panel + r, kMR);
      } else {
        for (size_t q = 0; q < kp; ++q) panel[q * kMR + r] = 0;
      }
    }
  }
}

// C (rows <= MR, cols <= NR) op= A~ B~ over kp word rows: MR broadcasts of a word, NV loads and
// MR NV dot products per two steps of K.
HWY_NOINLINE void MicroKernelDot(const uint32_t* HWY_RESTRICT a, const uint32_t* HWY_RESTRICT b, size_t kp,
                                 float* HWY_RESTRICT c, size_t ldc, size_t rows, size_t cols, const TileWrite& w) {
  PrefetchTile(c, ldc, rows);
  VF acc[kMR][kNV];
  HWY_UNROLL(16) for (size_t m = 0; m < kMR; ++m)
    HWY_UNROLL(4) for (size_t v = 0; v < kNV; ++v) acc[m][v] = hn::Zero(DF());
  for (size_t q = 0; q < kp; ++q) {
    __m512bh bv[kNV];
    HWY_UNROLL(4) for (size_t v = 0; v < kNV; ++v)
      bv[v] = reinterpret_cast<__m512bh>(_mm512_load_si512(b + q * kNR + v * kLanes));
    HWY_UNROLL(16) for (size_t m = 0; m < kMR; ++m) {
      const __m512bh am = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[q * kMR + m])));
      HWY_UNROLL(4) for (size_t v = 0; v < kNV; ++v) acc[m][v] = VF{_mm512_dpbf16_ps(acc[m][v].raw, am, bv[v])};
    }
  }
  StoreTile(acc, c, ldc, rows, cols, w);
}

QKV_AVX512BF16_END
