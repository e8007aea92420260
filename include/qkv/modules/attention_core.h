// qkv/modules/attention_core.h - scaled dot-product attention as the book computes it, with
// every intermediate kept for inspection, and its backward pass.
//
//   scores        = q @ k^T                               (..., T, S)
//   masked_scores = scores with -inf where `blocked` != 0 (..., T, S)   (only with a mask)
//   weights       = softmax(masked_scores / sqrt(D))      (..., T, S)
//   dropped       = dropout(weights)                       (..., T, S)   (only in training)
//   context       = dropped @ v                            (..., T, Dv)
//
// q (..., T, D), k (..., S, D), v (..., S, Dv); leading dims broadcast. `blocked` is a (T, S)
// mask where non-zero means "this query may not see this key" (the book's mask.bool()).
// A query whose keys are all blocked gets zero weights and a zero context vector, not NaN
// (PyTorch gives NaN there; notebook 004's tril mask bug shows such rows). Its gradient is zero
// too, consistent with that constant output.
//
// This is the textbook (reference) path: attend materialises the (T, S) matrices. A fused kernel
// may replace it behind the same two calls: attend(q, k, v, mask, dropout) -> context, keeping in
// AttentionSaved what its backward needs, and attend_backward(dcontext, saved, dropout) -> dq, dk, dv.
#pragma once

#include "qkv/core/tensor.h"

namespace qkv {

class Dropout;

struct AttentionTrace {
  Tensor queries, keys, values;  // as the module computed them (per head for MultiHeadAttention)
  Tensor scores;                 // q @ k^T, unscaled
  Tensor masked_scores;          // scores after masked_fill(-inf); undefined when there is no mask
  Tensor weights;                // softmax(masked / sqrt(D)), before dropout
  Tensor dropped_weights;        // after dropout; undefined when dropout is inactive
  Tensor context;                // the attention output before any output projection
};

// What attend keeps for attend_backward (views of tensors the forward computed; no copies).
struct AttentionSaved {
  Tensor q, k, v;   // (..., T, D), (..., S, D), (..., S, Dv)
  Tensor blocked;   // (T, S) the part of the mask that applied; undefined without a mask
  Tensor weights;   // (..., T, S) softmax output
  Tensor dropped;   // (..., T, S) after dropout (the weights themselves when dropout is inactive)
  float scale = 1;  // sqrt(D) as a float32, what the scores were divided by
};

struct AttentionGrads {
  Tensor dq, dk, dv;  // shaped as q, k, v
};

// With `trace`, every intermediate is kept there; with `saved`, what attend_backward needs.
// `dropout` may be null (no dropout); when given it draws its mask here.
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* blocked,
              Dropout* dropout, AttentionTrace* trace, AttentionSaved* saved = nullptr);

// The gradients of q, k and v given dL/dcontext (..., T, Dv), for the forward that filled `saved`.
// `dropout` must be the one that forward used (its backward applies the same mask), or null.
AttentionGrads attend_backward(const Tensor& dcontext, const AttentionSaved& saved, Dropout* dropout);

// The (n, n) causal mask buffer of the book: triu(ones(n, n), diagonal=1).
Tensor causal_mask(int64_t n);

}  // namespace qkv
