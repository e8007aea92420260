// Notebook 002's scaled_dot_product_attention. See include/qkv/modules/sdpa.h.
#include "qkv/modules/sdpa.h"

#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"

namespace qkv {

SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor* mask, MaskKind kind) {
  QKV_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
            "scaled_dot_product_attention: q, k, v need at least two dimensions, got ", q.describe(),
            ", ", k.describe(), ", ", v.describe());
  QKV_CHECK(q.size(-1) == k.size(-1), "scaled_dot_product_attention: q ", q.describe(), " and k ",
            k.describe(), " differ in their last dimension");
  QKV_CHECK(k.size(-2) == v.size(-2), "scaled_dot_product_attention: k ", k.describe(), " and v ",
            v.describe(), " differ in the number of positions");
  QKV_CHECK((mask == nullptr) == (kind == MaskKind::kNone),
            "scaled_dot_product_attention: a mask needs a kind, and a kind needs a mask");
  SdpaResult r;
  r.scaled = div(matmul(q, k.T()), static_cast<float>(std::sqrt(static_cast<double>(q.size(-1)))));
  Tensor logits = r.scaled;
  if (kind == MaskKind::kAdditive) logits = add(r.scaled, *mask);
  if (kind == MaskKind::kBlocked) logits = masked_fill(r.scaled, *mask, -std::numeric_limits<float>::infinity());
  r.weights = softmax(logits, -1);
  r.output = matmul(r.weights, v);
  return r;
}

}  // namespace qkv
