// The modules' fast path. See include/qkv/modules/fused_attention.h.
#include "qkv/modules/fused_attention.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/modules/layer_norm.h"
#include "qkv/modules/layers.h"

namespace qkv {

void QkvWeights::bind(Linear& query, Linear& key, Linear& value, bool copy_values) {
  has_bias = query.has_bias;
  // (C + 2 G D, d_in)
  weight = copy_values ? cat({query.weight, key.weight, value.weight}, 0)
                       : Tensor::empty({query.weight.size(0) + key.weight.size(0) + value.weight.size(0),
                                        query.weight.size(1)});
  dweight = Tensor::zeros(weight.shape());
  bias = has_bias ? cat({query.bias, key.bias, value.bias}, 0) : Tensor();  // (C + 2 G D)
  dbias = has_bias ? Tensor::zeros(bias.shape()) : Tensor();
  Linear* parts[3] = {&query, &key, &value};
  int64_t at = 0;  // the first row of part i
  for (Linear* part : parts) {
    Linear& l = *part;
    const int64_t n = l.weight.size(0);
    l.weight = weight.slice(0, at, at + n);  // rows of a contiguous tensor: contiguous
    l.dweight = dweight.slice(0, at, at + n);
    if (has_bias) {
      l.bias = bias.slice(0, at, at + n);
      l.dbias = dbias.slice(0, at, at + n);
    }
    at += n;
  }
}

bool QkvWeights::views(const Linear& query, const Linear& key, const Linear& value) const {
  const Linear* parts[3] = {&query, &key, &value};
  int64_t at = 0;
  for (const Linear* part : parts) {
    const Linear& l = *part;
    if (l.has_bias != has_bias || l.weight.dim() != 2 || l.weight.data() != weight.data() + at * weight.size(1) ||
        l.dweight.data() != dweight.data() + at * weight.size(1) || !l.weight.is_contiguous() ||
        !l.dweight.is_contiguous())
      return false;
    if (has_bias && (l.bias.data() != bias.data() + at || l.dbias.data() != dbias.data() + at)) return false;
    at += l.weight.size(0);
  }
  return at == weight.size(0);
}

void check_runs_in_dtype(const char* who, const AttentionConfig& config, bool fused) {
  QKV_CHECK(fused || config.attention.dtype == Dtype::kF32, who, ": dtype bf16 runs on the fused path, but path auto with ",
            "dropout in training mode runs the textbook one (PyTorch's masks) in f32; choose path fused for the ",
            "fused kernel's dropout in bf16");
}

// QK-norm's weights (D each) from the module's RMSNorms, when the spec asks for it.
void set_qk_norm(kernels::MhaWeights& w, const FusedProjections& p, const kernels::AttentionSpec& spec) {
  if (!spec.qk_norm) return;
  QKV_CHECK(p.q_norm != nullptr && p.k_norm != nullptr && p.q_norm->weight.numel() == spec.head_dim &&
                p.k_norm->weight.numel() == spec.head_dim && p.q_norm->weight.is_contiguous() &&
                p.k_norm->weight.is_contiguous(),
            "attention: QK-norm needs q_norm and k_norm weights of head_dim (", spec.head_dim, ") values");
  w.q_norm = p.q_norm->scale();
  w.k_norm = p.k_norm->scale();
}

bool runs_fused(AttentionPath path, const Dropout& dropout) {
  switch (path) {
    case AttentionPath::kFused: return true;
    case AttentionPath::kTextbook: return false;
    case AttentionPath::kAuto: return !dropout.active();  // PyTorch's dropout masks: the textbook path
  }
  return false;
}

Tensor FusedAttention::forward(const Tensor& x, const FusedProjections& p, const kernels::AttentionSpec& spec,
                               const std::vector<float>& slopes, const MaskBuffer& mask, Dropout& dropout,
                               AttentionTrace* trace, bool per_head_trace) {
  const int64_t B = x.size(0), T = x.size(1), d_in = x.size(2);
  QKV_CHECK(T <= mask.size(), "attention: the (", mask.size(), ", ", mask.size(),
            ") mask is smaller than the (", T, ", ", T, ") score matrix");
  QKV_CHECK(p.qkv->views(*p.query, *p.key, *p.value), "attention: W_query, W_key and W_value no longer view ",
            "the module's fused QKV weight (a member was replaced; load weights with load_state_dict)");
  shape_.batch = B;
  shape_.tokens = T;
  shape_.d_in = d_in;
  shape_.attention = spec;
  x_ = x.contiguous();
  has_bias_ = p.qkv->has_bias;
  kernels::MhaWeights w;
  w.w_qkv = p.qkv->weight.data();  // (3C, d_in) in place
  w.b_qkv = has_bias_ ? p.qkv->bias.data() : nullptr;
  Tensor out_w, out_b;
  if (p.out) {
    out_w = p.out->weight.contiguous();
    out_b = p.out->has_bias ? p.out->bias.contiguous() : Tensor();
    w.w_out = out_w.data();
    w.b_out = p.out->has_bias ? out_b.data() : nullptr;
  }
  shape_.out_dim = p.out ? p.out->weight.size(0) : 0;
  set_qk_norm(w, p, spec);
  // The book divides the scores by sqrt(D); the kernel multiplies by its inverse (mha_options).
  call_ = kernels::MhaCall{};
  if (mask.is_causal()) {
    mask_ = Tensor();
  } else {
    mask_ = mask.corner(T).contiguous();
    mask_view_ = kernels::AttentionMask::blocked(mask_.data(), T);
    call_.mask = &mask_view_;
  }
  slopes_ = slopes;
  call_.alibi_slopes = slopes_.empty() ? nullptr : slopes_.data();
  if (dropout.active()) {
    shape_.attention.dropout = dropout.p();
    call_.dropout = true;
    call_.dropout_seed = dropout.draw_seed();
    call_.batch_offset = dropout.batch_offset();  // a rank's slice: keyed by the whole batch's b
  }
  Tensor y = Tensor::empty({B, T, shape_.out_width()});
  kernels::mha_forward(shape_, w, x_.data(), y.data(), saved_, ws_, call_);
  forward_id_ = saved_.id();
  if (trace) fill_trace(*trace, mask, dropout.active(), per_head_trace);
  return y;
}

void FusedAttention::forward_cached(const float* x, int64_t B, int64_t Tn, int64_t d_in, float* y,
                                    const FusedProjections& p, const kernels::AttentionSpec& spec,
                                    const std::vector<float>& slopes, const MaskBuffer& mask, kernels::KvCache& cache,
                                    int64_t layer, FusedWeights16 w16, CachedScratch* scratch) {
  QKV_CHECK(mask.is_causal(), "attention: a cached forward needs the causal mask, but the module holds a ",
            "loaded (", mask.size(), ", ", mask.size(), ") mask that is not causal");
  QKV_CHECK(cache.length() + Tn <= mask.size(), "attention: ", Tn, " new tokens after the cache's ", cache.length(),
            " positions exceed the context length of ", mask.size());
  QKV_CHECK(p.qkv->views(*p.query, *p.key, *p.value), "attention: W_query, W_key and W_value no longer view ",
            "the module's fused QKV weight (a member was replaced; load weights with load_state_dict)");
  kernels::MhaShape s;
  s.batch = B;
  s.tokens = Tn;
  s.d_in = d_in;
  s.attention = spec;  // (no allocation unless the spec holds given ALiBi slopes)
  kernels::MhaCall call;
  call.alibi_slopes = slopes.empty() ? nullptr : slopes.data();
  kernels::MhaWeights w;
  w.w_qkv = p.qkv->weight.data();
  w.b_qkv = p.qkv->has_bias ? p.qkv->bias.data() : nullptr;
  QKV_CHECK(!p.out || (p.out->weight.is_contiguous() && (!p.out->has_bias || p.out->bias.is_contiguous())),
            "attention: out_proj's weight and bias must be contiguous for a cached forward");
  if (p.out) {
    w.w_out = p.out->weight.data();
    w.b_out = p.out->has_bias ? p.out->bias.data() : nullptr;
    s.out_dim = p.out->weight.size(0);
  }
  set_qk_norm(w, p, spec);
  if (spec.dtype == Dtype::kBF16) {  // bf16 weights kept by the caller (f32 mode reads the floats)
    w.w_qkv16 = w16.qkv;
    w.w_out16 = p.out ? w16.out : nullptr;
  }
  w.w_qkv_q = w16.qkv_q;  // quantized weights kept by the caller
  if (p.out) w.w_out_q = w16.out_q;
  CachedScratch& sc = scratch != nullptr ? *scratch : cached_;
  kernels::mha_forward_cached(s, w, x, y, cache, layer, sc.saved, sc.ws, call);
}

void FusedAttention::fill_trace(AttentionTrace& t, const MaskBuffer& mask, bool dropped, bool per_head) {
  const int64_t B = shape_.batch, T = shape_.tokens, C = shape_.d_out(), H = shape_.heads(), D = shape_.head_dim();
  const int64_t G = shape_.groups();
  const size_t rows = static_cast<size_t>(B * T);
  // q (B, H, T, D), k, v (B, G, T, D) from the kernel's split heads (after RoPE); the context from (B, T, C)
  Tensor heads = Tensor::empty({static_cast<int64_t>(rows) * shape_.qkv_width()});
  Tensor ctx = Tensor::empty({B, T, C});
  if (rows > 0 && shape_.dtype() == Dtype::kBF16) {  // the bf16 heads the kernel read, widened
    bf16_to_floats(saved_.heads16(), heads.data(), static_cast<size_t>(heads.numel()));
    std::memcpy(ctx.data(), saved_.ctx(), rows * static_cast<size_t>(C) * sizeof(float));
  } else if (rows > 0) {
    std::memcpy(heads.data(), saved_.heads(), static_cast<size_t>(heads.numel()) * sizeof(float));
    std::memcpy(ctx.data(), saved_.ctx(), rows * static_cast<size_t>(C) * sizeof(float));
  }
  // (B, H, T, D) as the book's view + transpose, or (B, T, C) for one head (H = 1, D = C)
  const int64_t q_size = B * H * T * D, kv_size = B * G * T * D;
  auto part = [&](int64_t at, int64_t size, int64_t n_heads) {
    Tensor p = heads.slice(0, at, at + size).view({B, n_heads, T, D});
    return per_head ? p : p.select(1, 0);
  };
  t.queries = part(0, q_size, H);
  t.keys = part(q_size, kv_size, G);
  t.values = part(q_size + kv_size, kv_size, G);
  t.context = per_head ? ctx.reshape({B, T, H, D}).transpose(1, 2) : ctx;
  t.scores = matmul(t.queries, (per_head ? repeat_kv(t.keys, H / G) : t.keys).T());
  const kernels::AttentionOptions options = kernels::mha_options(shape_, call_);
  t.masked_scores = masked_fill(t.scores, window_blocked(mask.corner(T), options.window),
                                -std::numeric_limits<float>::infinity());
  // The weights, recomputed head by head from q, k and the log-sum-exp the kernel kept.
  const kernels::ConstHeads q = kernels::mha_queries(shape_, heads.data());
  const kernels::ConstHeads k = kernels::mha_keys(shape_, heads.data());
  auto weights = [&](bool after_dropout) {
    Tensor w = per_head ? Tensor::empty({B, H, T, T}) : Tensor::empty({B, T, T});  // H = 1 without heads
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        kernels::attention_weights(q, k, saved_.lse(), options, b, h, 0, T, after_dropout,
                                   w.data() + (b * H + h) * T * T, T);
    return w;
  };
  t.weights = weights(false);
  t.dropped_weights = dropped ? weights(true) : Tensor();
}

Tensor FusedAttention::backward(const Tensor& dy, const FusedProjections& p) {
  QKV_CHECK(forward_id_ != 0, "attention: backward before forward");
  const int64_t B = shape_.batch, T = shape_.tokens, C = shape_.out_width(), d_in = shape_.d_in;
  QKV_CHECK(dy.shape() == Shape({B, T, C}), "attention: the gradient ", dy.describe(),
            " does not match the last forward's output (", B, ", ", T, ", ", C, ")");
  QKV_CHECK(p.qkv->views(*p.query, *p.key, *p.value) && p.qkv->has_bias == has_bias_,
            "attention: the QKV weights changed between forward and backward");
  const Tensor dyc = dy.contiguous();
  Tensor dx = Tensor::zeros({B, T, d_in});
  Tensor out_w, out_b;
  kernels::MhaWeights w;
  w.w_qkv = p.qkv->weight.data();
  w.b_qkv = has_bias_ ? p.qkv->bias.data() : nullptr;
  // Every parameter's gradient is added straight into its .grad: dW_qkv into the (3C, d_in)
  // tensor the three Linears' dweight view, out_proj's into its own.
  kernels::MhaGradients g;
  g.accumulate = true;
  g.dw_qkv = p.qkv->dweight.data();
  g.db_qkv = has_bias_ ? p.qkv->dbias.data() : nullptr;
  if (p.out) {
    QKV_CHECK(p.out->dweight.is_contiguous() && (!p.out->has_bias || p.out->dbias.is_contiguous()),
              "attention: out_proj's gradients must be contiguous");
    out_w = p.out->weight.contiguous();
    w.w_out = out_w.data();
    g.dw_out = p.out->dweight.data();
    if (p.out->has_bias) {
      out_b = p.out->bias.contiguous();
      w.b_out = out_b.data();
      g.db_out = p.out->dbias.data();
    }
  }
  set_qk_norm(w, p, shape_.attention);
  if (shape_.attention.qk_norm) {
    g.dq_norm = p.q_norm->dweight.data();
    g.dk_norm = p.k_norm->dweight.data();
  }
  kernels::mha_backward(shape_, w, x_.data(), dyc.data(), dx.data(), g, saved_, forward_id_, ws_, call_);
  return dx;
}

}  // namespace qkv
