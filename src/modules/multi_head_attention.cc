// MultiHeadAttentionWrapper and MultiHeadAttention. See include/qkv/modules/multi_head_attention.h.
#include "qkv/modules/multi_head_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/linear.h"
#include "qkv/core/ops.h"
#include "qkv/core/thread_pool.h"

namespace qkv {
namespace {

std::vector<CausalAttention> build_heads(const AttentionConfig& c, Generator& gen) {
  validate(c, "MultiHeadAttentionWrapper");
  QKV_CHECK(!c.attention.has_variants(), "MultiHeadAttentionWrapper takes no variants (num_kv_heads, rope, window, ",
            "alibi, softcap): only MultiHeadAttention does");
  AttentionConfig head = c;  // each head: one CausalAttention of the same width
  head.attention.heads = 1;
  std::vector<CausalAttention> heads;
  heads.reserve(static_cast<size_t>(c.attention.heads));
  for (int64_t h = 0; h < c.attention.heads; ++h) heads.emplace_back(head, gen);  // in order, as ModuleList
  return heads;
}

// A Linear drawn from gen, or with gen's init draws off (its values to be filled: packed ones' copies).
Linear linear_of(int64_t in, int64_t out, bool bias, Generator& gen, bool draw) {
  if (draw) return Linear(in, out, bias, gen);
  const bool was = gen.init_draws();
  gen.set_init_draws(false);
  try {
    Linear l(in, out, bias, gen);
    gen.set_init_draws(was);
    return l;
  } catch (...) {
    gen.set_init_draws(was);
    throw;
  }
}

std::optional<Linear> packed_of(const AttentionConfig& c, Generator& gen) {
  QKV_CHECK(!c.gate_in_query || c.output_gate, "MultiHeadAttention: gate_in_query packs the output gate's rows ",
            "with the queries', but the config has no output gate");
  if (!c.gate_in_query) return std::nullopt;
  return Linear(c.d_in, 2 * c.d_out(), c.qkv_bias, gen);
}

std::optional<Linear> gate_of(const AttentionConfig& c, Generator& gen) {
  if (!c.output_gate) return std::nullopt;
  return linear_of(c.d_in, c.d_out(), c.qkv_bias, gen, !c.gate_in_query);
}

// Rows [0, D) of each 2D-row block of `packed` to `a`'s D-row block, rows [D, 2D) to `b`'s
// (unpacking; `to_packed` adds them back instead). row: the elements of a row (d_in, or 1 for biases).
void interleave(float* packed, float* a, float* b, int64_t heads, int64_t D, int64_t row, bool to_packed) {
  const size_t n = static_cast<size_t>(D * row);
  for (int64_t h = 0; h < heads; ++h) {
    float* p = packed + 2 * h * D * row;
    float* qa = a + h * D * row;
    float* qb = b + h * D * row;
    if (to_packed) {
      for (size_t i = 0; i < n; ++i) p[i] += qa[i], p[n + i] += qb[i];
    } else {
      std::copy_n(p, n, qa);
      std::copy_n(p + n, n, qb);
    }
  }
}

Tensor stack_or_empty(const std::vector<Tensor>& parts) {
  return parts.empty() || !parts[0].defined() ? Tensor() : stack(parts, 1);
}

}  // namespace

MultiHeadAttentionWrapper::MultiHeadAttentionWrapper(const AttentionConfig& c, Generator& gen)
    : config(c), heads(build_heads(c, gen)) {}

void MultiHeadAttentionWrapper::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  for (size_t h = 0; h < heads.size(); ++h)
    heads[h].collect_state(prefix + "heads." + std::to_string(h) + ".", out);
}

void MultiHeadAttentionWrapper::train(bool on) {
  Module::train(on);
  for (CausalAttention& head : heads) head.train(on);
}

Tensor MultiHeadAttentionWrapper::forward(const Tensor& x, AttentionTrace* trace) {
  check_batch_input("MultiHeadAttentionWrapper", x, config.d_in, config.context_length);
  std::vector<Tensor> outputs;
  std::vector<AttentionTrace> traces(heads.size());
  for (size_t h = 0; h < heads.size(); ++h)
    outputs.push_back(heads[h].forward(x, trace ? &traces[h] : nullptr));  // (B, T, d_out)
  Tensor out = cat(outputs, -1);  // (B, T, H * d_out)
  if (trace) {
    auto gather = [&](Tensor AttentionTrace::*field) {
      std::vector<Tensor> parts;
      for (AttentionTrace& t : traces) parts.push_back(t.*field);
      return stack_or_empty(parts);  // (B, H, ...)
    };
    trace->queries = gather(&AttentionTrace::queries);
    trace->keys = gather(&AttentionTrace::keys);
    trace->values = gather(&AttentionTrace::values);
    trace->scores = gather(&AttentionTrace::scores);
    trace->masked_scores = gather(&AttentionTrace::masked_scores);
    trace->weights = gather(&AttentionTrace::weights);
    trace->dropped_weights = gather(&AttentionTrace::dropped_weights);
    trace->context = gather(&AttentionTrace::context);
  }
  return out;
}

Tensor MultiHeadAttentionWrapper::backward(const Tensor& doutput) {
  const int64_t d = config.attention.head_dim;
  QKV_CHECK(doutput.dim() == 3 && doutput.size(2) == d * static_cast<int64_t>(heads.size()),
            "MultiHeadAttentionWrapper: the gradient ", doutput.describe(), " does not match the output's ",
            "(batch, num_tokens, num_heads * d_out = ", d * static_cast<int64_t>(heads.size()), ")");
  // out = cat(outputs, -1): head h owns the columns [h d_out, (h + 1) d_out)
  // outputs[h] = heads[h].forward(x): every head read the same x, so their gradients add up
  Tensor dx;
  for (size_t h = 0; h < heads.size(); ++h) {
    const int64_t at = static_cast<int64_t>(h) * d;
    Tensor dh = heads[h].backward(doutput.slice(2, at, at + d));
    dx = h == 0 ? dh : add(dx, dh);
  }
  return dx;  // (B, T, d_in)
}

MultiHeadAttention::MultiHeadAttention(const AttentionConfig& c, Generator& gen)
    : config(validate(c, "MultiHeadAttention")),
      q_and_gate(packed_of(c, gen)),
      W_query(linear_of(c.d_in, c.d_out(), c.qkv_bias, gen, !c.gate_in_query)),
      W_gate(gate_of(c, gen)),
      W_key(c.d_in, c.attention.kv_width(), c.qkv_bias, gen),
      W_value(c.d_in, c.attention.kv_width(), c.qkv_bias, gen),
      out_proj(c.d_out(), c.out_width(), c.out_bias, gen),
      dropout(c.attention.dropout, gen),
      mask(c.context_length),
      q_norm(c.attention.head_dim, c.attention.qk_norm_eps, c.qk_norm_unit_offset),
      k_norm(c.attention.head_dim, c.attention.qk_norm_eps, c.qk_norm_unit_offset),
      alibi_slopes_(kernels::spec_alibi_slopes(c.attention)) {
  qkv_.bind(W_query, W_key, W_value, gen.init_draws());
  if (q_and_gate && gen.init_draws()) unpack_query_and_gate();
}

void MultiHeadAttention::unpack_query_and_gate() {
  if (!q_and_gate) return;
  const int64_t H = config.attention.heads, D = config.attention.head_dim, E = config.d_in;
  Linear& p = *q_and_gate;
  QKV_CHECK(p.weight.is_contiguous() && W_query.weight.is_contiguous() && W_gate->weight.is_contiguous(),
            "MultiHeadAttention: the packed queries and gate must be contiguous");
  interleave(p.weight.data(), W_query.weight.data(), W_gate->weight.data(), H, D, E, false);
  if (p.has_bias) interleave(p.bias.data(), W_query.bias.data(), W_gate->bias.data(), H, D, 1, false);
}

void MultiHeadAttention::pack_gradients() {
  if (!q_and_gate) return;
  const int64_t H = config.attention.heads, D = config.attention.head_dim, E = config.d_in;
  Linear& p = *q_and_gate;
  interleave(p.dweight.data(), W_query.dweight.data(), W_gate->dweight.data(), H, D, E, true);
  if (p.has_bias) interleave(p.dbias.data(), W_query.dbias.data(), W_gate->dbias.data(), H, D, 1, true);
  // added into the packed gradients: the copies' start again from zero
  for (Tensor* t : {&W_query.dweight, &W_gate->dweight, &W_query.dbias, &W_gate->dbias})
    if (t->defined()) std::fill_n(t->data(), t->numel(), 0.0f);
}

void MultiHeadAttention::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  // The module's own buffer first, then its children: PyTorch's state_dict() order.
  out.push_back({prefix + "mask", nullptr, false, nullptr, &mask});
  if (q_and_gate) {
    q_and_gate->collect_state(prefix + "W_query.", out);  // the book's Qwen3.5 class: W_query (2 d_out, d_in)
  } else {
    W_query.collect_state(prefix + "W_query.", out);
    if (W_gate) W_gate->collect_state(prefix + "W_gate.", out);
  }
  W_key.collect_state(prefix + "W_key.", out);
  W_value.collect_state(prefix + "W_value.", out);
  out_proj.collect_state(prefix + "out_proj.", out);
  if (config.attention.qk_norm) {
    q_norm.collect_state(prefix + "q_norm.", out);
    k_norm.collect_state(prefix + "k_norm.", out);
  }
}

void MultiHeadAttention::train(bool on) {
  Module::train(on);
  dropout.train(on);
}

Tensor MultiHeadAttention::forward(const Tensor& x, AttentionTrace* trace) {
  check_batch_input("MultiHeadAttention", x, config.d_in, config.context_length);
  unpack_query_and_gate();  // (the packed parameter may have changed: loaded, or a step taken)
  x_shape_ = x.shape();
  fused_last_ = runs_fused(config.path, dropout);
  check_runs_in_dtype("MultiHeadAttention", config, fused_last_);
  if (fused_last_) {
    Tensor y = fused_.forward(x, projections(), config.attention, alibi_slopes_, mask, dropout, trace, true);
    return W_gate ? gated_out(x, y) : y;  // (with the gate, y is the context: out_proj is the module's)
  }
  const kernels::AttentionSpec& spec = config.attention;
  const int64_t B = x.size(0), T = x.size(1), H = spec.heads, G = spec.groups(), D = spec.head_dim;
  auto split = [&](const Tensor& t, int64_t heads) {  // (B, heads, T, D)
    return t.view({B, T, heads, D}).transpose(1, 2);
  };
  Tensor keys = split(W_key.forward(x), G);
  Tensor queries = split(W_query.forward(x), H);
  Tensor values = split(W_value.forward(x), G);
  const Tensor blocked = mask.corner(T);  // (T, T)
  Tensor context;                         // (B, H, T, D)
  if (spec.has_variants()) {
    // queries, keys = q_norm(queries), k_norm(keys) (QK-norm: RMSNorm over each head's D)
    if (spec.qk_norm) {
      queries = q_norm.forward(queries);
      keys = k_norm.forward(keys);
    }
    // queries, keys = rope(queries), rope(keys), then the variants' scores (attention_variants.h)
    queries = rope(queries, spec.rope, spec.rope_base, false, spec.rope_scaling, spec.rope_dim);
    keys = rope(keys, spec.rope, spec.rope_base, false, spec.rope_scaling, spec.rope_dim);
    context = attend_variants(queries, keys, values, &blocked, spec, alibi_slopes_, &dropout, trace, &variant_saved_);
  } else {
    context = attend(queries, keys, values, &blocked, &dropout, trace, &saved_);
  }
  Tensor merged = context.transpose(1, 2).reshape({B, T, config.d_out()});  // (B, T, d_out)
  if (W_gate) return gated_out(x, merged);
  return out_proj.forward(merged);  // (B, T, out_width)
}

Tensor MultiHeadAttention::gated_out(const Tensor& x, const Tensor& context) {
  gate_sigmoid_ = sigmoid(W_gate->forward(x));  // (B, T, d_out)
  gate_context_ = context;
  return out_proj.forward(mul(context, gate_sigmoid_));
}

Tensor MultiHeadAttention::gated_backward(const Tensor& doutput, Tensor& dx_gate) {
  // out = out_proj(gated), gated = context * s, s = sigmoid(gate), gate = W_gate(x)
  const Tensor dgated = out_proj.backward(doutput);
  // ds = dgated * context; dgate = ds * s (1 - s)
  const Tensor dgate = mul(mul(dgated, gate_context_), mul(gate_sigmoid_, add(neg(gate_sigmoid_), 1.0f)));
  dx_gate = W_gate->backward(dgate);
  return mul(dgated, gate_sigmoid_);  // dcontext
}

Tensor MultiHeadAttention::forward_cached(const Tensor& x, kernels::KvCache& cache, int64_t layer,
                                         FusedWeights16 w16) {
  QKV_CHECK(x.dim() == 3 && x.size(2) == config.d_in, "MultiHeadAttention: forward_cached expects (batch, ",
            "new_tokens, d_in = ", config.d_in, "), got ", x.describe());
  const Tensor xc = x.contiguous();  // a view when x already is: no copy
  Tensor y = Tensor::empty({x.size(0), x.size(1), config.out_width()});
  forward_cached(xc.data(), x.size(0), x.size(1), y.data(), cache, layer, w16);
  return y;
}

void MultiHeadAttention::forward_cached(const float* x, int64_t B, int64_t Tn, float* y, kernels::KvCache& cache,
                                        int64_t layer, FusedWeights16 w16, CachedScratch* scratch) {
  QKV_CHECK(!dropout.active(), "MultiHeadAttention: forward_cached is inference, but dropout (p = ", dropout.p(),
            ") is active: call eval() first");
  if (!W_gate) {
    fused_.forward_cached(x, B, Tn, config.d_in, y, projections(), config.attention, alibi_slopes_, mask, cache, layer,
                          w16, scratch);
    return;
  }
  // f32 weights (no bf16 or quantized copies given): the packed parameter's rows as they are now
  if (w16.qkv == nullptr && !w16.qkv_q) unpack_query_and_gate();
  // The output gate (Qwen3.5's): context = attention(x) (the fused step without out_proj);
  // y = out_proj(context * sigmoid(W_gate(x))), each product in its Linear's precision or from the
  // caller's bf16 / quantized copies
  const int64_t N = B * Tn, C = config.d_out();
  CachedScratch& rows = scratch ? *scratch : gate_scratch_;  // a model's blocks share the caller's
  if (rows.gate_context.size() < static_cast<size_t>(N * C)) {  // grown to the largest step, then reused
    rows.gate_context.resize(static_cast<size_t>(N * C));
    rows.gate_rows.resize(static_cast<size_t>(N * C));
  }
  float* context = rows.gate_context.data();
  float* gated = rows.gate_rows.data();
  fused_.forward_cached(x, B, Tn, config.d_in, context, projections(), config.attention, alibi_slopes_, mask, cache,
                        layer, w16, scratch);
  const bool bf16 = config.attention.dtype == Dtype::kBF16;
  const Linear& g = *W_gate;
  linear(x, N, config.d_in, g.weight.data(), g.has_bias ? g.bias.data() : nullptr, C, gated, nullptr,
         bf16 && w16.gate ? Dtype::kBF16 : g.dtype, bf16 ? w16.gate : nullptr, w16.gate_q);
  constexpr int64_t kRowsPerTask = 8;  // as sigmoid() (core/ops.h): in double, rounded once; rows over the pool
  default_pool().parallel_for((N + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task, int) {
    for (int64_t i = task * kRowsPerTask * C; i < std::min(N, (task + 1) * kRowsPerTask) * C; ++i)
      gated[i] = context[i] * sigmoid_value(gated[i]);
  });
  linear(gated, N, C, out_proj.weight.data(), out_proj.has_bias ? out_proj.bias.data() : nullptr, config.out_width(), y,
         nullptr, bf16 && w16.out ? Dtype::kBF16 : out_proj.dtype, bf16 ? w16.out : nullptr, w16.out_q);
}

Tensor MultiHeadAttention::forward_token_by_token(const Tensor& x) {
  check_token_input(x, config.d_in);
  const kernels::AttentionSpec& a = config.attention;
  kernels::KvCache cache(1, x.size(0), a.groups(), x.size(1), a.head_dim, a.head_dim, kernels::CacheDtype::kF32);
  return each_token(x, [&](const Tensor& row) {
    Tensor y = forward_cached(row, cache, 0);
    cache.commit();
    return y;
  });
}

Tensor MultiHeadAttention::backward(const Tensor& doutput) {
  QKV_CHECK(x_shape_.size() == 3, "MultiHeadAttention: backward before forward");
  if (W_gate) {
    Tensor dx_gate;
    const Tensor dcontext = gated_backward(doutput, dx_gate);
    Tensor dx = add(fused_last_ ? fused_.backward(dcontext, projections()) : textbook_backward(dcontext), dx_gate);
    pack_gradients();
    return dx;
  }
  if (fused_last_) return fused_.backward(doutput, projections());
  // return out_proj.forward(merged)
  return textbook_backward(out_proj.backward(doutput));  // (B, T, d_out), contiguous
}

Tensor MultiHeadAttention::textbook_backward(const Tensor& dmerged) {
  const kernels::AttentionSpec& spec = config.attention;
  const int64_t B = x_shape_[0], T = x_shape_[1], H = spec.heads, D = spec.head_dim;
  // merged = context.transpose(1, 2).reshape({B, T, d_out})
  Tensor dcontext = dmerged.view({B, T, H, D}).transpose(1, 2);  // (B, H, T, D)
  AttentionGrads g;
  if (spec.has_variants()) {
    // context = attend_variants(queries, keys, values, ...)
    g = attend_variants_backward(dcontext, variant_saved_, spec, &dropout);
    // queries, keys = rope(queries), rope(keys): dq, dk = R^T dq, R^T dk
    g.dq = rope(g.dq, spec.rope, spec.rope_base, /*inverse=*/true, spec.rope_scaling, spec.rope_dim);
    g.dk = rope(g.dk, spec.rope, spec.rope_base, /*inverse=*/true, spec.rope_scaling, spec.rope_dim);
    if (spec.qk_norm) {  // queries, keys = q_norm(queries), k_norm(keys)
      g.dq = q_norm.backward(g.dq);
      g.dk = k_norm.backward(g.dk);
    }
  } else {
    // context = attend(queries, keys, values, &mask, &dropout, ...)
    g = attend_backward(dcontext, saved_, &dropout);
  }
  // keys = split(W_key.forward(x), G) etc., split(t, n) = t.view({B, T, n, D}).transpose(1, 2)
  auto merge = [&](const Tensor& t) { return t.transpose(1, 2).reshape({B, T, t.size(1) * D}); };
  Tensor dx = W_value.backward(merge(g.dv));
  dx = add(dx, W_query.backward(merge(g.dq)));
  return add(dx, W_key.backward(merge(g.dk)));  // (B, T, d_in)
}

GatedMultiHeadAttention::GatedMultiHeadAttention(const AttentionConfig& c, Generator& gen)
    : MultiHeadAttention(c, gen) {
  QKV_CHECK(c.output_gate, "GatedMultiHeadAttention: the config has no output gate (output_gate is false)");
}

void GatedMultiHeadAttention::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  const size_t first = out.size();
  MultiHeadAttention::collect_state(prefix, out);
  // the book's class registers its mask with persistent=False: not in its state dict
  QKV_CHECK(out.size() > first && out[first].name == prefix + "mask", "GatedMultiHeadAttention: expected ",
            prefix, "mask first in MultiHeadAttention's state");
  out.erase(out.begin() + static_cast<std::ptrdiff_t>(first));
}

}  // namespace qkv
