// qkv/modules/sdpa.h - notebook 002's numpy scaled_dot_product_attention(q, k, v, mask).
//
//   q (..., T, D), k (..., S, D), v (..., S, Dv) -> output (..., T, Dv), weights (..., T, S)
//   weights = softmax(q k^T / sqrt(D) + mask)
// The mask kind is the kernels' MaskKind (qkv/kernels/attention.h). kAdditive and kBlocked take a
// (T, S) mask (or one broadcastable to the scores); kNone and kCausal take none:
//   kAdditive: added to the scaled scores (0 to keep, -inf to hide), as notebook 002 does;
//   kBlocked:  boolean, non-zero means "hidden" (the book's masked_fill(mask.bool(), -inf));
//   kCausal:   key j hidden from query i when j > i (top-left aligned, as triu(ones(T, S), 1)).
// A row with every key hidden gets zero weights and a zero output, never NaN (and a zero gradient).
//
// The backward takes dL/doutput and the forward's result and gives dL/dq, dL/dk, dL/dv (shaped as
// q, k, v, summed over any broadcast leading dims). The mask is a constant: it gets no gradient.
#pragma once

#include "qkv/core/tensor.h"
#include "qkv/kernels/attention.h"

namespace qkv {

using kernels::MaskKind;

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
