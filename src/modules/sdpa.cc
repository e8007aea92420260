// Notebook 002's scaled_dot_product_attention. See include/qkv/modules/sdpa.h.
#include "qkv/modules/sdpa.h"

#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"

namespace qkv {
namespace {

// A mask given exactly when its kind needs values; the causal one as the (T, S) buffer the book
// keeps, triu(ones(T, S), 1).
const Tensor* checked_mask(const char* what, const Tensor* mask, MaskKind kind, const Tensor& scaled,
                           Tensor& causal) {
  const bool needs_values = kind == MaskKind::kAdditive || kind == MaskKind::kBlocked;
  QKV_CHECK((mask != nullptr) == needs_values, what, ": an additive or boolean mask kind needs a mask, ",
            "and no other kind takes one");
  if (kind != MaskKind::kCausal) return mask;
  causal = triu(Tensor::ones({scaled.size(-2), scaled.size(-1)}), 1);
  return &causal;
}

}  // namespace

SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor* mask, MaskKind kind) {
  QKV_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
            "scaled_dot_product_attention: q, k, v need at least two dimensions, got ", q.describe(),
            ", ", k.describe(), ", ", v.describe());
  QKV_CHECK(q.size(-1) == k.size(-1), "scaled_dot_product_attention: q ", q.describe(), " and k ",
            k.describe(), " differ in their last dimension");
  QKV_CHECK(k.size(-2) == v.size(-2), "scaled_dot_product_attention: k ", k.describe(), " and v ",
            v.describe(), " differ in the number of positions");
  SdpaResult r;
  r.scaled = div(matmul(q, k.T()), static_cast<float>(std::sqrt(static_cast<double>(q.size(-1)))));
  Tensor causal;
  mask = checked_mask("scaled_dot_product_attention", mask, kind, r.scaled, causal);
  Tensor logits = r.scaled;
  if (kind == MaskKind::kAdditive) logits = add(r.scaled, *mask);
  if (kind == MaskKind::kBlocked || kind == MaskKind::kCausal) logits = masked_fill(r.scaled, *mask, -std::numeric_limits<float>::infinity());
  r.weights = softmax(logits, -1);
  r.output = matmul(r.weights, v);
  return r;
}

SdpaGrads scaled_dot_product_attention_backward(const Tensor& doutput, const Tensor& q, const Tensor& k,
                                                const Tensor& v, const SdpaResult& r, const Tensor* mask,
                                                MaskKind kind) {
  check_same_shape("scaled_dot_product_attention backward: doutput vs the forward's output", doutput, r.output);
  Tensor causal;
  mask = checked_mask("scaled_dot_product_attention backward", mask, kind, r.scaled, causal);
  SdpaGrads g;
  // r.output = matmul(r.weights, v)
  Tensor dweights = matmul(doutput, v.T());
  g.dv = sum_to(matmul(r.weights.T(), doutput), v.shape());
  // r.weights = softmax(logits, -1)
  Tensor dlogits = softmax_backward(r.weights, dweights, -1);
  // logits = r.scaled | add(r.scaled, *mask) | masked_fill(r.scaled, *mask, -inf)
  Tensor dscaled = dlogits;
  if (kind == MaskKind::kAdditive) dscaled = sum_to(dlogits, r.scaled.shape());
  if (kind == MaskKind::kBlocked || kind == MaskKind::kCausal) dscaled = masked_fill(dlogits, *mask, 0.0f);
  // r.scaled = div(matmul(q, k.T()), sqrt(D))
  Tensor dscores = div(dscaled, static_cast<float>(std::sqrt(static_cast<double>(q.size(-1)))));
  g.dq = sum_to(matmul(dscores, k), q.shape());
  g.dk = sum_to(matmul(dscores.T(), q), k.shape());
  return g;
}

}  // namespace qkv
