// Per-target building blocks the fused attention kernels share (fp32 in flash_attention.cc, bf16
// in flash_attention_bf16.cc): block sizes, scratch carving, packing (widening bf16 on the way),
// the masks, the score variants (softcap, ALiBi) and the dropout key. Included once per target,
// hence the toggling include guard; everything is in an anonymous namespace.
#if defined(QKV_KERNELS_ATTENTION_BLOCKS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_ATTENTION_BLOCKS_INL_H_
#undef QKV_KERNELS_ATTENTION_BLOCKS_INL_H_
#else
#define QKV_KERNELS_ATTENTION_BLOCKS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hwy/cache_control.h"  // hwy::Prefetch
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"  // hn::Tanh (the softcap)
#include "kernels/attention_problem.h"
#include "kernels/attention_tiles-inl.h"
#include "qkv/core/bf16.h"
#include "qkv/core/machine.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace {

// Block sizes. Br = 3 vectors of queries and Bc = 64 keys: a (Br, Bc) block of scores is
// 12 KB, and with the block's queries, keys, values and output the working set stays in L1/L2.
// (Br = 32..64 and Bc = 32..128 measured within noise of each other on AVX-512.)
constexpr int kQueryVectors = 3;
constexpr size_t kBr = kQueryVectors * kLanes;  // 48 with AVX-512, 24 with AVX2
constexpr size_t kBc = 64;                      // a multiple of 4 (one Philox call per 4 keys)
// Register tile of St and Ot: 8 rows x 3 vectors = 24 accumulators with AVX-512's 32 registers
// (4 x 3 with AVX2's 16), leaving room for the 3 B vectors and a broadcast.
constexpr int kScoreRows = kVectorRegisters == 32 ? 8 : 4;
// Register tile of dk, dv, dq (lanes along the head dim): 4 x 4 vectors with AVX-512, 2 x 4 with
// AVX2; both divide 64 keys, 48 (or 24) queries and D = 64 evenly.
constexpr int kGradRows = kVectorRegisters == 32 ? 4 : 2;
constexpr int kGradVectors = 4;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// exp(x) = 2^(x log2(e)): the kernels compute their weights with Exp2 (ScoreUnits).
constexpr float kLog2e = 1.44269504088896341f;
constexpr double kLn2 = 0.693147180559945309417;

inline size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// Whether a head's worth of `floats` floats that a task reads again and again stays in L2: half
// of this core's L2 as the machine reports it (qkv/core/machine.h; the other half holds the
// blocks in flight), 512 KiB on a 1 MiB L2. Beyond it the kernels group their blocks so that each
// read from L3 or memory serves several (ForwardGroup, BackwardGroup).
inline bool FitsInL2(double floats) {
  return floats * sizeof(float) <= 0.5 * static_cast<double>(cache_sizes().l2);
}

// Carves 64-byte-aligned arrays out of one scratch buffer.
class Carver {
 public:
  explicit Carver(float* base) : p_(base) {}
  float* take(size_t n) {
    float* r = p_;
    p_ += round_up(n, 16);
    return r;
  }
  static size_t size(std::initializer_list<size_t> ns) {
    size_t total = 0;
    for (size_t n : ns) total += round_up(n, 16);
    return total;
  }

 private:
  float* p_;
};

// An element of an input head as float32: itself, or a bf16 widened (exact).
HWY_INLINE float Widen(float x) { return x; }
HWY_INLINE float Widen(uint16_t x) { return bf16_to_float(x); }

// Asks for the cache lines of row n of head (b, h) of x ahead of use. Rows of interleaved heads
// are a page apart, where the hardware prefetchers do not follow; without this each row costs a
// full cache miss in turn. (Always inlined: GCC drops the calls it has not inlined to a function
// that only prefetches, and this one's were gone until 2026-12-06.)
template <typename T>
HWY_INLINE void PrefetchRow(const Heads<const T>& x, int64_t b, int64_t h, int64_t n) {
  if (n >= x.tokens) return;
  const char* p = reinterpret_cast<const char*>(x.row(b, h, n));
  const size_t bytes = static_cast<size_t>((x.dim - 1) * x.stride_d + 1) * sizeof(T);
  for (size_t off = 0; off < bytes; off += 64) hwy::Prefetch(p + off);
}

constexpr int64_t kPrefetchRows = 16;

// Copies rows [j0, j0 + n) of head (b, h) of x into dst (n, ld) as float32 (bf16 widened),
// zero-padding columns [dim, ld).
template <typename T>
void PackRows(Heads<const T> x, int64_t b, int64_t h, int64_t j0, size_t n, float* HWY_RESTRICT dst, size_t ld) {
  const size_t dim = static_cast<size_t>(x.dim);
  for (int64_t r = 0; r < kPrefetchRows; ++r) PrefetchRow(x, b, h, j0 + r);
  for (size_t j = 0; j < n; ++j) {
    const int64_t row = j0 + static_cast<int64_t>(j);
    if (static_cast<int64_t>(j) + kPrefetchRows < static_cast<int64_t>(n)) PrefetchRow(x, b, h, row + kPrefetchRows);
    const T* src = x.row(b, h, row);
    float* out = dst + j * ld;
    if (std::is_same_v<T, float> && x.stride_d == 1) {
      std::memcpy(out, src, dim * sizeof(float));
    } else {
      for (size_t c = 0; c < dim; ++c) out[c] = Widen(src[c * x.stride_d]);
    }
    for (size_t c = dim; c < ld; ++c) out[c] = 0.0f;
  }
}

// dst (dim, kBr) = (rows [i0, i0 + n) of head (b, h) of x) ^T * factor, as float32 (bf16
// widened first); lanes n.. are zero.
template <typename T>
void PackTransposed(Heads<const T> x, int64_t b, int64_t h, int64_t i0, size_t n, float factor,
                    float* HWY_RESTRICT dst) {
  const size_t dim = static_cast<size_t>(x.dim);
  // All the block's rows at once: their misses then overlap instead of queueing one after another.
  for (size_t i = 0; i < n; ++i) PrefetchRow(x, b, h, i0 + static_cast<int64_t>(i));
  if constexpr (kHasTranspose16 && std::is_same_v<T, float>) {
    if (n == kBr && x.stride_d == 1 && dim % 16 == 0) {  // 16 x 16 blocks transposed in registers
      const DF d;
      const VF f = hn::Set(d, factor);
      for (size_t i = 0; i < kBr; i += 16)
        for (size_t c = 0; c < dim; c += 16) {
          VF r[16];
          for (size_t k = 0; k < 16; ++k) r[k] = hn::LoadU(d, x.row(b, h, i0 + static_cast<int64_t>(i + k)) + c);
          Transpose16(r);
          for (size_t k = 0; k < 16; ++k) hn::StoreU(hn::Mul(r[k], f), d, dst + (c + k) * kBr + i);
        }
      return;
    }
  }
  for (size_t i = 0; i < kBr; ++i) {
    if (i < n) {
      const T* src = x.row(b, h, i0 + static_cast<int64_t>(i));
      for (size_t c = 0; c < dim; ++c) dst[c * kBr + i] = Widen(src[c * x.stride_d]) * factor;
    } else {
      for (size_t c = 0; c < dim; ++c) dst[c * kBr + i] = 0.0f;
    }
  }
}

// x rounded to the nearest bf16 value (ties to even), kept as float32: the bf16 kernel's
// rounding of P (and dS, d_o) before they enter a product, when it multiplies in float32. The
// same rounding as float_to_bf16 and as AVX512_BF16's vcvtne2ps2bf16 (NaN stays NaN).
HWY_INLINE VF RoundToBF16(DF d, VF x) {
  const DU du;
  const VU u = hn::BitCast(du, x);
  const VU odd = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const VU r = hn::And(hn::Add(u, hn::Add(odd, hn::Set(du, 0x7fffu))), hn::Set(du, 0xffff0000u));
  return hn::IfThenElse(hn::IsNaN(x), x, hn::BitCast(d, r));
}
// Rows [0, rows) of a (rows, kBr) block rounded to bf16 values in place.
inline void RoundBlockToBF16(float* HWY_RESTRICT x, size_t rows) {
  const DF d;
  for (size_t j = 0; j < rows * kBr; j += kLanes) hn::StoreU(RoundToBF16(d, hn::LoadU(d, x + j)), d, x + j);
}

// Position differences pos - j as int32 lanes: clamped to +-2^30 (a window or a distance beyond
// that is as good as infinite for 2^31 keys; a block's lanes and rows add less than 2^8).
inline int32_t ClampedDistance(int64_t pos, int64_t j) {
  constexpr int64_t kFar = int64_t{1} << 30;
  return static_cast<int32_t>(std::clamp(pos - j, -kFar, kFar));
}

// -inf where the causal mask or the window hides key j0 + j (row j of St) from the query at
// position pos0 + lane: j > pos (causal), j <= pos - window (window > 0).
inline void ApplyPositionMask(const AttentionProblem& p, float* HWY_RESTRICT st, int64_t pos0, int64_t j0, size_t cols) {
  const DF d;
  const DI di;
  const VF neg_inf = hn::Set(d, kNegInf);
  const auto zero = hn::Zero(di);
  // dist0[v] = pos - j0 of the lanes of query vector v; row j subtracts j
  hn::Vec<DI> dist0[kQueryVectors];
  const int32_t base = ClampedDistance(pos0, p.key_pos(j0));
  for (int v = 0; v < kQueryVectors; ++v) dist0[v] = hn::Iota(di, base + v * static_cast<int32_t>(kLanes));
  if (p.window <= 0) {  // causal only: the book's mask
    for (size_t j = 0; j < cols; ++j) {
      const auto jv = hn::Set(di, static_cast<int32_t>(j));
      for (int v = 0; v < kQueryVectors; ++v) {
        const auto dist = hn::Sub(dist0[v], jv);
        float* s = st + j * kBr + v * kLanes;
        hn::StoreU(hn::IfThenElse(hn::RebindMask(d, hn::Lt(dist, zero)), neg_inf, hn::LoadU(d, s)), d, s);
      }
    }
    return;
  }
  // dist >= window as dist > window - 1 (integer Ge is not on every Highway version's targets)
  const auto window_m1 = hn::Set(di, static_cast<int32_t>(std::min<int64_t>(p.window, int64_t{1} << 30) - 1));
  const bool causal = p.causal();
  for (size_t j = 0; j < cols; ++j) {
    const auto jv = hn::Set(di, static_cast<int32_t>(j));
    for (int v = 0; v < kQueryVectors; ++v) {
      const auto dist = hn::Sub(dist0[v], jv);
      auto hidden = hn::Gt(dist, window_m1);
      if (causal) hidden = hn::Or(hidden, hn::Lt(dist, zero));
      float* s = st + j * kBr + v * kLanes;
      hn::StoreU(hn::IfThenElse(hn::RebindMask(d, hidden), neg_inf, hn::LoadU(d, s)), d, s);
    }
  }
}

// Applies the mask to St (Bc, Br, base-2 scores where an additive mask is added: ScoreUnits) for queries i0 + [0, rows) (at positions
// pos0 + [0, rows)) and keys j0 + [0, cols): the additive or boolean mask's values, then the
// causal mask and the window.
inline void ApplyMask(const AttentionProblem& p, float* HWY_RESTRICT st, int64_t i0, int64_t pos0, int64_t j0, size_t rows,
               size_t cols) {
  switch (p.mask.kind) {
    case AttentionMask::Kind::kNone:
    case AttentionMask::Kind::kCausal:
      break;
    case AttentionMask::Kind::kAdditive:
      for (size_t i = 0; i < rows; ++i) {
        const float* m = p.mask.values + (i0 + static_cast<int64_t>(i)) * p.mask.row_stride + j0;
        for (size_t j = 0; j < cols; ++j) st[j * kBr + i] += m[j] * kLog2e;
      }
      break;
    case AttentionMask::Kind::kBlocked:
      for (size_t i = 0; i < rows; ++i) {
        const float* m = p.mask.values + (i0 + static_cast<int64_t>(i)) * p.mask.row_stride + j0;
        for (size_t j = 0; j < cols; ++j)
          if (m[j] != 0.0f) st[j * kBr + i] = kNegInf;
      }
      break;
  }
  if (p.causal() || p.window > 0) ApplyPositionMask(p, st, pos0, j0, cols);
}

// Whether a block of queries at positions [pos0, pos0 + rows) against keys [j0, j0 + cols)
// needs ApplyMask: mask values, or some pair the causal mask or the window hides.
inline bool BlockNeedsMask(const AttentionProblem& p, int64_t pos0, size_t rows, int64_t j0, size_t cols) {
  if (p.mask.kind == AttentionMask::Kind::kAdditive || p.mask.kind == AttentionMask::Kind::kBlocked) return true;
  const int64_t key0 = p.key_pos(j0);
  if (p.causal() && key0 + static_cast<int64_t>(cols) - 1 > pos0) return true;  // some key beyond some query
  if (p.window > 0 && key0 <= pos0 + static_cast<int64_t>(rows) - 1 - p.window) return true;  // some key before a window
  return false;
}

// Whether the softcap or ALiBi transforms the scores (hoisted: the book's path never asks per block).
inline bool HasScoreVariants(const AttentionProblem& p) { return p.softcap > 0.0f || p.alibi != nullptr; }

// ALiBi's anchor of query i of head h: the key whose bias -slope (pos_i - j) is the largest among
// those the causal mask and the window leave visible (the last one for slope >= 0, else the first).
// The kernels add -slope (anchor_i - j) instead, which differs by a constant per query - the same
// weights - but is <= 0 and small where the weights are large: biases of tens (a negative slope,
// or no causal mask) would otherwise cost float scores their last digits. lse gets the constant
// back, in double (AlibiShift).
inline int64_t AlibiAnchor(const AttentionProblem& p, int64_t h, int64_t i) {
  const int64_t begin = p.visible_begin(i), end = p.visible_end(i);
  if (begin >= end) return p.pos(i) - p.key_offset;  // no visible key: any anchor (a local key index)
  return p.alibi[h] >= 0.0f ? end - 1 : begin;
}
// lse = lse' - AlibiShift, lse' the log-sum-exp of the anchored scores.
inline double AlibiShift(const AttentionProblem& p, int64_t h, int64_t i) {
  return static_cast<double>(p.alibi[h]) * static_cast<double>(p.pos(i) - p.key_pos(AlibiAnchor(p, h, i)));
}
// anchor (Br) = AlibiAnchor of queries i0 + lane (as floats: exact below 2^24), the last row's
// in lanes beyond rows.
inline void FillAlibiAnchors(const AttentionProblem& p, int64_t h, int64_t i0, size_t rows, float* anchor) {
  for (size_t i = 0; i < kBr; ++i)
    anchor[i] = static_cast<float>(AlibiAnchor(p, h, i0 + static_cast<int64_t>(std::min(i, rows - 1))));
}

// The softcap and ALiBi on St (Bc, Br; base-2 scores (ScoreUnits) x2 = x log2(e) of query head h, keys
// j0 + row), before the masks (attention.h's order):
//   s2 = cap2 tanh(x2 / cap2), cap2 = cap log2(e)   (tanh kept in tt, (Bc, Br), when not null)
//   s2 -= slope[h] log2(e) (anchor - j)            (anchor (Br): the queries' AlibiAnchor)
inline void ApplyScoreVariants(const AttentionProblem& p, int64_t h, float* HWY_RESTRICT st, float* HWY_RESTRICT tt,
                        const float* HWY_RESTRICT anchor, int64_t j0, size_t cols) {
  const DF d;
  if (p.softcap > 0.0f) {
    const float cap2 = p.softcap * kLog2e;
    const VF cap = hn::Set(d, cap2), inv = hn::Set(d, 1.0f / cap2);
    for (size_t j = 0; j < cols; ++j)
      for (int v = 0; v < kQueryVectors; ++v) {
        float* s = st + j * kBr + v * kLanes;
        const VF t = hn::Tanh(d, hn::Mul(hn::LoadU(d, s), inv));
        hn::StoreU(hn::Mul(cap, t), d, s);
        if (tt) hn::StoreU(t, d, tt + j * kBr + v * kLanes);
      }
  }
  if (p.alibi) {
    const VF slope = hn::Set(d, p.alibi[h] * kLog2e);
    for (size_t j = 0; j < cols; ++j) {
      const VF key = hn::Set(d, static_cast<float>(j0 + static_cast<int64_t>(j)));
      for (int v = 0; v < kQueryVectors; ++v) {
        const VF dist = hn::Sub(hn::LoadU(d, anchor + v * kLanes), key);
        float* s = st + j * kBr + v * kLanes;
        hn::StoreU(hn::NegMulAdd(slope, dist, hn::LoadU(d, s)), d, s);
      }
    }
  }
}

// What the kernels' scores St hold, and how a weight comes from them: 2^(x f) with x = St - m in
// the forward (m the row's running max of St: exact near the max, 0 at it) and x f = St f - lse2
// in the backward (lse2 the forward's lse in base 2, St f inside one FMA), so the exponent is
// rounded only at its own size, small where the weight is large. On the book's path St is the raw
// product q . k (score 1) and f = scale log2(e) (exp): the weights' only rounding before the
// exponent is the product's, where scaling q first (or St after) added one per element
// (docs/kernels.md). The softcap, ALiBi and an additive mask transform scaled scores, so with them
// (or an unusual scale: 0 or negative, where the raw max is not the scores' max, or below 2^-8,
// where raw products would overflow hundreds of times sooner than scaled ones) q is scaled by
// scale log2(e) before the product (score) and f = 1: base-2 scores.
struct ScoreUnits {
  float score = 1.0f;  // the factor on q (or on the product): St = score (q . k)
  float exp = 1.0f;    // f: a weight is 2^((St - m) f)
};
inline ScoreUnits ScoreUnitsOf(const AttentionProblem& p) {
  const float base2 = p.scale * kLog2e;
  const bool raw = !HasScoreVariants(p) && p.mask.kind != AttentionMask::Kind::kAdditive && p.scale >= 0x1p-8f;
  return raw ? ScoreUnits{1.0f, base2} : ScoreUnits{base2, 1.0f};
}

inline DropoutKey MakeDropoutKey(const AttentionProblem& p, int64_t b, int64_t h) {
  return {static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32), static_cast<uint32_t>(p.batch_offset + b),
          static_cast<uint32_t>(p.head_offset + h), p.threshold};
}


}  // namespace
}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_ATTENTION_BLOCKS_INL_H_
