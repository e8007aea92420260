// The textbook attention path, forward and backward. See include/qkv/modules/attention_core.h.
#include "qkv/modules/attention_core.h"

#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/modules/layers.h"

namespace qkv {

Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* blocked,
              Dropout* dropout, AttentionTrace* trace, AttentionSaved* saved) {
  QKV_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, "attention: q, k and v need at least ",
            "two dimensions, got ", q.describe(), ", ", k.describe(), ", ", v.describe());
  QKV_CHECK(q.size(-1) == k.size(-1), "attention: queries ", q.describe(), " and keys ", k.describe(),
            " differ in their last dimension");
  QKV_CHECK(k.size(-2) == v.size(-2), "attention: keys ", k.describe(), " and values ", v.describe(),
            " differ in the number of positions");
  Tensor scores = matmul(q, k.T());
  Tensor masked, m;
  if (blocked != nullptr) {
    QKV_CHECK(blocked->dim() == 2 && blocked->size(0) >= q.size(-2) && blocked->size(1) >= k.size(-2),
              "attention: mask ", blocked->describe(), " is smaller than the (", q.size(-2), ", ",
              k.size(-2), ") score matrix");
    m = blocked->slice(0, 0, q.size(-2)).slice(1, 0, k.size(-2));
    masked = masked_fill(scores, m, -std::numeric_limits<float>::infinity());
  }
  // The book divides by keys.shape[-1] ** 0.5: a Python float, applied as a float32 scalar.
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(k.size(-1))));
  Tensor weights = softmax(div(blocked ? masked : scores, scale), -1);
  Tensor dropped = dropout ? dropout->forward(weights) : weights;
  Tensor context = matmul(dropped, v);
  // queries, keys, values, scores, masked_scores, weights, dropped_weights, context
  if (trace) *trace = {q, k, v, scores, masked, weights, dropout && dropout->active() ? dropped : Tensor(), context};
  if (saved) *saved = AttentionSaved{q, k, v, blocked ? m : Tensor(), weights, dropped, scale};
  return context;
}

AttentionGrads attend_backward(const Tensor& dcontext, const AttentionSaved& s, Dropout* dropout) {
  Shape want = s.dropped.shape();
  want.back() = s.v.size(-1);
  QKV_CHECK(s.weights.dim() >= 2 && dcontext.shape() == want, "attention backward: the gradient ",
            dcontext.describe(), " does not match the forward's context ", shape_str(want),
            " (call forward before backward)");
  AttentionGrads g;
  // context = matmul(dropped, v)
  Tensor ddropped = matmul(dcontext, s.v.T());               // (..., T, S)
  g.dv = sum_to(matmul(s.dropped.T(), dcontext), s.v.shape());  // (..., S, Dv)
  // dropped = dropout->forward(weights): the same mask
  Tensor dweights = dropout ? dropout->backward(ddropped) : ddropped;
  // weights = softmax(div(masked, scale), -1)
  Tensor dscaled = softmax_backward(s.weights, dweights, -1);
  Tensor dmasked = div(dscaled, s.scale);
  // masked = masked_fill(scores, m, -inf): the filled entries do not depend on the scores
  Tensor dscores = s.blocked.defined() ? masked_fill(dmasked, s.blocked, 0.0f) : dmasked;
  // scores = matmul(q, k.T())
  g.dq = sum_to(matmul(dscores, s.k), s.q.shape());          // (..., T, D)
  g.dk = sum_to(matmul(dscores.T(), s.q), s.k.shape());      // (..., S, D)
  return g;
}

Tensor causal_mask(int64_t n) { return triu(Tensor::ones({n, n}), 1); }

}  // namespace qkv
