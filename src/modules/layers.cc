// Linear, Embedding, PositionalEmbedding, Dropout. See include/qkv/modules/layers.h.
#include "qkv/modules/layers.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"

namespace qkv {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator& gen)
    : weight(Tensor::empty({out_features, in_features})), has_bias(with_bias) {
  QKV_CHECK(in_features > 0 && out_features > 0, "Linear: in_features (", in_features,
            ") and out_features (", out_features, ") must be positive");
  if (has_bias) bias = Tensor::empty({out_features});
  gen.linear_init(weight.data(), has_bias ? bias.data() : nullptr, out_features, in_features);
}

void Linear::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  out.push_back({prefix + "weight", &weight, true});
  if (has_bias) out.push_back({prefix + "bias", &bias, true});
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, has_bias ? &bias : nullptr); }

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen)
    : weight(Tensor::empty({num_embeddings, dim})) {
  QKV_CHECK(num_embeddings > 0 && dim > 0, "Embedding: num_embeddings (", num_embeddings,
            ") and dim (", dim, ") must be positive");
  gen.embedding_init(weight.data(), num_embeddings, dim);
}

void Embedding::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  out.push_back({prefix + "weight", &weight, true});
}

Tensor Embedding::forward(const std::vector<int64_t>& ids, const Shape& shape) const {
  QKV_CHECK(numel_of(shape) == static_cast<int64_t>(ids.size()), "Embedding: ", ids.size(),
            " ids do not fill shape ", shape_str(shape));
  const int64_t n = weight.size(0), dim = weight.size(1);
  Shape out_shape = shape;
  out_shape.push_back(dim);
  Tensor out = Tensor::empty(out_shape);
  for (size_t i = 0; i < ids.size(); ++i) {
    QKV_CHECK(ids[i] >= 0 && ids[i] < n, "Embedding: id ", ids[i], " at position ", i,
              " is outside the table of ", n, " rows");
    const float* row = weight.data() + ids[i] * dim;
    std::copy(row, row + dim, out.data() + static_cast<int64_t>(i) * dim);
  }
  return out;
}

PositionalEmbedding::PositionalEmbedding(int64_t context_length, int64_t dim, Generator& gen)
    : table(context_length, dim, gen) {}

void PositionalEmbedding::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  table.collect_state(prefix, out);
}

Tensor PositionalEmbedding::forward(int64_t num_tokens) const {
  const int64_t ctx = table.weight.size(0);
  QKV_CHECK(num_tokens <= ctx, "PositionalEmbedding: ", num_tokens,
            " tokens but the table has only context_length = ", ctx, " positions");
  return table.weight.slice(0, 0, num_tokens).contiguous();
}

Dropout::Dropout(double p, Generator& gen) : p_(p), gen_(&gen) {
  QKV_CHECK(p >= 0.0 && p < 1.0, "Dropout: p = ", p, " is outside [0, 1)");
}

Tensor Dropout::forward(const Tensor& x) {
  if (!active() || x.numel() == 0) {
    noise_ = Tensor();
    return x;
  }
  // As at::dropout without a fused kernel: noise = bernoulli_(1 - p); noise /= (1 - p); x * noise.
  noise_ = Tensor::empty(x.shape());
  gen_->bernoulli(noise_.data(), noise_.numel(), 1.0 - p_);
  const float keep = static_cast<float>(1.0 - p_);
  float* z = noise_.data();
  for (int64_t i = 0, n = noise_.numel(); i < n; ++i) z[i] = z[i] / keep;
  return mul(x, noise_);
}

}  // namespace qkv
