// MultiHeadAttention's variants on the textbook path. See include/qkv/modules/attention_variants.h.
#include "qkv/modules/attention_variants.h"

#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/modules/attention_module.h"
#include "qkv/modules/layers.h"

namespace qkv {
namespace {

using kernels::RopeLayout;

// cos and sin of theta[t, i], spread over the D elements of a row the way `layout` pairs them:
// (T, D) each (kHalf: [c_0 .. c_{D/2-1}, c_0 .. c_{D/2-1}]; kInterleaved: [c_0, c_0, c_1, c_1, ..]).
void rope_tables(int64_t T, int64_t D, RopeLayout layout, double base, const kernels::RopeScaling& scaling, Tensor& cos,
                 Tensor& sin) {
  const kernels::RopeTable table(T, D, base, 0, scaling);
  cos = Tensor::empty({T, D});
  sin = Tensor::empty({T, D});
  const int64_t half = D / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = layout == RopeLayout::kHalf ? i : 2 * i;
      const int64_t b = layout == RopeLayout::kHalf ? i + half : 2 * i + 1;
      cos.data()[t * D + a] = cos.data()[t * D + b] = table.cos_row(t)[i];
      sin.data()[t * D + a] = sin.data()[t * D + b] = table.sin_row(t)[i];
    }
}

// rotate_half(x) = cat(-x2, x1) (kHalf) or, pair by pair, (-x_{2i+1}, x_{2i}) (kInterleaved).
Tensor rotate(const Tensor& x, RopeLayout layout) {
  const int last = x.dim() - 1;
  const int64_t D = x.size(last);
  if (layout == RopeLayout::kHalf) return cat({neg(x.slice(last, D / 2, D)), x.slice(last, 0, D / 2)}, last);
  Shape pairs = x.shape();
  pairs.back() = D / 2;
  pairs.push_back(2);
  const Tensor p = x.reshape(pairs);  // (..., D/2, 2)
  return stack({neg(p.select(last + 1, 1)), p.select(last + 1, 0)}, last + 1).reshape(x.shape());
}

Tensor map(const Tensor& x, float (*f)(float, float), float arg) {
  const Tensor c = x.contiguous();
  Tensor y = Tensor::empty(c.shape());
  for (int64_t i = 0; i < c.numel(); ++i) y.data()[i] = f(c.data()[i], arg);
  return y;
}

}  // namespace

Tensor rope(const Tensor& x, RopeLayout layout, double base, bool inverse, const kernels::RopeScaling& scaling,
            int64_t rotary_dim) {
  if (layout == RopeLayout::kNone) return x;
  QKV_CHECK(x.dim() >= 2, "rope: x ", x.describe(), " needs (..., T, D)");
  const int last = x.dim() - 1;
  if (rotary_dim > 0 && rotary_dim < x.size(last))  // cat(rope(x[..., :R]), x[..., R:])
    return cat({rope(x.slice(last, 0, rotary_dim), layout, base, inverse, scaling),
                x.slice(last, rotary_dim, x.size(last))},
               last);
  Tensor cos, sin;
  rope_tables(x.size(-2), x.size(-1), layout, base, scaling, cos, sin);
  // y = x * cos + rotate(x) * sin; R^T: y = x * cos - rotate(x) * sin (the rotation by -theta)
  const Tensor turned = mul(rotate(x, layout), sin);
  return inverse ? sub(mul(x, cos), turned) : add(mul(x, cos), turned);
}

Tensor repeat_kv(const Tensor& x, int64_t r) {
  if (r == 1) return x;
  const int64_t B = x.size(0), G = x.size(1), T = x.size(2), D = x.size(3);
  return x.unsqueeze(2).expand({B, G, r, T, D}).reshape({B, G * r, T, D});
}

Tensor sum_kv_groups(const Tensor& dx, int64_t r) {
  if (r == 1) return dx;
  const int64_t B = dx.size(0), H = dx.size(1), T = dx.size(2), D = dx.size(3);
  return sum(dx.reshape({B, H / r, r, T, D}), 2);
}

Tensor window_blocked(const Tensor& blocked, int64_t window) {
  if (window <= 0) return blocked;
  Tensor m = blocked.contiguous().clone();
  const int64_t T = m.size(0), S = m.size(1);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S && j <= i - window; ++j) m.data()[i * S + j] = 1.0f;
  return m;
}

Tensor attend_variants(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* blocked,
                       const kernels::AttentionSpec& spec, const std::vector<float>& slopes, Dropout* dropout,
                       AttentionTrace* trace, VariantSaved* saved) {
  QKV_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
            "attention: q ", q.describe(), ", k ", k.describe(), " and v ", v.describe(),
            " must be (B, H, T, D) and (B, G, T, D) with G dividing H");
  const int64_t H = q.size(1), T = q.size(2), r = H / k.size(1);
  // k_rep, v_rep = repeat_interleave(k, v, r, dim=1)
  const Tensor k_rep = repeat_kv(k, r), v_rep = repeat_kv(v, r);
  // scores = q @ k_rep^T; scaled = scores / sqrt(D) (the book's keys.shape[-1] ** 0.5 as a float32)
  const Tensor scores = matmul(q, k_rep.T());
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(k.size(-1))));
  Tensor logits = div(scores, scale);
  // capped = softcap * tanh(scaled / softcap)
  Tensor tanh;
  const auto softcap = static_cast<float>(spec.softcap);  // validated: within float's range
  if (softcap > 0.0f) {
    tanh = map(logits, [](float x, float cap) { return std::tanh(x / cap); }, softcap);
    logits = mul(tanh, softcap);
  }
  // biased = capped - slope[h] * (i - j)
  if (!slopes.empty()) {
    Tensor bias = Tensor::empty({H, T, T});
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j)
          bias.data()[(h * T + i) * T + j] = -slopes[static_cast<size_t>(h)] * static_cast<float>(i - j);
    logits = add(logits, bias);
  }
  // masked = biased with -inf where blocked (the module's mask, and the window)
  Tensor m;
  if (blocked != nullptr) m = window_blocked(blocked->slice(0, 0, T).slice(1, 0, T), spec.window);
  else if (spec.window > 0) m = window_blocked(Tensor::zeros({T, T}), spec.window);
  const float inf = std::numeric_limits<float>::infinity();
  if (m.defined()) logits = masked_fill(logits, m, -inf);
  // weights = softmax(masked); dropped = dropout(weights); context = dropped @ v_rep
  Tensor weights = softmax(logits, -1);
  Tensor dropped = dropout ? dropout->forward(weights) : weights;
  Tensor context = matmul(dropped, v_rep);
  // queries, keys, values, scores, masked_scores, weights, dropped_weights, context
  if (trace)
    *trace = {q,       k,       v, scores, m.defined() ? masked_fill(scores, m, -inf) : Tensor(),
              weights, dropout && dropout->active() ? dropped : Tensor(), context};
  if (saved) *saved = VariantSaved{q, k_rep, v_rep, tanh, m, weights, dropped, scale, r};
  return context;
}

AttentionGrads attend_variants_backward(const Tensor& dcontext, const VariantSaved& s,
                                        const kernels::AttentionSpec& spec, Dropout* dropout) {
  QKV_CHECK(s.weights.dim() == 4 && dcontext.shape() == s.q.shape(), "attention backward: the gradient ",
            dcontext.describe(), " does not match the forward's context ", s.q.describe(),
            " (call forward before backward)");
  AttentionGrads g;
  // context = dropped @ v_rep
  const Tensor ddropped = matmul(dcontext, s.v_rep.T());
  // v_rep = repeat_interleave(v, r): the r copies' gradients add up
  g.dv = sum_kv_groups(matmul(s.dropped.T(), dcontext), s.r);
  // dropped = dropout(weights): the same mask
  const Tensor dweights = dropout ? dropout->backward(ddropped) : ddropped;
  // weights = softmax(masked, -1)
  Tensor dlogits = softmax_backward(s.weights, dweights, -1);
  // masked = masked_fill(biased, blocked, -inf): the filled entries do not depend on the scores
  if (s.blocked.defined()) dlogits = masked_fill(dlogits, s.blocked, 0.0f);
  // biased = capped - slope * (i - j): a constant shift
  // capped = softcap * tanh(scaled / softcap)  ->  dscaled = dcapped * (1 - tanh^2)
  if (spec.softcap > 0.0) dlogits = mul(dlogits, sub(Tensor::ones(s.tanh.shape()), mul(s.tanh, s.tanh)));
  // scaled = scores / sqrt(D)
  const Tensor dscores = div(dlogits, s.scale);
  // scores = q @ k_rep^T; k_rep = repeat_interleave(k, r)
  g.dq = matmul(dscores, s.k_rep);
  g.dk = sum_kv_groups(matmul(dscores.T(), s.q), s.r);
  return g;
}

}  // namespace qkv
