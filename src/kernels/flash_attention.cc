// The fused attention kernels, forward and backward (FlashAttention-2 on the CPU), compiled once
// per SIMD target by Highway and dispatched at run time. See include/qkv/kernels/attention.h for
// the math and attention_tiles-inl.h for the tile layout (one query per SIMD lane).
//
// Forward, per task = (b, h, group of query blocks of Br queries; one block unless the head's keys
// and values outgrow L2), for each query block:
//   Qt = (q_block * scale)^T                                      (D, Br)
//   for each block of Bc keys from the window's start to the causal diagonal (each key block
//   visits the group's query blocks in turn):
//     St = k_block Qt                                             (Bc, Br)  scores^T
//     softcap, ALiBi, mask St; m_new = max(m, column max of St)   online softmax, lane-wise
//     Pt = exp(St - m_new); l = l * exp(m - m_new) + column sum of Pt
//     Ot = Ot * exp(m - m_new) + v_block^T (Pt * dropout)         (Dv, Br)
//   o = (Ot / l)^T, lse = m + log(l)
// Backward, per task = (b, g) - a key/value head - FlashAttention-2's loop order, for each query
// head h of g's group in turn: for each key block j (holding dk_j, dv_j, which the group's
// heads add to in head order), for each query block i that sees it:
//   Pt = exp(mask(k_j Qt_i) - lse_i)          weights^T, recomputed (softcap, ALiBi included)
//   dPt = v_j dOt_i                           (d_o v^T)^T
//   dv_j += (Pt * z) d_o_i                     z = dropout keep / (1 - p)
//   dSt = Pt * (dPt * z - Di),  Di = sum_d d_o[i, d] o[i, d]   (times 1 - tanh^2 with a softcap)
//   dk_j += dSt (q_i * scale);  dq_i += dSt^T k_j   (dq scaled at the end)
// Query i is at position query_offset + i, key j at key_offset + j: the causal mask, the window,
// ALiBi and the dropout mask use positions. The variants' work (softcap, ALiBi, the window's mask) is decided once per
// call or per block, never per element on the book's path.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/flash_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "hwy/base.h"
#include "hwy/cache_control.h"  // hwy::Prefetch

#include "hwy/highway.h"
#include "kernels/flush_subnormals.h"
#include "hwy/contrib/math/math-inl.h"  // hn::Tanh (the softcap)
#include "kernels/attention_problem.h"
#include "qkv/core/machine.h"
#include "kernels/attention_tiles-inl.h"

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
// The kernels keep scores in base 2: s2 = s * log2(e), so that exp(s - m) = 2^(s2 - m2).
constexpr float kLog2e = 1.44269504088896341f;
constexpr double kLn2 = 0.693147180559945309417;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// Whether a head's worth of `floats` floats that a task reads again and again stays in L2: half
// of this core's L2 as the machine reports it (qkv/core/machine.h; the other half holds the
// blocks in flight), 512 KiB on a 1 MiB L2. Beyond it the kernels group their blocks so that each
// read from L3 or memory serves several (ForwardGroup, BackwardGroup).
bool FitsInL2(double floats) {
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

// Asks for the cache lines of row n of head (b, h) of x ahead of use. Rows of interleaved heads
// are a page apart, where the hardware prefetchers do not follow; without this each row costs a
// full cache miss in turn.
void PrefetchRow(const ConstHeads& x, int64_t b, int64_t h, int64_t n) {
  if (n >= x.tokens) return;
  const char* p = reinterpret_cast<const char*>(x.row(b, h, n));
  const size_t bytes = static_cast<size_t>((x.dim - 1) * x.stride_d + 1) * sizeof(float);
  for (size_t off = 0; off < bytes; off += 64) hwy::Prefetch(p + off);
}

constexpr int64_t kPrefetchRows = 16;

// Copies rows [j0, j0 + n) of head (b, h) of x into dst (n, ld), zero-padding columns [dim, ld).
void PackRows(ConstHeads x, int64_t b, int64_t h, int64_t j0, size_t n, float* HWY_RESTRICT dst, size_t ld) {
  const size_t dim = static_cast<size_t>(x.dim);
  for (int64_t r = 0; r < kPrefetchRows; ++r) PrefetchRow(x, b, h, j0 + r);
  for (size_t j = 0; j < n; ++j) {
    const int64_t row = j0 + static_cast<int64_t>(j);
    if (static_cast<int64_t>(j) + kPrefetchRows < static_cast<int64_t>(n)) PrefetchRow(x, b, h, row + kPrefetchRows);
    const float* src = x.row(b, h, row);
    float* out = dst + j * ld;
    if (x.stride_d == 1) {
      std::memcpy(out, src, dim * sizeof(float));
    } else {
      for (size_t c = 0; c < dim; ++c) out[c] = src[c * x.stride_d];
    }
    for (size_t c = dim; c < ld; ++c) out[c] = 0.0f;
  }
}

// dst (dim, kBr) = (rows [i0, i0 + n) of head (b, h) of x) ^T * factor; lanes n.. are zero.
void PackTransposed(ConstHeads x, int64_t b, int64_t h, int64_t i0, size_t n, float factor,
                    float* HWY_RESTRICT dst) {
  const size_t dim = static_cast<size_t>(x.dim);
  // All the block's rows at once: their misses then overlap instead of queueing one after another.
  for (size_t i = 0; i < n; ++i) PrefetchRow(x, b, h, i0 + static_cast<int64_t>(i));
  if constexpr (kHasTranspose16) {
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
      const float* src = x.row(b, h, i0 + static_cast<int64_t>(i));
      for (size_t c = 0; c < dim; ++c) dst[c * kBr + i] = src[c * x.stride_d] * factor;
    } else {
      for (size_t c = 0; c < dim; ++c) dst[c * kBr + i] = 0.0f;
    }
  }
}

// Position differences pos - j as int32 lanes: clamped to +-2^30 (a window or a distance beyond
// that is as good as infinite for 2^31 keys; a block's lanes and rows add less than 2^8).
int32_t ClampedDistance(int64_t pos, int64_t j) {
  constexpr int64_t kFar = int64_t{1} << 30;
  return static_cast<int32_t>(std::clamp(pos - j, -kFar, kFar));
}

// -inf where the causal mask or the window hides key j0 + j (row j of St) from the query at
// position pos0 + lane: j > pos (causal), j <= pos - window (window > 0).
void ApplyPositionMask(const AttentionProblem& p, float* HWY_RESTRICT st, int64_t pos0, int64_t j0, size_t cols) {
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

// Applies the mask to St (Bc, Br, base-2 scores) for queries i0 + [0, rows) (at positions
// pos0 + [0, rows)) and keys j0 + [0, cols): the additive or boolean mask's values, then the
// causal mask and the window.
void ApplyMask(const AttentionProblem& p, float* HWY_RESTRICT st, int64_t i0, int64_t pos0, int64_t j0, size_t rows,
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
bool BlockNeedsMask(const AttentionProblem& p, int64_t pos0, size_t rows, int64_t j0, size_t cols) {
  if (p.mask.kind == AttentionMask::Kind::kAdditive || p.mask.kind == AttentionMask::Kind::kBlocked) return true;
  const int64_t key0 = p.key_pos(j0);
  if (p.causal() && key0 + static_cast<int64_t>(cols) - 1 > pos0) return true;  // some key beyond some query
  if (p.window > 0 && key0 <= pos0 + static_cast<int64_t>(rows) - 1 - p.window) return true;  // some key before a window
  return false;
}

// Whether the softcap or ALiBi transforms the scores (hoisted: the book's path never asks per block).
bool HasScoreVariants(const AttentionProblem& p) { return p.softcap > 0.0f || p.alibi != nullptr; }

// ALiBi's anchor of query i of head h: the key whose bias -slope (pos_i - j) is the largest among
// those the causal mask and the window leave visible (the last one for slope >= 0, else the first).
// The kernels add -slope (anchor_i - j) instead, which differs by a constant per query - the same
// weights - but is <= 0 and small where the weights are large: biases of tens (a negative slope,
// or no causal mask) would otherwise cost float scores their last digits. lse gets the constant
// back, in double (AlibiShift).
int64_t AlibiAnchor(const AttentionProblem& p, int64_t h, int64_t i) {
  const int64_t begin = p.visible_begin(i), end = p.visible_end(i);
  if (begin >= end) return p.pos(i) - p.key_offset;  // no visible key: any anchor (a local key index)
  return p.alibi[h] >= 0.0f ? end - 1 : begin;
}
// lse = lse' - AlibiShift, lse' the log-sum-exp of the anchored scores.
double AlibiShift(const AttentionProblem& p, int64_t h, int64_t i) {
  return static_cast<double>(p.alibi[h]) * static_cast<double>(p.pos(i) - p.key_pos(AlibiAnchor(p, h, i)));
}
// anchor (Br) = AlibiAnchor of queries i0 + lane (as floats: exact below 2^24), the last row's
// in lanes beyond rows.
void FillAlibiAnchors(const AttentionProblem& p, int64_t h, int64_t i0, size_t rows, float* anchor) {
  for (size_t i = 0; i < kBr; ++i)
    anchor[i] = static_cast<float>(AlibiAnchor(p, h, i0 + static_cast<int64_t>(std::min(i, rows - 1))));
}

// The softcap and ALiBi on St (Bc, Br; base-2 scores x2 = x log2(e) of query head h, keys
// j0 + row), before the masks (attention.h's order):
//   s2 = cap2 tanh(x2 / cap2), cap2 = cap log2(e)   (tanh kept in tt, (Bc, Br), when not null)
//   s2 -= slope[h] log2(e) (anchor - j)            (anchor (Br): the queries' AlibiAnchor)
void ApplyScoreVariants(const AttentionProblem& p, int64_t h, float* HWY_RESTRICT st, float* HWY_RESTRICT tt,
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

DropoutKey MakeDropoutKey(const AttentionProblem& p, int64_t b, int64_t h) {
  return {static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32), static_cast<uint32_t>(p.batch_offset + b),
          static_cast<uint32_t>(p.head_offset + h), p.threshold};
}

// ---------------------------------------------------------------------------------------------
// Forward

// One query block's running state: its queries (transposed and pre-scaled), the output
// accumulator and the online softmax's running max and sum, lane i = query i0 + i.
struct QueryBlock {
  float* qt = nullptr;     // (D, Br)   (q * scale * log2(e))^T: base-2 scores
  float* ot = nullptr;     // (Dv, Br)  sum_j P[i, j] v[j], transposed
  float* m = nullptr;      // (Br)      running max of the base-2 scores
  float* l = nullptr;      // (Br)      running sum of 2^(s - m)
  float* alpha = nullptr;  // (Br)      this step's rescale 2^(m_old - m_new)
  float* mx = nullptr;     // (Br)      this step's column max
  float* anchor = nullptr; // (Br)      ALiBi's anchors (AlibiAnchor), with ALiBi
  int64_t i0 = 0;          // the block's first query
  int64_t pos0 = 0;        // its position (query_offset + i0)
  size_t rows = 0;         // its queries (at most Br)
  int64_t j_begin = 0;     // keys [j_begin, j_end) are visible to some of them (causal mask,
  int64_t j_end = 0;       // window); empty: j_begin = j_end = 0
  int64_t j_first = 0;     // the first key block it attends to (j_begin rounded down to Bc)
};

// A task's query blocks share each block of keys and values while it is in L1: kMaxGroup blocks
// at most (their state is 8 x 25 KB for D = 64, in L2).
constexpr size_t kMaxGroup = 8;

struct ForwardScratch {
  float* st;                         // (Bc, Br) scores^T of one (key block, query block) pair
  QueryBlock blocks[kMaxGroup];
  float *kc, *vc;  // (S, D), (S, Dv): the head's keys and values, copied (when they are not contiguous)
  // (alibi: whether to carve the anchors; without, the layout is the book's path's as it was.)
  static size_t floats(size_t group, size_t D, size_t Dv, size_t cached_keys, bool alibi) {
    return Carver::size({kBc * kBr, cached_keys * D, cached_keys * Dv}) +
           group * Carver::size({D * kBr, Dv * kBr, kBr, kBr, kBr, kBr, alibi ? kBr : 0});
  }
  ForwardScratch(float* base, size_t group, size_t D, size_t Dv, size_t cached_keys, bool alibi) {
    Carver c(base);
    st = c.take(kBc * kBr);
    kc = c.take(cached_keys * D);
    vc = c.take(cached_keys * Dv);
    for (size_t g = 0; g < group; ++g) {
      QueryBlock& q = blocks[g];
      q.qt = c.take(D * kBr);
      q.ot = c.take(Dv * kBr);
      q.m = c.take(kBr);
      q.l = c.take(kBr);
      q.alpha = c.take(kBr);
      q.mx = c.take(kBr);
      q.anchor = c.take(alibi ? kBr : 0);
    }
  }
};

// Query blocks per task. While a head's keys and values fit in half of L2 (FitsInL2), every
// query block can read them from there on its own. Beyond that each block would stream them
// from L3 or memory - at T = 65536 that is 16 MB per block on average, and 2 threads then wait
// on memory half of the time - so a task takes kMaxGroup blocks and runs each key block through
// all of them in turn, reading the keys and values once per group.
size_t ForwardGroup(const AttentionProblem& p) {
  return FitsInL2(static_cast<double>(p.S) * static_cast<double>(p.D + p.Dv)) ? 1 : kMaxGroup;
}

// Keys and values are read where they are when each head's rows are contiguous ((B, H, S, D)
// arrays). Otherwise - heads interleaved in the rows of a projection output, where consecutive
// keys of a head are a page apart and the hardware prefetchers, which stop at page boundaries,
// cannot follow (35% slower measured) - each worker copies the rows of the head it works on
// into its scratch once, and reuses them for the following tasks of the same head.
struct HeadCache {
  int64_t bh = -1;    // the head whose rows are in kc, vc
  int64_t rows = 0;   // rows [0, rows) are there
};

bool RowsContiguous(const AttentionProblem& p) {
  return p.k.stride_d == 1 && p.k.stride_n == p.D && p.v.stride_d == 1 && p.v.stride_n == p.Dv;
}

// One online-softmax step over St (cols, Br) for query block q: updates m, l, writes alpha =
// exp(m_old - m_new) and replaces St by the (dropped-out) probabilities exp(St - m_new). q.mx
// holds the block's column max.
void OnlineSoftmaxStep(const AttentionProblem& p, const DropoutKey& key, const QueryBlock& q, float* st_base,
                       int64_t j0, size_t cols) {
  const DF d;
  VF m_use[kQueryVectors], sum[kQueryVectors];
  for (int v = 0; v < kQueryVectors; ++v) {
    const VF m_old = hn::LoadU(d, q.m + v * kLanes);
    const VF m_new = hn::Max(m_old, hn::LoadU(d, q.mx + v * kLanes));
    // A query with no visible key yet keeps m = -inf; subtract 0 instead so exp gives 0, not NaN.
    m_use[v] = hn::IfThenZeroElse(hn::Eq(m_new, hn::Set(d, kNegInf)), m_new);
    const VF alpha = Exp2(d, hn::Sub(m_old, m_use[v]));
    hn::StoreU(alpha, d, q.alpha + v * kLanes);
    hn::StoreU(m_new, d, q.m + v * kLanes);
    sum[v] = hn::Mul(hn::LoadU(d, q.l + v * kLanes), alpha);
  }
  if (!p.dropout) {
    for (size_t j = 0; j < cols; ++j) {
      HWY_UNROLL(4) for (int v = 0; v < kQueryVectors; ++v) {
        float* st = st_base + j * kBr + v * kLanes;
        const VF pr = Exp2(d, hn::Sub(hn::LoadU(d, st), m_use[v]));
        sum[v] = hn::Add(sum[v], pr);
        hn::StoreU(pr, d, st);
      }
    }
  } else {
    for (size_t j = 0; j < cols; j += 4) {
      for (int v = 0; v < kQueryVectors; ++v) {
        hn::Mask<DF> drop[4];
        DropoutDrop4(key, q.pos0 + v * static_cast<int64_t>(kLanes), p.key_pos(j0 + static_cast<int64_t>(j)), drop);
        for (size_t r = 0; r < 4 && j + r < cols; ++r) {
          float* st = st_base + (j + r) * kBr + v * kLanes;
          const VF pr = Exp2(d, hn::Sub(hn::LoadU(d, st), m_use[v]));
          sum[v] = hn::Add(sum[v], pr);  // the normaliser counts every weight, dropped or not
          hn::StoreU(hn::IfThenZeroElse(drop[r], pr), d, st);
        }
      }
    }
  }
  for (int v = 0; v < kQueryVectors; ++v) hn::StoreU(sum[v], d, q.l + v * kLanes);
}

// Query block q against keys [j0, j0 + cols) (kb, vb: their rows, row strides ldk, ldv):
//   St = k_block Qt, masked; mx = its column max; the online softmax step; Ot = Ot alpha + v^T Pt
template <int kD>
void AttendKeyBlock(const AttentionProblem& p, const DropoutKey& key, const QueryBlock& q, int64_t h, float* st,
                    int64_t j0, size_t cols, const float* kb, size_t ldk, const float* vb, size_t ldv, size_t D,
                    size_t Dv) {
  const DF d;
  BlockProduct<kScoreRows, kQueryVectors, false, Out::kStore, kD>(cols, kQueryVectors, kb, ldk, q.qt, kBr, D, st,
                                                                  kBr);
  if (HasScoreVariants(p)) ApplyScoreVariants(p, h, st, nullptr, q.anchor, j0, cols);
  if (BlockNeedsMask(p, q.pos0, q.rows, j0, cols)) ApplyMask(p, st, q.i0, q.pos0, j0, q.rows, cols);
  {  // the query vectors' maxima side by side: three independent chains of max, not one
    VF mx[kQueryVectors];
    for (int v = 0; v < kQueryVectors; ++v) mx[v] = hn::Set(d, kNegInf);
    for (size_t j = 0; j < cols; ++j)
      HWY_UNROLL(4) for (int v = 0; v < kQueryVectors; ++v) mx[v] = hn::Max(mx[v], hn::LoadU(d, st + j * kBr + v * kLanes));
    for (int v = 0; v < kQueryVectors; ++v) hn::StoreU(mx[v], d, q.mx + v * kLanes);
  }
  OnlineSoftmaxStep(p, key, q, st, j0, cols);
  // Ot = Ot * alpha + v_block^T Pt (Ot is still zero at the block's first key block)
  if (j0 > q.j_first) {
    for (size_t c = 0; c < Dv; ++c)
      for (int v = 0; v < kQueryVectors; ++v) {
        float* x = q.ot + c * kBr + v * kLanes;
        hn::StoreU(hn::Mul(hn::LoadU(d, x), hn::LoadU(d, q.alpha + v * kLanes)), d, x);
      }
  }
  if (cols == kBc) {
    BlockProduct<kScoreRows, kQueryVectors, true, Out::kAccumulate, static_cast<int>(kBc)>(Dv, kQueryVectors, vb, ldv,
                                                                                           st, kBr, cols, q.ot, kBr);
  } else {
    BlockProduct<kScoreRows, kQueryVectors, true, Out::kAccumulate>(Dv, kQueryVectors, vb, ldv, st, kBr, cols, q.ot,
                                                                   kBr);
  }
}

// lse and o = (Ot / l)^T of query block q; a row with no visible key (l = 0) gets o = 0, lse = -inf.
void WriteQueryBlock(const AttentionProblem& p, const QueryBlock& q, MutableHeads o, float* lse, int64_t b,
                     int64_t h, size_t Dv) {
  float* lse_row = lse + (b * p.H + h) * p.T + q.i0;
  for (size_t i = 0; i < q.rows; ++i) {
    const float l = q.l[i];
    // m and l are base 2: lse = ln(2^m l) = (m + log2 l) ln 2
    const double shift = p.alibi ? AlibiShift(p, h, q.i0 + static_cast<int64_t>(i)) : 0.0;
    lse_row[i] = l == 0.0f ? kNegInf : static_cast<float>((q.m[i] + std::log2(static_cast<double>(l))) * kLn2 - shift);
  }
  if constexpr (kHasTranspose16) {
    if (q.rows == kBr && o.stride_d == 1 && Dv % 16 == 0) {  // 16 x 16 blocks transposed in registers
      const DF d;
      for (int v = 0; v < kQueryVectors; ++v) {
        const VF l = hn::LoadU(d, q.l + v * kLanes);
        const VF inv = hn::IfThenZeroElse(hn::Eq(l, hn::Zero(d)), hn::Div(hn::Set(d, p.keep_scale), l));
        for (size_t c = 0; c < Dv; c += 16) {
          VF r[16];
          for (size_t k = 0; k < 16; ++k) r[k] = hn::Mul(hn::LoadU(d, q.ot + (c + k) * kBr + v * kLanes), inv);
          Transpose16(r);
          for (size_t k = 0; k < 16; ++k)
            hn::StoreU(r[k], d, o.row(b, h, q.i0 + v * static_cast<int64_t>(kLanes) + static_cast<int64_t>(k)) + c);
        }
      }
      return;
    }
  }
  for (size_t i = 0; i < q.rows; ++i) {
    const float l = q.l[i];
    const float inv = l == 0.0f ? 0.0f : p.keep_scale / l;
    float* out = o.row(b, h, q.i0 + static_cast<int64_t>(i));
    for (size_t c = 0; c < Dv; ++c) out[c * o.stride_d] = q.ot[c * kBr + i] * inv;
  }
}

// Query blocks [first, first + count) of head (b, h); query block n starts at row
// block_start(n) and has block_rows(n) rows.
template <int kD, typename Start, typename Rows>
void ForwardTask(const AttentionProblem& p, MutableHeads o, float* lse, int64_t b, int64_t h, int64_t first,
                 size_t count, const Start& block_start, const Rows& block_rows, float* scratch, HeadCache& cache) {
  const size_t D = kD > 0 ? kD : static_cast<size_t>(p.D);
  const size_t Dv = kD > 0 ? kD : static_cast<size_t>(p.Dv);
  const bool direct = RowsContiguous(p);
  ForwardScratch s(scratch, count, D, Dv, direct ? 0 : static_cast<size_t>(p.S), p.alibi != nullptr);
  const DropoutKey key = MakeDropoutKey(p, b, h);
  const int64_t kvh = p.kv_head(h);  // grouped-query heads read their group's keys and values
  int64_t j_begin = p.S, j_end = 0;  // over the whole group
  for (size_t g = 0; g < count; ++g) {
    QueryBlock& q = s.blocks[g];
    q.i0 = block_start(first + static_cast<int64_t>(g));
    q.pos0 = p.pos(q.i0);
    q.rows = block_rows(first + static_cast<int64_t>(g));
    // Positions increase with i: the first query sees the first keys, the last the last ones.
    q.j_begin = p.visible_begin(q.i0);
    q.j_end = p.visible_end(q.i0 + static_cast<int64_t>(q.rows) - 1);
    if (q.j_begin >= q.j_end) q.j_begin = q.j_end = 0;
    q.j_first = q.j_begin / static_cast<int64_t>(kBc) * static_cast<int64_t>(kBc);
    if (q.j_end > q.j_begin) j_begin = std::min(j_begin, q.j_first);
    if (p.alibi) FillAlibiAnchors(p, h, q.i0, q.rows, q.anchor);
    j_end = std::max(j_end, q.j_end);
    PackTransposed(p.q, b, h, q.i0, q.rows, p.scale * kLog2e, q.qt);
    std::fill(q.ot, q.ot + Dv * kBr, 0.0f);
    std::fill(q.m, q.m + kBr, kNegInf);
    std::fill(q.l, q.l + kBr, 0.0f);
  }
  if (!direct) {
    const int64_t bg = b * p.G + kvh;  // the heads of a group share the cached rows
    if (cache.bh != bg) cache = {bg, 0};
    if (cache.rows < j_end) {
      const auto n = static_cast<size_t>(j_end - cache.rows);
      PackRows(p.k, b, kvh, cache.rows, n, s.kc + static_cast<size_t>(cache.rows) * D, D);
      PackRows(p.v, b, kvh, cache.rows, n, s.vc + static_cast<size_t>(cache.rows) * Dv, Dv);
      cache.rows = j_end;
    }
  }
  const size_t ldk = direct ? static_cast<size_t>(p.k.stride_n) : D;
  const size_t ldv = direct ? static_cast<size_t>(p.v.stride_n) : Dv;

  // Key blocks wholly hidden from every query of the group (after the causal diagonal, before
  // the window) are never read: a window w costs O(T w), not O(T S).
  for (int64_t j0 = j_begin; j0 < j_end; j0 += static_cast<int64_t>(kBc)) {
    const float* kb = direct ? p.k.row(b, kvh, j0) : s.kc + static_cast<size_t>(j0) * D;
    const float* vb = direct ? p.v.row(b, kvh, j0) : s.vc + static_cast<size_t>(j0) * Dv;
    for (size_t g = 0; g < count; ++g) {
      const QueryBlock& q = s.blocks[g];
      if (j0 >= q.j_end || j0 < q.j_first) continue;  // keys none of this block's queries sees
      const size_t cols = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kBc), q.j_end - j0));
      AttendKeyBlock<kD>(p, key, q, h, s.st, j0, cols, kb, ldk, vb, ldv, D, Dv);
    }
  }
  for (size_t g = 0; g < count; ++g) WriteQueryBlock(p, s.blocks[g], o, lse, b, h, Dv);
}

template <int kD>
void Forward(const AttentionProblem& p, MutableHeads o, float* lse) {
  const int64_t blocks = (p.T + static_cast<int64_t>(kBr) - 1) / static_cast<int64_t>(kBr);
  const int64_t heads = p.B * p.H;
  const auto group = static_cast<int64_t>(ForwardGroup(p));
  const int64_t groups = (blocks + group - 1) / group;
  ThreadPool& pool = *p.pool;
  const size_t scratch = ForwardScratch::floats(static_cast<size_t>(std::min(group, blocks)), static_cast<size_t>(p.D),
                                                static_cast<size_t>(p.Dv),
                                                RowsContiguous(p) ? 0 : static_cast<size_t>(p.S), p.alibi != nullptr);
  std::vector<HeadCache> caches(static_cast<size_t>(pool.num_threads()));  // one per worker, this call
  // Query blocks of kBr rows, except the first, which takes the remainder (T mod kBr): a short
  // block costs a full block's vector work per key, and the first one sees the fewest keys under
  // a causal mask (at T = 1024 a short last block would waste 6% of the work).
  const int64_t br = static_cast<int64_t>(kBr);
  const int64_t short_rows = p.T % br == 0 ? br : p.T % br;
  const auto block_start = [&](int64_t n) { return n == 0 ? 0 : short_rows + (n - 1) * br; };
  const auto block_rows = [&](int64_t n) { return static_cast<size_t>(n == 0 ? short_rows : br); };
  // Tasks head by head, so consecutive tasks read the same keys and values (one head's k and v
  // stay in L2; going across heads first streams them from L3: 15-20% slower), and within a head
  // the last group first, the one with the most keys under a causal mask.
  pool.parallel_for(groups * heads, [&](int64_t task, int worker) {
    const int64_t g = groups - 1 - task % groups, bh = task / groups;
    const int64_t first = g * group;
    const auto count = static_cast<size_t>(std::min(group, blocks - first));
    [[maybe_unused]] const FlushSubnormals flush;
    ForwardTask<kD>(p, o, lse, bh / p.H, bh % p.H, first, count, block_start, block_rows,
                    pool.scratch(worker, scratch), caches[static_cast<size_t>(worker)]);
  });
}

// ---------------------------------------------------------------------------------------------
// Backward

// The backward's key blocks are as long as its query blocks and start at the same multiples, so
// that under a causal mask a key block meets the diagonal in one square query block (whose upper
// triangle is masked work) - with 64-key blocks against 48-query ones, 11% of the work at
// T = 1024 was on masked pairs, 5% with equal blocks. (A multiple of 4: one Philox call per 4 keys.)
constexpr size_t kBcB = kBr % 4 == 0 ? kBr : kBc;

// One block of keys in the backward: its keys and values and their gradients' accumulators.
struct KeyBlock {
  float *kb, *vb, *dk, *dv;  // (Bc, Dp), (Bc, Dv), (Bc, Dp), (Bc, Dvp)
  int64_t j0 = 0;            // the block's first key
  size_t cols = 0;           // its keys (at most Bc)
};

// A pass over a head's query blocks serves kMaxKeyGroup key blocks at most.
constexpr size_t kMaxKeyGroup = 4;

struct BackwardScratch {
  // Whole head, packed once per task.
  float *qt;     // (blocks, D, Br)   (q * scale * log2(e))^T per query block: base-2 scores
  float *qs;     // (Tp, Dp)          q * scale, rows zero-padded
  float *dot;    // (blocks, Dv, Br)  d_o^T per query block
  float *dob;    // (Tp, Dvp)         d_o
  float *lse;    // (Tp)              lse * log2(e), or +inf where the weights are all zero
  float *di;     // (Tp)              sum_d d_o * o
  float *dq;     // (Tp, Dp)          dq accumulator
  float *anchor; // (Tp)              ALiBi's anchors (AlibiAnchor)
  KeyBlock keys[kMaxKeyGroup];
  float *pt, *dpt;  // (Bc, Br) x 2: one (key block, query block) pair's weights and their gradient
  float *tt;        // (Bc, Br) tanh(x / cap) of those scores, with a softcap

  // (variants: whether to carve anchor and tt; without, the layout is the book's path's as it was.)
  static size_t floats(size_t blocks, size_t group, size_t D, size_t Dv, bool variants) {
    const size_t Tp = blocks * kBr, Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes), v = variants ? 1 : 0;
    return Carver::size({blocks * D * kBr, Tp * Dp, blocks * Dv * kBr, Tp * Dvp, Tp, Tp, Tp * Dp, v * Tp,
                         kBcB * kBr, kBcB * kBr, v * kBcB * kBr}) +
           group * Carver::size({kBcB * Dp, kBcB * Dv, kBcB * Dp, kBcB * Dvp});
  }
  BackwardScratch(float* base, size_t blocks, size_t group, size_t D, size_t Dv, bool variants) {
    const size_t Tp = blocks * kBr, Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes), v = variants ? 1 : 0;
    Carver c(base);
    qt = c.take(blocks * D * kBr);
    qs = c.take(Tp * Dp);
    dot = c.take(blocks * Dv * kBr);
    dob = c.take(Tp * Dvp);
    lse = c.take(Tp);
    di = c.take(Tp);
    dq = c.take(Tp * Dp);
    anchor = c.take(v * Tp);
    pt = c.take(kBcB * kBr);
    dpt = c.take(kBcB * kBr);
    tt = c.take(v * kBcB * kBr);
    for (size_t g = 0; g < group; ++g) {
      keys[g].kb = c.take(kBcB * Dp);
      keys[g].vb = c.take(kBcB * Dv);
      keys[g].dk = c.take(kBcB * Dp);
      keys[g].dv = c.take(kBcB * Dvp);
    }
  }
};

// Key blocks per pass over the query blocks. Each pass reads every query block's packed rows
// (q twice, d_o twice, the dq accumulator: 5 T D floats for a head); while they fit in L2 one
// key block per pass costs nothing, beyond that each pass streams them from L3 or memory, so
// a pass takes kMaxKeyGroup key blocks. (The dq accumulator still sees the key blocks in
// increasing order: the results are the same either way.)
size_t BackwardGroup(const AttentionProblem& p) {
  return FitsInL2(static_cast<double>(p.T) * static_cast<double>(3 * p.D + 2 * p.Dv)) ? 1 : kMaxKeyGroup;
}

// Query blocks [first, blocks): the ones that can see the task's keys.
void PackHeadForBackward(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, const float* lse, int64_t b,
                         int64_t h, size_t first, size_t blocks, BackwardScratch& s) {
  const size_t D = static_cast<size_t>(p.D), Dv = static_cast<size_t>(p.Dv);
  const size_t Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes), Tp = blocks * kBr;
  const size_t T = static_cast<size_t>(p.T);
  const bool unit_stride = p.q.stride_d == 1 && d_o.stride_d == 1 && o.stride_d == 1;
  for (size_t blk = first; blk < blocks; ++blk) {
    const int64_t i0 = static_cast<int64_t>(blk * kBr);
    const size_t rows = std::min(kBr, T - blk * kBr);
    PackTransposed(p.q, b, h, i0, rows, p.scale * kLog2e, s.qt + blk * D * kBr);
    PackTransposed(d_o, b, h, i0, rows, 1.0f, s.dot + blk * Dv * kBr);
    if (p.alibi) FillAlibiAnchors(p, h, i0, rows, s.anchor + blk * kBr);
  }
  for (size_t i = first * kBr; i < Tp; ++i) {
    float* qrow = s.qs + i * Dp;
    float* drow = s.dob + i * Dvp;
    std::fill(qrow, qrow + Dp, 0.0f);
    std::fill(drow, drow + Dvp, 0.0f);
    s.lse[i] = std::numeric_limits<float>::infinity();
    s.di[i] = 0.0f;
    if (i >= T) continue;
    const int64_t ii = static_cast<int64_t>(i);
    const float* q = p.q.row(b, h, ii);
    const float* g = d_o.row(b, h, ii);
    const float* out = o.row(b, h, ii);
    float dsum = 0.0f;
    if (unit_stride) {  // the common case, in loops the compiler vectorises
      for (size_t c = 0; c < D; ++c) qrow[c] = q[c] * p.scale;
      for (size_t c = 0; c < Dv; ++c) drow[c] = g[c];
      for (size_t c = 0; c < Dv; ++c) dsum += g[c] * out[c];
    } else {
      for (size_t c = 0; c < D; ++c) qrow[c] = q[c * p.q.stride_d] * p.scale;
      for (size_t c = 0; c < Dv; ++c) {
        drow[c] = g[c * d_o.stride_d];
        dsum += drow[c] * out[c * o.stride_d];
      }
    }
    s.di[i] = dsum;
    const float l = lse[(b * p.H + h) * p.T + ii];
    // -inf: no visible key, every weight is 0 (2^(s - inf) = 0). With ALiBi, the anchored
    // scores' lse (lse + shift), in double.
    if (l != kNegInf)
      s.lse[i] = p.alibi ? static_cast<float>((static_cast<double>(l) + AlibiShift(p, h, ii)) * kLog2e) : l * kLog2e;
  }
  std::fill(s.dq + first * kBr * Dp, s.dq + Tp * Dp, 0.0f);
}

// Pt = exp(mask(St) - lse) and the dropout / dS step for one (query block, key block) pair:
// on return pt holds Pt * z and dpt holds dSt = Pt * (dPt * z - Di).
// (pos0: the position of the block's first query, which keys the dropout mask.)
template <bool kDropout>
void WeightsAndScoreGradient(const AttentionProblem& p, const DropoutKey& key, const float* HWY_RESTRICT lse,
                             const float* HWY_RESTRICT di, float* HWY_RESTRICT pt, float* HWY_RESTRICT dpt,
                             int64_t pos0, int64_t j0, size_t cols) {
  const DF d;
  for (int v = 0; v < kQueryVectors; ++v) {
    const VF l = hn::LoadU(d, lse + v * kLanes);
    const VF dsum = hn::LoadU(d, di + v * kLanes);
    const VF z = hn::Set(d, p.keep_scale);
    for (size_t j = 0; j < cols; j += 4) {
      hn::Mask<DF> drop[4];
      if constexpr (kDropout)
        DropoutDrop4(key, pos0 + v * static_cast<int64_t>(kLanes), p.key_pos(j0 + static_cast<int64_t>(j)), drop);
      for (size_t r = 0; r < 4 && j + r < cols; ++r) {
        const size_t at = (j + r) * kBr + v * kLanes;
        const VF w = Exp2(d, hn::Sub(hn::LoadU(d, pt + at), l));
        VF dw = hn::LoadU(d, dpt + at);
        VF wz = w;
        if constexpr (kDropout) {
          dw = hn::IfThenZeroElse(drop[r], hn::Mul(dw, z));
          wz = hn::IfThenZeroElse(drop[r], hn::Mul(w, z));
        }
        hn::StoreU(hn::Mul(w, hn::Sub(dw, dsum)), d, dpt + at);
        hn::StoreU(wz, d, pt + at);
      }
    }
  }
}

// With a softcap, dS with respect to x = scale q.k: dSt *= 1 - tanh^2(x / cap) (tt holds the tanh).
void SoftcapGradient(float* HWY_RESTRICT dpt, const float* HWY_RESTRICT tt, size_t cols) {
  const DF d;
  const VF one = hn::Set(d, 1.0f);
  for (size_t j = 0; j < cols; ++j)
    for (int v = 0; v < kQueryVectors; ++v) {
      const size_t at = j * kBr + v * kLanes;
      const VF t = hn::LoadU(d, tt + at);
      hn::StoreU(hn::Mul(hn::LoadU(d, dpt + at), hn::NegMulAdd(t, t, one)), d, dpt + at);
    }
}

// Query rows [first, end) of query head h that can see some key of [key0, key1): the causal mask
// hides key j from queries at positions before j, the window from those at j + window and after.
std::pair<int64_t, int64_t> QueriesSeeing(const AttentionProblem& p, int64_t key0, int64_t key1) {
  const int64_t first = p.causal() ? std::clamp<int64_t>(p.key_pos(key0) - p.query_offset, 0, p.T) : 0;
  const int64_t end = p.window > 0 && key1 > key0
                          ? std::clamp<int64_t>(p.key_pos(key1) - 1 + p.window - p.query_offset, 0, p.T)
                          : p.T;
  return {first, std::max(first, end)};
}

template <int kD>
// Keys [key0, key1) of query head (b, h): their dk and dv - written to dk, dv of kv head
// kv_head(h), or added to them when `accumulate` (the group's earlier heads wrote them) - and
// these keys' share of dq - written to dq itself when one task covers every key of the head,
// else to dq_part (T, D), summed afterwards.
void BackwardTask(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, const float* lse, MutableHeads dq,
                  MutableHeads dk, MutableHeads dv, int64_t b, int64_t h, int64_t key0, int64_t key1,
                  bool accumulate, float* dq_part, float* scratch) {
  const size_t D = kD > 0 ? kD : static_cast<size_t>(p.D);
  const size_t Dv = kD > 0 ? kD : static_cast<size_t>(p.Dv);
  const size_t Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes);
  const size_t blocks = (static_cast<size_t>(p.T) + kBr - 1) / kBr;
  const size_t group = BackwardGroup(p);
  const int64_t kvh = p.kv_head(h);
  BackwardScratch s(scratch, blocks, group, D, Dv, HasScoreVariants(p));
  // Queries outside [first_row, end_row) see none of these keys (causal mask, window): their rows
  // are not packed, and their share of dq is zero.
  const auto [first_row, end_row] = QueriesSeeing(p, key0, key1);
  const size_t first_block = static_cast<size_t>(first_row) / kBr;
  const size_t end_block = (static_cast<size_t>(end_row) + kBr - 1) / kBr;
  PackHeadForBackward(p, o, d_o, lse, b, h, first_block, end_block, s);
  const DropoutKey key = MakeDropoutKey(p, b, h);
  const bool variants = HasScoreVariants(p);

  for (int64_t g0 = key0; g0 < key1; g0 += static_cast<int64_t>(group * kBcB)) {
    size_t count = 0;
    for (int64_t j0 = g0; j0 < key1 && count < group; j0 += static_cast<int64_t>(kBcB), ++count) {
      KeyBlock& kj = s.keys[count];
      kj.j0 = j0;
      kj.cols = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kBcB), key1 - j0));
      PackRows(p.k, b, kvh, j0, kj.cols, kj.kb, Dp);
      PackRows(p.v, b, kvh, j0, kj.cols, kj.vb, Dv);
      std::fill(kj.dk, kj.dk + kBcB * Dp, 0.0f);
      std::fill(kj.dv, kj.dv + kBcB * Dvp, 0.0f);
      if (accumulate) {  // the sums of the group's earlier heads, in head order
        PackRows(dk, b, kvh, j0, kj.cols, kj.dk, Dp);
        PackRows(dv, b, kvh, j0, kj.cols, kj.dv, Dvp);
      }
    }
    // The query blocks that see some of these keys.
    const int64_t g1 = s.keys[count - 1].j0 + static_cast<int64_t>(s.keys[count - 1].cols);
    const auto [rows0, rows1] = QueriesSeeing(p, g0, g1);
    const size_t blk0 = static_cast<size_t>(rows0) / kBr, blk1 = (static_cast<size_t>(rows1) + kBr - 1) / kBr;
    for (size_t blk = blk0; blk < blk1; ++blk) {
      const int64_t i0 = static_cast<int64_t>(blk * kBr), pos0 = p.pos(i0);
      const size_t rows = std::min(kBr, static_cast<size_t>(p.T) - blk * kBr);
      for (size_t g = 0; g < count; ++g) {
        const KeyBlock& kj = s.keys[g];
        const int64_t j0 = kj.j0;
        const size_t cols = kj.cols;
        // keys beyond the block's queries, or before the window of every one of them
        if (p.causal() && p.key_pos(j0) > pos0 + static_cast<int64_t>(rows) - 1) break;
        if (p.window > 0 && p.key_pos(j0) + static_cast<int64_t>(cols) - 1 <= pos0 - p.window) continue;
        // St = k_j Qt_i, capped, biased, masked; dPt = v_j dOt_i
        BlockProduct<kScoreRows, kQueryVectors, false, Out::kStore, kD>(cols, kQueryVectors, kj.kb, Dp,
                                                                        s.qt + blk * D * kBr, kBr, D, s.pt, kBr);
        if (variants) ApplyScoreVariants(p, h, s.pt, s.tt, s.anchor + i0, j0, cols);
        if (BlockNeedsMask(p, pos0, rows, j0, cols)) ApplyMask(p, s.pt, i0, pos0, j0, rows, cols);
        BlockProduct<kScoreRows, kQueryVectors, false, Out::kStore, kD>(cols, kQueryVectors, kj.vb, Dv,
                                                                        s.dot + blk * Dv * kBr, kBr, Dv, s.dpt, kBr);
        if (p.dropout) {
          WeightsAndScoreGradient<true>(p, key, s.lse + i0, s.di + i0, s.pt, s.dpt, pos0, j0, cols);
        } else {
          WeightsAndScoreGradient<false>(p, key, s.lse + i0, s.di + i0, s.pt, s.dpt, pos0, j0, cols);
        }
        if (p.softcap > 0.0f) SoftcapGradient(s.dpt, s.tt, cols);
        // dv_j += (Pt z) d_o_i;  dk_j += dSt (q_i scale);  dq_i += dSt^T k_j
        BlockProduct<kGradRows, kGradVectors, false, Out::kAccumulate>(cols, Dvp / kLanes, s.pt, kBr,
                                                                       s.dob + i0 * Dvp, Dvp, rows, kj.dv, Dvp);
        BlockProduct<kGradRows, kGradVectors, false, Out::kAccumulate>(cols, Dp / kLanes, s.dpt, kBr,
                                                                       s.qs + i0 * Dp, Dp, rows, kj.dk, Dp);
        BlockProduct<kGradRows, kGradVectors, true, Out::kAccumulate>(rows, Dp / kLanes, s.dpt, kBr, kj.kb, Dp,
                                                                      cols, s.dq + i0 * Dp, Dp);
      }
    }
    for (size_t g = 0; g < count; ++g) {
      const KeyBlock& kj = s.keys[g];
      for (size_t j = 0; j < kj.cols; ++j) {
        const int64_t jj = kj.j0 + static_cast<int64_t>(j);
        float* gk = dk.row(b, kvh, jj);
        float* gv = dv.row(b, kvh, jj);
        if (dk.stride_d == 1 && dv.stride_d == 1) {
          std::memcpy(gk, kj.dk + j * Dp, D * sizeof(float));
          std::memcpy(gv, kj.dv + j * Dvp, Dv * sizeof(float));
        } else {
          for (size_t c = 0; c < D; ++c) gk[c * dk.stride_d] = kj.dk[j * Dp + c];
          for (size_t c = 0; c < Dv; ++c) gv[c * dv.stride_d] = kj.dv[j * Dvp + c];
        }
      }
    }
  }
  // dq: rows outside [first_row, end_row) are zero (packed blocks may start before first_row:
  // their accumulators are zero where no key reached them).
  for (int64_t i = 0; i < p.T; ++i) {
    float* gq = dq_part ? dq_part + i * p.D : dq.row(b, h, i);
    const int64_t stride = dq_part ? 1 : dq.stride_d;
    if (i < first_row || i >= end_row) {
      if (stride == 1) {
        std::fill(gq, gq + D, 0.0f);
      } else {
        for (size_t c = 0; c < D; ++c) gq[c * stride] = 0.0f;
      }
      continue;
    }
    const float* acc = s.dq + static_cast<size_t>(i) * Dp;
    if (stride == 1) {
      for (size_t c = 0; c < D; ++c) gq[c] = acc[c] * p.scale;
    } else {
      for (size_t c = 0; c < D; ++c) gq[c * stride] = acc[c] * p.scale;
    }
  }
}

template <int kD>
void Backward(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, const float* lse, MutableHeads dq,
              MutableHeads dk, MutableHeads dv) {
  const size_t blocks = (static_cast<size_t>(p.T) + kBr - 1) / kBr;
  const size_t scratch = BackwardScratch::floats(blocks, BackwardGroup(p), static_cast<size_t>(p.D),
                                                 static_cast<size_t>(p.Dv), HasScoreVariants(p));
  ThreadPool& pool = *p.pool;
  // One task per key/value head (b, g), each over all its keys and, in turn, over the query
  // heads of its group (which add to its dk, dv in head order: no atomics, the same sums for
  // any thread count) - unless there are too few kv heads to keep the threads busy: then each
  // one's keys are split into up to kSplit runs of whole key blocks, each task adds its keys'
  // share of dq into a partial sum, and the partial sums are added in run order afterwards. The
  // split depends on the shape only, so the result does not depend on the thread count.
  constexpr int64_t kSplit = 4;  // a run re-packs its queries: more runs cost more on one thread
  const int64_t heads = p.B * p.H, kv_heads = p.B * p.G, per_group = p.H / p.G;
  const int64_t key_blocks = (p.S + static_cast<int64_t>(kBcB) - 1) / static_cast<int64_t>(kBcB);
  const int64_t runs = kv_heads >= kSplit ? 1 : std::max<int64_t>(1, std::min(kSplit, key_blocks));
  const int64_t per_run = (key_blocks + runs - 1) / std::max<int64_t>(runs, 1) * static_cast<int64_t>(kBcB);
  std::vector<float> partial(runs > 1 ? static_cast<size_t>(runs * heads * p.T * p.D) : 0);
  pool.parallel_for(kv_heads * runs, [&](int64_t task, int worker) {
    [[maybe_unused]] const FlushSubnormals flush;
    const int64_t bg = task / runs, run = task % runs;
    const int64_t b = bg / p.G, g = bg % p.G;
    const int64_t key0 = std::min(p.S, run * per_run), key1 = std::min(p.S, key0 + per_run);
    for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h) {
      const int64_t bh = b * p.H + h;
      float* dq_part = runs > 1 ? partial.data() + (run * heads + bh) * p.T * p.D : nullptr;
      if (runs > 1 && key0 == key1) {  // no keys left for this run: its share is zero
        std::fill(dq_part, dq_part + p.T * p.D, 0.0f);
        continue;
      }
      BackwardTask<kD>(p, o, d_o, lse, dq, dk, dv, b, h, key0, key1, h > g * per_group, dq_part,
                       pool.scratch(worker, scratch));
    }
  });
  if (runs == 1) return;
  pool.parallel_for(heads, [&](int64_t bh, int) {
    for (int64_t i = 0; i < p.T; ++i) {
      float* gq = dq.row(bh / p.H, bh % p.H, i);
      for (int64_t c = 0; c < p.D; ++c) {
        float sum = 0.0f;
        for (int64_t run = 0; run < runs; ++run) sum += partial[static_cast<size_t>(((run * heads + bh) * p.T + i) * p.D + c)];
        gq[c * dq.stride_d] = sum;
      }
    }
  });
}

}  // namespace

// D = Dv = 64 (GPT-2's heads) gets loops of known length on the vector targets; every other
// head dim, and the portable fallback target, take the generic path.
#if HWY_TARGET >= HWY_EMU128  // the portable targets (EMU128, SCALAR): the last bits of the ordering
constexpr bool kSpecialise = false;
#else
constexpr bool kSpecialise = true;
#endif

void ForwardImpl(const AttentionProblem& p, MutableHeads o, float* lse) {
  if (kSpecialise && p.D == 64 && p.Dv == 64) return Forward<kSpecialise ? 64 : 0>(p, o, lse);
  Forward<0>(p, o, lse);
}

void BackwardImpl(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, const float* lse, MutableHeads dq,
                  MutableHeads dk, MutableHeads dv) {
  if (kSpecialise && p.D == 64 && p.Dv == 64) return Backward<kSpecialise ? 64 : 0>(p, o, d_o, lse, dq, dk, dv);
  Backward<0>(p, o, d_o, lse, dq, dk, dv);
}

}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels {

HWY_EXPORT(ForwardImpl);
HWY_EXPORT(BackwardImpl);

void flash_attention_forward(const AttentionProblem& p, MutableHeads o, float* lse) {
  HWY_DYNAMIC_DISPATCH(ForwardImpl)(p, o, lse);
}

void flash_attention_backward(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, const float* lse,
                              MutableHeads dq, MutableHeads dk, MutableHeads dv) {
  HWY_DYNAMIC_DISPATCH(BackwardImpl)(p, o, d_o, lse, dq, dk, dv);
}

}  // namespace qkv::kernels
#endif  // HWY_ONCE
