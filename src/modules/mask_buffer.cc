// The causal classes' mask buffer. See include/qkv/modules/mask_buffer.h.
#include "qkv/modules/mask_buffer.h"

#include "qkv/core/error.h"
#include "qkv/core/ops.h"

namespace qkv {

MaskBuffer::MaskBuffer(int64_t context_length) : n_(context_length) {
  QKV_CHECK(context_length > 0, "mask: context_length (", context_length, ") must be positive");
}

Tensor MaskBuffer::to_tensor() const { return has_dense_ ? dense_.clone() : corner(n_); }

Tensor MaskBuffer::corner(int64_t T) const {
  QKV_CHECK(T >= 0 && T <= n_, "mask: a ", T, "-token corner of the (", n_, ", ", n_, ") mask");
  if (has_dense_) return dense_.slice(0, 0, T).slice(1, 0, T);
  return triu(Tensor::ones({T, T}), 1);
}

const Tensor& MaskBuffer::dense() const {
  QKV_CHECK(has_dense_, "mask: the causal mask has no dense form (use corner or to_tensor)");
  return dense_;
}

void MaskBuffer::load(const Tensor& mask) {
  QKV_CHECK(mask.shape() == shape(), "mask: tensor ", mask.describe(), " has shape ", shape_str(mask.shape()),
            " but this module's mask is ", shape_str(shape()));
  if (is_causal_triangle(mask)) {
    has_dense_ = false;
    dense_ = Tensor();
  } else {
    dense_ = mask.contiguous().clone();
    has_dense_ = true;
  }
}

bool is_causal_triangle(const Tensor& mask) {
  if (mask.dim() != 2 || mask.size(0) != mask.size(1)) return false;
  const int64_t n = mask.size(0), s0 = mask.strides()[0], s1 = mask.strides()[1];
  for (int64_t i = 0; i < n; ++i) {
    const float* row = mask.data() + i * s0;
    for (int64_t j = 0; j < n; ++j)
      if ((row[j * s1] != 0.0f) != (j > i)) return false;
  }
  return true;
}

}  // namespace qkv
