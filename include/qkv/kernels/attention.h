// qkv/kernels/attention.h - fused scaled dot-product attention (FlashAttention-2 style) on strided
// float32 (B, H, T, D) arrays, its backward pass, exact weights on demand, and the naive
// references they are tested against.
//
// Legend: B batch, H query heads, G key/value heads (G divides H; G = H is multi-head attention,
// G < H grouped-query, G = 1 multi-query), T query positions, S key positions, D query/key dim,
// Dv value dim.
//
//   q (B, H, T, D), k (B, G, S, D), v (B, G, S, Dv)  ->  o (B, H, T, Dv), lse (B, H, T)
//   query head h reads key/value head g(h) = h / (H / G)   (PyTorch's repeat_interleave order)
//   pos_i     = query_offset + i,  pos_j = key_offset + j      (both offsets 0 by default)
//   x[i, j]   = scale * (q[i] . k[j])
//   s[i, j]   = softcap ? softcap * tanh(x / softcap) : x     (Gemma 2's logit softcapping)
//               (+ mask[i, j] for an additive mask)
//               - slope[h] * (pos_i - pos_j)                 with ALiBi slopes
//               -inf where hidden: causal and pos_j > pos_i; window w > 0 and pos_j <= pos_i - w;
//                                  boolean mask and mask[i, j] != 0
//   lse[i]    = log(sum_j exp(s[i, j]))                    -inf when every key is blocked
//   w[i, j]   = exp(s[i, j] - lse[i])                       0 when every key is blocked
//   o[i]      = sum_j w[i, j] * z[i, j] * v[j]              z = kept / (1 - p) under dropout, else 1
//
// The book's attention is scale = 1 / sqrt(D) with the causal mask, G = H, no offset, window,
// ALiBi or cap; its output is o with heads merged. A row whose keys are all blocked gives o = 0
// and lse = -inf, never NaN (qkv's reference convention, see attention_core.h). Non-finite
// inputs propagate as in the reference: a NaN in a visible score makes that row's output NaN.
// (Values at positions a mask hides may or may not reach the output as NaN: whole key blocks
// above the causal diagonal or before the window are never read.)
//
// With query_offset = 0 the causal mask is top-left aligned (key j is visible to query i when
// j <= i), as the book's triu(ones(T, T), 1)[:T, :S] buffer is; it is allowed with T != S. A
// KV cache of S keys decoding T new queries sets query_offset = S - T (bottom-right aligned).
// key_offset places the keys too: a block of a longer sequence's keys, as ring attention
// (qkv/mpi/ring_attention.h) hands the kernel one rank's block at a time. A query may then see
// none of the block's keys (causal, pos_i < key_offset): o = 0, lse = -inf, and merging the
// blocks' (o, lse) by the log-sum-exp rule gives the attention over all of them.
// Additive and boolean masks are (T, S) float32 arrays with a row stride; a boolean mask blocks
// where the value is non-zero (the book's mask.bool()). -inf in an additive mask blocks, as in
// notebook 002.
//
// Dropout draws each weight's keep/drop from Philox keyed by the seed and (batch_offset + b,
// head_offset + h, pos_i, pos_j) (see philox.h), so the mask does not depend on threads, tiling, how a sequence was
// split between a prefill and cached steps, or between the ranks of a ring, or which heads a call
// was given; the backward pass regenerates it. It is a different mask from
// PyTorch's nn.Dropout (which qkv reproduces on the textbook path).
//
// The fused kernels tile queries by blocks of Br and keys by blocks of Bc, keep a running max
// and sum per query (online softmax), skip key blocks wholly hidden (above the causal diagonal,
// before the window), and never hold more than one (Br, Bc) block of scores; memory is linear
// in T. One parallel_for runs over batch x heads x query blocks (forward) or batch x key/value
// heads (backward: a task runs its group's query heads in turn, so dk and dv sum them in a fixed
// order; with fewer than 4 key/value heads in all, batch x key/value heads x runs of key blocks,
// dq's shares summed in a fixed order). SIMD is Google Highway with run-time dispatch (AVX-512 or AVX2 on
// x86, a portable fallback elsewhere), with D = 64 (GPT-2's heads) unrolled and any other D on a
// generic path.
#pragma once

#include <cstdint>
#include <type_traits>

#include "qkv/core/bf16.h"  // Dtype (the backward reference's rounding)
#include "qkv/core/thread_pool.h"

namespace qkv::kernels {

// A strided (B, H, N, D) float32 array: element (b, h, n, d) is at
// data[b * stride_b + h * stride_h + n * stride_n + d * stride_d]. Strides are in elements and
// may be anything (e.g. heads interleaved in a (B, N, H * D) projection output).
template <typename F>
struct Heads {
  F* data = nullptr;
  int64_t batch = 0, heads = 0, tokens = 0, dim = 0;
  int64_t stride_b = 0, stride_h = 0, stride_n = 0, stride_d = 1;

  F* row(int64_t b, int64_t h, int64_t n) const { return data + b * stride_b + h * stride_h + n * stride_n; }
  // A writable view is also a read-only one.
  operator Heads<const F>() const
    requires(!std::is_const_v<F>)
  {
    return {data, batch, heads, tokens, dim, stride_b, stride_h, stride_n, stride_d};
  }
  // A contiguous (B, H, N, D) array.
  static Heads contiguous(F* data, int64_t B, int64_t H, int64_t N, int64_t D) {
    return {data, B, H, N, D, H * N * D, N * D, D, 1};
  }
  // Heads interleaved in rows of a (B, N, row_width) matrix, head h at column offset h * D:
  // the layout of a (B, N, H * D) projection output, viewed as (B, H, N, D) without a copy.
  static Heads interleaved(F* data, int64_t B, int64_t H, int64_t N, int64_t D, int64_t row_width) {
    return {data, B, H, N, D, N * row_width, D, row_width, 1};
  }
};
using ConstHeads = Heads<const float>;
using MutableHeads = Heads<float>;

// What masks the scores: nothing, the causal triangle (no values), an additive (T, S) array, or a
// boolean (T, S) array. The one mask-kind enum of qkv: the textbook sdpa (modules/sdpa.h) takes it too.
enum class MaskKind { kNone, kCausal, kAdditive, kBlocked };

struct AttentionMask {
  using Kind = MaskKind;
  Kind kind = Kind::kNone;
  const float* values = nullptr;  // (T, S) for kAdditive / kBlocked, row-major with row_stride
  int64_t row_stride = 0;         // elements between rows of `values`

  static AttentionMask none() { return {}; }
  static AttentionMask causal() { return {Kind::kCausal, nullptr, 0}; }
  static AttentionMask additive(const float* values, int64_t row_stride) { return {Kind::kAdditive, values, row_stride}; }
  static AttentionMask blocked(const float* values, int64_t row_stride) { return {Kind::kBlocked, values, row_stride}; }
};

struct AttentionOptions {
  float scale = 1.0f;          // multiplies q . k; the book uses 1 / sqrt(D)
  AttentionMask mask;
  float dropout_p = 0.0f;      // in [0, 1); 0 = no dropout
  uint64_t dropout_seed = 0;   // Philox key
  ThreadPool* pool = nullptr;  // nullptr: default_pool()
  // Today's variants, all off by default (see the score formula at the top):
  int64_t query_offset = 0;             // >= 0: query i is at position query_offset + i
  int64_t key_offset = 0;               // >= 0: key j is at position key_offset + j
  int64_t head_offset = 0;              // >= 0: query head h is head head_offset + h of the layer
                                        // (the dropout mask's key; for calls on a slice of heads)
  int64_t batch_offset = 0;             // >= 0: sequence b is sequence batch_offset + b of a larger batch
                                        // (the dropout mask's key; for a rank's slice of a batch)
  int64_t window = 0;                   // > 0: key j hidden from query i when j <= pos_i - window; 0: none
  const float* alibi_slopes = nullptr;  // (H) one finite slope per query head, or null: no ALiBi
  float softcap = 0.0f;                 // > 0: scores capped as softcap * tanh(x / softcap); 0: none
  // (B, H, T, contiguous) or null: the part of each row's lse a float drops, lse - (double)lse_f.
  // The forward writes it beside lse, the backward reads it: the weights it recomputes, exp(s -
  // lse), then carry no row-wide error of about |lse| * 2^-25 (at scores in the tens, a dozen
  // float32 ulps on every weight of the row, and on the gradients they make; PyTorch's textbook
  // softmax keeps its weights and has no such error). Null: the backward uses lse alone.
  float* lse_low = nullptr;
  // The backward only: k and v hold part of the keys o and lse were computed over (ring
  // attention's blocks, each a rank's). The backward then takes D_i = d_o . o for every row; with
  // every key given (false), rows that see at most 64 keys sum D_i from their own weights, which
  // cancels dP's rounding in dS as PyTorch's softmax backward does (docs/kernels.md).
  bool partial_keys = false;
};

// The ALiBi paper's slopes for H heads: the geometric sequence 2^(-8 / n), 2^(-16 / n), ... for
// n = H a power of two; otherwise those of the power of two below H, then every other slope of
// twice that (the paper's and Hugging Face's rule). slopes has H entries.
void alibi_default_slopes(int64_t H, float* slopes);

// --- fused kernels --------------------------------------------------------------------------------
// o (B, H, T, Dv) and lse (B, H, T, contiguous) are written whole; k and v may have fewer heads
// (G, dividing H). Throws qkv::Error (naming the
// argument and its sizes) on inconsistent shapes, a bad mask or p outside [0, 1).
void attention_forward(ConstHeads q, ConstHeads k, ConstHeads v, MutableHeads o, float* lse,
                       const AttentionOptions& options);

// Given the forward's inputs, its o and lse, and d_o = dLoss/do, writes dq (B, H, T, D),
// dk (B, G, S, D), dv (B, G, S, Dv) (overwritten, not accumulated; with G < H each sums the
// gradients of its group's query heads). The weights are recomputed
// from q, k and lse, so nothing (T, S)-sized is stored. Same options as the forward.
void attention_backward(ConstHeads q, ConstHeads k, ConstHeads v, ConstHeads o, ConstHeads d_o,
                        const float* lse, MutableHeads dq, MutableHeads dk, MutableHeads dv,
                        const AttentionOptions& options);

// Weights on demand: rows [row_begin, row_end) of head (b, h) of the softmax weights w (before
// dropout) or, with after_dropout, w * z, recomputed exactly from q, k and the forward's lse.
// out is (row_end - row_begin, S) with row stride out_row_stride.
void attention_weights(ConstHeads q, ConstHeads k, const float* lse, const AttentionOptions& options,
                       int64_t b, int64_t h, int64_t row_begin, int64_t row_end, bool after_dropout,
                       float* out, int64_t out_row_stride);

// --- naive references (kept forever; what the fused kernels are tested against) ------------------
// Three passes per row in double: scores and mask, softmax, weighted sum of v. Same conventions,
// same dropout mask. Single-threaded, allocation per row: for tests, not for speed.
void attention_forward_reference(ConstHeads q, ConstHeads k, ConstHeads v, MutableHeads o, float* lse,
                                 const AttentionOptions& options);
// The textbook backward, one (b, h) at a time with the full (T, S) weights in double. With
// rounding = kBF16, d_o, the weights P z and scale * dS are rounded to bf16 where the bf16 kernel
// rounds them (attention_bf16.h), everything else still in double.
void attention_backward_reference(ConstHeads q, ConstHeads k, ConstHeads v, ConstHeads d_o,
                                   MutableHeads dq, MutableHeads dk, MutableHeads dv,
                                   const AttentionOptions& options, Dtype rounding = Dtype::kF32);

// The (i, j) pairs of one head that the causal mask and the window leave visible: T * S with
// neither, about half of T * S causal, about T * w with a window w.
double attention_visible_pairs(int64_t T, int64_t S, bool causal, int64_t query_offset = 0, int64_t window = 0);
// FLOPs of the matrix products attention needs, counting only the visible (i, j) pairs: the
// forward's two (q k^T, w v) are 2 * pairs * (D + Dv).
double attention_forward_flops(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal,
                               int64_t query_offset = 0, int64_t window = 0);
// The backward's five (scores recomputed, d_o v^T, dv, dq, dk): 2 * pairs * (3 D + 2 Dv).
double attention_backward_flops(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal,
                                int64_t query_offset = 0, int64_t window = 0);

}  // namespace qkv::kernels
