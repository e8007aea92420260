// CausalAttention. See include/qkv/modules/causal_attention.h.
#include "qkv/modules/causal_attention.h"

#include "qkv/core/error.h"
#include "qkv/core/ops.h"

namespace qkv {

void check_batch_input(const char* who, const Tensor& x, int64_t d_in, int64_t context_length) {
  QKV_CHECK(x.dim() == 3 && x.size(2) == d_in, who, ": input must be (batch, num_tokens, d_in = ",
            d_in, "), got ", shape_str(x.shape()));
  QKV_CHECK(x.size(1) <= context_length, who, ": the input has ", x.size(1),
            " tokens but context_length is ", context_length,
            "; the causal mask only covers context_length tokens (PyTorch fails here with a shape "
            "mismatch). Use a larger context_length or a shorter input");
}

const AttentionConfig& validate(const AttentionConfig& c, const char* who) {
  QKV_CHECK(c.d_in > 0, who, ": d_in (", c.d_in, ") must be positive");
  QKV_CHECK(c.context_length > 0, who, ": context_length (", c.context_length, ") must be positive");
  QKV_CHECK(c.out_dim >= 0, who, ": out_dim (", c.out_dim, ") must be positive (or 0 for d_out)");
  kernels::validate_attention_spec(c.attention, who, attention_config_name);
  QKV_CHECK(c.attention.causal, who, " is causal: its config's attention.causal must be true");
  QKV_CHECK(c.attention.dtype == Dtype::kF32 || c.path != AttentionPath::kTextbook, who,
            ": dtype bf16 runs on the fused path; the textbook path computes in f32 only");
  return c;
}

// One causal head of width D (the config's head_dim): CausalAttention, or a head of the wrapper.
const AttentionConfig& validate_one_head(const AttentionConfig& c, const char* who) {
  validate(c, who);
  QKV_CHECK(c.attention.heads == 1, who, " has one head; its config's num_heads (", c.attention.heads,
            ") must be 1");
  QKV_CHECK(!c.attention.has_variants(), who, " takes no variants (num_kv_heads, qk_norm, rope, window, alibi, softcap)");
  return c;
}

CausalAttention::CausalAttention(const AttentionConfig& c, Generator& gen)
    : config(validate_one_head(c, "CausalAttention")),
      W_query(c.d_in, c.d_out(), c.qkv_bias, gen),
      W_key(c.d_in, c.d_out(), c.qkv_bias, gen),
      W_value(c.d_in, c.d_out(), c.qkv_bias, gen),
      dropout(c.attention.dropout, gen),
      mask(c.context_length) {
  qkv_.bind(W_query, W_key, W_value, gen.init_draws());
}

void CausalAttention::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  // The module's own buffer first, then its children: PyTorch's state_dict() order.
  out.push_back({prefix + "mask", nullptr, false, nullptr, &mask});
  W_query.collect_state(prefix + "W_query.", out);
  W_key.collect_state(prefix + "W_key.", out);
  W_value.collect_state(prefix + "W_value.", out);
}

void CausalAttention::train(bool on) {
  Module::train(on);
  dropout.train(on);
}

Tensor CausalAttention::forward(const Tensor& x, AttentionTrace* trace) {
  check_batch_input("CausalAttention", x, config.d_in, config.context_length);
  fused_last_ = runs_fused(config.path, dropout);
  check_runs_in_dtype("CausalAttention", config, fused_last_);
  if (fused_last_) return fused_.forward(x, projections(), config.attention, {}, mask, dropout, trace, false);
  Tensor keys = W_key.forward(x);       // (B, T, d_out)
  Tensor queries = W_query.forward(x);  // (B, T, d_out)
  Tensor values = W_value.forward(x);   // (B, T, d_out)
  const Tensor blocked = mask.corner(x.size(1));  // (T, T)
  return attend(queries, keys, values, &blocked, &dropout, trace, &saved_);
}

Tensor CausalAttention::backward(const Tensor& doutput) {
  if (fused_last_) return fused_.backward(doutput, projections());
  // return attend(queries, keys, values, &mask, &dropout, ...)
  AttentionGrads g = attend_backward(doutput, saved_, &dropout);  // each (B, T, d_out)
  // values = W_value.forward(x); queries = W_query.forward(x); keys = W_key.forward(x)
  Tensor dx = W_value.backward(g.dv);
  dx = add(dx, W_query.backward(g.dq));
  return add(dx, W_key.backward(g.dk));  // (B, T, d_in)
}

}  // namespace qkv
