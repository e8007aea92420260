// The fused attention's backward (FlashAttention-2's loop order; the math is in
// flash_attention.cc's header), per target, generic in its operands as the forward is
// (attention_forward-inl.h): the task loop, the recomputed weights, dropout, the masks, the
// softcap's chain rule and the write-out are the same for every element type, and a backward
// Operands class says how a head's queries and output gradient and a block of keys and values are
// packed, and how the five products run:
//   St = k_j Qt_i,  dPt = v_j dOt_i,  dv_j += (Pt z) d_o_i,  dk_j += dSt q_i,  dq_i += dSt^T k_j.
// WidenedBackward<float> is the fp32 kernel; WidenedBackward<uint16_t> (bf16 inputs widened to
// float32; d_o, P z and dS rounded to bf16 before they are multiplied) and flash_attention_bf16.cc's
// BF16DotBackward (AVX512_BF16) the bf16 kernel. Included once per target, hence the toggling
// include guard.
#if defined(QKV_KERNELS_ATTENTION_BACKWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_ATTENTION_BACKWARD_INL_H_
#undef QKV_KERNELS_ATTENTION_BACKWARD_INL_H_
#else
#define QKV_KERNELS_ATTENTION_BACKWARD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "hwy/highway.h"
#include "kernels/attention_blocks-inl.h"
#include "kernels/attention_problem.h"
#include "kernels/attention_tiles-inl.h"
#include "kernels/flush_subnormals.h"
#include "qkv/core/bf16.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::HWY_NAMESPACE {
namespace {
// ---------------------------------------------------------------------------------------------
// Backward

// The backward's key blocks are as long as its query blocks and start at the same multiples, so
// that under a causal mask a key block meets the diagonal in one square query block (whose upper
// triangle is masked work) - with 64-key blocks against 48-query ones, 11% of the work at
// T = 1024 was on masked pairs, 5% with equal blocks. (A multiple of 4: one Philox call per 4 keys.)
constexpr size_t kBcB = kBr % 4 == 0 ? kBr : kBc;

// One block of keys in the backward: its keys and values as the Operands pack them, and their
// gradients' accumulators (float32 for every Operands).
struct KeyBlock {
  float *kb, *vb, *dk, *dv;  // (Bc, Dp), (Bc, Dv) floats' room; (Bc, Dp), (Bc, Dvp) accumulators
  int64_t j0 = 0;            // the block's first key
  size_t cols = 0;           // its keys (at most Bc)
};

// A pass over a head's query blocks serves kMaxKeyGroup key blocks at most.
constexpr size_t kMaxKeyGroup = 4;

// The task's scratch. qt, qs, dot, dob, kb and vb are the Operands' packed operands, in at most
// the room the fp32 layout takes (the bf16 pair layouts take half); `words` is the Operands' own
// per-pair room (pair_floats()).
struct BackwardScratch {
  // Whole head, packed once per task.
  float *qt;     // (blocks, D, Br)   fp32: (q * ScoreUnits::score)^T per query block
  float *qs;     // (Tp, Dp)          fp32: q * scale, rows zero-padded
  float *dot;    // (blocks, Dv, Br)  fp32: d_o^T per query block
  float *dob;    // (Tp, Dvp)         fp32: d_o
  float *lse;    // (Tp)              lse * log2(e) rounded to float, or +inf where the weights are all zero
  float *lse_lo; // (Tp)              what that rounding dropped (the weights: 2^((s f - lse) - lse_lo))
  float *di;     // (Tp)              sum_d d_o * o
  float *dq;     // (Tp, Dp)          dq accumulator
  float *anchor; // (Tp)              ALiBi's anchors (AlibiAnchor)
  KeyBlock keys[kMaxKeyGroup];
  float *pt, *dpt;  // (Bc, Br) x 2: one (key block, query block) pair's weights and their gradient
  float *tt;        // (Bc, Br) tanh(x / cap) of those scores, with a softcap
  float *words;     // the Operands' per-pair room

  // (variants: whether to carve anchor and tt; without, the layout is the book's path's as it was.)
  static size_t floats(size_t blocks, size_t group, size_t D, size_t Dv, bool variants, size_t extra) {
    const size_t Tp = blocks * kBr, Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes), v = variants ? 1 : 0;
    return Carver::size({blocks * D * kBr, Tp * Dp, blocks * Dv * kBr, Tp * Dvp, Tp, Tp, Tp, Tp * Dp, v * Tp,
                         kBcB * kBr, kBcB * kBr, v * kBcB * kBr, extra}) +
           group * Carver::size({kBcB * Dp, kBcB * Dv, kBcB * Dp, kBcB * Dvp});
  }
  BackwardScratch(float* base, size_t blocks, size_t group, size_t D, size_t Dv, bool variants, size_t extra) {
    const size_t Tp = blocks * kBr, Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes), v = variants ? 1 : 0;
    Carver c(base);
    qt = c.take(blocks * D * kBr);
    qs = c.take(Tp * Dp);
    dot = c.take(blocks * Dv * kBr);
    dob = c.take(Tp * Dvp);
    lse = c.take(Tp);
    lse_lo = c.take(Tp);
    di = c.take(Tp);
    dq = c.take(Tp * Dp);
    anchor = c.take(v * Tp);
    pt = c.take(kBcB * kBr);
    dpt = c.take(kBcB * kBr);
    tt = c.take(v * kBcB * kBr);
    words = c.take(extra);
    for (size_t g = 0; g < group; ++g) {
      keys[g].kb = c.take(kBcB * Dp);
      keys[g].vb = c.take(kBcB * Dv);
      keys[g].dk = c.take(kBcB * Dp);
      keys[g].dv = c.take(kBcB * Dvp);
    }
  }
};

// The operands in float32: fp32 inputs (T = float), or bf16 inputs widened to float32 as they are
// packed (T = uint16_t: the bf16 kernel without AVX512_BF16), with d_o, P z and dS * scale
// rounded to bf16 before they are multiplied - the products BF16DotBackward takes, so that both
// bf16 paths compute the same thing up to the order of float32 additions. (fp32 folds the scale
// into q instead: qs = q * scale, and dq is scaled as it is written.)
template <typename T>
struct WidenedBackward {
  static constexpr bool kRound = !std::is_same_v<T, float>;
  Heads<const T> q, k, v;  // (B, H, T, D), (B, G, S, D), (B, G, S, Dv)

  size_t pair_floats(const AttentionProblem&) const { return 0; }
  // What dq's accumulator is multiplied by as it is written.
  float dq_scale(const AttentionProblem& p) const { return kRound ? 1.0f : p.scale; }

  // Query block blk (rows i0 .. i0 + rows of head (b, h); the block's lanes beyond are zero):
  // qt, dot, its rows of qs and dob, and di.
  void PackQueries(const AttentionProblem& p, ConstHeads o, ConstHeads d_o, int64_t b, int64_t h, size_t blk,
                   size_t rows, BackwardScratch& s) const {
    const size_t D = static_cast<size_t>(p.D), Dv = static_cast<size_t>(p.Dv);
    const size_t Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes);
    const int64_t i0 = static_cast<int64_t>(blk * kBr);
    PackTransposed(q, b, h, i0, rows, ScoreUnitsOf(p).score, s.qt + blk * D * kBr);
    PackTransposed(d_o, b, h, i0, rows, 1.0f, s.dot + blk * Dv * kBr);
    if constexpr (kRound) RoundBlockToBF16(s.dot + blk * Dv * kBr, Dv);
    const bool unit_stride = q.stride_d == 1 && d_o.stride_d == 1 && o.stride_d == 1;
    const float q_scale = kRound ? 1.0f : p.scale;
    const auto round = [](float x) { return kRound ? bf16_to_float(float_to_bf16(x)) : x; };
    for (size_t i = static_cast<size_t>(i0); i < static_cast<size_t>(i0) + kBr; ++i) {
      float* qrow = s.qs + i * Dp;
      float* drow = s.dob + i * Dvp;
      std::fill(qrow, qrow + Dp, 0.0f);
      std::fill(drow, drow + Dvp, 0.0f);
      s.di[i] = 0.0f;
      if (i >= static_cast<size_t>(i0) + rows) continue;
      const int64_t ii = static_cast<int64_t>(i);
      const T* x = q.row(b, h, ii);
      const float* g = d_o.row(b, h, ii);
      const float* out = o.row(b, h, ii);
      // D_i = d_o . o in double, rounded once: it stands for sum_j P_ij dP_ij, and any error of
      // its own moves every dS_ij = P_ij (dP_ij - D_i) of the row the same way (the gradients of
      // a key bias, zero in exact arithmetic, sum exactly those)
      double dsum = 0.0;
      if (unit_stride && !kRound) {  // the common case, in loops the compiler vectorises
        for (size_t c = 0; c < D; ++c) qrow[c] = Widen(x[c]) * q_scale;
        for (size_t c = 0; c < Dv; ++c) drow[c] = g[c];
        for (size_t c = 0; c < Dv; ++c) dsum += static_cast<double>(g[c]) * out[c];
      } else {
        for (size_t c = 0; c < D; ++c) qrow[c] = Widen(x[c * q.stride_d]) * q_scale;
        for (size_t c = 0; c < Dv; ++c) {
          drow[c] = round(g[c * d_o.stride_d]);
          dsum += static_cast<double>(drow[c]) * out[c * o.stride_d];
        }
      }
      s.di[i] = static_cast<float>(dsum);
    }
  }

  // kj's keys and values (kj.j0, kj.cols set) of key/value head (b, kvh).
  void PackKeys(const AttentionProblem& p, int64_t b, int64_t kvh, KeyBlock& kj) const {
    PackRows(k, b, kvh, kj.j0, kj.cols, kj.kb, round_up(static_cast<size_t>(p.D), kLanes));
    PackRows(v, b, kvh, kj.j0, kj.cols, kj.vb, static_cast<size_t>(p.Dv));
  }

  // St (cols, Br) = k_j Qt_i: the scores of query block blk in ScoreUnits
  template <int kD>
  void Scores(const AttentionProblem& p, const BackwardScratch& s, size_t blk, const KeyBlock& kj, float* st) const {
    const size_t D = kD > 0 ? kD : static_cast<size_t>(p.D), Dp = round_up(D, kLanes);
    BlockProduct<kScoreRows, kQueryVectors, false, Out::kStore, kD>(kj.cols, kQueryVectors, kj.kb, Dp,
                                                                    s.qt + blk * D * kBr, kBr, D, st, kBr);
  }
  // dPt (cols, Br) = v_j dOt_i
  template <int kD>
  void ScoreGradient(const AttentionProblem& p, const BackwardScratch& s, size_t blk, const KeyBlock& kj,
                     float* dpt) const {
    const size_t Dv = kD > 0 ? kD : static_cast<size_t>(p.Dv);
    BlockProduct<kScoreRows, kQueryVectors, false, Out::kStore, kD>(kj.cols, kQueryVectors, kj.vb, Dv,
                                                                    s.dot + blk * Dv * kBr, kBr, Dv, dpt, kBr);
  }
  // dv_j += (Pt z) d_o_i;  dk_j += dSt (q_i scale);  dq_i += dSt^T k_j   (s.pt = Pt z, s.dpt = dSt)
  void Gradients(const AttentionProblem& p, BackwardScratch& s, size_t blk, size_t rows, const KeyBlock& kj) const {
    const size_t Dp = round_up(static_cast<size_t>(p.D), kLanes), Dvp = round_up(static_cast<size_t>(p.Dv), kLanes);
    const size_t i0 = blk * kBr, cols = kj.cols;
    if constexpr (kRound) {
      RoundBlockToBF16(s.pt, cols);
      ScaleBlock(s.dpt, cols, p.scale);
      RoundBlockToBF16(s.dpt, cols);
    }
    BlockProduct<kGradRows, kGradVectors, false, Out::kAccumulate>(cols, Dvp / kLanes, s.pt, kBr, s.dob + i0 * Dvp,
                                                                   Dvp, rows, kj.dv, Dvp);
    BlockProduct<kGradRows, kGradVectors, false, Out::kAccumulate>(cols, Dp / kLanes, s.dpt, kBr, s.qs + i0 * Dp, Dp,
                                                                   rows, kj.dk, Dp);
    BlockProduct<kGradRows, kGradVectors, true, Out::kAccumulate>(rows, Dp / kLanes, s.dpt, kBr, kj.kb, Dp, cols,
                                                                  s.dq + i0 * Dp, Dp);
  }

 private:
  static void ScaleBlock(float* HWY_RESTRICT x, size_t rows, float scale) {
    const DF d;
    const VF f = hn::Set(d, scale);
    for (size_t j = 0; j < rows * kBr; j += kLanes) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), f), d, x + j);
  }
};

// Key blocks per pass over the query blocks. Each pass reads every query block's packed rows
// (q twice, d_o twice, the dq accumulator: 5 T D floats for a head); while they fit in L2 one
// key block per pass costs nothing, beyond that each pass streams them from L3 or memory, so
// a pass takes kMaxKeyGroup key blocks. (The dq accumulator still sees the key blocks in
// increasing order: the results are the same either way.)
inline size_t BackwardGroup(const AttentionProblem& p) {
  return FitsInL2(static_cast<double>(p.T) * static_cast<double>(3 * p.D + 2 * p.Dv)) ? 1 : kMaxKeyGroup;
}

// Query blocks [first, blocks): the ones that can see the task's keys.
template <class Operands>
void PackHeadForBackward(const AttentionProblem& p, const Operands& ops, ConstHeads o, ConstHeads d_o,
                         const float* lse, int64_t b, int64_t h, size_t first, size_t blocks, BackwardScratch& s) {
  const size_t Dp = round_up(static_cast<size_t>(p.D), kLanes), Tp = blocks * kBr;
  const size_t T = static_cast<size_t>(p.T);
  for (size_t blk = first; blk < blocks; ++blk) {
    const int64_t i0 = static_cast<int64_t>(blk * kBr);
    const size_t rows = std::min(kBr, T - blk * kBr);
    ops.PackQueries(p, o, d_o, b, h, blk, rows, s);
    if (p.alibi) FillAlibiAnchors(p, h, i0, rows, s.anchor + blk * kBr);
  }
  for (size_t i = first * kBr; i < Tp; ++i) {
    s.lse[i] = std::numeric_limits<float>::infinity();
    s.lse_lo[i] = 0.0f;
    if (i >= T) continue;
    const int64_t ii = static_cast<int64_t>(i);
    const int64_t at = (b * p.H + h) * p.T + ii;
    const float l = lse[at];
    // -inf: no visible key, every weight is 0 (2^(s - inf) = 0). Else, in double: the forward's
    // lse with the part a float dropped (AttentionOptions::lse_low) and, with ALiBi, the anchored
    // scores' shift, back in base 2 (the forward's m f + log2 l: / kLn2 undoes its * kLn2); then a
    // float and its remainder, so that s f - lse, small where a weight matters, is not rounded at
    // lse's magnitude.
    if (l != kNegInf) {
      const double exact = (static_cast<double>(l) + (p.lse_low ? static_cast<double>(p.lse_low[at]) : 0.0) +
                            (p.alibi ? AlibiShift(p, h, ii) : 0.0)) / kLn2;
      s.lse[i] = static_cast<float>(exact);
      s.lse_lo[i] = static_cast<float>(exact - static_cast<double>(s.lse[i]));
    }
  }
  std::fill(s.dq + first * kBr * Dp, s.dq + Tp * Dp, 0.0f);
}

// Pt = exp(mask(St) - lse) and the dropout / dS step for one (query block, key block) pair:
// on return pt holds Pt * z and dpt holds dSt = Pt * (dPt * z - Di).
// (pos0: the position of the block's first query, which keys the dropout mask.)
template <bool kDropout>
void WeightsAndScoreGradient(const AttentionProblem& p, const DropoutKey& key, const float* HWY_RESTRICT lse,
                             const float* HWY_RESTRICT lse_lo,
                             const float* HWY_RESTRICT di, float* HWY_RESTRICT pt, float* HWY_RESTRICT dpt,
                             int64_t pos0, int64_t j0, size_t cols) {
  const DF d;
  const VF f = hn::Set(d, ScoreUnitsOf(p).exp);
  for (int v = 0; v < kQueryVectors; ++v) {
    const VF l = hn::LoadU(d, lse + v * kLanes), l_lo = hn::LoadU(d, lse_lo + v * kLanes);
    const VF dsum = hn::LoadU(d, di + v * kLanes);
    const VF z = hn::Set(d, p.keep_scale);
    for (size_t j = 0; j < cols; j += 4) {
      hn::Mask<DF> drop[4];
      if constexpr (kDropout)
        DropoutDrop4(key, pos0 + v * static_cast<int64_t>(kLanes), p.key_pos(j0 + static_cast<int64_t>(j)), drop);
      for (size_t r = 0; r < 4 && j + r < cols; ++r) {
        const size_t at = (j + r) * kBr + v * kLanes;
        const VF w = Exp2(d, hn::Sub(FusedMulSub(d, hn::LoadU(d, pt + at), f, l), l_lo));
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

// For the rows of one (query block, key block) pair: e += sum_j P dP' and l += sum_j P over the
// block's keys (P = exp(mask(St) - lse) as above, dP' = dPt * z), lane-wise in float, then added
// into the rows' double sums (e, l: Br each).
template <bool kDropout>
void AddWeightSums(const AttentionProblem& p, const DropoutKey& key, const float* HWY_RESTRICT lse,
                   const float* HWY_RESTRICT lse_lo, const float* HWY_RESTRICT pt, const float* HWY_RESTRICT dpt,
                   int64_t pos0, int64_t j0, size_t cols, double* HWY_RESTRICT e, double* HWY_RESTRICT l) {
  const DF d;
  HWY_ALIGN float es[kLanes], ls[kLanes];
  const VF f = hn::Set(d, ScoreUnitsOf(p).exp);
  for (int v = 0; v < kQueryVectors; ++v) {
    const VF lv = hn::LoadU(d, lse + v * kLanes), lo = hn::LoadU(d, lse_lo + v * kLanes);
    const VF z = hn::Set(d, p.keep_scale);
    VF esum = hn::Zero(d), lsum = hn::Zero(d);
    for (size_t j = 0; j < cols; j += 4) {
      hn::Mask<DF> drop[4];
      if constexpr (kDropout)
        DropoutDrop4(key, pos0 + v * static_cast<int64_t>(kLanes), p.key_pos(j0 + static_cast<int64_t>(j)), drop);
      for (size_t r = 0; r < 4 && j + r < cols; ++r) {
        const size_t at = (j + r) * kBr + v * kLanes;
        const VF w = Exp2(d, hn::Sub(FusedMulSub(d, hn::LoadU(d, pt + at), f, lv), lo));
        VF dw = hn::LoadU(d, dpt + at);
        if constexpr (kDropout) dw = hn::IfThenZeroElse(drop[r], hn::Mul(dw, z));
        esum = hn::MulAdd(w, dw, esum);
        lsum = hn::Add(lsum, w);
      }
    }
    hn::Store(esum, d, es);
    hn::Store(lsum, d, ls);
    for (size_t c = 0; c < kLanes; ++c) {
      e[v * kLanes + c] += es[c];
      l[v * kLanes + c] += ls[c];
    }
  }
}

// Rows that see at most this many keys take D_i from their own weights (RowSumsFromWeights).
constexpr int64_t kOwnSumKeys = 64;

// D_i = sum_j P_ij dP'_ij from the weights and dP the backward itself computes, instead of
// d_o . o, for each query row that sees at most kOwnSumKeys keys (short rows; a causal
// sequence's first rows). Exactly, both are the same; in float, dS_ij = P_ij (dP_ij - D_i)
// cancels what dP_ij's rounding shares with D_i only when D_i is summed from those same dP: with
// the weights on one key (a saturated softmax; a causal sequence's first query, whose one weight
// is 1) dS is then about P_ij (1 - P_ij) times that rounding, as PyTorch's softmax backward
// gives, not P_ij times it (the gradients of q and k at T = 2 were 10-30x PyTorch float32's
// distance from float64). It costs two of the five products again, on these rows' blocks only.
// The rows are chosen by their own keys, whatever the task's share of the keys and the target's
// block sizes, so every target and thread count picks the same rows. D_i = e / l (l = sum_j P_ij,
// 1 up to rounding: sum_j dS_ij stays 0). Not when the keys are a part (p.partial_keys: ring
// attention's ranks each hold some of them; D needs all), and, should a caller give a part
// without saying so, not for a row whose l is not 1 within 2^-16 (keys elsewhere carry weight).
template <int kD, class Operands>
void RowSumsFromWeights(const AttentionProblem& p, const Operands& ops, const DropoutKey& key, int64_t b, int64_t h,
                        size_t first_block, size_t end_block, BackwardScratch& s) {
  if (p.partial_keys) return;
  const bool variants = HasScoreVariants(p);
  const int64_t kvh = p.kv_head(h);
  const auto own = [&](int64_t i) {
    const int64_t span = p.visible_end(i) - p.visible_begin(i);
    return span > 0 && span <= kOwnSumKeys;
  };
  for (size_t blk = first_block; blk < end_block; ++blk) {
    const int64_t i0 = static_cast<int64_t>(blk * kBr), pos0 = p.pos(i0);
    const size_t rows = std::min(kBr, static_cast<size_t>(p.T) - blk * kBr);
    int64_t begin = p.S, end = 0;
    for (size_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + static_cast<int64_t>(r);
      if (!own(i)) continue;
      begin = std::min(begin, p.visible_begin(i));
      end = std::max(end, p.visible_end(i));
    }
    if (end <= begin) continue;
    double e[kBr] = {}, l[kBr] = {};
    for (int64_t j0 = begin; j0 < end; j0 += static_cast<int64_t>(kBcB)) {
      KeyBlock& kj = s.keys[0];  // the main loop packs its own blocks afterwards
      kj.j0 = j0;
      kj.cols = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kBcB), end - j0));
      ops.PackKeys(p, b, kvh, kj);
      ops.template Scores<kD>(p, s, blk, kj, s.pt);
      if (variants) ApplyScoreVariants(p, h, s.pt, s.tt, s.anchor + i0, j0, kj.cols);
      if (BlockNeedsMask(p, pos0, rows, j0, kj.cols)) ApplyMask(p, s.pt, i0, pos0, j0, rows, kj.cols);
      ops.template ScoreGradient<kD>(p, s, blk, kj, s.dpt);
      if (p.dropout) {
        AddWeightSums<true>(p, key, s.lse + i0, s.lse_lo + i0, s.pt, s.dpt, pos0, j0, kj.cols, e, l);
      } else {
        AddWeightSums<false>(p, key, s.lse + i0, s.lse_lo + i0, s.pt, s.dpt, pos0, j0, kj.cols, e, l);
      }
    }
    for (size_t r = 0; r < rows; ++r)
      if (own(i0 + static_cast<int64_t>(r)) && std::abs(l[r] - 1.0) <= 1.0 / 65536.0)
        s.di[static_cast<size_t>(i0) + r] = static_cast<float>(e[r] / l[r]);
  }
}

// With a softcap, dS with respect to x = scale q.k: dSt *= 1 - tanh^2(x / cap) (tt holds the tanh).
inline void SoftcapGradient(float* HWY_RESTRICT dpt, const float* HWY_RESTRICT tt, size_t cols) {
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
inline std::pair<int64_t, int64_t> QueriesSeeing(const AttentionProblem& p, int64_t key0, int64_t key1) {
  const int64_t first = p.causal() ? std::clamp<int64_t>(p.key_pos(key0) - p.query_offset, 0, p.T) : 0;
  const int64_t end = p.window > 0 && key1 > key0
                          ? std::clamp<int64_t>(p.key_pos(key1) - 1 + p.window - p.query_offset, 0, p.T)
                          : p.T;
  return {first, std::max(first, end)};
}

// Keys [key0, key1) of query head (b, h): their dk and dv - written to dk, dv of kv head
// kv_head(h), or added to them when `accumulate` (the group's earlier heads wrote them) - and
// these keys' share of dq - written to dq itself when one task covers every key of the head,
// else to dq_part (T, D), summed afterwards.
template <int kD, class Operands>
void BackwardTask(const AttentionProblem& p, const Operands& ops, ConstHeads o, ConstHeads d_o, const float* lse,
                  MutableHeads dq, MutableHeads dk, MutableHeads dv, int64_t b, int64_t h, int64_t key0, int64_t key1,
                  bool accumulate, float* dq_part, float* scratch) {
  const size_t D = kD > 0 ? kD : static_cast<size_t>(p.D);
  const size_t Dv = kD > 0 ? kD : static_cast<size_t>(p.Dv);
  const size_t Dp = round_up(D, kLanes), Dvp = round_up(Dv, kLanes);
  const size_t blocks = (static_cast<size_t>(p.T) + kBr - 1) / kBr;
  const size_t group = BackwardGroup(p);
  const int64_t kvh = p.kv_head(h);
  BackwardScratch s(scratch, blocks, group, D, Dv, HasScoreVariants(p), ops.pair_floats(p));
  // Queries outside [first_row, end_row) see none of these keys (causal mask, window): their rows
  // are not packed, and their share of dq is zero.
  const auto [first_row, end_row] = QueriesSeeing(p, key0, key1);
  const size_t first_block = static_cast<size_t>(first_row) / kBr;
  const size_t end_block = (static_cast<size_t>(end_row) + kBr - 1) / kBr;
  PackHeadForBackward(p, ops, o, d_o, lse, b, h, first_block, end_block, s);
  const DropoutKey key = MakeDropoutKey(p, b, h);
  const bool variants = HasScoreVariants(p);
  RowSumsFromWeights<kD>(p, ops, key, b, h, first_block, end_block, s);

  for (int64_t g0 = key0; g0 < key1; g0 += static_cast<int64_t>(group * kBcB)) {
    size_t count = 0;
    for (int64_t j0 = g0; j0 < key1 && count < group; j0 += static_cast<int64_t>(kBcB), ++count) {
      KeyBlock& kj = s.keys[count];
      kj.j0 = j0;
      kj.cols = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kBcB), key1 - j0));
      ops.PackKeys(p, b, kvh, kj);
      std::fill(kj.dk, kj.dk + kBcB * Dp, 0.0f);
      std::fill(kj.dv, kj.dv + kBcB * Dvp, 0.0f);
      if (accumulate) {  // the sums of the group's earlier heads, in head order
        PackRows<float>(dk, b, kvh, j0, kj.cols, kj.dk, Dp);
        PackRows<float>(dv, b, kvh, j0, kj.cols, kj.dv, Dvp);
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
        ops.template Scores<kD>(p, s, blk, kj, s.pt);
        if (variants) ApplyScoreVariants(p, h, s.pt, s.tt, s.anchor + i0, j0, cols);
        if (BlockNeedsMask(p, pos0, rows, j0, cols)) ApplyMask(p, s.pt, i0, pos0, j0, rows, cols);
        ops.template ScoreGradient<kD>(p, s, blk, kj, s.dpt);
        if (p.dropout) {
          WeightsAndScoreGradient<true>(p, key, s.lse + i0, s.lse_lo + i0, s.di + i0, s.pt, s.dpt, pos0, j0, cols);
        } else {
          WeightsAndScoreGradient<false>(p, key, s.lse + i0, s.lse_lo + i0, s.di + i0, s.pt, s.dpt, pos0, j0, cols);
        }
        if (p.softcap > 0.0f) SoftcapGradient(s.dpt, s.tt, cols);
        ops.Gradients(p, s, blk, rows, kj);
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
  const float dq_scale = ops.dq_scale(p);
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
      for (size_t c = 0; c < D; ++c) gq[c] = acc[c] * dq_scale;
    } else {
      for (size_t c = 0; c < D; ++c) gq[c * stride] = acc[c] * dq_scale;
    }
  }
}

template <int kD, class Operands>
void Backward(const AttentionProblem& p, const Operands& ops, ConstHeads o, ConstHeads d_o, const float* lse,
              MutableHeads dq, MutableHeads dk, MutableHeads dv) {
  const size_t blocks = (static_cast<size_t>(p.T) + kBr - 1) / kBr;
  const size_t scratch = BackwardScratch::floats(blocks, BackwardGroup(p), static_cast<size_t>(p.D),
                                                 static_cast<size_t>(p.Dv), HasScoreVariants(p), ops.pair_floats(p));
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
      BackwardTask<kD>(p, ops, o, d_o, lse, dq, dk, dv, b, h, key0, key1, h > g * per_group, dq_part,
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
}  // namespace qkv::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_ATTENTION_BACKWARD_INL_H_
