// Linear, Embedding, PositionalEmbedding, Dropout. See include/qkv/modules/layers.h.
#include "qkv/modules/layers.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/linear.h"
#include "qkv/core/ops.h"

namespace qkv {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator& gen)
    : weight(Tensor::empty({out_features, in_features})), has_bias(with_bias) {
  QKV_CHECK(in_features > 0 && out_features > 0, "Linear: in_features (", in_features,
            ") and out_features (", out_features, ") must be positive");
  if (has_bias) bias = Tensor::empty({out_features});
  gen.linear_init(weight.data(), has_bias ? bias.data() : nullptr, out_features, in_features);
  dweight = Tensor::zeros(weight.shape());
  if (has_bias) dbias = Tensor::zeros(bias.shape());
}

void Linear::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  out.push_back({prefix + "weight", &weight, true, &dweight});
  if (has_bias) out.push_back({prefix + "bias", &bias, true, &dbias});
}

Tensor Linear::forward(const Tensor& x) const {
  x_ = x;
  return linear(x, weight, has_bias ? &bias : nullptr, dtype);
}

Tensor Linear::backward(const Tensor& doutput) {
  const int64_t out = weight.size(0), in = weight.size(1);
  Shape want = x_.shape();
  want.back() = out;
  QKV_CHECK(x_.dim() >= 1 && x_.size(-1) == in && doutput.shape() == want, "Linear: the gradient ",
            doutput.describe(), " does not match the last forward's output ", shape_str(want),
            " (call forward before backward)");
  const Tensor dy = doutput.reshape({-1, out});  // (N, out), N = every leading dim together
  const Tensor x = x_.reshape({-1, in});         // (N, in)
  const Tensor w = weight.contiguous();
  // y = x @ weight.T + bias: d(weight) = dy^T @ x (out, in), d(bias) = dy summed over rows,
  // d(x) = dy @ weight (..., in); the gradients are added to what the parameters hold.
  Tensor dw = Tensor::empty(weight.shape()), db = has_bias ? Tensor::empty(bias.shape()) : Tensor();
  Tensor dx = Tensor::empty(x_.shape());
  linear_backward(x.data(), dy.data(), dy.size(0), in, w.data(), out, dx.data(), dw.data(),
                  has_bias ? db.data() : nullptr, nullptr, false, dtype);
  accumulate(dweight, dw);
  if (has_bias) accumulate(dbias, db);
  return dx;
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen)
    : weight(Tensor::empty({num_embeddings, dim})) {
  QKV_CHECK(num_embeddings > 0 && dim > 0, "Embedding: num_embeddings (", num_embeddings,
            ") and dim (", dim, ") must be positive");
  gen.embedding_init(weight.data(), num_embeddings, dim);
  dweight = Tensor::zeros(weight.shape());
}

void Embedding::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  out.push_back({prefix + "weight", &weight, true, &dweight});
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
  ids_ = ids;
  shape_ = shape;
  return out;
}

void Embedding::backward(const Tensor& doutput) {
  const int64_t dim = weight.size(1);
  Shape want = shape_;
  want.push_back(dim);
  QKV_CHECK(doutput.shape() == want, "Embedding: the gradient ", doutput.describe(),
            " does not match the last forward's output ", shape_str(want), " (call forward before backward)");
  // out[i] = weight[ids[i]]: row i of the gradient goes back into row ids[i].
  Tensor g = doutput.contiguous();
  for (size_t i = 0; i < ids_.size(); ++i) {
    const float* src = g.data() + static_cast<int64_t>(i) * dim;
    float* dst = dweight.data() + ids_[i] * dim;
    for (int64_t j = 0; j < dim; ++j) dst[j] += src[j];
  }
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
  num_tokens_ = num_tokens;
  return table.weight.slice(0, 0, num_tokens).contiguous();
}

void PositionalEmbedding::backward(const Tensor& doutput) {
  QKV_CHECK(doutput.dim() == 2 && doutput.size(0) == num_tokens_ && doutput.size(1) == table.weight.size(1),
            "PositionalEmbedding: the gradient ", doutput.describe(), " does not match the last forward's (",
            num_tokens_, ", ", table.weight.size(1), ")");
  // out = weight[0:T]
  Tensor rows = table.dweight.slice(0, 0, num_tokens_);
  accumulate(rows, doutput);
}

Dropout::Dropout(double p, Generator& gen) : p_(p), gen_(&gen) {
  QKV_CHECK(p >= 0.0 && p < 1.0, "Dropout: p = ", p, " is outside [0, 1)");
}

Tensor Dropout::forward(const Tensor& x) {
  shape_ = x.shape();
  if (!active() || x.numel() == 0) {
    noise_ = Tensor();
    return x;
  }
  // As at::dropout without a fused kernel: noise = bernoulli_(1 - p); noise /= (1 - p); x * noise.
  noise_ = Tensor::empty(x.shape());
  // A slice of a batch: skip the draws of the sequences before it and after it (bernoulli takes
  // one random64, two 32-bit draws, per element).
  const int64_t seqs = x.dim() > 0 ? x.size(0) : 1, per_sequence = x.numel() / seqs;
  if (slice_total_ > 0)
    QKV_CHECK(slice_begin_ + seqs <= slice_total_, "Dropout: an input of ", seqs, " sequences from sequence ", slice_begin_,
              " does not fit the batch of ", slice_total_, " set by set_batch_slice");
  if (slice_total_ > 0) gen_->discard(2 * static_cast<uint64_t>(slice_begin_ * per_sequence));
  gen_->bernoulli(noise_.data(), noise_.numel(), 1.0 - p_);
  if (slice_total_ > 0) gen_->discard(2 * static_cast<uint64_t>((slice_total_ - slice_begin_ - seqs) * per_sequence));
  const float keep = static_cast<float>(1.0 - p_);
  float* z = noise_.data();
  for (int64_t i = 0, n = noise_.numel(); i < n; ++i) z[i] = z[i] / keep;
  return mul(x, noise_);
}

void Dropout::set_batch_slice(int64_t begin, int64_t total) {
  QKV_CHECK(total >= 0 && begin >= 0 && (total > 0 || begin == 0) && (total == 0 || begin < total),
            "Dropout: the slice from sequence ", begin, " of a batch of ", total,
            " is not in the batch (0, 0: no slice)");
  slice_begin_ = begin;
  slice_total_ = total;
}

Tensor Dropout::backward(const Tensor& doutput) {
  QKV_CHECK(doutput.shape() == shape_, "Dropout: the gradient ", doutput.describe(),
            " does not match the last forward's input ", shape_str(shape_));
  // return x (inactive) / return mul(x, noise_)
  return !noise_.defined() ? doutput : mul(doutput, noise_);
}

}  // namespace qkv
