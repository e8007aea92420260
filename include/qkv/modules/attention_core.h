// qkv/modules/attention_core.h - scaled dot-product attention as the book computes it, with
// every intermediate kept for inspection.
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
// (PyTorch gives NaN there; notebook 004's tril mask bug shows such rows).
#pragma once

#include "qkv/core/tensor.h"

namespace qkv {

class Dropout;

struct AttentionTrace {
  Tensor queries, keys, values;  // as the module computed them (per head for MultiHeadAttention)
  Tensor scores;                 // q @ k^T, unscaled
  Tensor masked_scores;          // scores after masked_fill(-inf); empty when there is no mask
  Tensor weights;                // softmax(masked / sqrt(D)), before dropout
  Tensor dropped_weights;        // after dropout; empty when dropout is inactive
  Tensor context;                // the attention output before any output projection
};

Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* blocked,
              Dropout* dropout, AttentionTrace* trace);

// The (n, n) causal mask buffer of the book: triu(ones(n, n), diagonal=1).
Tensor causal_mask(int64_t n);

}  // namespace qkv
