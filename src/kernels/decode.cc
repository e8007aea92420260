// Flash-decoding over a KV cache, compiled once per SIMD target by Highway and dispatched at run
// time. See include/qkv/kernels/decode.h for the math and the scheme.
//
// Per task = (b, g, chunk of keys [j0, j1)), R = (H / G) * Tq rows (the group's query heads x the
// new queries, row r = hh * Tq + i), for each block of kBlock keys:
//   s[r, j]  = scale q_r . k_j                      (R, kBlock)  keys read once for all R rows
//   s        = variants(s) * log2(e)                softcap, masks, ALiBi, -inf where hidden
//   m_new    = max(m, max_j s[r, j]);  p = 2^(s - m_new);  l = l 2^(m - m_new) + sum_j p
//   o_r      = o_r 2^(m - m_new) + sum_j p[r, j] z[r, j] v_j      values read once for all R rows
// and writes (m, l, o) per row; the merge per (b, g) sums the chunks in order:
//   M = max_c m_c,  L = sum_c l_c 2^(m_c - M),  o = sum_c o_c 2^(m_c - M) / (1 - p) / L,
//   lse = (M + log2 L) ln 2.
// With many rows per key (kProductRows: latent attention's heads over one latent) and float keys
// (see ChunkTask for which), a block is kWide keys and its scores and weighted sum are two
// small products (kernels/small_gemm.h), each key and value read once for all rows by the tiles;
// where every row sees the whole block, the softmax runs on the scores key-major, a lane a row
// (KeyMajorSoftmax). Otherwise a full block that every row sees whole, without variants, takes the
// rows in fours (AVX-512) or pairs (RowsStep): each key and value widened once for them together,
// each row's arithmetic the same as alone, and the loop over such blocks pipelined (a block's
// softmax step, then the next block's scores, then its weighted sum).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hwy/base.h"
#include "hwy/highway.h"
#include "kernels/flush_subnormals.h"
#include "hwy/contrib/math/math-inl.h"  // Tanh
#include "kernels/attention_tiles-inl.h"  // Exp2
#include "qkv/core/error.h"
#include "qkv/core/machine.h"
#include "qkv/kernels/decode.h"
#include "qkv/kernels/philox.h"
#include "qkv/kernels/small_gemm.h"

#ifndef QKV_KERNELS_DECODE_PROBLEM_ONCE
#define QKV_KERNELS_DECODE_PROBLEM_ONCE
namespace qkv::kernels {
namespace {

constexpr int64_t kBlock = 16;  // keys per block: one AVX-512 vector of scores per row
// From this many rows per key on (a group's heads times the new queries), a wide block of kWide
// keys is two small products (see ChunkTask).
constexpr size_t kProductRows = 12;
constexpr int64_t kWide = 4 * kBlock;

size_t pad16(int64_t n) { return static_cast<size_t>((n + 15) / 16 * 16); }

// One validated decode_attention call.
struct DecodeProblem {
  ConstHeads q;                   // (B, H, Tq, D)
  MutableHeads o;                 // (B, H, Tq, Dv)
  float* lse = nullptr;           // (B, H, Tq)
  const void* keys = nullptr;     // (B, G, C, D) float or bf16 bits
  const void* values = nullptr;   // (B, G, C, Dv)
  bool bf16 = false;
  int64_t B = 0, H = 0, G = 0, Tq = 0, D = 0, Dv = 0, C = 0, S = 0;
  int64_t group = 0, rows = 0;    // H / G, group * Tq
  int64_t begin = 0, end = 0;     // keys [begin, end) are visible to some query
  int64_t chunk = 0, chunks = 0;  // keys per chunk, chunks per (b, g)
  float scale = 1.0f;
  AttentionMask mask;
  int64_t query_offset = 0, window = 0;
  const float* alibi = nullptr;
  float softcap = 0.0f;
  bool dropout = false;
  uint64_t seed = 0;
  uint32_t threshold = 0;
  float keep_scale = 1.0f;
  ThreadPool* pool = nullptr;
  float* partials = nullptr;      // (B, G, chunks, rows, part_stride)
  size_t part_stride = 0;         // 2 + pad16(Dv)
  float* scratch = nullptr;       // (threads, scratch_stride) per-worker scratch
  size_t scratch_stride = 0;      // pad16(scratch_floats())
  // (threads, 2): the call and the group (b G + g + 1) whose queries a worker's scratch holds (its
  // next chunk of the same group reuses them); `call` numbers the calls of this process.
  uint64_t* held = nullptr;
  uint64_t call = 0;
  bool serial = false;            // too little to read to pay for waking the pool (decode_serial_bytes())
  // With one chunk per (b, g), the task that computes it merges it (MergeChunks) at once: one
  // parallel_for a call instead of two, the same arithmetic.
  void (*merge)(const DecodeProblem&, int64_t b, int64_t g) = nullptr;

  bool causal() const { return mask.kind == AttentionMask::Kind::kCausal; }
  int64_t pos(int64_t i) const { return query_offset + i; }
  int64_t visible_end(int64_t i) const { return causal() ? std::min(pos(i) + 1, S) : S; }
  int64_t visible_begin(int64_t i) const {
    if (window <= 0) return 0;
    return std::clamp<int64_t>(pos(i) - window + 1, 0, S);
  }
  float* part(int64_t bg, int64_t c, int64_t r) const {
    return partials + (static_cast<size_t>((bg * chunks + c) * rows + r)) * part_stride;
  }
  // Per-task scratch, in floats: q rows, o rows, m, l, scores (a wide block's), a block of keys and
  // of values, and for the products' path q^T and a wide block's scores transposed.
  size_t scratch_floats() const {
    const size_t R = static_cast<size_t>(rows);
    return R * pad16(D) + R * pad16(Dv) + 2 * pad16(rows) + R * kWide + kBlock * pad16(D) + kBlock * pad16(Dv) +
           pad16(rows) + pad16(D) * pad16(rows) + kWide * pad16(rows);
  }
};

// Below decode_serial_bytes() (core/machine.h) of keys and values a call runs its tasks on the
// calling thread: handing them to the pool costs more than the second thread saves. The tasks and
// the chunks are the same either way, so the result is too, bit for bit.

// p.pool->parallel_for(n, f), or the same tasks in order on this thread (as worker 0) when p.serial.
template <typename F>
void ForTasks(const DecodeProblem& p, int64_t n, F&& f) {
  if (!p.serial) return p.pool->parallel_for(n, f);
  for (int64_t t = 0; t < n; ++t) f(t, 0);
}

}  // namespace
}  // namespace qkv::kernels
#endif  // QKV_KERNELS_DECODE_PROBLEM_ONCE

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kLog2e = 1.44269504088896341f;
constexpr size_t kBlockVectors = kBlock / kLanes;  // 1 (AVX-512), 2 (AVX2), 4 (128-bit)

// Whether any of s[0, n) is NaN: a row's scores whose max came out -inf (the rare path).
bool HasNaN(const float* s, size_t n) {
  for (size_t j = 0; j < n; ++j)
    if (std::isnan(s[j])) return true;
  return false;
}

// Rows [j0, j0 + n) of a contiguous (.., dim) array of float or bf16 bits, widened into dst
// (n, ld) with columns [dim, ld) zero.
void PackRows(const float* src, size_t dim, size_t n, float* HWY_RESTRICT dst, size_t ld) {
  for (size_t j = 0; j < n; ++j) {
    std::memcpy(dst + j * ld, src + j * dim, dim * sizeof(float));
    std::fill(dst + j * ld + dim, dst + (j + 1) * ld, 0.0f);
  }
}
void PackRows(const uint16_t* src, size_t dim, size_t n, float* HWY_RESTRICT dst, size_t ld) {
  const DF d;
  const DU du;
  const hn::Rebind<uint16_t, DF> d16;
  for (size_t j = 0; j < n; ++j) {
    const uint16_t* s = src + j * dim;
    float* out = dst + j * ld;
    size_t c = 0;
    for (; c + kLanes <= dim; c += kLanes)
      hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, s + c)))), d, out + c);
    for (; c < dim; ++c) out[c] = bf16_to_float(s[c]);
    for (; c < ld; ++c) out[c] = 0.0f;
  }
}

// Asks for the cache lines of `bytes` bytes at p, into L2 or L1 (prefetch_bursts_to_l2(),
// core/machine.h): a block's keys and values are 64-128 lines asked for at once. Into L1 they held
// Zen 4 (family 25 model 17) to 12-17 GB/s of its 27-32 (`qkv bench --module decode --kv-len 32768
// --num-heads 12 --head-dim 64`, 2 threads; into L2: 24-31; bf16 keys 19-20 -> 21-29; AVX2 16-21 ->
// 24-26, bf16 16-17 -> 28); on Zen 5 into L2 made the same call 1.11x as long (AVX2 1.17x; bf16
// 1.00x and 1.07x; 16 heads of 128 over 8: 1.03x and 1.05x).
HWY_INLINE void Prefetch(const void* p, size_t bytes, bool to_l2) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) prefetch_line(c + off, to_l2);
}

// Prefetch for the rows [at, min(at + kBlock, end)) of rows (.., dim), if any. (Always inlined, as
// Prefetch is: GCC drops a call it has not inlined to a function that only prefetches.)
template <typename T>
HWY_INLINE void AskForBlock(const T* rows, int64_t at, int64_t end, size_t dim, bool to_l2) {
  if (at >= end) return;
  const size_t n = static_cast<size_t>(std::min<int64_t>(kBlock, end - at));
  Prefetch(rows + at * static_cast<int64_t>(dim), n * dim * sizeof(T), to_l2);
}

// kLanes elements at p, widened to float (bf16 bits: shifted into the high half).
HWY_INLINE VF LoadWide(DF d, const float* HWY_RESTRICT p) { return hn::LoadU(d, p); }
HWY_INLINE VF LoadWide(DF d, const uint16_t* HWY_RESTRICT p) {
  const DU du;
  const hn::Rebind<uint16_t, DF> d16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}

// s[r, j] = q_r . k_j for rows [0, R) and keys [0, cols) of kb (cols, ldk); q rows of ldq, the
// key row of kNV vectors (fixed at compile time) held in registers for every row r.
template <int kNV, typename T>
void QDotK(const float* HWY_RESTRICT qs, size_t ldq, size_t R, const T* HWY_RESTRICT kb, size_t ldk, size_t cols,
           float* HWY_RESTRICT s) {
  static_assert(kNV > 0, "QDotK: rows of kNV vectors; QDotKAny takes any");
  const DF d;
  for (size_t j = 0; j < cols; ++j) {
    VF k[kNV];
    HWY_UNROLL(8) for (int v = 0; v < kNV; ++v) k[v] = LoadWide(d, kb + j * ldk + v * kLanes);
    for (size_t r = 0; r < R; ++r) {
      const float* q = qs + r * ldq;
      VF a0 = hn::Mul(hn::LoadU(d, q), k[0]), a1 = hn::Zero(d);
      if constexpr (kNV > 1) a1 = hn::Mul(hn::LoadU(d, q + kLanes), k[1]);
      HWY_UNROLL(8) for (int v = 2; v < kNV; v += 2) {
        a0 = hn::MulAdd(hn::LoadU(d, q + v * kLanes), k[v], a0);
        a1 = hn::MulAdd(hn::LoadU(d, q + (v + 1) * kLanes), k[v + 1], a1);
      }
      s[r * kBlock + j] = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
    }
  }
}

// One vector whose lane i is the sum of a[i]'s lanes (N = kLanes vectors): a transposed reduction,
// N - 1 adds of shuffled pairs instead of N horizontal sums. 16 lanes (4 blocks of 4): halves, then
// adjacent blocks, then lanes within blocks; 8 lanes: halves, then lanes; 4 lanes: lanes only.
template <size_t N>
HWY_INLINE VF SumsOfLanes(DF d, const VF* HWY_RESTRICT a) {
#if HWY_TARGET == HWY_SCALAR
  static_assert(N == 1, "SumsOfLanes: one lane on HWY_SCALAR");
  (void)d;
  return a[0];
#else
  {
    static_assert(N == 4 || N == 8 || N == 16, "SumsOfLanes: 4, 8 or 16 lanes");
    VF e[4];  // e[i], block k: the 4 lane-sums of a[i + 4k] (over all of a[i + 4k]'s blocks)
    if constexpr (N == 4) {
      for (size_t i = 0; i < 4; ++i) e[i] = a[i];
    } else if constexpr (N == 8) {
      for (size_t i = 0; i < 4; ++i)
        e[i] = hn::Add(hn::ConcatLowerLower(d, a[i + 4], a[i]), hn::ConcatUpperUpper(d, a[i + 4], a[i]));
    } else {
      VF c[8];  // c[i]: blocks (a[i] b0+b2, a[i] b1+b3, a[i+8] b0+b2, a[i+8] b1+b3)
      for (size_t i = 0; i < 8; ++i)
        c[i] = hn::Add(hn::ConcatLowerLower(d, a[i + 8], a[i]), hn::ConcatUpperUpper(d, a[i + 8], a[i]));
      for (size_t i = 0; i < 4; ++i)  // (c[i] b0, c[i+4] b1, ..) + (c[i] b1, c[i+4] b0, ..)
        e[i] = hn::Add(hn::OddEvenBlocks(c[i + 4], c[i]), hn::SwapAdjacentBlocks(hn::OddEvenBlocks(c[i], c[i + 4])));
    }
    const hn::Repartition<uint64_t, DF> d64;
    const VF x0 = hn::Add(hn::InterleaveLower(d, e[0], e[1]), hn::InterleaveUpper(d, e[0], e[1]));
    const VF x1 = hn::Add(hn::InterleaveLower(d, e[2], e[3]), hn::InterleaveUpper(d, e[2], e[3]));
    const auto y0 = hn::BitCast(d64, x0), y1 = hn::BitCast(d64, x1);
    return hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, y0, y1)), hn::BitCast(d, hn::InterleaveUpper(d64, y0, y1)));
  }
#endif
}

// f.template operator()<k>(r) over rows [0, R) in groups of k = kFirst while that many are left, then
// 2, then 1 (kFirst: 4, 2 or 1).
template <size_t kFirst, typename F>
HWY_INLINE void InRowGroups(size_t R, F&& f) {
  size_t r = 0;
  if constexpr (kFirst >= 4)
    for (; R - r >= 4; r += 4) f.template operator()<4>(r);
  if constexpr (kFirst >= 2)
    for (; R - r >= 2; r += 2) f.template operator()<2>(r);
  for (; r < R; ++r) f.template operator()<1>(r);
}

// s[r, j] = q_r . k_j for rows [0, R) and keys [0, cols) of keys kb (cols, ldk; nv vectors a row),
// any nv: kLanes (row, key) pairs at a time, kRB rows by kLanes / kRB keys (kRB = 4 while four
// rows are left, then 2, then 1), one accumulator each (kRB + kLanes / kRB loads per kLanes FMAs),
// then one transposed reduction into a vector of their kLanes scores; keys past the last whole
// group one pair at a time. Many rows per key (latent attention's heads over one latent) or long
// rows (D of 128 on 8 lanes) make this the bulk of a step.
template <size_t kRB>
HWY_INLINE void PairScores(const float* HWY_RESTRICT qs, size_t ldq, size_t r, const float* HWY_RESTRICT kb,
                           size_t ldk, size_t j, size_t nv, float* HWY_RESTRICT s) {
  constexpr size_t kJB = kLanes / kRB;
  const DF d;
  VF acc[kLanes];
  HWY_UNROLL(16) for (size_t i = 0; i < kLanes; ++i) acc[i] = hn::Zero(d);
  for (size_t v = 0; v < nv; ++v) {
    VF q[kRB];
    HWY_UNROLL(16) for (size_t rr = 0; rr < kRB; ++rr) q[rr] = hn::LoadU(d, qs + (r + rr) * ldq + v * kLanes);
    HWY_UNROLL(16) for (size_t jj = 0; jj < kJB; ++jj) {
      const VF k = hn::LoadU(d, kb + (j + jj) * ldk + v * kLanes);
      HWY_UNROLL(16) for (size_t rr = 0; rr < kRB; ++rr) acc[rr * kJB + jj] = hn::MulAdd(q[rr], k, acc[rr * kJB + jj]);
    }
  }
  HWY_ALIGN float out[kLanes];
  hn::Store(SumsOfLanes<kLanes>(d, acc), d, out);
  for (size_t rr = 0; rr < kRB; ++rr)
    for (size_t jj = 0; jj < kJB; ++jj) s[(r + rr) * kBlock + j + jj] = out[rr * kJB + jj];
}

void QDotKAny(const float* HWY_RESTRICT qs, size_t ldq, size_t R, const float* HWY_RESTRICT kb, size_t ldk,
              size_t cols, size_t nv, float* HWY_RESTRICT s) {
  const DF d;
  auto one = [&](size_t r, size_t j) {
    const float *q = qs + r * ldq, *k = kb + j * ldk;
    VF a0 = hn::Zero(d), a1 = hn::Zero(d);
    size_t v = 0;
    for (; v + 2 <= nv; v += 2) {
      a0 = hn::MulAdd(hn::LoadU(d, q + v * kLanes), hn::LoadU(d, k + v * kLanes), a0);
      a1 = hn::MulAdd(hn::LoadU(d, q + (v + 1) * kLanes), hn::LoadU(d, k + (v + 1) * kLanes), a1);
    }
    if (v < nv) a0 = hn::MulAdd(hn::LoadU(d, q + v * kLanes), hn::LoadU(d, k + v * kLanes), a0);
    s[r * kBlock + j] = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  };
  InRowGroups<std::min<size_t>(kLanes, 4)>(R, [&]<size_t kRB>(size_t r) {
    constexpr size_t kJB = kLanes / kRB;
    const size_t keys = cols / kJB * kJB;
    for (size_t j = 0; j < keys; j += kJB) PairScores<kRB>(qs, ldq, r, kb, ldk, j, nv, s);
    for (size_t j = keys; j < cols; ++j)
      for (size_t rr = 0; rr < kRB; ++rr) one(r + rr, j);
  });
}

// Vector registers a block kernel fills with accumulators: half of AVX-512's 32 (and of 128-bit
// targets'), half of AVX2's 16. The rest hold the widened keys or values, queries and weights.
constexpr size_t kAccRegs = kLanes == 8 ? 8 : 16;

// s[r kBlock + j] = q_r . k_j for kRows rows (q + r ldq) and a full block of kBlock keys kb (kBlock,
// kNV * kLanes), read in place: kLanes / kRows keys at a time, one accumulator per (row, key)
// (vertical FMAs over the key's vectors in order), then one transposed reduction into a vector of
// their kLanes scores. Each key vector is loaded and widened once for all kRows rows.
template <size_t kRows, int kNV, typename T>
HWY_INLINE void BlockScores(const float* HWY_RESTRICT q, size_t ldq, const T* HWY_RESTRICT kb, float* HWY_RESTRICT s) {
  static_assert(kRows >= 1 && kLanes % kRows == 0, "BlockScores: kLanes / kRows keys at a time");
  constexpr size_t kKeys = kLanes / kRows;
  constexpr size_t ldk = static_cast<size_t>(kNV) * kLanes;
  const DF d;
  for (size_t j = 0; j < static_cast<size_t>(kBlock); j += kKeys) {
    VF acc[kLanes];  // acc[r kKeys + jj]: row r against key j + jj
    HWY_UNROLL(16) for (size_t i = 0; i < kLanes; ++i) acc[i] = hn::Zero(d);
    HWY_UNROLL(16) for (int v = 0; v < kNV; ++v) {
      VF qv[kRows];
      HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) qv[r] = hn::LoadU(d, q + r * ldq + static_cast<size_t>(v) * kLanes);
      HWY_UNROLL(16) for (size_t jj = 0; jj < kKeys; ++jj) {
        const VF k = LoadWide(d, kb + (j + jj) * ldk + static_cast<size_t>(v) * kLanes);
        HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) acc[r * kKeys + jj] = hn::MulAdd(qv[r], k, acc[r * kKeys + jj]);
      }
    }
    const VF sums = SumsOfLanes<kLanes>(d, acc);
    if constexpr (kRows == 1) {
      hn::StoreU(sums, d, s + j);
    } else {
      HWY_ALIGN float out[kLanes];
      hn::Store(sums, d, out);
      for (size_t r = 0; r < kRows; ++r)
        for (size_t jj = 0; jj < kKeys; ++jj) s[r * kBlock + j + jj] = out[r * kKeys + jj];
    }
  }
}

// BlockScores of kRows rows for the loops over rows, not inlined into them.
template <size_t kRows, int kNV, typename T>
HWY_NOINLINE void RowsScores(const float* HWY_RESTRICT q, size_t ldq, const T* HWY_RESTRICT kb, float* HWY_RESTRICT s) {
  BlockScores<kRows, kNV>(q, ldq, kb, s);
}

// The online softmax step of one row over a full block of scores pb (kBlock), every key visible
// and no variant: the scores made base 2, m and l updated, pb replaced by the weights
// 2^(s - m_new); alpha = 2^(m_old - m_new), the factor for o (1 where the max did not move). False
// (and nothing changed) when every score is -inf: no weight.
HWY_INLINE bool BlockSoftmax(float* HWY_RESTRICT pb, float& m, float& l, float& alpha) {
  const DF d;
  const VF log2e = hn::Set(d, kLog2e);
  VF x[kBlockVectors];
  x[0] = hn::Mul(hn::LoadU(d, pb), log2e);
  VF mx = x[0];
  for (size_t v = 1; v < kBlockVectors; ++v) {
    x[v] = hn::Mul(hn::LoadU(d, pb + v * kLanes), log2e);
    mx = hn::Max(mx, x[v]);
  }
  float m_new = std::max(m, hn::GetLane(hn::MaxOfLanes(d, mx)));
  if (m_new == kNegInf) {  // every score -inf (no weight), or NaN, which the max passes over
    if (!HasNaN(pb, kBlock)) return false;
    m_new = kNaN;  // as PyTorch's softmax: the row's weights, and with them its output, NaN
  }
  const VF mv = hn::Set(d, m_new);
  VF sum = hn::Zero(d);
  for (size_t v = 0; v < kBlockVectors; ++v) {
    const VF pr = Exp2(d, hn::Sub(x[v], mv));
    sum = hn::Add(sum, pr);
    hn::StoreU(pr, d, pb + v * kLanes);
  }
  alpha = 1.0f;
  if (m_new != m) {
    alpha = std::exp2(m - m_new);  // 0 when m was -inf
    l *= alpha;
    m = m_new;
  }
  l += hn::GetLane(hn::SumOfLanes(d, sum));
  return true;
}

// o_r (kNV vectors, rows at o + r ldo) = alpha[r] o_r + sum_j pb[r kBlock + j] v_j for kRows rows
// over a full block of values vb (kBlock, kNV * kLanes). Each element's terms in four sets (keys j
// mod 4: FMA chains of kBlock / 4) added pairwise at the end; kC vectors of columns at a time, so
// that the 4 kRows kC accumulators stay in registers. Each value vector is loaded and widened once
// for all kRows rows.
template <size_t kRows, int kNV, typename T>
HWY_INLINE void BlockWeighted(const float* HWY_RESTRICT pb, const T* HWY_RESTRICT vb, const float* HWY_RESTRICT alpha,
                              float* HWY_RESTRICT o, size_t ldo) {
  constexpr size_t kC = std::clamp<size_t>(kAccRegs / (4 * kRows), 1, static_cast<size_t>(kNV));
  static_assert(kNV % kC == 0, "BlockWeighted: whole tiles of columns");
  constexpr size_t ldv = static_cast<size_t>(kNV) * kLanes;
  const DF d;
  for (size_t c = 0; c < static_cast<size_t>(kNV); c += kC) {
    VF a[kRows][4][kC];
    HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) {
      const VF av = hn::Set(d, alpha[r]);
      HWY_UNROLL(4) for (size_t cc = 0; cc < kC; ++cc) {
        a[r][0][cc] = hn::LoadU(d, o + r * ldo + (c + cc) * kLanes);
        if (alpha[r] != 1.0f) a[r][0][cc] = hn::Mul(av, a[r][0][cc]);
        a[r][1][cc] = a[r][2][cc] = a[r][3][cc] = hn::Zero(d);
      }
    }
    HWY_UNROLL(4) for (size_t j = 0; j < static_cast<size_t>(kBlock); j += 4) {
      HWY_UNROLL(4) for (size_t u = 0; u < 4; ++u) {
        VF pj[kRows];
        HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) pj[r] = hn::Set(d, pb[r * kBlock + j + u]);
        HWY_UNROLL(4) for (size_t cc = 0; cc < kC; ++cc) {
          const VF v = LoadWide(d, vb + (j + u) * ldv + (c + cc) * kLanes);
          HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) a[r][u][cc] = hn::MulAdd(pj[r], v, a[r][u][cc]);
        }
      }
    }
    HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r)
      HWY_UNROLL(4) for (size_t cc = 0; cc < kC; ++cc)
        hn::StoreU(hn::Add(hn::Add(a[r][0][cc], a[r][1][cc]), hn::Add(a[r][2][cc], a[r][3][cc])), d,
                   o + r * ldo + (c + cc) * kLanes);
  }
}

// One step of the loop over full blocks that every row sees whole, without softcap, mask values,
// ALiBi or dropout, for kRows rows (heads of a group, or queries): the online softmax step over
// this block's scores pb (made the step before), then the next block's scores into pn from its
// keys kn (none after the last), then o_r += p V over this block's values vb (kBlock, kNV *
// kLanes). The softmax's chain of dependent steps (maxima, exponentials, sums) is written before
// the next block's independent dot products, so that the core runs them under it; taken block by
// block, every step waited on the one before. Each key and value vector is read and widened once
// for all rows, and each row's arithmetic, term for term, is the same whatever kRows (the same
// bits). q: rows at q + r ldq; pb, pn: (kRows, kBlock); m, l: (kRows); o: rows at o + r ldo.
template <size_t kRows, int kNV, typename T>
HWY_NOINLINE void RowsStep(const float* HWY_RESTRICT q, size_t ldq, const T* HWY_RESTRICT kn, const T* HWY_RESTRICT vb,
                           float* HWY_RESTRICT pb, float* HWY_RESTRICT pn, float* HWY_RESTRICT m, float* HWY_RESTRICT l,
                           float* HWY_RESTRICT o, size_t ldo) {
  float alpha[kRows] = {};
  bool ok[kRows], all = true;
  for (size_t r = 0; r < kRows; ++r) {
    ok[r] = BlockSoftmax(pb + r * kBlock, m[r], l[r], alpha[r]);
    all = all && ok[r];
  }
  if (kn != nullptr) BlockScores<kRows, kNV>(q, ldq, kn, pn);
  if (all) return BlockWeighted<kRows, kNV>(pb, vb, alpha, o, ldo);
  for (size_t r = 0; r < kRows; ++r)  // a row of -inf scores takes no weight: the others alone
    if (ok[r]) BlockWeighted<1, kNV>(pb + r * kBlock, vb, alpha + r, o + r * ldo, ldo);
}

// o_r += sum_j p[r, j] v_j for rows [0, R), keys [0, cols) of vb (cols, ldv). With kNV > 0 o_r
// stays in registers over the block, in two sets (even and odd keys) so that consecutive keys'
// FMAs do not wait on each other.
// ov rows [r, r + kR), vectors [c, c + kC) += s's rows times the block's cols values (vb, ldv).
template <size_t kR, size_t kC, typename T>
HWY_INLINE void WeightedBlock(const float* HWY_RESTRICT s, size_t r, const T* HWY_RESTRICT vb, size_t ldv, size_t cols,
                              size_t c, float* HWY_RESTRICT ov, size_t ldo) {
  const DF d;
  VF a[kR][kC];
  HWY_UNROLL(8) for (size_t rr = 0; rr < kR; ++rr)
    HWY_UNROLL(8) for (size_t cc = 0; cc < kC; ++cc) a[rr][cc] = hn::LoadU(d, ov + (r + rr) * ldo + (c + cc) * kLanes);
  for (size_t j = 0; j < cols; ++j) {
    VF v[kC];
    HWY_UNROLL(8) for (size_t cc = 0; cc < kC; ++cc) v[cc] = LoadWide(d, vb + j * ldv + (c + cc) * kLanes);
    HWY_UNROLL(8) for (size_t rr = 0; rr < kR; ++rr) {
      const VF p = hn::Set(d, s[(r + rr) * kBlock + j]);
      HWY_UNROLL(8) for (size_t cc = 0; cc < kC; ++cc) a[rr][cc] = hn::MulAdd(p, v[cc], a[rr][cc]);
    }
  }
  HWY_UNROLL(8) for (size_t rr = 0; rr < kR; ++rr)
    HWY_UNROLL(8) for (size_t cc = 0; cc < kC; ++cc) hn::StoreU(a[rr][cc], d, ov + (r + rr) * ldo + (c + cc) * kLanes);
}

template <int kNV, typename T>
void WeightedSumV(const float* HWY_RESTRICT s, size_t R, const T* HWY_RESTRICT vb, size_t ldv, size_t cols,
                  size_t nv_runtime, float* HWY_RESTRICT ov, size_t ldo) {
  const DF d;
  if constexpr (kNV > 0) {
    // kC vectors of columns at a time in two sets (even and odd keys), so that the 2 kC
    // accumulators stay in registers (all of a row's at once up to 8 vectors on AVX-512).
    constexpr size_t kC = std::min(kAccRegs / 2, static_cast<size_t>(kNV));
    for (size_t r = 0; r < R; ++r) {
      const float* pr = s + r * kBlock;
      for (size_t c0 = 0; c0 < static_cast<size_t>(kNV); c0 += kC) {
        float* o = ov + r * ldo + c0 * kLanes;
        const T* vc = vb + c0 * kLanes;
        VF a[kC], b[kC];
        HWY_UNROLL(8) for (size_t v = 0; v < kC; ++v) {
          a[v] = hn::LoadU(d, o + v * kLanes);
          b[v] = hn::Zero(d);
        }
        size_t j = 0;
        for (; j + 2 <= cols; j += 2) {
          const VF p0 = hn::Set(d, pr[j]), p1 = hn::Set(d, pr[j + 1]);
          const T* v0 = vc + j * ldv;
          const T* v1 = v0 + ldv;
          HWY_UNROLL(8) for (size_t v = 0; v < kC; ++v) {
            a[v] = hn::MulAdd(p0, LoadWide(d, v0 + v * kLanes), a[v]);
            b[v] = hn::MulAdd(p1, LoadWide(d, v1 + v * kLanes), b[v]);
          }
        }
        if (j < cols) {
          const VF p0 = hn::Set(d, pr[j]);
          HWY_UNROLL(8) for (size_t v = 0; v < kC; ++v) a[v] = hn::MulAdd(p0, LoadWide(d, vc + j * ldv + v * kLanes), a[v]);
        }
        HWY_UNROLL(8) for (size_t v = 0; v < kC; ++v) hn::StoreU(hn::Add(a[v], b[v]), d, o + v * kLanes);
      }
    }
  } else {
    // kR rows by 8 / kR vectors of columns held in registers over the block's keys (kR = 4 while
    // four rows are left, then 2, then 1; each element's sum over j in order, as one row at a time
    // would take it).
    const size_t nv = nv_runtime;
    InRowGroups<4>(R, [&]<size_t kR>(size_t r) {
      constexpr size_t kC = 8 / kR;
      size_t c = 0;
      for (; c + kC <= nv; c += kC) WeightedBlock<kR, kC>(s, r, vb, ldv, cols, c, ov, ldo);
      for (; c < nv; ++c) WeightedBlock<kR, 1>(s, r, vb, ldv, cols, c, ov, ldo);
    });
  }
}

// The scores of row r (query i of head h) against keys jb + [0, kBlock) become base-2 scores with
// every variant applied; keys at or beyond jb + cols are -inf.
void ApplyVariants(const DecodeProblem& p, int64_t h, int64_t i, int64_t jb, size_t cols, float* HWY_RESTRICT s) {
  const DF d;
  const DI di;
  const int64_t vb = p.visible_begin(i), ve = std::min(p.visible_end(i), jb + static_cast<int64_t>(cols));
  const bool all_visible = vb <= jb && ve >= jb + kBlock;
  if (p.softcap > 0.0f) {
    const VF cap = hn::Set(d, p.softcap), inv = hn::Set(d, 1.0f / p.softcap);
    for (size_t v = 0; v < kBlockVectors; ++v)
      hn::StoreU(hn::Mul(cap, hn::Tanh(d, hn::Mul(hn::LoadU(d, s + v * kLanes), inv))), d, s + v * kLanes);
  }
  if (p.mask.kind == AttentionMask::Kind::kAdditive || p.mask.kind == AttentionMask::Kind::kBlocked) {
    const float* m = p.mask.values + i * p.mask.row_stride + jb;
    const bool additive = p.mask.kind == AttentionMask::Kind::kAdditive;
    for (size_t j = 0; j < cols; ++j) {
      if (additive) s[j] += m[j];
      else if (m[j] != 0.0f) s[j] = kNegInf;
    }
  }
  const VF log2e = hn::Set(d, kLog2e);
  const VF slope = hn::Set(d, p.alibi ? p.alibi[h] : 0.0f);
  const auto first = hn::Set(di, static_cast<int32_t>(vb)), last = hn::Set(di, static_cast<int32_t>(ve));
  const auto pos = hn::Set(di, static_cast<int32_t>(p.pos(i)));
  for (size_t v = 0; v < kBlockVectors; ++v) {
    VF x = hn::LoadU(d, s + v * kLanes);
    const auto j = hn::Iota(di, static_cast<int32_t>(jb + static_cast<int64_t>(v * kLanes)));
    if (p.alibi) x = hn::NegMulAdd(slope, hn::ConvertTo(d, hn::Sub(pos, j)), x);
    x = hn::Mul(x, log2e);
    if (!all_visible) {
      const auto visible = hn::AndNot(hn::Lt(j, first), hn::Lt(j, last));  // first <= j < last
      x = hn::IfThenElse(hn::RebindMask(d, visible), x, hn::Set(d, kNegInf));
    }
    hn::StoreU(x, d, s + v * kLanes);
  }
}

// The online softmax step of one row over one block: m, l updated, o rescaled, s replaced by the
// (dropped-out, unscaled) probabilities.
// s holds `width` scores (kBlock, or kWide on the products' path).
void OnlineSoftmaxStep(const DecodeProblem& p, int64_t b, int64_t h, int64_t i, int64_t jb, size_t cols,
                       float* HWY_RESTRICT s, float& m, float& l, float* HWY_RESTRICT o, size_t nvo,
                       size_t width = kBlock) {
  const DF d;
  const size_t vectors = width / kLanes;
  VF mx = hn::LoadU(d, s);
  for (size_t v = 1; v < vectors; ++v) mx = hn::Max(mx, hn::LoadU(d, s + v * kLanes));
  float m_new = std::max(m, hn::GetLane(hn::MaxOfLanes(d, mx)));
  if (m_new == kNegInf) {
    if (!HasNaN(s, width)) {  // nothing visible yet: no weight
      std::fill(s, s + width, 0.0f);
      return;
    }
    m_new = kNaN;  // NaN scores, which the max passed over: the row's output NaN, as PyTorch's
  }
  const VF mv = hn::Set(d, m_new);
  VF sum = hn::Zero(d);
  for (size_t v = 0; v < vectors; ++v) {
    const VF pr = Exp2(d, hn::Sub(hn::LoadU(d, s + v * kLanes), mv));
    sum = hn::Add(sum, pr);
    hn::StoreU(pr, d, s + v * kLanes);
  }
  if (m_new != m) {
    const float alpha = std::exp2(m - m_new);  // 0 when m was -inf
    const VF av = hn::Set(d, alpha);
    for (size_t c = 0; c < nvo; ++c) hn::StoreU(hn::Mul(av, hn::LoadU(d, o + c * kLanes)), d, o + c * kLanes);
    l *= alpha;
    m = m_new;
  }
  l += hn::GetLane(hn::SumOfLanes(d, sum));
  if (p.dropout) {  // the normaliser counted every weight, dropped or not
    for (size_t j = 0; j < cols; ++j)
      if (s[j] != 0.0f && !dropout_kept(p.seed, p.threshold, b, h, p.pos(i), jb + static_cast<int64_t>(j)))
        s[j] = 0.0f;
  }
}

// The online softmax step over a wide block every row sees whole, its scores key-major: st (kWide,
// rs) holds scale q_r . k_j at st[j rs + r]; per row r (a lane): the scores made base 2, m[r] and
// l[r] updated, st replaced by the probabilities, alpha[r] = 2^(m_old - m_new) (1 where the max
// did not move) for the caller to rescale o_r. rs: a multiple of the vector length.
void KeyMajorSoftmax(float* HWY_RESTRICT st, size_t rs, float* HWY_RESTRICT m, float* HWY_RESTRICT l,
                     float* HWY_RESTRICT alpha) {
  const DF d;
  const VF log2e = hn::Set(d, kLog2e), one = hn::Set(d, 1.0f);
  for (size_t v = 0; v < rs; v += kLanes) {
    const VF m_old = hn::LoadU(d, m + v);
    VF mx = m_old;
    for (int64_t j = 0; j < kWide; ++j) {
      const VF x = hn::Mul(hn::LoadU(d, st + static_cast<size_t>(j) * rs + v), log2e);
      hn::StoreU(x, d, st + static_cast<size_t>(j) * rs + v);
      mx = hn::Max(mx, x);
    }
    VF sum = hn::Zero(d);
    for (int64_t j = 0; j < kWide; ++j) {
      float* at = st + static_cast<size_t>(j) * rs + v;
      const VF pr = Exp2(d, hn::Sub(hn::LoadU(d, at), mx));
      sum = hn::Add(sum, pr);
      hn::StoreU(pr, d, at);
    }
    const VF a = hn::IfThenElse(hn::Eq(m_old, mx), one, Exp2(d, hn::Sub(m_old, mx)));  // 0 from -inf
    hn::StoreU(hn::MulAdd(hn::LoadU(d, l + v), a, sum), d, l + v);
    hn::StoreU(mx, d, m + v);
    hn::StoreU(a, d, alpha + v);
  }
}

// One task: rows of group (b, g) against chunk c. T: float or uint16_t (bf16 bits).
// kNV: D / kLanes = Dv / kLanes fixed at compile time (the keys read in place when T is float),
// 0 for any other D.
template <typename T, int kNV>
void ChunkTask(const DecodeProblem& p, int64_t b, int64_t g, int64_t c, float* scratch, uint64_t* held) {
  FlushSubnormals flush;
  const size_t R = static_cast<size_t>(p.rows), Dp = pad16(p.D), Dvp = pad16(p.Dv);
  const size_t D = static_cast<size_t>(p.D), Dv = static_cast<size_t>(p.Dv);
  const bool to_l2 = prefetch_bursts_to_l2();
  float* qs = scratch;                // (R, Dp) scale * q
  float* ov = qs + R * Dp;            // (R, Dvp) sum_j p z v_j
  float* ms = ov + R * Dvp;           // (R) running max, base 2
  float* ls = ms + pad16(p.rows);     // (R) running sum
  float* s = ls + pad16(p.rows);      // (R, kBlock) scores, then probabilities ((R, kWide): products)
  float* kb = s + R * kWide;          // (kBlock, Dp) packed keys
  float* vb = kb + kBlock * Dp;       // (kBlock, Dvp) packed values
  const size_t Rp = pad16(p.rows);
  float* qt = vb + kBlock * Dvp;      // (D, Rp) (scale q)^T, columns past R zero: the products' path
  float* st = qt + Dp * Rp;           // (kWide, Rp) a wide block's scores, a key a row
  // The group's scaled queries (and their transpose, below), unless this worker's last chunk was
  // of the same group in the same call.
  const bool have_queries = held[0] == p.call && held[1] == static_cast<uint64_t>(b * p.G + g + 1);
  held[0] = p.call;
  held[1] = static_cast<uint64_t>(b * p.G + g + 1);
  for (size_t r = 0; r < R; ++r) {
    const int64_t h = g * p.group + static_cast<int64_t>(r) / p.Tq, i = static_cast<int64_t>(r) % p.Tq;
    const float* q = p.q.row(b, h, i);
    if (!have_queries)
      for (size_t x = 0; x < Dp; ++x) qs[r * Dp + x] = x < D ? q[static_cast<int64_t>(x) * p.q.stride_d] * p.scale : 0.0f;
    std::fill(ov + r * Dvp, ov + (r + 1) * Dvp, 0.0f);
    ms[r] = kNegInf;
    ls[r] = 0.0f;
  }
  const int64_t j0 = p.begin + c * p.chunk, j1 = std::min(j0 + p.chunk, p.end);
  const T* keys = static_cast<const T*>(p.keys) + (b * p.G + g) * p.C * p.D;
  const T* values = static_cast<const T*>(p.values) + (b * p.G + g) * p.C * p.Dv;
  constexpr bool kInPlace = kNV > 0;  // rows of D = Dv = kNV vectors: read where they are
  // No variant but the causal mask and the window: blocks every query sees fully take RowsStep.
  const bool plain = p.softcap == 0.0f && p.alibi == nullptr && !p.dropout &&
                     (p.mask.kind == AttentionMask::Kind::kNone || p.causal());
  const int64_t last_begin = p.visible_begin(p.Tq - 1), first_end = p.visible_end(0);
  // Many rows over each key (latent attention's heads over one latent, a large group of heads): a
  // wide block's scores and its weighted sum as two small products (kernels/small_gemm.h), keys and
  // values read in place, instead of each row's dot products. Not for keys and values apart whose
  // rows the per-row loops unroll (kInPlace): there those loops, reading twice the bytes a key,
  // were faster (12 heads over one of 64, 32,768 keys: 2.3-2.6 against 2.6-3.3 ms on a Zen 3,
  // where latents of 64 went 2.2-2.5 -> 1.6-1.7 ms as products).
  auto write_partials = [&] {  // (m, l, o) of each row, for the merge
    const int64_t bg = b * p.G + g;
    for (size_t r = 0; r < R; ++r) {
      float* out = p.part(bg, c, static_cast<int64_t>(r));
      out[0] = ms[r];
      out[1] = ls[r];
      std::memcpy(out + 2, ov + r * Dvp, Dvp * sizeof(float));
    }
  };
  if constexpr (std::is_same_v<T, float>) {
    if (R >= kProductRows && (!kInPlace || p.keys == p.values)) {
      for (size_t r = R; r < Rp; ++r) {  // the lanes of rows past R in KeyMajorSoftmax
        ms[r] = kNegInf;
        ls[r] = 0.0f;
      }
      if (!have_queries)
        for (size_t x = 0; x < D; ++x)
          for (size_t r = 0; r < Rp; ++r) qt[x * Rp + r] = r < R ? qs[r * Dp + x] : 0.0f;
      for (int64_t jb = j0; jb < j1; jb += kWide) {
        const size_t cols = static_cast<size_t>(std::min<int64_t>(kWide, j1 - jb));
        // the next block's keys asked for while this one's scores are multiplied, a few lines at a
        // time, and its values (the same rows for latents: their second half) during the weighted sum
        const int64_t ahead = jb + kWide < j1 ? std::min<int64_t>(kWide, j1 - jb - kWide) : 0;
        const float* next_k = ahead > 0 ? keys + (jb + kWide) * p.D : nullptr;  // none past the last block
        const int64_t k_bytes = ahead * p.D * 4, v_bytes = ahead * p.Dv * 4;
        const bool shared = p.keys == p.values;
        // st (cols, Rp) = K_block (cols, D) (scale q)^T (D, Rp); s = st^T, 0 past cols
        small_gemm(false, static_cast<int64_t>(cols), static_cast<int64_t>(Rp), p.D, 1.0f, keys + jb * p.D, p.D, qt,
                   static_cast<int64_t>(Rp), 0.0f, st, static_cast<int64_t>(Rp), next_k, shared ? k_bytes / 2 : k_bytes);
        const char* next_v = ahead == 0 ? nullptr
                             : shared   ? reinterpret_cast<const char*>(next_k) + k_bytes / 2
                                        : reinterpret_cast<const char*>(values + (jb + kWide) * p.Dv);
        const int64_t next_v_bytes = shared ? k_bytes - k_bytes / 2 : v_bytes;
        if (plain && cols == static_cast<size_t>(kWide) && last_begin <= jb && first_end >= jb + kWide) {
          // Every row sees every key of the block: the online softmax in st's layout, a lane a row
          // (rows past R, of zero queries, computed and never written out), then o += P^T V.
          KeyMajorSoftmax(st, Rp, ms, ls, s);
          const float* alpha = s;
          const DF d;
          for (size_t r = 0; r < R; ++r)
            if (alpha[r] != 1.0f)
              for (size_t x = 0; x < Dvp; x += kLanes)
                hn::StoreU(hn::Mul(hn::Set(d, alpha[r]), hn::LoadU(d, ov + r * Dvp + x)), d, ov + r * Dvp + x);
          small_gemm(true, static_cast<int64_t>(R), p.Dv, kWide, 1.0f, st, static_cast<int64_t>(Rp), values + jb * p.Dv,
                     p.Dv, 1.0f, ov, static_cast<int64_t>(Dvp), next_v, next_v_bytes);
          continue;
        }
        for (size_t r = 0; r < R; ++r) {
          float* sr = s + r * kWide;
          for (size_t j = 0; j < static_cast<size_t>(kWide); ++j) sr[j] = j < cols ? st[j * Rp + r] : 0.0f;
          const int64_t h = g * p.group + static_cast<int64_t>(r) / p.Tq, i = static_cast<int64_t>(r) % p.Tq;
          for (int64_t sb = 0; sb < kWide; sb += kBlock) {  // the variants by blocks; keys past cols hidden
            const int64_t left = std::clamp<int64_t>(static_cast<int64_t>(cols) - sb, 0, kBlock);
            ApplyVariants(p, h, i, jb + sb, static_cast<size_t>(left), sr + sb);
          }
          OnlineSoftmaxStep(p, b, h, i, jb, cols, sr, ms[r], ls[r], ov + r * Dvp, Dvp / kLanes, kWide);
        }
        // o (R, Dv) += s (R, cols) V_block (cols, Dv)
        small_gemm(false, static_cast<int64_t>(R), p.Dv, static_cast<int64_t>(cols), 1.0f, s, kWide, values + jb * p.Dv,
                   p.Dv, 1.0f, ov, static_cast<int64_t>(Dvp), next_v, next_v_bytes);
      }
      return write_partials();
    }
  }
  // A block's keys and values asked for ahead, all at once: the hardware prefetcher alone leaves
  // gaps. Into L1 one block ahead of their use (Zen 5: two blocks ahead made 16 heads of 128 over 8
  // at 32,768 bf16 keys 1.24x as long, 12 heads of 64 fp32 1.13x: the block ahead and the one in
  // hand crowd L1); into L2 two (Zen 4, measured before). The pipelined loop below reads keys a
  // block before their values, so it asks for them a block earlier.
  const int64_t distance = (to_l2 ? 2 : 1) * kBlock;
  auto block = [&](int64_t jb) {  // any block: the variants, a partial block, the register-blocked path
    const size_t cols = static_cast<size_t>(std::min<int64_t>(kBlock, j1 - jb));
    AskForBlock(keys, jb + distance, j1, D, to_l2);
    AskForBlock(values, jb + distance, j1, Dv, to_l2);
    if constexpr (kInPlace) {
      if (cols == kBlock) {
        for (size_t r = 0; r < R; ++r) RowsScores<1, kNV>(qs + r * Dp, 0, keys + jb * p.D, s + r * kBlock);
      } else {
        QDotK<kNV>(qs, Dp, R, keys + jb * p.D, D, cols, s);
      }
    } else {
      if constexpr (std::is_same_v<T, float>) {
        if (D == Dp) {  // whole vectors: read in place (a latent of 96 or 512, a head of 128 on AVX2)
          QDotKAny(qs, Dp, R, keys + jb * p.D, D, cols, Dp / kLanes, s);
        } else {
          PackRows(keys + jb * p.D, D, cols, kb, Dp);
          QDotKAny(qs, Dp, R, kb, Dp, cols, Dp / kLanes, s);
        }
      } else {
        PackRows(keys + jb * p.D, D, cols, kb, Dp);
        QDotKAny(qs, Dp, R, kb, Dp, cols, Dp / kLanes, s);
      }
    }
    for (size_t r = 0; r < R; ++r) {
      const int64_t h = g * p.group + static_cast<int64_t>(r) / p.Tq, i = static_cast<int64_t>(r) % p.Tq;
      ApplyVariants(p, h, i, jb, cols, s + r * kBlock);
      OnlineSoftmaxStep(p, b, h, i, jb, cols, s + r * kBlock, ms[r], ls[r], ov + r * Dvp, Dvp / kLanes);
    }
    if constexpr (kInPlace) {
      WeightedSumV<kNV>(s, R, values + jb * p.Dv, Dv, cols, Dvp / kLanes, ov, Dvp);
    } else {
      if (std::is_same_v<T, float> && Dv == Dvp) {
        WeightedSumV<kNV>(s, R, values + jb * p.Dv, Dv, cols, Dvp / kLanes, ov, Dvp);
      } else {
        PackRows(values + jb * p.Dv, Dv, cols, vb, Dvp);
        WeightedSumV<kNV>(s, R, static_cast<const float*>(vb), Dvp, cols, Dvp / kLanes, ov, Dvp);
      }
    }
  };
  int64_t jb = j0;
  if constexpr (kInPlace) {
    // The blocks every row sees whole (no variant but the causal mask and the window: a contiguous
    // run), pipelined: block n's softmax step, block n + 1's scores, block n's weighted sum. Rows
    // in fours (AVX-512) or pairs, each key and value widened once for them all. s holds two
    // blocks of scores, (R, kBlock) each.
    static_assert(kWide >= 2 * kBlock, "ChunkTask: s holds two blocks of scores");
    int64_t fb = j1, fe = j1;  // the run [fb, fe) of such blocks
    if (plain) {
      fb = std::min(j1, j0 + std::max<int64_t>(0, (last_begin - j0 + kBlock - 1) / kBlock * kBlock));
      const int64_t limit = std::min(j1, first_end);
      fe = limit - fb >= kBlock ? fb + (limit - fb) / kBlock * kBlock : fb;
    }
    for (; jb < fb; jb += kBlock) block(jb);
    if (fb < fe) {
      constexpr size_t kGroup = kLanes >= 16 ? 4 : std::min<size_t>(kLanes, 2);
      float *cur = s, *next = s + R * kBlock;
      InRowGroups<kGroup>(R, [&]<size_t kRows>(size_t r) {
        RowsScores<kRows, kNV>(qs + r * Dp, Dp, keys + fb * p.D, cur + r * kBlock);
      });
      for (; jb < fe; jb += kBlock) {
        AskForBlock(keys, jb + kBlock + distance, j1, D, to_l2);  // read a step before their values
        AskForBlock(values, jb + distance, j1, Dv, to_l2);
        const T* kn = jb + kBlock < fe ? keys + (jb + kBlock) * p.D : nullptr;
        const T* vj = values + jb * p.Dv;
        InRowGroups<kGroup>(R, [&]<size_t kRows>(size_t r) {
          RowsStep<kRows, kNV>(qs + r * Dp, Dp, kn, vj, cur + r * kBlock, next + r * kBlock, ms + r, ls + r,
                               ov + r * Dvp, Dvp);
        });
        std::swap(cur, next);
      }
    }
  }
  for (; jb < j1; jb += kBlock) block(jb);
  write_partials();
}

template <typename T>
void RunChunk(const DecodeProblem& p, int nv, int64_t b, int64_t g, int64_t c, float* scratch, uint64_t* held) {
  switch (nv) {
    case 1: return ChunkTask<T, 1>(p, b, g, c, scratch, held);
    case 2: return ChunkTask<T, 2>(p, b, g, c, scratch, held);
    case 4: return ChunkTask<T, 4>(p, b, g, c, scratch, held);
    case 8: return ChunkTask<T, 8>(p, b, g, c, scratch, held);
    case 16: return ChunkTask<T, 16>(p, b, g, c, scratch, held);
    default: return ChunkTask<T, 0>(p, b, g, c, scratch, held);
  }
}

void RunChunks(const DecodeProblem& p) {
  // D = Dv a multiple of 16 of 1, 2, 4, 8 or 16 vectors (16 to 256 with 16 lanes, 16 to 128 with 8;
  // GPT-2's 64, Llama's and Qwen's 128, a small model's 16): the row loops unrolled, keys and values
  // read in place. Any other D takes the register-blocked path (QDotKAny, WeightedBlock): rows of
  // whole vectors read in place, others (and bf16) packed into padded float rows first (a copy of
  // every key and value the step reads).
  const int nv = p.D == p.Dv && p.D % 16 == 0 ? static_cast<int>(p.D / static_cast<int64_t>(kLanes)) : 0;
  ForTasks(p, p.B * p.G * p.chunks, [&](int64_t task, int worker) {
    float* scratch = p.scratch + static_cast<size_t>(worker) * p.scratch_stride;
    const int64_t c = task % p.chunks, bg = task / p.chunks, b = bg / p.G, g = bg % p.G;
    uint64_t* held = p.held + 2 * static_cast<size_t>(worker);
    if (p.bf16) RunChunk<uint16_t>(p, nv, b, g, c, scratch, held);
    else RunChunk<float>(p, nv, b, g, c, scratch, held);
    if (p.merge) p.merge(p, b, g);
  });
}

}  // namespace

// For HWY_EXPORT (outside the anonymous namespace).
void DecodeChunks(const DecodeProblem& p) { RunChunks(p); }

}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(DecodeChunks);

namespace {
constexpr int64_t kMaxChunks = 64;  // chunks per (b, g) at most
}  // namespace

int64_t decode_chunk_keys(int64_t visible_keys) {
  // At least 512 keys (256 KB of fp32 keys and values at D = 64: the per-task setup and the merge
  // are noise next to it), and at most 64 chunks per (b, g), so the merge stays small.
  constexpr int64_t kMinChunk = 512;
  const int64_t even = (visible_keys + kMaxChunks - 1) / kMaxChunks;
  return std::max(kMinChunk, (even + kBlock - 1) / kBlock * kBlock);
}

namespace {

// Row r of group (b, g): the chunks' partial results merged into o and lse, in chunk order.
void MergeRow(const DecodeProblem& p, int64_t b, int64_t g, int64_t r) {
  const int64_t bg = b * p.G + g;
  const int64_t h = g * p.group + r / p.Tq, i = r % p.Tq;
  float* out = p.o.row(b, h, i);
  float& lse = p.lse[(b * p.H + h) * p.Tq + i];
  float M = -std::numeric_limits<float>::infinity();
  bool nan = false;  // a chunk whose scores held NaN (OnlineSoftmaxStep): the row NaN, as PyTorch's
  for (int64_t c = 0; c < p.chunks; ++c) {
    const float m = p.part(bg, c, r)[0];
    nan = nan || std::isnan(m);
    M = std::max(M, m);
  }
  if (nan) {
    for (int64_t x = 0; x < p.Dv; ++x) out[x * p.o.stride_d] = std::numeric_limits<float>::quiet_NaN();
    lse = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (M == -std::numeric_limits<float>::infinity() || p.chunks == 0) {
    for (int64_t x = 0; x < p.Dv; ++x) out[x * p.o.stride_d] = 0.0f;
    lse = -std::numeric_limits<float>::infinity();
    return;
  }
  // The chunks' weights 2^(m_c - M), once per chunk (not once per output column).
  double weight[kMaxChunks];  // chunks <= kMaxChunks (decode_chunk_keys)
  double L = 0.0;
  for (int64_t c = 0; c < p.chunks; ++c) {
    const float* part = p.part(bg, c, r);
    weight[c] = std::exp2(static_cast<double>(part[0]) - M);
    L += static_cast<double>(part[1]) * weight[c];
  }
  const double norm = static_cast<double>(p.keep_scale) / L;
  // Each column's terms in chunk order, a tile of columns at a time: each chunk's row read along.
  constexpr int64_t kTile = 64;
  double acc[kTile];
  for (int64_t x0 = 0; x0 < p.Dv; x0 += kTile) {
    const int64_t n = std::min(kTile, p.Dv - x0);
    std::fill(acc, acc + n, 0.0);
    for (int64_t c = 0; c < p.chunks; ++c) {
      const float* part = p.part(bg, c, r);
      if (part[0] == -std::numeric_limits<float>::infinity()) continue;
      for (int64_t x = 0; x < n; ++x) acc[x] += static_cast<double>(part[2 + x0 + x]) * weight[c];
    }
    for (int64_t x = 0; x < n; ++x) out[(x0 + x) * p.o.stride_d] = static_cast<float>(acc[x] * norm);
  }
  lse = static_cast<float>((static_cast<double>(M) + std::log2(L)) * 0.693147180559945309417);
}

// Every row of group (b, g) (MergeRow).
void MergeChunks(const DecodeProblem& p, int64_t b, int64_t g) {
  for (int64_t r = 0; r < p.rows; ++r) MergeRow(p, b, g, r);
}

// The keys and values a call reads: (B, G, C, D) and (B, G, C, Dv), float or bf16 bits, the first
// S of each C visible.
struct KvRows {
  const void* keys = nullptr;
  const void* values = nullptr;
  bool bf16 = false;
  int64_t B = 0, G = 0, C = 0, S = 0, D = 0, Dv = 0;
};

// decode_attention on kv, validated here but for kv's own fields (the callers').
void DecodeOn(const char* what, ConstHeads q, const KvRows& kv, MutableHeads o, float* lse,
              const AttentionOptions& options, DecodeWorkspace* workspace) {
  const int64_t G = kv.G, D = kv.D, Dv = kv.Dv, B = kv.B;
  QKV_CHECK(q.batch == B && q.dim == D && q.heads >= 1 && q.tokens >= 0, what, ": q (", q.batch, ", ", q.heads,
            ", ", q.tokens, ", ", q.dim, ") should be (", B, ", H, Tq, ", D, ") for the cache's batch and head_dim");
  QKV_CHECK(q.heads % G == 0, what, ": the cache's ", G, " key/value heads must divide q's ", q.heads,
            " query heads (grouped-query attention)");
  QKV_CHECK(q.tokens < (int64_t{1} << 31), what, ": q has ", q.tokens, " queries, more than 2^31 - 1");
  QKV_CHECK(o.batch == B && o.heads == q.heads && o.tokens == q.tokens && o.dim == Dv, what, ": o (", o.batch, ", ",
            o.heads, ", ", o.tokens, ", ", o.dim, ") should be (", B, ", ", q.heads, ", ", q.tokens, ", ", Dv, ")");
  QKV_CHECK((q.data && o.data) || q.tokens == 0, what, ": q or o has no data");
  QKV_CHECK(lse != nullptr || q.tokens == 0, what, ": lse (", B, ", ", q.heads, ", ", q.tokens, ") is null");
  QKV_CHECK(options.query_offset >= 0 && options.query_offset + q.tokens <= (int64_t{1} << 31), what,
            ": query_offset ", options.query_offset, " with ", q.tokens, " queries puts positions beyond 2^31 - 1");
  QKV_CHECK(options.key_offset == 0 && options.head_offset == 0 && options.batch_offset == 0, what, ": key_offset (",
            options.key_offset, "), head_offset (", options.head_offset, ") and batch_offset (", options.batch_offset,
            ") must be 0: the cache's keys are at positions 0, 1, ...");
  QKV_CHECK(options.window >= 0, what, ": the window must be positive (or 0 for none), got ", options.window);
  QKV_CHECK(std::isfinite(options.softcap) && options.softcap >= 0.0f, what,
            ": softcap must be positive (or 0 for none), got ", options.softcap);
  QKV_CHECK(std::isfinite(options.scale), what, ": scale must be finite, got ", options.scale);
  QKV_CHECK(options.dropout_p >= 0.0f && options.dropout_p < 1.0f, what, ": dropout p must be in [0, 1), got ",
            options.dropout_p);
  if (options.alibi_slopes)
    for (int64_t h = 0; h < q.heads; ++h)
      QKV_CHECK(std::isfinite(options.alibi_slopes[h]), what, ": ALiBi slope ", h, " must be finite, got ",
                options.alibi_slopes[h]);
  const int64_t S = kv.S;
  const AttentionMask& m = options.mask;
  if (m.kind == AttentionMask::Kind::kAdditive || m.kind == AttentionMask::Kind::kBlocked) {
    QKV_CHECK(m.values != nullptr || q.tokens * S == 0, what, ": the mask has no values");
    QKV_CHECK(m.row_stride >= S, what, ": the mask's row stride (", m.row_stride,
              ") is smaller than the number of keys (", S, ")");
  }
  DecodeProblem p;
  p.q = q;
  p.o = o;
  p.lse = lse;
  p.keys = kv.keys;
  p.values = kv.values;
  p.bf16 = kv.bf16;
  p.B = B;
  p.H = q.heads;
  p.G = G;
  p.Tq = q.tokens;
  p.D = D;
  p.Dv = Dv;
  p.C = kv.C;
  p.S = S;
  p.group = p.H / G;
  p.rows = p.group * p.Tq;
  p.scale = options.scale;
  p.mask = m;
  p.query_offset = options.query_offset;
  p.window = options.window;
  p.alibi = options.alibi_slopes;
  p.softcap = options.softcap;
  p.dropout = options.dropout_p > 0.0f;
  p.seed = options.dropout_seed;
  p.threshold = dropout_threshold(options.dropout_p);
  p.keep_scale = p.dropout ? 1.0f / (1.0f - options.dropout_p) : 1.0f;
  p.pool = options.pool ? options.pool : &default_pool();
  if (p.Tq == 0) return;
  // The keys some query sees: from the first query's window start to the last query's causal end.
  p.begin = p.visible_begin(0);
  p.end = p.visible_end(p.Tq - 1);
  const int64_t visible = std::max<int64_t>(0, p.end - p.begin);
  p.chunk = decode_chunk_keys(visible);
  p.chunks = (visible + p.chunk - 1) / p.chunk;
  p.serial = static_cast<double>(B * G) * static_cast<double>(visible) * static_cast<double>(D + Dv) *
                 (p.bf16 ? 2.0 : 4.0) < static_cast<double>(decode_serial_bytes());
  QKV_CHECK(p.chunks <= kMaxChunks, what, ": ", p.chunks, " chunks, more than ", kMaxChunks);  // by construction
  p.part_stride = 2 + pad16(Dv);
  thread_local DecodeWorkspace own;
  DecodeWorkspace& ws = workspace ? *workspace : own;
  const size_t need = static_cast<size_t>(B * G * p.chunks * p.rows) * p.part_stride;
  if (ws.partials.size() < need) ws.partials.resize(need);
  p.partials = ws.partials.data();
  // Per-worker scratch in the workspace too (not the pool's, which a worker grows the first time
  // it happens to run a task): sized here, by the caller, so the first call sizes it for good.
  p.scratch_stride = pad16(static_cast<int64_t>(p.scratch_floats()));
  const size_t scratch = static_cast<size_t>(p.pool->num_threads()) * p.scratch_stride;
  if (ws.scratch.size() < scratch) ws.scratch.resize(scratch);
  p.scratch = ws.scratch.data();
  static std::atomic<uint64_t> calls{0};
  p.call = ++calls;
  if (ws.held.size() < static_cast<size_t>(2 * p.pool->num_threads()))
    ws.held.resize(static_cast<size_t>(2 * p.pool->num_threads()), 0);
  p.held = ws.held.data();
  if (p.chunks == 1) p.merge = MergeChunks;
  if (p.chunks > 0) HWY_DYNAMIC_DISPATCH(DecodeChunks)(p);
  if (p.chunks != 1)  // a task a row: one group's rows (latent attention's heads) merged by every thread
    ForTasks(p, B * G * p.rows, [&](int64_t task, int) {
      const int64_t bg = task / p.rows;
      MergeRow(p, bg / G, bg % G, task % p.rows);
    });
}

}  // namespace

void decode_attention(ConstHeads q, const KvCache& cache, int64_t layer, MutableHeads o, float* lse,
                      const AttentionOptions& options, DecodeWorkspace* workspace) {
  const char* what = "decode_attention";
  QKV_CHECK(layer >= 0 && layer < cache.layers(), what, ": layer ", layer, " is not in [0, ", cache.layers(), ")");
  KvRows kv;
  kv.keys = cache.key_data(layer);
  kv.values = cache.value_data(layer);
  kv.bf16 = cache.dtype() == CacheDtype::kBF16;
  kv.B = cache.batch();
  kv.G = cache.kv_heads();
  kv.C = cache.capacity();
  kv.S = cache.length(layer);
  kv.D = cache.head_dim();
  kv.Dv = cache.value_dim();
  DecodeOn(what, q, kv, o, lse, options, workspace);
}

void decode_attention_rows(ConstHeads q, const float* keys, const float* values, int64_t G, int64_t capacity,
                           int64_t length, int64_t Dv, MutableHeads o, float* lse, const AttentionOptions& options,
                           DecodeWorkspace* workspace) {
  const char* what = "decode_attention_rows";
  QKV_CHECK(G >= 1 && Dv >= 1 && q.dim >= 1 && q.batch >= 1, what, ": key/value heads (", G, "), value dim (", Dv,
            "), q's batch (", q.batch, ") and dim (", q.dim, ") must be at least 1");
  QKV_CHECK(length >= 0 && length <= capacity, what, ": ", length, " keys in rows of capacity ", capacity,
            " (0 <= length <= capacity)");
  QKV_CHECK((keys && values) || length == 0, what, ": no keys or values");
  KvRows kv;
  kv.keys = keys;
  kv.values = values;
  kv.B = q.batch;
  kv.G = G;
  kv.C = capacity;
  kv.S = length;
  kv.D = q.dim;
  kv.Dv = Dv;
  DecodeOn(what, q, kv, o, lse, options, workspace);
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
