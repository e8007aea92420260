// The modules' fast path. See include/qkv/modules/fused_attention.h.
#include "qkv/modules/fused_attention.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/modules/layers.h"

namespace qkv {
namespace {

// Whether mask[:T, :T] blocks exactly the keys after each query: triu(ones, 1) as the book builds it.
bool is_causal_corner(const Tensor& mask, int64_t T) {
  for (int64_t i = 0; i < T; ++i) {
    const float* row = mask.data() + i * mask.strides()[0];
    const int64_t step = mask.strides()[1];
    for (int64_t j = 0; j < T; ++j)
      if ((row[j * step] != 0.0f) != (j > i)) return false;
  }
  return true;
}

}  // namespace

bool runs_fused(AttentionPath path, const Dropout& dropout) {
  switch (path) {
    case AttentionPath::kFused: return true;
    case AttentionPath::kTextbook: return false;
    case AttentionPath::kAuto: return !dropout.active();  // PyTorch's dropout masks: the textbook path
  }
  return false;
}

Tensor FusedAttention::forward(const Tensor& x, const FusedProjections& p, int64_t heads, const Tensor& mask,
                               Dropout& dropout, AttentionTrace* trace, bool per_head_trace) {
  const int64_t B = x.size(0), T = x.size(1), d_in = x.size(2), C = p.query->weight.size(0);
  QKV_CHECK(mask.dim() == 2 && mask.size(0) >= T && mask.size(1) >= T, "attention: mask ", mask.describe(),
            " is smaller than the (", T, ", ", T, ") score matrix");
  shape_ = {B, T, d_in, C, heads};
  x_ = x.contiguous();
  // W_qkv = [W_query; W_key; W_value], as the weights are now (the backward uses these)
  w_qkv_ = cat({p.query->weight, p.key->weight, p.value->weight}, 0);  // (3C, d_in)
  b_qkv_ = p.query->has_bias ? cat({p.query->bias, p.key->bias, p.value->bias}, 0) : Tensor();
  kernels::MhaWeights w;
  w.w_qkv = w_qkv_.data();
  w.b_qkv = p.query->has_bias ? b_qkv_.data() : nullptr;
  Tensor out_w, out_b;
  if (p.out) {
    out_w = p.out->weight.contiguous();
    out_b = p.out->has_bias ? p.out->bias.contiguous() : Tensor();
    w.w_out = out_w.data();
    w.b_out = p.out->has_bias ? out_b.data() : nullptr;
  }
  // The book divides the scores by sqrt(D); the kernel multiplies by its inverse.
  options_ = kernels::AttentionOptions{};
  options_.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(C / heads)));
  if (is_causal_corner(mask, T)) {
    mask_ = Tensor();
    options_.mask = kernels::AttentionMask::causal();
  } else {
    mask_ = mask.slice(0, 0, T).slice(1, 0, T).contiguous();
    options_.mask = kernels::AttentionMask::blocked(mask_.data(), T);
  }
  if (dropout.active()) {
    options_.dropout_p = static_cast<float>(dropout.p());
    options_.dropout_seed = dropout.draw_seed();
  }
  Tensor y = Tensor::empty({B, T, C});
  kernels::mha_forward(shape_, w, x_.data(), y.data(), ws_, options_);
  has_forward_ = true;
  if (trace) fill_trace(*trace, mask, dropout.active(), per_head_trace);
  return y;
}

void FusedAttention::fill_trace(AttentionTrace& t, const Tensor& mask, bool dropped, bool per_head) {
  const int64_t B = shape_.batch, T = shape_.tokens, C = shape_.d_out, H = shape_.heads, D = shape_.head_dim();
  const size_t rows = static_cast<size_t>(B * T);
  Tensor qkv = Tensor::empty({B, T, 3 * C});
  Tensor ctx = Tensor::empty({B, T, C});
  if (rows > 0) {
    std::memcpy(qkv.data(), ws_.qkv(), rows * 3 * static_cast<size_t>(C) * sizeof(float));
    std::memcpy(ctx.data(), ws_.ctx(), rows * static_cast<size_t>(C) * sizeof(float));
  }
  // (B, T, C) -> (B, H, T, D) as the book's view + transpose, or (B, T, C) for one head
  auto heads_of = [&](const Tensor& a) { return per_head ? a.reshape({B, T, H, D}).transpose(1, 2) : a; };
  t.queries = heads_of(qkv.slice(2, 0, C));
  t.keys = heads_of(qkv.slice(2, C, 2 * C));
  t.values = heads_of(qkv.slice(2, 2 * C, 3 * C));
  t.context = heads_of(ctx);
  t.scores = matmul(t.queries, t.keys.T());
  t.masked_scores = masked_fill(t.scores, mask.slice(0, 0, T).slice(1, 0, T), -std::numeric_limits<float>::infinity());
  // The weights, recomputed head by head from q, k and the log-sum-exp the kernel kept.
  const kernels::ConstHeads q = kernels::ConstHeads::interleaved(ws_.qkv(), B, H, T, D, 3 * C);
  const kernels::ConstHeads k = kernels::ConstHeads::interleaved(ws_.qkv() + C, B, H, T, D, 3 * C);
  auto weights = [&](bool after_dropout) {
    Tensor w = per_head ? Tensor::empty({B, H, T, T}) : Tensor::empty({B, T, T});  // H = 1 without heads
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        kernels::attention_weights(q, k, ws_.lse(), options_, b, h, 0, T, after_dropout,
                                   w.data() + (b * H + h) * T * T, T);
    return w;
  };
  t.weights = weights(false);
  t.dropped_weights = dropped ? weights(true) : Tensor();
}

Tensor FusedAttention::backward(const Tensor& dy, const FusedProjections& p) {
  QKV_CHECK(has_forward_, "attention: backward before forward");
  const int64_t B = shape_.batch, T = shape_.tokens, C = shape_.d_out, d_in = shape_.d_in;
  QKV_CHECK(dy.shape() == Shape({B, T, C}), "attention: the gradient ", dy.describe(),
            " does not match the last forward's output (", B, ", ", T, ", ", C, ")");
  const Tensor dyc = dy.contiguous();
  const bool bias = b_qkv_.defined();
  Tensor dx = Tensor::zeros({B, T, d_in});
  Tensor dw_qkv = Tensor::zeros({3 * C, d_in});
  Tensor db_qkv = bias ? Tensor::zeros({3 * C}) : Tensor();
  Tensor dw_out, db_out, out_w, out_b;
  kernels::MhaWeights w;
  w.w_qkv = w_qkv_.data();
  w.b_qkv = bias ? b_qkv_.data() : nullptr;
  kernels::MhaGradients g;
  g.dw_qkv = dw_qkv.data();
  g.db_qkv = bias ? db_qkv.data() : nullptr;
  if (p.out) {
    out_w = p.out->weight.contiguous();
    w.w_out = out_w.data();
    dw_out = Tensor::zeros(p.out->weight.shape());
    g.dw_out = dw_out.data();
    if (p.out->has_bias) {
      out_b = p.out->bias.contiguous();
      w.b_out = out_b.data();
      db_out = Tensor::zeros(p.out->bias.shape());
      g.db_out = db_out.data();
    }
  }
  kernels::mha_backward(shape_, w, x_.data(), dyc.data(), dx.data(), g, ws_, options_);
  Linear* parts[3] = {p.query, p.key, p.value};
  for (int64_t i = 0; i < 3; ++i) {
    accumulate(parts[i]->dweight, dw_qkv.slice(0, i * C, (i + 1) * C));
    if (bias) accumulate(parts[i]->dbias, db_qkv.slice(0, i * C, (i + 1) * C));
  }
  if (p.out) {
    accumulate(p.out->dweight, dw_out);
    if (p.out->has_bias) accumulate(p.out->dbias, db_out);
  }
  return dx;
}

}  // namespace qkv
