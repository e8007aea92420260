// What the models' cached steps share. See src/models/cached_rows.h.
#include "models/cached_rows.h"

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/linear.h"

namespace qkv::models_detail {

float* rows_of(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

void add_into(float* x, const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += a[i];
}

void linear_rows(const char* model, const float* x, int64_t N, const Linear& l, const uint16_t* w16, float* y,
                 QuantView wq) {
  QKV_CHECK(l.weight.is_contiguous() && (!l.has_bias || l.bias.is_contiguous()), model,
            ": a Linear's weight and bias must be contiguous for a cached forward");
  linear(x, N, l.weight.size(1), l.weight.data(), l.has_bias ? l.bias.data() : nullptr, l.weight.size(0), y, nullptr,
         w16 ? Dtype::kBF16 : l.dtype, w16, wq);
}

WeightVector<uint16_t> bf16_copy(const Tensor& w) {
  const Tensor c = w.contiguous();
  WeightVector<uint16_t> bits(static_cast<size_t>(c.numel()));
  floats_to_bf16(c.data(), bits.data(), bits.size());
  return bits;
}

}  // namespace qkv::models_detail
