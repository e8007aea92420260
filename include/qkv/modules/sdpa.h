// qkv/modules/sdpa.h - notebook 002's numpy scaled_dot_product_attention(q, k, v, mask).
//
//   q (..., T, D), k (..., S, D), v (..., S, Dv) -> output (..., T, Dv), weights (..., T, S)
//   weights = softmax(q k^T / sqrt(D) + mask)
// The mask is (T, S) (or broadcastable to the scores) and comes in two kinds:
//   kAdditive: added to the scaled scores (0 to keep, -inf to hide), as notebook 002 does;
//   kBlocked:  boolean, non-zero means "hidden" (the book's masked_fill(mask.bool(), -inf)).
// A row with every key hidden gets zero weights and a zero output, never NaN (and a zero gradient).
//
// The backward takes dL/doutput and the forward's result and gives dL/dq, dL/dk, dL/dv (shaped as
// q, k, v, summed over any broadcast leading dims). The mask is a constant: it gets no gradient.
#pragma once

#include "qkv/core/tensor.h"

namespace qkv {

enum class MaskKind { kNone, kAdditive, kBlocked };

struct SdpaResult {
  Tensor output;   // (..., T, Dv)
  Tensor weights;  // (..., T, S)
  Tensor scaled;   // q k^T / sqrt(D), before the mask
};

SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor* mask = nullptr, MaskKind kind = MaskKind::kNone);

struct SdpaGrads {
  Tensor dq, dk, dv;
};

SdpaGrads scaled_dot_product_attention_backward(const Tensor& doutput, const Tensor& q, const Tensor& k,
                                                const Tensor& v, const SdpaResult& forward,
                                                const Tensor* mask = nullptr, MaskKind kind = MaskKind::kNone);

}  // namespace qkv
