// SelfAttention_v1 and SelfAttention_v2. See include/qkv/modules/self_attention.h.
#include "qkv/modules/self_attention.h"

#include "qkv/core/error.h"
#include "qkv/core/ops.h"

namespace qkv {
namespace {
Tensor draw(int64_t d_in, int64_t d_out, Generator& gen, MatrixInit init) {
  QKV_CHECK(d_in > 0 && d_out > 0, "SelfAttentionV1: d_in (", d_in, ") and d_out (", d_out,
            ") must be positive");
  Tensor t = Tensor::empty({d_in, d_out});
  if (init == MatrixInit::kRand) gen.uniform(t.data(), t.numel());
  else gen.normal(t.data(), t.numel());
  return t;
}
}  // namespace

void check_tokens_by_features(const char* who, const Tensor& x, int64_t d_in) {
  QKV_CHECK(x.dim() == 2 && x.size(1) == d_in, who, ": input must be (num_tokens, d_in = ", d_in,
            "), got ", shape_str(x.shape()));
}

SelfAttentionV1::SelfAttentionV1(int64_t d_in, int64_t d_out, Generator& gen, MatrixInit init)
    : W_query(draw(d_in, d_out, gen, init)),
      W_key(draw(d_in, d_out, gen, init)),
      W_value(draw(d_in, d_out, gen, init)),
      dW_query(Tensor::zeros({d_in, d_out})),
      dW_key(Tensor::zeros({d_in, d_out})),
      dW_value(Tensor::zeros({d_in, d_out})) {}

void SelfAttentionV1::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  out.push_back({prefix + "W_query", &W_query, true, &dW_query});
  out.push_back({prefix + "W_key", &W_key, true, &dW_key});
  out.push_back({prefix + "W_value", &W_value, true, &dW_value});
}

Tensor SelfAttentionV1::forward(const Tensor& x, AttentionTrace* trace) {
  check_tokens_by_features("SelfAttentionV1", x, W_query.size(0));
  x_ = x;
  Tensor keys = matmul(x, W_key);        // (T, d_out)
  Tensor queries = matmul(x, W_query);   // (T, d_out)
  Tensor values = matmul(x, W_value);    // (T, d_out)
  return attend(queries, keys, values, nullptr, nullptr, trace, &saved_);
}

Tensor SelfAttentionV1::backward(const Tensor& doutput) {
  // return attend(queries, keys, values, ...)
  AttentionGrads g = attend_backward(doutput, saved_, nullptr);  // each (T, d_out)
  // values = matmul(x, W_value); queries = matmul(x, W_query); keys = matmul(x, W_key)
  accumulate(dW_value, matmul(x_.T(), g.dv));
  accumulate(dW_query, matmul(x_.T(), g.dq));
  accumulate(dW_key, matmul(x_.T(), g.dk));
  Tensor dx = matmul(g.dv, W_value.T());
  dx = add(dx, matmul(g.dq, W_query.T()));
  return add(dx, matmul(g.dk, W_key.T()));  // (T, d_in)
}

SelfAttentionV2::SelfAttentionV2(int64_t d_in, int64_t d_out, bool qkv_bias, Generator& gen)
    : W_query(d_in, d_out, qkv_bias, gen), W_key(d_in, d_out, qkv_bias, gen), W_value(d_in, d_out, qkv_bias, gen) {}

void SelfAttentionV2::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  W_query.collect_state(prefix + "W_query.", out);
  W_key.collect_state(prefix + "W_key.", out);
  W_value.collect_state(prefix + "W_value.", out);
}

Tensor SelfAttentionV2::forward(const Tensor& x, AttentionTrace* trace) {
  check_tokens_by_features("SelfAttentionV2", x, W_query.weight.size(1));
  Tensor keys = W_key.forward(x);       // (T, d_out)
  Tensor queries = W_query.forward(x);  // (T, d_out)
  Tensor values = W_value.forward(x);   // (T, d_out)
  return attend(queries, keys, values, nullptr, nullptr, trace, &saved_);
}

Tensor SelfAttentionV2::backward(const Tensor& doutput) {
  // return attend(queries, keys, values, ...)
  AttentionGrads g = attend_backward(doutput, saved_, nullptr);  // each (T, d_out)
  // values = W_value.forward(x); queries = W_query.forward(x); keys = W_key.forward(x)
  Tensor dx = W_value.backward(g.dv);
  dx = add(dx, W_query.backward(g.dq));
  return add(dx, W_key.backward(g.dk));  // (T, d_in)
}

}  // namespace qkv
