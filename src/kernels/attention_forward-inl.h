// The fused attention's forward (FlashAttention-2; see flash_attention.cc for the loop), per
// target, generic in its operands: the online softmax, masks, output and the task loop are the
// same for every element type, and an Operands class says how a query block is packed, how the
// head's keys and values are held, and how the two products St = k Qt and Ot += v^T Pt are done.
// WidenedOperands<float> is the fp32 kernel; WidenedOperands<uint16_t> (bf16 inputs widened to
// float32, P rounded to bf16) and flash_attention_bf16.cc's BF16DotOperands (AVX512_BF16) the
// bf16 kernel. Included once per target, hence the toggling include guard.
#if defined(QKV_KERNELS_ATTENTION_FORWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_ATTENTION_FORWARD_INL_H_
#undef QKV_KERNELS_ATTENTION_FORWARD_INL_H_
#else
#define QKV_KERNELS_ATTENTION_FORWARD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "hwy/cache_control.h"  // hwy::Prefetch
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"  // hn::Tanh (the softcap)
#include "kernels/attention_problem.h"
#include "kernels/attention_blocks-inl.h"
#include "kernels/attention_tiles-inl.h"
#include "kernels/flush_subnormals.h"
#include "qkv/core/bf16.h"
#include "qkv/core/machine.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace {
// ---------------------------------------------------------------------------------------------
// Forward

// One query block's running state: its queries (transposed, scaled as ScoreUnits says), the output
// accumulator and the online softmax's running max and sum, lane i = query i0 + i.
struct QueryBlock {
  float* qt = nullptr;     // the queries as the Operands pack them: (D, Br) (q * ScoreUnits::score)^T
                           // in float32 (WidenedOperands), bf16 pairs (BF16DotOperands)
  float* ot = nullptr;     // (Dv, Br)  sum_j P[i, j] v[j], transposed
  float* m = nullptr;      // (Br)      running max of the scores St
  float* l = nullptr;      // (Br)      running sum of 2^((St - m) f) (f: ScoreUnits)
  float* alpha = nullptr;  // (Br)      this step's rescale 2^((m_old - m_new) f)
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
  float* st;      // (Bc, Br) scores^T of one (key block, query block) pair
  float* cache;   // what the Operands keep of the head's keys and values (cache_floats)
  QueryBlock blocks[kMaxGroup];
  // (alibi: whether to carve the anchors; without, the layout is the book's path's as it was.)
  static size_t floats(size_t group, size_t query_floats, size_t Dv, size_t cache_floats, bool alibi) {
    return Carver::size({kBc * kBr, cache_floats}) +
           group * Carver::size({query_floats, Dv * kBr, kBr, kBr, kBr, kBr, alibi ? kBr : 0});
  }
  ForwardScratch(float* base, size_t group, size_t query_floats, size_t Dv, size_t cache_floats, bool alibi) {
    Carver c(base);
    st = c.take(kBc * kBr);
    cache = c.take(cache_floats);
    for (size_t g = 0; g < group; ++g) {
      QueryBlock& q = blocks[g];
      q.qt = c.take(query_floats);
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
inline size_t ForwardGroup(const AttentionProblem& p) {
  return FitsInL2(static_cast<double>(p.S) * static_cast<double>(p.D + p.Dv)) ? 1 : kMaxGroup;
}

// fp32 keys and values are read where they are when each head's rows are contiguous ((B, H, S, D)
// arrays). Otherwise - heads interleaved in the rows of a projection output, where consecutive
// keys of a head are a page apart and the hardware prefetchers, which stop at page boundaries,
// cannot follow (35% slower measured) - each worker copies the rows of the head it works on
// into its scratch once, and reuses them for the following tasks of the same head.
struct HeadCache {
  int64_t bh = -1;    // the key/value head (b * G + g) whose rows are in the cache
  int64_t rows = 0;   // rows [0, rows) are there
};

// The head cache for key/value head (b, kvh): whether it holds another head (then it is reset to
// hold none of this one's rows).
inline void UseHeadCache(const AttentionProblem& p, int64_t b, int64_t kvh, HeadCache& cache) {
  const int64_t bg = b * p.G + kvh;  // the heads of a group share the cached rows
  if (cache.bh != bg) cache = {bg, 0};
}

template <typename T>
bool RowsContiguous(Heads<const T> k, Heads<const T> v) {
  return k.stride_d == 1 && k.stride_n == k.dim && v.stride_d == 1 && v.stride_n == v.dim;
}

// The operands in float32: fp32 inputs (T = float), or bf16 inputs widened to float32 as they are
// packed (T = uint16_t: the bf16 kernel without AVX512_BF16), then the probabilities P rounded
// to bf16 just before Ot += v^T Pt, so that both bf16 paths compute the same products.
template <typename T>
struct WidenedOperands {
  static constexpr bool kRoundP = !std::is_same_v<T, float>;
  Heads<const T> q, k, v;  // (B, H, T, D), (B, G, S, D), (B, G, S, Dv)
  bool direct = false;     // fp32 rows read in place (RowsContiguous); else cached, widened
  WidenedOperands(Heads<const T> q_, Heads<const T> k_, Heads<const T> v_)
      : q(q_), k(k_), v(v_), direct(!kRoundP && RowsContiguous(k_, v_)) {}

  size_t query_floats(size_t D) const { return D * kBr; }
  // (S, D) keys and (S, Dv) values
  size_t cache_floats(const AttentionProblem& p) const {
    return direct ? 0 : static_cast<size_t>(p.S) * static_cast<size_t>(p.D + p.Dv);
  }
  void PackQueries(const AttentionProblem& p, int64_t b, int64_t h, const QueryBlock& qb) const {
    PackTransposed(q, b, h, qb.i0, qb.rows, ScoreUnitsOf(p).score, qb.qt);
  }
  // Keys [0, j_end) of key/value head (b, kvh) in the cache (unless read in place).
  void CacheKeys(const AttentionProblem& p, int64_t b, int64_t kvh, int64_t j_end, HeadCache& cache,
                 float* c) const {
    if (direct) return;
    UseHeadCache(p, b, kvh, cache);
    if (cache.rows >= j_end) return;
    const size_t D = static_cast<size_t>(p.D), Dv = static_cast<size_t>(p.Dv);
    const auto n = static_cast<size_t>(j_end - cache.rows), r0 = static_cast<size_t>(cache.rows);
    PackRows(k, b, kvh, cache.rows, n, c + r0 * D, D);
    PackRows(v, b, kvh, cache.rows, n, c + static_cast<size_t>(p.S) * D + r0 * Dv, Dv);
    cache.rows = j_end;
  }
  // St (cols, Br) = k_block Qt: the scores in ScoreUnits
  template <int kD>
  void Scores(const AttentionProblem& p, int64_t b, int64_t kvh, const QueryBlock& qb, const float* c, int64_t j0,
              size_t cols, float* st) const {
    const size_t D = kD > 0 ? kD : static_cast<size_t>(p.D);
    const float* kb = c + static_cast<size_t>(j0) * D;
    size_t ldk = D;
    if constexpr (!kRoundP) {
      if (direct) kb = k.row(b, kvh, j0), ldk = static_cast<size_t>(k.stride_n);
    }
    BlockProduct<kScoreRows, kQueryVectors, false, Out::kStore, kD>(cols, kQueryVectors, kb, ldk, qb.qt, kBr, D, st,
                                                                    kBr);
  }
  // Ot (Dv, Br) += v_block^T Pt, Pt (cols, Br) in st
  template <int kD>
  void Values(const AttentionProblem& p, int64_t b, int64_t kvh, const QueryBlock& qb, const float* c, int64_t j0,
              size_t cols, float* st) const {
    const size_t Dv = kD > 0 ? kD : static_cast<size_t>(p.Dv);
    const float* vb = c + static_cast<size_t>(p.S) * static_cast<size_t>(p.D) + static_cast<size_t>(j0) * Dv;
    size_t ldv = Dv;
    if constexpr (!kRoundP) {
      if (direct) vb = v.row(b, kvh, j0), ldv = static_cast<size_t>(v.stride_n);
    } else {
      RoundBlockToBF16(st, cols);
    }
    if (cols == kBc) {
      BlockProduct<kScoreRows, kQueryVectors, true, Out::kAccumulate, static_cast<int>(kBc)>(
          Dv, kQueryVectors, vb, ldv, st, kBr, cols, qb.ot, kBr);
    } else {
      BlockProduct<kScoreRows, kQueryVectors, true, Out::kAccumulate>(Dv, kQueryVectors, vb, ldv, st, kBr, cols,
                                                                     qb.ot, kBr);
    }
  }
};

// One online-softmax step over St (cols, Br) for query block q: updates m and l, writes alpha =
// 2^((m_old - m_new) f) and replaces St by the (dropped-out) probabilities 2^((St - m_new) f)
// (f: ScoreUnits). St - m is exact near the max (0 at the max itself: a query that sees one key
// gets its value exactly), and rounding (St - m) f errs in proportion to the exponent, small where
// a weight matters. q.mx holds the block's column max of St.
inline void OnlineSoftmaxStep(const AttentionProblem& p, const DropoutKey& key, const QueryBlock& q, float* st_base,
                       int64_t j0, size_t cols) {
  const DF d;
  const VF f = hn::Set(d, ScoreUnitsOf(p).exp);
  VF m_use[kQueryVectors], sum[kQueryVectors];
  for (int v = 0; v < kQueryVectors; ++v) {
    const VF m_old = hn::LoadU(d, q.m + v * kLanes);
    const VF m_new = hn::Max(m_old, hn::LoadU(d, q.mx + v * kLanes));
    // A query with no visible key yet keeps m = -inf; subtract 0 instead so exp gives 0, not NaN.
    m_use[v] = hn::IfThenZeroElse(hn::Eq(m_new, hn::Set(d, kNegInf)), m_new);
    const VF alpha = Exp2(d, hn::Mul(hn::Sub(m_old, m_use[v]), f));
    hn::StoreU(alpha, d, q.alpha + v * kLanes);
    hn::StoreU(m_new, d, q.m + v * kLanes);
    sum[v] = hn::Mul(hn::LoadU(d, q.l + v * kLanes), alpha);
  }
  if (!p.dropout) {
    for (size_t j = 0; j < cols; ++j) {
      HWY_UNROLL(4) for (int v = 0; v < kQueryVectors; ++v) {
        float* st = st_base + j * kBr + v * kLanes;
        const VF pr = Exp2(d, hn::Mul(hn::Sub(hn::LoadU(d, st), m_use[v]), f));
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
          const VF pr = Exp2(d, hn::Mul(hn::Sub(hn::LoadU(d, st), m_use[v]), f));
          sum[v] = hn::Add(sum[v], pr);  // the normaliser counts every weight, dropped or not
          hn::StoreU(hn::IfThenZeroElse(drop[r], pr), d, st);
        }
      }
    }
  }
  for (int v = 0; v < kQueryVectors; ++v) hn::StoreU(sum[v], d, q.l + v * kLanes);
}

// Query block q against keys [j0, j0 + cols) of key/value head (b, kvh):
//   St = k_block Qt, masked; mx = its column max; the online softmax step; Ot = Ot alpha + v^T Pt
template <int kD, class Operands>
void AttendKeyBlock(const AttentionProblem& p, const Operands& ops, const DropoutKey& key, const QueryBlock& q,
                    int64_t b, int64_t h, int64_t kvh, float* st, const float* cache, int64_t j0, size_t cols) {
  const DF d;
  const size_t Dv = kD > 0 ? kD : static_cast<size_t>(p.Dv);
  ops.template Scores<kD>(p, b, kvh, q, cache, j0, cols, st);
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
  ops.template Values<kD>(p, b, kvh, q, cache, j0, cols, st);
}

// lse and o = (Ot / l)^T of query block q; a row with no visible key (l = 0) gets o = 0, lse = -inf.
inline void WriteQueryBlock(const AttentionProblem& p, const QueryBlock& q, MutableHeads o, float* lse, int64_t b,
                     int64_t h, size_t Dv) {
  const int64_t row0 = (b * p.H + h) * p.T + q.i0;
  const double f = ScoreUnitsOf(p).exp;
  for (size_t i = 0; i < q.rows; ++i) {
    const float l = q.l[i];
    // l = sum 2^((s - m) f): lse = ln(2^(m f) l) = (m f + log2 l) ln 2, in double: m f as the
    // backward's FMA takes s f, unrounded
    const double shift = p.alibi ? AlibiShift(p, h, q.i0 + static_cast<int64_t>(i)) : 0.0;
    const double exact = l == 0.0f ? 0.0 : (q.m[i] * f + std::log2(static_cast<double>(l))) * kLn2 - shift;
    const float rounded = l == 0.0f ? kNegInf : static_cast<float>(exact);
    lse[row0 + static_cast<int64_t>(i)] = rounded;
    if (p.lse_low) p.lse_low[row0 + static_cast<int64_t>(i)] = l == 0.0f ? 0.0f : static_cast<float>(exact - rounded);
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
template <int kD, class Operands, typename Start, typename Rows>
void ForwardTask(const AttentionProblem& p, const Operands& ops, MutableHeads o, float* lse, int64_t b, int64_t h,
                 int64_t first, size_t count, const Start& block_start, const Rows& block_rows, float* scratch,
                 HeadCache& cache) {
  const size_t D = kD > 0 ? kD : static_cast<size_t>(p.D);
  const size_t Dv = kD > 0 ? kD : static_cast<size_t>(p.Dv);
  ForwardScratch s(scratch, count, ops.query_floats(D), Dv, ops.cache_floats(p), p.alibi != nullptr);
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
    ops.PackQueries(p, b, h, q);
    std::fill(q.ot, q.ot + Dv * kBr, 0.0f);
    std::fill(q.m, q.m + kBr, kNegInf);
    std::fill(q.l, q.l + kBr, 0.0f);
  }
  ops.CacheKeys(p, b, kvh, j_end, cache, s.cache);

  // Key blocks wholly hidden from every query of the group (after the causal diagonal, before
  // the window) are never read: a window w costs O(T w), not O(T S).
  for (int64_t j0 = j_begin; j0 < j_end; j0 += static_cast<int64_t>(kBc)) {
    for (size_t g = 0; g < count; ++g) {
      const QueryBlock& q = s.blocks[g];
      if (j0 >= q.j_end || j0 < q.j_first) continue;  // keys none of this block's queries sees
      const size_t cols = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kBc), q.j_end - j0));
      AttendKeyBlock<kD>(p, ops, key, q, b, h, kvh, s.st, s.cache, j0, cols);
    }
  }
  for (size_t g = 0; g < count; ++g) WriteQueryBlock(p, s.blocks[g], o, lse, b, h, Dv);
}

template <int kD, class Operands>
void Forward(const AttentionProblem& p, const Operands& ops, MutableHeads o, float* lse) {
  const int64_t blocks = (p.T + static_cast<int64_t>(kBr) - 1) / static_cast<int64_t>(kBr);
  const int64_t heads = p.B * p.H;
  const auto group = static_cast<int64_t>(ForwardGroup(p));
  const int64_t groups = (blocks + group - 1) / group;
  ThreadPool& pool = *p.pool;
  const size_t scratch =
      ForwardScratch::floats(static_cast<size_t>(std::min(group, blocks)), ops.query_floats(static_cast<size_t>(p.D)),
                             static_cast<size_t>(p.Dv), ops.cache_floats(p), p.alibi != nullptr);
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
    ForwardTask<kD>(p, ops, o, lse, bh / p.H, bh % p.H, first, count, block_start, block_rows,
                    pool.scratch(worker, scratch), caches[static_cast<size_t>(worker)]);
  });
}


}  // namespace
}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_ATTENTION_FORWARD_INL_H_
